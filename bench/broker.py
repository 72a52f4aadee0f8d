"""The broker a benchmark runs against: ``KAFKA_BOOTSTRAP_SERVERS``, or a fresh local one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from deploy.kafka import launcher


@contextlib.contextmanager
def broker() -> Iterator[str]:
    """Yield a bootstrap; a local broker started here is stopped on exit."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    launcher.fetch(quiet=True)
    with tempfile.TemporaryDirectory(prefix="agui-bench-") as data:
        started = launcher.start(Path(data), ready_timeout=90, quiet=True)
        try:
            yield started.bootstrap
        finally:
            started.stop()
