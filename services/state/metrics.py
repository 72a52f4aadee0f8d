"""What operators see of the state stores, read at scrape time.

Per store kind and owned partition: ``agui_state_store_bytes`` (the files on
disk), ``agui_state_store_offset`` (the changelog offset the store
reflects), ``agui_state_restore_records`` and ``agui_state_restore_seconds``
(the last restore: changelog records read, and how long the restore of
that assignment took); per process: ``agui_state_cache_bytes``,
``agui_state_cache_hits_total``, ``agui_state_cache_misses_total`` and
``agui_state_cache_hit_ratio``. An owner registers itself once
(``watch``) and answers ``Source.samples``; nothing is computed between
scrapes.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


@dataclass(frozen=True, slots=True)
class PartitionSample:
    """One owned partition's store, as the metrics show it."""

    partition: int
    disk_bytes: int
    offset: int | None
    restore_records: int
    restore_seconds: float


@dataclass(frozen=True, slots=True)
class CacheSample:
    bytes: int
    hits: int
    misses: int


class Source(Protocol):
    """An owner of stores (one kind, e.g. ``gatekeeper-threads``)."""

    name: str

    def samples(self) -> tuple[list[PartitionSample], CacheSample]: ...


class _StateCollector(Collector):
    def __init__(self) -> None:
        self.sources: weakref.WeakSet[Source] = weakref.WeakSet()

    def collect(self) -> Iterator[Metric]:
        size = GaugeMetricFamily("agui_state_store_bytes", "State store files on disk",
                                 labels=["store", "partition"])
        offset = GaugeMetricFamily("agui_state_store_offset",
                                   "The changelog offset a state store reflects",
                                   labels=["store", "partition"])
        records = GaugeMetricFamily("agui_state_restore_records",
                                    "Changelog records read by a partition's last restore",
                                    labels=["store", "partition"])
        seconds = GaugeMetricFamily("agui_state_restore_seconds",
                                    "How long the restore of a partition's assignment took",
                                    labels=["store", "partition"])
        cache = GaugeMetricFamily("agui_state_cache_bytes", "Decoded values cached",
                                  labels=["store"])
        hits = CounterMetricFamily("agui_state_cache_hits", "State cache hits", labels=["store"])
        misses = CounterMetricFamily("agui_state_cache_misses", "State cache misses",
                                     labels=["store"])
        ratio = GaugeMetricFamily("agui_state_cache_hit_ratio",
                                  "Hits over lookups since the process started",
                                  labels=["store"])
        for source in list(self.sources):
            partitions, c = source.samples()
            for s in partitions:
                labels = [source.name, str(s.partition)]
                size.add_metric(labels, s.disk_bytes)
                if s.offset is not None:
                    offset.add_metric(labels, s.offset)
                records.add_metric(labels, s.restore_records)
                seconds.add_metric(labels, s.restore_seconds)
            cache.add_metric([source.name], c.bytes)
            hits.add_metric([source.name], c.hits)
            misses.add_metric([source.name], c.misses)
            lookups = c.hits + c.misses
            ratio.add_metric([source.name], c.hits / lookups if lookups else 0.0)
        yield from (size, offset, records, seconds, cache, hits, misses, ratio)


@functools.cache
def _collector() -> _StateCollector:
    collector = _StateCollector()
    REGISTRY.register(collector)
    return collector


def watch(source: Source) -> None:
    """Report ``source``'s stores for as long as it lives."""
    _collector().sources.add(source)
