"""A producer worker that SIGKILLs itself at the moment of a run's terminal write.

The fault scenario ``test_kill_at_terminal`` hosts the ``scripted`` agent
through this module (``AGUI_AGENTS=scripted=faults.dying_worker:agent``,
``PYTHONPATH`` naming ``tests``). Importing it wraps ``RunWriter.send`` so
that a run whose runId starts with ``DYING`` kills its worker process with
SIGKILL just before its terminal event is written to ``events``: by then the
same record is on ``runs``, acknowledged (``KafkaRunSink.send_terminal``
writes it there first) — the narrowest window of a run's end, which no
timing of an outside kill can hit reliably. Recovery (the other worker
closing the run) goes through ``send_event``, not the writer: it never dies.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable
from typing import Any

from contracts.headers import RUN_ID
from services.producer.agents.scripted import agent
from services.producer.publish import RunWriter

DYING = "dying-"
TERMINALS = ("RUN_FINISHED", "RUN_ERROR")

_send = RunWriter.send


def _send_or_die(self: RunWriter, event_type: str, seq: int,
                 value: bytes) -> Awaitable[asyncio.Future[Any]]:
    run_id = dict(self.headers(event_type, seq))[RUN_ID]
    if event_type in TERMINALS and run_id.startswith(DYING.encode()):
        os.kill(os.getpid(), signal.SIGKILL)
    return _send(self, event_type, seq, value)


RunWriter.send = _send_or_die  # type: ignore[method-assign]

__all__ = ["DYING", "agent"]
