"""A blocked event loop says where it is blocked.

Every service runs one asyncio loop; code that blocks it (an agent calling
``time.sleep`` or burning CPU, a synchronous client, a huge JSON document
decoded in one call) stops everything else the process does: every other
run's events, the Kafka heartbeats (the group then rebalances every
partition), the health endpoint. The process looks hung, and nothing in its
log said why (found by probing: a hosted agent's ``time.sleep(15)`` held a
worker's 23 consumer groups past their session timeout, and the log named no
agent).

``LoopWatch`` is a daemon thread beside the loop: the loop stamps a
heartbeat every ``BEAT_S``, and when no stamp has come for ``BLOCKED_S`` the
thread logs a warning naming the frames the loop's thread is executing
(which module and line block it), once per stall, and how long the stall
lasted when the loop beats again. It reads the stack with
``sys._current_frames`` (CPython's way to see another thread's frame) and
never touches the loop itself.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger(__name__)

BEAT_S = 0.25
BLOCKED_S = 2.0
"""A loop that has not run a callback for this long is blocked (a healthy one runs its
heartbeat within a few milliseconds of each ``BEAT_S``)."""
FRAMES = 6
"""The innermost frames of the blocked thread named in the warning."""


class LoopWatch:
    """Watches the running loop from a thread of its own (see the module docstring)."""

    def __init__(self, blocked_s: float = BLOCKED_S, beat_s: float = BEAT_S) -> None:
        self.blocked_s = blocked_s
        self.beat_s = beat_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._last = time.monotonic()
        self._beat: asyncio.TimerHandle | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stalls = 0
        """Stalls reported since the watch started."""

    def start(self) -> None:
        """Start watching the running loop (call from it)."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._stamp()
        self._thread = threading.Thread(target=self._watch, name="loop-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.cancel()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.beat_s)

    def _stamp(self) -> None:
        self._last = time.monotonic()
        assert self._loop is not None
        self._beat = self._loop.call_later(self.beat_s, self._stamp)

    def _watch(self) -> None:
        since: float | None = None
        while not self._stop.wait(self.beat_s):
            last = self._last
            silent = time.monotonic() - last
            if since is None and silent >= self.blocked_s:
                since = last
                self.stalls += 1
                log.warning("the event loop has run nothing for %.1f s: everything else this "
                            "process does waits (heartbeats, streams, other runs); it is in %s",
                            silent, self._where())
            elif since is not None and last != since:
                log.warning("the event loop ran again after %.1f s blocked", last - since)
                since = None

    def _where(self) -> str:
        frame = sys._current_frames().get(self._loop_thread)
        if frame is None:
            return "(no frame)"
        frames = traceback.extract_stack(frame)[-FRAMES:]
        return " <- ".join(f"{f.filename}:{f.lineno} {f.name}" for f in reversed(frames))
