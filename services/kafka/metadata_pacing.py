"""Metadata refreshes paced by the client's retry backoff, as the Java client paces them.

While a partition has no leader the client knows (its topic deleted, a
cluster coming back), aiokafka 0.14's producer sender asks for a metadata
refresh and loops as soon as the answer comes, and the answer comes at once
("unknown topic"): the consumer service spent 15 to 22 % of a core on it while
``events`` was missing, 34,000 metadata refreshes a second here (found by
probing; its log lines are bounded by ``services.runtime.log_repeats``).
The Java client waits ``retry.backoff.ms`` between metadata attempts.

``install`` (called by ``clients``) has every aiokafka client start a
metadata refresh no sooner than its retry backoff (``retry_backoff_ms``,
100 ms by default) after the previous one started: ten a second at most.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.client import AIOKafkaClient

from services.kafka.wrapping import wrap_once

_Update = Callable[[AIOKafkaClient, Any, Any], Awaitable[bool]]
_LAST = "_agui_metadata_started"


def _pacing(update: _Update) -> _Update:
    async def _metadata_update(self: AIOKafkaClient, cluster_metadata: Any,
                               topics: Any) -> bool:
        wait = getattr(self, _LAST, float("-inf")) + self._retry_backoff - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        setattr(self, _LAST, time.monotonic())
        return await update(self, cluster_metadata, topics)

    return _metadata_update


def install() -> None:
    """Pace every aiokafka client's metadata refreshes by its retry backoff."""
    wrap_once(AIOKafkaClient, "_metadata_update", _pacing)
