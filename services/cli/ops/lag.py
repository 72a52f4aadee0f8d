"""``agui-relay lag``: how far each service's consumer group is behind, per partition.

For every consumer group with offsets committed on this deployment's topics
(the gatekeeper's, the producer workers', the consumer service's), the
committed offset of each partition is set against its end offset (the last
stable offset, which is what a ``read_committed`` consumer can reach) and
the difference is the lag (a short one is read, so the transaction marker
that follows a group's last record is not counted as lag); a per-group total
follows. ``held`` counts the
records past that end, up to the high watermark: records of a transaction
still open. A transaction commits in milliseconds, so ``held`` that stays
above zero names a partition whose transaction hangs, holding every
``read_committed`` reader at ``end`` (``deploy/kafka/README.md`` says how a
single broker restarted mid-commit can leave one). ``--group`` keeps the
named groups only; ``--json`` prints NDJSON rows. Group ids and topics
print whole at any width (``columns``): any client may commit under any
group id, and it is what an operator copies into ``--group``.

A partition of a topic the group reads (it committed an offset on another
partition of it) that holds records but has no committed offset of the
group is listed too, its lag counted from the partition's first offset
(``committed`` shows ``-``): records there are read by nobody yet. Requests
on partitions of ``requests`` past ``AGUI_PARTITIONS`` (a topic grown with
``kafka-topics --alter``) wait so, undecided, and a lag of 0 would hide them.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated

import orjson
import typer
from rich.text import Text

from services.cli.ops.columns import Column, Grid, print_grid
from services.cli.ops.kafka_io import EXIT_OK, run_command, stdout
from services.cli.ops.safe import safe, safe_id
from services.kafka.clients import TopicPartition
from services.kafka.groups import committed_offsets
from services.kafka.reader import TopicReader, UnknownTopicError, unread_records
from services.runtime.settings import KafkaSettings


@dataclass(frozen=True, slots=True)
class LagRow:
    """One partition of one group."""

    group: str
    topic: str
    partition: int
    committed: int | None
    """None: the group committed nothing here (its lag counts from ``start``)."""
    end: int
    high: int
    """The high watermark: ``end`` plus what an open transaction holds back."""
    unread: int | None = None
    """The records a reader would still read up to ``end``, when a short gap was read:
    a group that has read everything commits the offset of the transaction marker that
    follows, one short of the end, and showed a lag of 1 for ever."""
    start: int = 0
    """The partition's first offset, where a group without a committed offset begins."""

    @property
    def read_from(self) -> int:
        """Where the group reads on from: its committed offset, else the partition's start."""
        return self.committed if self.committed is not None else self.start

    @property
    def lag(self) -> int:
        return self.unread if self.unread is not None else max(self.end - self.read_from, 0)

    @property
    def held(self) -> int:
        return max(self.high - self.end, 0)

    def to_json(self) -> dict[str, object]:
        return {"group": self.group, "topic": self.topic, "partition": self.partition,
                "committed": self.committed, "end": self.end, "lag": self.lag,
                "held": self.held}


def lag_rows(committed: Mapping[str, Mapping[TopicPartition, int]],
             ends: Mapping[TopicPartition, int],
             highs: Mapping[TopicPartition, int] | None = None,
             unread: Mapping[tuple[TopicPartition, int], int] | None = None,
             starts: Mapping[TopicPartition, int] | None = None) -> list[LagRow]:
    """Rows sorted by group, topic, partition (pure). ``starts``: the first offsets of the
    partitions some group has no committed offset on (``uncommitted``); each one with
    records past its start is a row of every group that reads its topic without one."""
    highs = highs or {}
    unread = unread or {}
    rows = []
    for group, offsets in committed.items():
        for tp, offset in offsets.items():
            end = ends.get(tp, offset)
            rows.append(LagRow(group, tp.topic, tp.partition, offset, end, highs.get(tp, end),
                               unread.get((tp, offset))))
        for tp in uncommitted(offsets, (starts or {}).keys()):
            start = (starts or {})[tp]
            end = ends.get(tp, start)
            if end > start:
                rows.append(LagRow(group, tp.topic, tp.partition, None, end,
                                   highs.get(tp, end), unread.get((tp, start)), start))
    return sorted(rows, key=lambda r: (r.group, r.topic, r.partition))


