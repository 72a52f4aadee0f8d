"""A library's line repeated in a tight loop is logged once per window, with a count.

aiokafka logs some conditions every time a loop meets them, and some of its
loops spin: while a topic a service writes is missing, its sender refreshes
the metadata without pause and each refresh logs "Topic … not found in
cluster metadata" at ERROR, about 2,700 times a second (0.7 MB of log a
second from two services, gigabytes an hour); a broker that is down gets
"Unable connect to …" at each attempt. ``RepeatFilter``, on the handler,
lets a library record through once per ``window_s`` for the same logger,
level and text (the message with its arguments, rendered: aiokafka passes a
new exception object each time, which compared as a new argument, so a
broker down got "Unable connect to …" through 65 to 210 times a second per
service: found by probing); the next one let through says how many like it
were left out meanwhile. The relay's own records are never held back
(they are bounded by design), and what is remembered is bounded too: at most
``keys`` distinct lines, the oldest forgotten first.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

LIBRARIES = ("aiokafka", "kafka")
"""Loggers (and their children) whose repeats are held back."""
WINDOW_S = 10.0
KEYS = 512


class RepeatFilter(logging.Filter):
    """Drop a library record seen within ``window_s``; count it for the next one let through."""

    def __init__(self, window_s: float = WINDOW_S, keys: int = KEYS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self.keys = keys
        self.clock = clock
        self._seen: OrderedDict[tuple[str, int, str], tuple[float, int]] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.partition(".")[0] not in LIBRARIES:
            return True
        key = (record.name, record.levelno, record.getMessage())
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.window_s:
            self._seen[key] = (seen[0], seen[1] + 1)
            return False
        if seen is not None and seen[1]:
            record.msg = f"{record.msg} ({seen[1]} more like it in the last {now - seen[0]:.0f} s)"
        self._seen[key] = (now, 0)
        self._seen.move_to_end(key)
        while len(self._seen) > self.keys:
            self._seen.popitem(last=False)
        return True

