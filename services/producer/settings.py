"""The producer worker's own settings (``AGUI_*`` environment variables)."""

from __future__ import annotations

import os
import socket
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.producer.ttl import check_settings
from services.runtime.settings import StateDirectory


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class ProducerSettings(BaseSettings):
    """How a producer worker runs its agents."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True,
                                      allow_inf_nan=False)

    agents: str | None = Field(None, alias="AGUI_AGENTS")
    """``name=module:object,...`` (or bare sample names); unset: every known agent."""
    max_concurrent_runs: int = Field(256, alias="AGUI_MAX_CONCURRENT_RUNS", ge=1, le=100_000)
    """Runs in flight at once, per hosted agent."""
    max_buffered_runs: int = Field(0, alias="AGUI_MAX_BUFFERED_RUNS", ge=0)
    """Dispatches held per partition before it is paused (0: twice the concurrency)."""
    uncovered_policy: Literal["reject", "reinterrupt"] = Field(
        "reinterrupt", alias="AGUI_UNCOVERED_POLICY")
    """What to do with an input leaving a known interrupt uncovered (seed: either is allowed)."""
    cancel_grace_s: float = Field(2.0, alias="AGUI_CANCEL_GRACE_S", gt=0, le=3600)
    """How long a cancelled agent may take to stop before it is abandoned."""
    run_timeout_s: float = Field(3600.0, alias="AGUI_RUN_TIMEOUT_S", gt=0, le=7 * 86_400)
    """The longest a hosted agent's run may take; then it ends ``RUN_ERROR run_timeout``
    (as a bridged agent's does after ``AGUI_UPSTREAM_RUN_TIMEOUT_S``): an agent that never
    ends, or waits for child runs that can never get a slot, held its thread busy for ever."""
    drain_s: float = Field(10.0, alias="AGUI_PRODUCER_DRAIN_S", ge=0, le=3600)
    """On shutdown or losing partitions: how long runs may finish before they are
    closed with RUN_ERROR ``worker_stopped``."""
    session_timeout_ms: int = Field(10_000, alias="AGUI_PRODUCER_SESSION_TIMEOUT_MS",
                                    ge=6_000, le=1_800_000)
    """Within the broker's defaults (``group.min``/``group.max.session.timeout.ms``):
    outside them the group refused the worker at join, with a traceback."""
    linger_ms: int = Field(1, alias="AGUI_PRODUCER_LINGER_MS", ge=0, le=1000)
    handover_wait_s: float = Field(15.0, alias="AGUI_HANDOVER_WAIT_S", ge=0, le=3600)
    """How long a run that takes a thread over from another agent waits for that agent's
    previous run to show closed in the thread's checkpoint (``CheckpointStore.handover``)."""
    recovery_margin_s: float = Field(60.0, alias="AGUI_RECOVERY_MARGIN_S", ge=0, le=86_400)
    """How far before a lost run's start marker the events scan begins (clock skew)."""
    worker_id: str = Field(default_factory=default_worker_id, alias="AGUI_WORKER_ID")
    state_dir: StateDirectory = Field(None, alias="AGUI_STATE_DIR")
    """Where the owned partitions' thread checkpoints are kept on disk
    (``checkpoint_disk``); unset: in memory, read in full on every assignment."""
    state_cache_mb: int = Field(64, alias="AGUI_STATE_CACHE_MB", ge=0)
    state_grace_s: float = Field(600.0, alias="AGUI_STATE_GRACE_S", ge=0, le=7 * 86_400)

    @model_validator(mode="after")
    def _ttls_are_durations(self) -> ProducerSettings:
        """``AGUI_DEFAULT_INTERRUPT_TTL[_<AGENT>]`` (read per agent by ``ttl``) must parse."""
        check_settings(os.environ)
        return self

    @property
    def buffered_per_partition(self) -> int:
        return self.max_buffered_runs or 2 * self.max_concurrent_runs
