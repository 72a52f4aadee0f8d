"""Fixtures for the interrupt lifecycle on the real broker: the gatekeeper suite's own
(``kafka``, ``topics``: a client writing requests and reading every output topic;
``processes``: gatekeepers as child processes tests may SIGKILL), and a follower of
``events`` from the producer suite; the worker runs in the test's loop."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for helpers in ("gatekeeper", "producer"):  # their harnesses, imported by name
    if str(HERE.parent / helpers) not in sys.path:
        sys.path.insert(0, str(HERE.parent / helpers))

from producer_harness import Relay  # noqa: E402

from services.runtime.settings import KafkaSettings  # noqa: E402

_spec = importlib.util.spec_from_file_location("gatekeeper_fixtures",
                                               HERE.parent / "gatekeeper" / "conftest.py")
assert _spec is not None
assert _spec.loader is not None
_gatekeeper = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gatekeeper)
kafka = _gatekeeper.kafka
topics = _gatekeeper.topics
processes = _gatekeeper.processes


@pytest.fixture
async def events(kafka: KafkaSettings, topics: object) -> AsyncIterator[Relay]:
    """A follower of ``events`` (runs by id, each ended once seen), after the topics exist."""
    async with Relay(kafka) as relay:
        yield relay