def uncommitted(offsets: Mapping[TopicPartition, int],
                partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
    """Those of ``partitions`` of a topic the group reads (it committed on some partition
    of it) on which it has no committed offset (pure)."""
    read = {tp.topic for tp in offsets}
    return [tp for tp in partitions if tp.topic in read and tp not in offsets]


def lag_grid(rows: list[LagRow]) -> Grid:
    """Each group's partitions (sorted as ``lag_rows`` sorts them), then its total."""
    grid = Grid([Column("group", ids=True), Column("topic", ids=True), Column("partition"),
                 Column("committed"), Column("end"), Column("lag"), Column("held")])
    for group in sorted({r.group for r in rows}):
        mine = [r for r in rows if r.group == group]
        for row in mine:
            grid.add(row.group, row.topic, str(row.partition),
                     "-" if row.committed is None else str(row.committed), str(row.end),
                     Text(str(row.lag), style="red" if row.lag else "green"),
                     Text(str(row.held), style="yellow") if row.held else "0")
        grid.add(Text(safe_id(group), style="bold"), Text("total", style="bold"), "-", "-", "-",
                 Text(str(sum(r.lag for r in mine)), style="bold"),
                 str(sum(r.held for r in mine)))
    return grid


async def _lag(settings: KafkaSettings, groups: list[str], as_json: bool) -> int:
    prefix = f"{settings.topic_prefix}."
    committed = await committed_offsets(settings, lambda topic: topic.startswith(prefix))
    if groups:
        committed = {g: o for g, o in committed.items() if g in groups}
    partitions = sorted({tp for offsets in committed.values() for tp in offsets})
    ends: dict[TopicPartition, int] = {}
    highs: dict[TopicPartition, int] = {}
    unread: dict[tuple[TopicPartition, int], int] = {}
    starts: dict[TopicPartition, int] = {}
    if partitions:
        async with TopicReader(settings, "agui-relay-lag") as reader:
            every = await _every_partition(reader, {tp.topic for tp in partitions})
            bare = sorted({tp for offsets in committed.values()
                           for tp in uncommitted(offsets, every)})
            starts = await reader.start_offsets(bare) if bare else {}
            partitions = sorted({*partitions, *bare})
            ends = await reader.end_offsets(partitions)
            wanted = [*((tp, offset) for offsets in committed.values()
                        for tp, offset in offsets.items()), *starts.items()]
            unread = await unread_records(reader, wanted, ends)
        async with TopicReader(settings, "agui-relay-lag", read_committed=False) as reader:
            highs = await reader.end_offsets(partitions)
    rows = lag_rows(committed, ends, highs, unread, starts)
    if as_json:
        for row in rows:
            sys.stdout.write(orjson.dumps(row.to_json()).decode() + "\n")
        return EXIT_OK
    console = stdout()
    if not committed:
        console.print(f"no consumer group has committed offsets on {safe(prefix)}* topics",
                      markup=False)
        return EXIT_OK
    console.print(Text(f"consumer-group lag on {safe(prefix)}*", style="bold"), soft_wrap=True)
    print_grid(console, lag_grid(rows))
    console.print(Text("held: records of a transaction still open (past 'end'); if it stays, "
                       "the transaction hangs", style="dim"), soft_wrap=True)
    return EXIT_OK


async def _every_partition(reader: TopicReader, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of ``topics`` (none of a topic gone since its offsets were committed)."""
    every: list[TopicPartition] = []
    for topic in sorted(topics):
        with contextlib.suppress(UnknownTopicError):
            every += await reader.all_partitions(topic)
    return every


def lag(
    groups: Annotated[list[str] | None, typer.Option(
        "--group", "-g", help="Only this consumer group (repeatable).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="NDJSON: one object per partition.")
                       ] = False,
) -> None:
    """Consumer-group lag per service and partition, and what open transactions hold back."""
    settings = KafkaSettings()
    raise typer.Exit(run_command(lambda _stop: _lag(settings, list(groups or []), as_json)))
