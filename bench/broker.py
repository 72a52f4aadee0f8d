"""The broker a benchmark runs against: ``KAFKA_BOOTSTRAP_SERVERS``, or a fresh local one.

Every phase writes to topics of its own (``topic_prefix``). A local broker
started here goes away with them; on a broker the benchmark did not start,
the topics it made are deleted when it is done, so running benchmarks
against a long-lived broker does not pile up partitions (each holds a file
open in the broker: a few thousand runs' worth reached its open-file limit).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from deploy.kafka import launcher
from services.kafka.admin import delete_prefixed_now
from services.runtime.settings import KafkaSettings

_PREFIXES: list[str] = []


def topic_prefix(kind: str) -> str:
    """A fresh topic prefix (``kind`` and eight hex digits) whose topics ``broker`` deletes."""
    prefix = f"{kind}{uuid.uuid4().hex[:8]}"
    _PREFIXES.append(prefix)
    return prefix


@contextlib.contextmanager
def broker() -> Iterator[str]:
    """Yield a bootstrap; a local broker started here is stopped on exit, and on any other
    broker the topics of every ``topic_prefix`` handed out meanwhile are deleted."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        before = len(_PREFIXES)
        try:
            yield external
        finally:
            if prefixes := tuple(_PREFIXES[before:]):
                # the caller's event loop may still be running
                delete_prefixed_now(KafkaSettings(bootstrap_servers=external), prefixes)
        return
    launcher.fetch(quiet=True)
    with tempfile.TemporaryDirectory(prefix="agui-bench-") as data:
        started = launcher.start(Path(data), ready_timeout=90, quiet=True)
        try:
            yield started.bootstrap
        finally:
            started.stop()
