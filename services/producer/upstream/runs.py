"""Which run of an upstream's stream is the requested one, and what ends it.

One SSE answer may carry several runs in sequence (AG-UI 1.0 rule 38;
replaying a thread's earlier runs is the usual case), each run's boundary
events naming the input's ``threadId`` and their own ``runId``; the
requested run echoes the input's ``runId`` (rule 64). ``RunSelector`` reads
the stream's events in order and says what the relay's run is made of:

* a run with another ``runId`` on the input's thread, before the requested
  one, is a replay: none of its events is published. The client sent the
  complete history in ``messages`` (rule 66), so its ``MESSAGES_SNAPSHOT``
  restates history the client holds and is dropped; its last
  ``STATE_SNAPSHOT`` is kept and published when the requested run opens,
  since state persists across the stream's runs (rule 38) and the requested
  run's ``STATE_DELTA`` events apply to it (rule 68);
* the requested run's events are published, its ``RUN_STARTED`` dropped (the
  runtime opened the run already);
* a boundary naming another thread, or another run where only the requested
  one may be (its ``RUN_FINISHED``), a run opened inside another, or any
  event after the requested run closed but a ``RUN_ERROR`` (the late error of
  rule 36) or the ``RUN_STARTED`` of a next run is a ``RunRuleError``.

Events before any ``RUN_STARTED`` open the requested run, as before (an
upstream that omits its ``RUN_STARTED``); between a replayed run's end and
the next ``RUN_STARTED`` only that run's late ``RUN_ERROR`` may come (and is
skipped with it). Pure: no I/O.

``relayed_error`` is the upstream's ``RUN_ERROR`` as the relay's run
reports it: its ``code`` namespaced ``upstream.<code>`` (``upstream_error``
when it has none), so no upstream can send a code of the relay's own
(``worker_lost``, ``run_timeout``, ``upstream_timeout``...) and have clients
read it as the relay's.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

Phase = Literal["before", "replayed", "requested", "finished", "ended"]
ERROR_PREFIX = "upstream."
LATE_ERROR_GRACE_S = 0.5
"""How long the requested run's ``RUN_FINISHED`` waits for a late ``RUN_ERROR`` on a
stream the upstream leaves open (most close it at once: no wait)."""
NO_CODE = "upstream_error"
SKIPPED_NAMED = 3
"""Replayed runs a message names, the last ones (the others are counted): an upstream
may replay thousands, each ``runId`` as long as it likes."""


class RunRuleError(Exception):
    """The stream breaks the run rules: the run ends ``upstream_protocol``."""


def relayed_error(wire: dict[str, Any]) -> dict[str, Any]:
    """The upstream's ``RUN_ERROR`` with its code namespaced (see the module's docstring)."""
    code = wire.get("code")
    return {**wire, "code": f"{ERROR_PREFIX}{code}" if code else NO_CODE}


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text if len(text) <= 80 else text[:80] + "…")


@dataclass
class RunSelector:
    """The requested run (``thread_id``, ``run_id``) picked out of one upstream stream."""

    thread_id: str
    run_id: str
    phase: Phase = "before"
    replayed: str | None = None
    """The ``runId`` of the replayed run being skipped."""
    skipped: int = 0
    """How many replayed runs were skipped so far."""
    last_skipped: deque[str] = field(default_factory=lambda: deque(maxlen=SKIPPED_NAMED))
    """The last ones, each as a message shows it (cut to 80 characters): what is kept is
    bounded however many runs, of whatever ids, the upstream replays."""
    state: dict[str, Any] | None = None
    """The last ``STATE_SNAPSHOT`` of a replayed run, until the requested run opens."""

    def take(self, wire: dict[str, Any]) -> list[dict[str, Any]]:
        """The events ``wire`` adds to the requested run (none while replaying). After
        the requested run's terminal event, use ``after`` instead."""
        kind = wire["type"]
        if self.phase == "replayed":
            return self._replayed(kind, wire)
        if kind == "RUN_STARTED":
            return self._started(wire)
        if self.phase == "before":
            if self.skipped:  # between runs: only a replayed run's late error may be
                if kind == "RUN_ERROR":
                    return []
                raise RunRuleError(f"sent {kind} after replayed run "
                                      f"{self.last_skipped[-1]} finished")
            self.phase = "requested"
        if kind == "RUN_FINISHED":
            self._own(wire, "RUN_FINISHED")
            self.phase = "finished"
        elif kind == "RUN_ERROR":
            self.phase = "ended"
            return [relayed_error(wire)]
        return [wire]

    def after(self, wire: dict[str, Any]) -> Literal["late_error", "next_run"]:
        """What an event after the requested run's ``RUN_FINISHED`` is: its late
        ``RUN_ERROR`` (the run failed after all, rule 36), or a next run's
        ``RUN_STARTED`` (not the relay's: the stream is read no further)."""
        kind = wire["type"]
        if kind == "RUN_ERROR":
            self.phase = "ended"
            return "late_error"
        if kind != "RUN_STARTED":
            raise RunRuleError(f"sent {kind} after run {_shown(self.run_id)} finished")
        if wire.get("threadId") != self.thread_id:
            raise RunRuleError(f"started a run of another thread ({self._named(wire)}) "
                                  f"after run {_shown(self.run_id)} finished")
        self.phase = "ended"
        return "next_run"

    def unended(self) -> str:
        """What a stream that ended here left undone (for the failure's message)."""
        if self.phase != "before":
            return f"without the RUN_FINISHED or RUN_ERROR of run {_shown(self.run_id)}"
        replayed = f" (after replaying {self.replays()})"
        return f"before run {_shown(self.run_id)} started" + (replayed if self.skipped else "")

    def replays(self) -> str:
        """The replayed runs skipped, for a message: all named, or how many and the last
        ``SKIPPED_NAMED``."""
        named = ", ".join(self.last_skipped)
        if self.skipped <= len(self.last_skipped):
            return named
        return f"{self.skipped} runs, the last {named}"

    def _started(self, wire: dict[str, Any]) -> list[dict[str, Any]]:
        if self.phase == "requested":
            raise RunRuleError(f"started a run ({self._named(wire)}) while run "
                                  f"{_shown(self.run_id)} was open")
        if wire.get("threadId") != self.thread_id:
            raise RunRuleError(f"started a run of another thread ({self._named(wire)}); "
                                  f"the input's is {self._expected()}")
        if wire.get("runId") != self.run_id:
            self.phase, self.replayed = "replayed", wire.get("runId")
            return []
        self.phase = "requested"
        state, self.state = self.state, None
        return [state] if state is not None else []

    def _replayed(self, kind: str, wire: dict[str, Any]) -> list[dict[str, Any]]:
        if kind == "RUN_STARTED":
            raise RunRuleError(f"started a run ({self._named(wire)}) while replayed run "
                                  f"{_shown(self.replayed)} was open")
        if kind == "STATE_SNAPSHOT":
            self.state = wire
        elif kind in ("RUN_FINISHED", "RUN_ERROR"):
            if kind == "RUN_FINISHED" and (wire.get("threadId") != self.thread_id
                                           or wire.get("runId") != self.replayed):
                raise RunRuleError(f"finished replayed run {_shown(self.replayed)} with "
                                      f"a RUN_FINISHED naming {self._named(wire)}")
            self.skipped += 1
            self.last_skipped.append(_shown(self.replayed))
            self.phase, self.replayed = "before", None
        return []

    def _own(self, wire: dict[str, Any], kind: str) -> None:
        if wire.get("threadId") != self.thread_id or wire.get("runId") != self.run_id:
            raise RunRuleError(f"sent a {kind} naming {self._named(wire)}; the input's "
                                  f"is {self._expected()}")

    def _expected(self) -> str:
        return f"thread {_shown(self.thread_id)}, run {_shown(self.run_id)}"

    @staticmethod
    def _named(wire: dict[str, Any]) -> str:
        return f"thread {_shown(wire.get('threadId'))}, run {_shown(wire.get('runId'))}"
