"""Setting aside the inputs whose outputs the broker refused, so a partition moves on.

Every output is measured before it is written (``batch``), so the broker
should never refuse one; when it does anyway (a topic whose
``max.message.bytes`` is below ``AGUI_MAX_RECORD_BYTES``, a limit counted
differently), retrying the same batch would fail the same way forever. The
transaction's ``RecordsRefusedError`` names the refused records, each with
the input it was made from; those inputs become ``Poison`` of their
partition, and once the failed transaction is settled and the partition
read again, its next batch dead-letters them (``record_too_large``) instead
of deciding them. An input refused a second time is dead-lettered with
nothing else written for it, and its letter cut to the minimum: every round
sets aside at least one more input, so the partition always gets past
(``services.kafka.size_refusals``: the notifier's dead letters step down alike).
Exactly-once is untouched: the refused transaction was aborted, and the
dead letters commit with the offsets like any other output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.gatekeeper.batch import Poison
from services.gatekeeper.partition import Owned
from services.kafka.size_refusals import refused_reason
from services.kafka.transactions import OutRecord


def set_aside(refused: Sequence[OutRecord], owned: Mapping[int, Owned]) -> list[str]:
    """Poison the inputs of ``refused`` on the partitions they came from; what was set aside."""
    named: list[str] = []
    seen: set[object] = set()
    for record in refused:
        source = record.source
        if not (isinstance(source, tuple) and len(source) == 3) or source in seen:
            continue
        seen.add(source)
        topic, partition, offset = source
        target = owned.get(partition)
        if target is None:
            continue
        before = target.poison.get(source)
        if before is None:
            reason = refused_reason(record.topic, record.key, record.value, record.headers)
            target.poison[source] = Poison(reason)
        else:
            target.poison[source] = Poison(before.reason, 2)
        named.append(f"{topic} p{partition}@{offset}")
    return named
