"""``agui-relay state``: each partition's on-disk store against its changelog's end.

Reads the stores under ``AGUI_STATE_DIR``, named in any case as the services
read it (``.run/state`` as ``agui-relay up`` uses it, or ``--dir``) on this
machine, read-only, so it works while the gatekeeper holds them open, and
sets each store's checkpoint (the changelog offset it reflects) against the
end of that partition of the changelog topic (the last stable offset). ``behind`` is what a restore
would read now; an open store is normally a few records behind between
commits. A store the owner cannot use is listed with why (it will be
rebuilt on its next assignment). ``--json`` prints NDJSON rows.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.table import Table
from rich.text import Text

from contracts.topics import TopicCatalog
from services.cli.ops.kafka_io import EXIT_OK, run_command, stdout
from services.cli.ops.safe import safe
from services.cli.settings_read import setting
from services.gatekeeper.settings import GatekeeperSettings
from services.kafka.clients import TopicPartition
from services.kafka.metadata import partition_counts
from services.kafka.reader import TopicReader, unread_records
from services.runtime.settings import KafkaSettings
from services.state.dirs import PARTITION_DIR
from services.state.disk import Peek, peek

DEFAULT_DIR = ".run/state"
CHANGELOGS = {"gatekeeper-threads": "threads", "producer-checkpoints": "checkpoints",
              "consumer-threads": "threads"}
"""Store kind → the topic (by its catalog name) that is its changelog."""
PER_INSTANCE = {"consumer-threads"}
"""Kinds whose stores are kept per instance: ``<kind>/<changelog>/<instance>/p<n>``."""


@dataclass(frozen=True, slots=True)
class StoreRow:
    store: str
    partition: int
    peeked: Peek
    end: int | None
    unread: int | None = None
    """The records a restore would read, when a short gap was read: a store that has
    everything stops at the offset of the transaction marker that follows its last
    record, and showed ``behind 1`` in yellow for ever."""

    @property
    def behind(self) -> int | None:
        if self.end is None or self.peeked.offset is None:
            return None
        return self.unread if self.unread is not None else self.end - self.peeked.offset

    def to_json(self) -> dict[str, object]:
        row: dict[str, object] = {"store": self.store, "partition": self.partition,
                                  "bytes": self.peeked.disk_bytes, "open": self.peeked.held}
        for name, value in (("offset", self.peeked.offset), ("end", self.end),
                            ("behind", self.behind), ("error", self.peeked.error)):
            if value is not None:
                row[name] = value
        return row


def found_stores(root: Path, topics: TopicCatalog) -> list[tuple[str, int, Path]]:
    """(kind, partition, directory) of every store under ``root`` that mirrors this
    deployment's changelogs (``<root>/<kind>/<changelog topic>/p<n>``), sorted."""
    out = []
    for kind in sorted(CHANGELOGS):
        home = root / kind / getattr(topics, CHANGELOGS[kind])
        if not home.is_dir():
            continue
        for child in home.iterdir():
            match = PARTITION_DIR.fullmatch(child.name)
            if match and child.is_dir():
                out.append((kind, int(match.group(1)), child))
            elif kind in PER_INSTANCE and child.is_dir():  # <instance>/p<n>
                out += [(f"{kind}/{child.name}", int(m.group(1)), grand)
                        for grand in child.iterdir()
                        if (m := PARTITION_DIR.fullmatch(grand.name)) and grand.is_dir()]
    return sorted(out)


def _no_partition(topic: str, partition: int, counts: dict[str, int]) -> str:
    if topic not in counts:
        return f"no topic {topic} (a store left from another deployment?)"
    return (f"{topic} has no partition {partition} ({counts[topic]} partitions): a store "
            "left from a topic recreated with fewer, or not a store")


def changelog_of(kind: str) -> str:
    """The catalog name of a store kind's changelog (``consumer-threads/<instance>`` too)."""
    return CHANGELOGS[kind.split("/", 1)[0]]


async def _state(settings: KafkaSettings, root: Path, as_json: bool) -> int:
    stores = found_stores(root, settings.topics)
    topic_of = {kind: getattr(settings.topics, changelog_of(kind)) for kind, _, _ in stores}
    counts = await partition_counts(settings, tuple(sorted(set(topic_of.values())))) \
        if stores else {}
    # only partitions the topic has: asking the end of one it lacks waits 40 s, then fails
    # the whole listing (a stray ``p99`` did that)
    tps = {(kind, p): TopicPartition(topic_of[kind], p) for kind, p, _ in stores
           if p < counts.get(topic_of[kind], 0)}
    ends: dict[TopicPartition, int] = {}
    peeks = {(kind, p): peek(path, p) for kind, p, path in stores}
    unread: dict[tuple[TopicPartition, int], int] = {}
    if tps:
        async with TopicReader(settings, "agui-relay-state") as reader:
            ends = await reader.end_offsets(sorted(set(tps.values())))
            unread = await unread_records(reader, (
                (tp, offset) for where, tp in tps.items()
                if (offset := peeks[where].offset) is not None), ends)
    rows = []
    for kind, p, _ in stores:
        peeked = peeks[(kind, p)]
        tp = tps.get((kind, p))
        if tp is None:
            peeked = replace(peeked, error=_no_partition(topic_of[kind], p, counts))
        rows.append(StoreRow(kind, p, peeked, ends.get(tp) if tp is not None else None,
                             unread.get((tp, peeked.offset))
                             if tp is not None and peeked.offset is not None else None))
    if as_json:
        for row in rows:
            sys.stdout.write(orjson.dumps(row.to_json()).decode() + "\n")
        return EXIT_OK
    if not rows:
        stdout().print(f"no state stores under {root}", markup=False)
        return EXIT_OK
    table = Table("store", "partition", "offset", "changelog end", "behind", "on disk", "open",
                  title=Text(f"state stores under {safe(root)}"), title_justify="left",
                  caption="offset: the changelog offset the store reflects; behind: what a "
                          "restore would read now", caption_justify="left")
    for row in rows:
        behind = row.behind
        table.add_row(
            Text(safe(row.store)), str(row.partition),
            str(row.peeked.offset) if row.peeked.offset is not None else "-",
            str(row.end) if row.end is not None else "-",
            Text(safe(row.peeked.error), style="red") if row.peeked.error else
            (f"[{'yellow' if behind else 'green'}]{behind}[/]" if behind is not None else "-"),
            f"{row.peeked.disk_bytes / 1e6:.1f} MB", "yes" if row.peeked.held else "no")
    stdout().print(table)
    return EXIT_OK


def state(
    directory: Annotated[Path | None, typer.Option(
        "--dir", help="The state directory (default: AGUI_STATE_DIR, else .run/state).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="NDJSON: one object per store.")
                       ] = False,
) -> None:
    """This machine's state stores: each partition's offset against its changelog's end."""
    settings = KafkaSettings()
    root = directory or Path(setting(GatekeeperSettings, "AGUI_STATE_DIR") or DEFAULT_DIR)
    raise typer.Exit(run_command(lambda _stop: _state(settings, root, as_json)))
