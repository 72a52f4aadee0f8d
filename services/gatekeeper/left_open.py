"""What the broker left open of the gatekeeper's last transaction, closed as it ended.

Kafka can skip a transaction's markers on some of its partitions (a broker
restarted while the transaction completed): the coordinator holds it as
committed or aborted, but a ``threads`` or ``decisions`` partition, or the
group's offsets, stay in it, and only this transactional id writing there
again closes them (``services.kafka.hanging``). Whoever reads them next waits
for ever: a takeover restoring thread states, and the settling of a failed
commit reading the group's offsets back (found by probing: after a broker
SIGKILLed mid-commit came back, the gatekeeper read its offsets back every
120 s for as long as it ran, deciding nothing on any partition).

``last`` is the coordinator's account of the transaction, read before the
new producer's ``init_transactions`` changes it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from services.gatekeeper.partition import transactional_id
from services.gatekeeper.state import Instance
from services.kafka.clients import KafkaError, TopicPartition
from services.kafka.hanging import LastTransaction, close_hanging, last_transaction

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LeftOpen:
    """Closes, at most once, what the broker left open of this transactional id's last
    transaction, as it ended: the ``threads`` and ``decisions`` partitions of ``numbers``
    and the group's offsets."""

    st: Instance
    last: LastTransaction | None
    numbers: list[int]
    done: bool = False

    @classmethod
    async def of(cls, st: Instance, numbers: list[int]) -> LeftOpen:
        """The account of the transactional id for ``numbers``, as it stands now."""
        last = await last_transaction(st.require_consumer()._client,
                                      transactional_id(st.kafka.topic_prefix, numbers))
        return cls(st, last, numbers)

    async def close_all(self) -> None:
        """The group's offsets stay unstable: close every partition of the transaction."""
        await self._close(self.numbers, "the group's offsets stay unstable")

    async def close(self, open_: list[TopicPartition]) -> None:
        """These ``threads`` partitions stay open."""
        await self._close(sorted({tp.partition for tp in open_}),
                          f"{self.st.kafka.topics.threads} stays open")

    async def _close(self, partitions: list[int], why: str) -> None:
        if self.done:
            return
        self.done = True
        st, last = self.st, self.last
        committed = last.committed if last is not None else None
        if committed is None:
            log.warning("%s on partitions %s and this transactional id's last transaction is "
                        "unknown (%s): not closing it; an operator can, with "
                        "kafka-transactions.sh find-hanging / abort", why, partitions,
                        last.state if last else "none")
            return
        topics = st.kafka.topics
        log.warning("closing partitions %s of %s and %s and the group's offsets, in case the "
                    "broker left this transactional id's last transaction open there, as it "
                    "ended (%s): %s", partitions, topics.threads, topics.decisions,
                    last.state if last else "", why)
        try:
            await close_hanging(st.require_producer(),
                                [TopicPartition(t, p) for t in (topics.threads, topics.decisions)
                                 for p in partitions], commit=committed,
                                group_id=str(st.group) if st.group is not None else None)
        except KafkaError as exc:  # a repair only: the reader waits on as it did without
            log.warning("closing partitions %s failed: %s", partitions, exc)
            return
        st.stats["hanging_closed"] += len(partitions)
