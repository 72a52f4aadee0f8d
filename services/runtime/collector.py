"""The cyclic garbage collector, set for long-running services.

CPython collects its youngest generation every 700 net allocations of
container objects and, every hundred of those, a full collection over every
such object the process holds. A service holds a few hundred thousand from
startup alone (FastAPI, pydantic's models, aiokafka, the AG-UI types), so a
full collection took about 50 ms in the consumer service; streaming 50,000
events a second it made three or four a second and spent a third of its CPU
in the collector (1.4 s of every 4.0 s). Almost everything a record or a
request allocates is freed by reference counting, not by the collector.

So, before a service starts serving: ``gc.freeze()`` moves everything that
exists into a permanent generation no collection scans (what startup built
lives as long as the process), and the youngest generation's threshold is
``AGUI_GC_THRESHOLD`` (default 50,000) instead of 700: the cycles a service
does make (asyncio's exceptions and their tracebacks) are still collected, a
few times a minute instead of hundreds of times a second. ``700`` restores
CPython's default.
"""

from __future__ import annotations

import gc

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_THRESHOLD = 50_000


class CollectorSettings(BaseSettings):
    """``AGUI_GC_THRESHOLD``: container allocations between young-generation collections."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True,
                                      allow_inf_nan=False)

    gc_threshold: int = Field(DEFAULT_THRESHOLD, alias="AGUI_GC_THRESHOLD", ge=1,
                              le=2**31 - 1)  # a C int: more overflowed in gc.set_threshold


def settle_for_serving(settings: CollectorSettings) -> None:
    """Collect once, freeze what is left, and space the young collections out."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(settings.gc_threshold, middle, oldest)
