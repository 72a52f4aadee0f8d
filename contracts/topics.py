"""The topic catalog: every topic's name, partitions, retention and role.

All topics are keyed by threadId, so one thread's records stay in one
partition, in order. ``requests``, ``events``, ``runs``, ``threads`` and
``control`` (and ``decisions``, which the consumer service reads whole)
share one partition count: a gatekeeper instance owning partition p of
``requests`` owns p of ``runs`` and restores p of ``threads``.

``runs`` is the small boundary topic: each run's ``RUN_STARTED`` and its
terminal event (``RUN_FINISHED`` / ``RUN_ERROR``), the same bytes and headers
as on ``events``, written there by the producer workers too, so the
gatekeeper learns when runs open and close without reading their tokens
(``services.producer.publish`` says in which order, and why a run's end is on
``runs`` if and only if it is on ``events``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

DAY_MS = 24 * 60 * 60 * 1000
BOUNDARY_TYPES = frozenset({"RUN_STARTED", "RUN_FINISHED", "RUN_ERROR"})
"""The event types a run's boundary records have: what ``runs`` carries of ``events``."""
TERMINAL_TYPES = frozenset({"RUN_FINISHED", "RUN_ERROR"})
"""The event types that end a run."""
DEFAULT_PREFIX = "agui"
DEFAULT_PARTITIONS = 8


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic: its name, partitioning and broker configs."""

    name: str
    role: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    copartitioned: bool = False
    description: str = ""


def _delete(days: int) -> dict[str, str]:
    return {"cleanup.policy": "delete", "retention.ms": str(days * DAY_MS)}


@dataclass(frozen=True, slots=True)
class TopicCatalog:
    """The topics of one deployment, named under ``prefix``."""

    prefix: str = DEFAULT_PREFIX
    partitions: int = DEFAULT_PARTITIONS
    dispatch_partitions: int = DEFAULT_PARTITIONS

    @property
    def requests(self) -> str:
        return f"{self.prefix}.requests"

    @property
    def decisions(self) -> str:
        return f"{self.prefix}.decisions"

    @property
    def events(self) -> str:
        return f"{self.prefix}.events"

    @property
    def runs(self) -> str:
        """Run boundaries: each run's RUN_STARTED and terminal event, as on ``events``."""
        return f"{self.prefix}.runs"

    @property
    def threads(self) -> str:
        return f"{self.prefix}.threads"

    @property
    def control(self) -> str:
        return f"{self.prefix}.control"

    @property
    def deadletter(self) -> str:
        return f"{self.prefix}.deadletter"

    @property
    def checkpoints(self) -> str:
        """The producer workers' compacted changelog (run markers, raised interrupts)."""
        return f"{self.prefix}.producer-checkpoints"

    def dispatch(self, agent: str) -> str:
        """The topic the workers hosting ``agent`` consume."""
        return f"{self.prefix}.dispatch.{agent}"

    def specs(self, agents: tuple[str, ...] = ()) -> list[TopicSpec]:
        """Every topic, with configs, for ``agents`` hosted in this deployment."""
        n = self.partitions
        specs = [
            TopicSpec(self.requests, "requests", n, _delete(7), True,
                      "RunRequest: inputs submitted by consumers, decided by the gatekeeper"),
            TopicSpec(self.decisions, "decisions", n, _delete(7), True,
                      "Decision: the gatekeeper's verdict on each request"),
            TopicSpec(self.events, "events", n, _delete(7), True,
                      "AG-UI events, one per record, exactly the wire JSON"),
            TopicSpec(self.runs, "runs", n, _delete(7), True,
                      "Run boundaries: each run's RUN_STARTED and terminal event, the same "
                      "bytes and headers as on events (what the gatekeeper reads of runs)"),
            TopicSpec(self.threads, "threads", n,
                      {"cleanup.policy": "compact", "min.compaction.lag.ms": "0",
                       "segment.ms": str(DAY_MS)}, True,
                      "ThreadState: the gatekeeper's changelog, one live record per thread"),
            TopicSpec(self.control, "control", n, _delete(1), True,
                      "ControlCommand: cancel a run"),
            TopicSpec(self.deadletter, "deadletter", n, _delete(30), False,
                      "DeadLetter: records no service could use, and why"),
            TopicSpec(self.checkpoints, "checkpoints", self.dispatch_partitions,
                      {"cleanup.policy": "compact", "min.compaction.lag.ms": "0",
                       "segment.ms": str(DAY_MS)}, False,
                      "Producer checkpoints: per thread, the interrupts the runtime raised, "
                      "run start/terminal markers and side-effect executions; partitioned "
                      "like dispatch.<agent> so a worker restores the partitions it owns"),
        ]
        specs += [
            TopicSpec(self.dispatch(a), "dispatch", self.dispatch_partitions, _delete(7), False,
                      f"Dispatch: admitted runs for agent {a}")
            for a in agents
        ]
        return specs
