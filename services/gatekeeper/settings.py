"""The gatekeeper's own settings, read from the environment by the CLI.

The policies are the architecture's (``AGUI_BUSY_POLICY``,
``AGUI_UNKNOWN_ENTRY_POLICY``); the rest tune the loop. Which agents exist is
not configured here: an agent exists when its dispatch topic does (topics
are created by ``agui-relay topics create`` with the agent list), so the
gatekeeper lists the ``<prefix>.dispatch.*`` topics at start, looks up an
agent a request names that it does not know yet, checks the known ones again
every ``AGUI_GATEKEEPER_AGENTS_REFRESH_S`` seconds (``agents``), and refuses a
request for any other agent as ``invalid_input`` instead of writing to a topic
nobody reads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.gatekeeper.rules import BusyPolicy, Policy, UnknownEntryPolicy
from services.runtime.settings import StateDirectory

BATCH_FETCH_BYTES = 1_048_576
"""What a batching fetch waits for (``AGUI_GATEKEEPER_BATCH_MS``): more than any batch of
requests and boundaries a gatekeeper sees in a fraction of a second, so the wait decides."""
IDLE_FETCH_WAIT_MS = 100
"""Without batching: how long a fetch with nothing to return is held by the broker."""


class GatekeeperSettings(BaseSettings):
    """Policies and loop tuning for ``agui-relay gatekeeper``."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True,
                                      allow_inf_nan=False)

    busy_policy: BusyPolicy = Field("reject", alias="AGUI_BUSY_POLICY")
    unknown_entry_policy: UnknownEntryPolicy = Field("strict", alias="AGUI_UNKNOWN_ENTRY_POLICY")
    on_expiry: Literal["keep", "cancel"] = Field("keep", alias="AGUI_ON_EXPIRY")
    """``cancel``: once every open interrupt of a thread has expired, the gatekeeper
    resumes it cancelling them all (``expiry_policy``); ``keep``: it waits for a client."""
    queue_limit: int = Field(8, alias="AGUI_GATEKEEPER_QUEUE_LIMIT", ge=1, le=64)
    """Requests one running thread may hold under the enqueue policy."""
    max_batch: int = Field(5000, alias="AGUI_GATEKEEPER_MAX_BATCH", ge=1)
    """Records taken per poll (all partitions together)."""
    events_wait_ms: int = Field(500, alias="AGUI_GATEKEEPER_EVENTS_WAIT_MS", ge=0)
    """How long a request may wait for the run boundaries (``runs``) its partition already
    holds (the name is from when they were read on ``events``)."""
    linger_ms: int = Field(0, alias="AGUI_GATEKEEPER_LINGER_MS", ge=0, le=1000)
    """How long a partition lets a small backlog grow before committing it."""
    transaction_interval_ms: int = Field(0, alias="AGUI_GATEKEEPER_TRANSACTION_INTERVAL_MS",
                                         ge=0, le=1000)
    """The least time between the starts of two transactions (``pacing``): batches ready
    sooner wait and ride the next one together; 0 begins each as soon as the last ends."""
    batch_ms: int = Field(0, alias="AGUI_GATEKEEPER_BATCH_MS", ge=0, le=1000)
    """How long the gatekeeper may hold what it reads so that more shares the work: each
    fetch waits up to this long for ``BATCH_FETCH_BYTES`` instead of returning with the
    first record, and transactions begin at most this often (it raises
    ``transaction_interval_ms`` to it). Under load a fetch and a transaction then carry many
    runs at once, and the gatekeeper's CPU per run falls several-fold; a decision waits up
    to about twice this long more, and an idle gatekeeper polls every ``batch_ms``. 0 (the
    default): each record is handled as soon as it is there (lowest latency)."""
    transaction_deadline_s: float = Field(20.0, alias="AGUI_GATEKEEPER_TRANSACTION_DEADLINE_S",
                                          gt=0, le=3600)
    """A transaction not ended after this long is settled by a new producer, so a request
    the broker never answers cannot hold the instance's partitions up; above the broker's
    15 s transaction timeout, after which such a transaction could only abort."""
    agents_refresh_s: float = Field(60.0, alias="AGUI_GATEKEEPER_AGENTS_REFRESH_S", gt=0, le=86_400)
    """How often the known agents' dispatch topics are asked about again (by name, not by
    listing the cluster), so an agent whose topic was deleted is refused. A new agent needs
    no refresh: it is looked up when a request first names it."""
    session_timeout_ms: int = Field(10_000, alias="AGUI_GATEKEEPER_SESSION_TIMEOUT_MS",
                                    ge=6_000, le=1_800_000)
    """How long the group waits for a silent instance before handing its partitions on."""
    instance_id: str | None = Field(None, alias="AGUI_GATEKEEPER_INSTANCE_ID", min_length=1,
                                    max_length=249, pattern=r"^[A-Za-z0-9._-]+$")
    """This process's static identity in the group (KIP-345 ``group.instance.id``): a
    restart under the same id takes the partitions back at once, without waiting out
    the session of the process it replaces (a StatefulSet's pod name). One process per
    id at a time: a second one with the same id stops the gatekeeper with an error."""
    offsets_flush_s: float = Field(5.0, alias="AGUI_GATEKEEPER_OFFSETS_FLUSH_S", gt=0, le=3600)
    """Offsets of boundaries that changed nothing (a ``RUN_STARTED`` of a run already
    admitted) are committed at least this often when nothing else is."""
    gauges_s: float = Field(5.0, alias="AGUI_GATEKEEPER_GAUGES_S", gt=0, le=3600)
    """How often the thread gauges (open and expired interrupts, long runs) and the
    consumer lag are recomputed for ``/metrics``."""
    gc_full_s: float = Field(300.0, alias="AGUI_GATEKEEPER_GC_FULL_S", gt=0, le=86_400)
    """How often the cyclic garbage collector makes a pass (``heap``); it never runs
    on allocation counts."""
    stall_s: float = Field(30.0, alias="AGUI_GATEKEEPER_STALL_S", gt=0, le=86_400)
    """An owned partition with input whose committed offsets have not moved for this long
    makes ``/readyz`` fail, naming it (``stall``)."""
    running_too_long_s: float = Field(300.0, alias="AGUI_RUNNING_TOO_LONG_S", gt=0, le=30 * 86_400)
    """A run older than this counts in ``agui_threads_running_too_long``."""
    state_dir: StateDirectory = Field(None, alias="AGUI_STATE_DIR")
    """Where each owned partition's thread states are kept on disk (``threadstore``);
    unset: in memory, every ``threads`` record read again on each assignment."""
    state_cache_mb: int = Field(64, alias="AGUI_STATE_CACHE_MB", ge=0)
    """Decoded thread states kept in memory in front of the stores, all partitions."""
    state_grace_s: float = Field(600.0, alias="AGUI_STATE_GRACE_S", ge=0, le=7 * 86_400)
    """How long the store of a partition handed back is kept before it is deleted."""

    @property
    def fetch_min_bytes(self) -> int:
        """What a fetch waits to fill (``batch_ms``), or 1: any record answers it."""
        return BATCH_FETCH_BYTES if self.batch_ms else 1

    @property
    def fetch_wait_ms(self) -> int:
        """How long the broker holds a fetch that has less than ``fetch_min_bytes``."""
        return self.batch_ms or IDLE_FETCH_WAIT_MS

    @property
    def catch_up_ms(self) -> int:
        """How long held requests wait for ``runs`` to catch up: ``events_wait_ms``, plus
        ``batch_ms`` that a batching fetch may hold the boundaries for."""
        return self.events_wait_ms + self.batch_ms

    @property
    def pacing_s(self) -> float:
        """The least time between the starts of two transactions (``pacing``)."""
        return max(self.transaction_interval_ms, self.batch_ms) / 1000

    @property
    def policy(self) -> Policy:
        """The rule engine's policy."""
        return Policy(self.busy_policy, self.unknown_entry_policy, self.queue_limit)
