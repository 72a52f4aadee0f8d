"""What one gatekeeper instance holds between rounds, in one explicit object.

The Kafka loop has three concerns that act on the same things: routing
polled records to their partitions (``processor``), committing the decided
batches and settling a failed transaction (``commit``), and taking
partitions over or handing them back on a rebalance (``takeover``). Each is
a module of functions over this ``Instance``, so what they share — the owned
partitions, the producer and the group generation it commits with, the
batches queued for the next transaction and the one in flight, the lock a
round and a rebalance take turns on — is written down in one place, with
what each field is for, instead of spread over one class's attributes.
Also the small operations every concern uses (seek a partition back,
the client it needs or a clear error).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from services.gatekeeper.agents import Agents
from services.gatekeeper.batch import Batch, Limits
from services.gatekeeper.expirer import Expirer
from services.gatekeeper.heap import Heap
from services.gatekeeper.partition import Owned
from services.gatekeeper.settings import GatekeeperSettings
from services.gatekeeper.stall import StallWatch
from services.gatekeeper.telemetry import Telemetry
from services.gatekeeper.threadstore import Threads
from services.kafka.clients import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from services.kafka.fencing import FencedGroup
from services.runtime.settings import KafkaSettings
from services.runtime.tracing import Entropy


@dataclass(slots=True)
class Share:
    """One partition's batch (or bare offsets) waiting for, or riding, a transaction."""

    owned: Owned
    batch: Batch | None
    offsets: dict[TopicPartition, int]
    polled_at: float | None


@dataclass(eq=False)
class Instance:
    """The state of one gatekeeper instance; ``processor.Processor`` builds and runs it."""

    kafka: KafkaSettings
    settings: GatekeeperSettings
    client_id: str
    clock: Callable[[], datetime]
    entropy: Entropy
    """Random bytes for the trace ids of decisions (``Batch``), injected so batches stay pure."""
    agents: Agents
    heap: Heap
    telemetry: Telemetry
    limits: Limits
    """The record and input limits, with the agents known now (kept, not rebuilt per batch)."""
    stall: StallWatch
    """Owned partitions with input whose committed offsets stand still (``/readyz``)."""
    stats: Counter[str] = field(default_factory=Counter)
    assigned: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once partitions are assigned and restored (tests wait on it)."""
    owned: dict[int, Owned] = field(default_factory=dict)
    consumer: AIOKafkaConsumer | None = None
    producer: AIOKafkaProducer | None = None
    group: FencedGroup | None = None
    """The group id with the generation this instance joined, to fence its commits;
    None once the group refused it (nothing is decided until the next assignment)."""
    joined: bool = False
    shares: list[Share] = field(default_factory=list)
    """Batches ready for the next transaction."""
    transaction: asyncio.Task[None] | None = None
    """The transaction in flight (``commit.commit``), at most one."""
    transaction_began: float | None = None
    """When the last transaction began (monotonic seconds), for ``pacing``."""
    pacer: asyncio.TimerHandle | None = None
    """The timer that launches batches once the transaction interval has passed."""
    takeover: asyncio.Task[None] | None = None
    """Partitions being taken over (``takeover.assign``), outside the rebalance callback."""
    follower: asyncio.Task[None] | None = None
    """The last takeover's census (``takeover.follow``), cancelled when partitions go."""
    following: dict[int, set[str]] = field(default_factory=dict)
    """Partitions whose watched threads are still being handed to the census and expiry
    timer after their takeover (``takeover.follow``), each with the threads committed
    since: what was read of those is older and is left out."""
    accepting: bool = True
    """False while partitions are being handed back: no new transaction starts."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by a round's routing and by a rebalance: they never interleave."""
    generation: int = 0
    """Moves on every rebalance step: records polled across one are dropped and read again."""
    expirer: Expirer | None = None
    threads: Threads | None = None
    """The partitions' on-disk thread stores (``AGUI_STATE_DIR``); None: states in memory."""
    """The expiry policy's timer (``AGUI_ON_EXPIRY=cancel``), told of committed states."""
    fatal: BaseException | None = None
    """Why the instance cannot go on (installing an outcome failed, a takeover failed)."""

    @property
    def group_id(self) -> str:
        return f"{self.kafka.topic_prefix}.gatekeeper"

    def require_consumer(self) -> AIOKafkaConsumer:
        if self.consumer is None:
            raise RuntimeError("the gatekeeper consumer is not started")
        return self.consumer

    def require_producer(self) -> AIOKafkaProducer:
        if self.producer is None:
            raise RuntimeError("the gatekeeper owns no partitions: no producer")
        return self.producer

    def fence(self) -> FencedGroup:
        if self.group is None:
            raise RuntimeError("the gatekeeper has not joined its group")
        return self.group

    def raise_if_fatal(self) -> None:
        if self.fatal is not None:
            raise RuntimeError("the gatekeeper cannot continue") from self.fatal

    def seek(self, owned: Owned) -> None:
        """Position the consumer at what ``owned`` reads next."""
        consumer = self.require_consumer()
        consumer.seek(owned.requests, owned.next_request)
        consumer.seek(owned.runs, owned.next_event)

    def read_again(self, partitions: Iterable[Owned]) -> None:
        """Step 1's recovery: drop what was routed and undecided, and read it again."""
        for owned in partitions:
            owned.read_again_from(owned.offsets()[owned.requests], owned.applied_event)
            self.seek(owned)


def done(owned: Owned) -> None:
    """The partition's batch has ended (committed, rewound or dropped): it may start another."""
    if owned.inflight is not None and not owned.inflight.done():
        owned.inflight.set_result(None)
    owned.inflight = None
