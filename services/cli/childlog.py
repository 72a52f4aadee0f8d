"""A child process's output, relayed whatever it writes: ``agui-relay up``'s pipe reader.

``up`` pipes each service's output, keeps it whole in ``<service>.log`` and
shows it on the terminal prefixed with the service's name. The pipe must be
read to its end, always: a child whose pipe fills blocks in its next log
write, its event loop with it (a service that stops answering while its
``/readyz`` says ready). asyncio's line reader gives up on a line over 64 KiB,
so this reads chunks and splits lines itself: the log file gets every byte
as it comes, the terminal at most ``SHOWN`` bytes of a line and a note of
what was cut. A line is shown as plain text, never as rich markup, so a
child printing ``[red]`` or ``[/]`` neither styles nor breaks the relay.

A log file that stops taking writes (a full disk) is said on the terminal,
and tried again every ``RETRY_S``: it had been dropped without a word, and
never written again once space was freed (found by probing). What comes
meanwhile is on the terminal only.

``Lines`` is the pure part (bytes in, finished display lines out).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

CHUNK = 65_536
SHOWN = 8_192
"""Bytes of one line shown on the terminal (the log file keeps all of it)."""
RETRY_S = 30.0
"""How often a log file that stopped taking writes is tried again."""


@dataclass
class Lines:
    """Splits a byte stream into lines, keeping at most ``shown`` bytes of each."""

    shown: int = SHOWN
    _line: bytearray = field(default_factory=bytearray)
    _cut: int = 0

    def feed(self, chunk: bytes) -> list[tuple[bytes, int]]:
        """The lines ``chunk`` completes, each as (kept bytes, bytes cut)."""
        done: list[tuple[bytes, int]] = []
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._take(chunk, start, end)
            done.append(self._finish())
            start = end + 1
        self._take(chunk, start, len(chunk))
        return done

    def close(self) -> list[tuple[bytes, int]]:
        """The last line, when the stream ended without a newline."""
        return [self._finish()] if self._line or self._cut else []

    def _take(self, chunk: bytes, start: int, end: int) -> None:
        room = max(0, self.shown - len(self._line))
        take = min(room, end - start)
        self._line += chunk[start:start + take]
        self._cut += end - start - take

    def _finish(self) -> tuple[bytes, int]:
        line, cut = bytes(self._line).rstrip(b"\r"), self._cut
        self._line, self._cut = bytearray(), 0
        return line, cut


def display(line: bytes, cut: int, log: Path) -> str:
    """The terminal text of one line (``cut``: bytes not shown)."""
    text = line.decode("utf-8", "replace")
    return f"{text} …[{cut} more bytes in {log}]" if cut else text


class LogFile:
    """``path`` opened for appending; a failure is said once through ``show`` and the
    file tried again after ``RETRY_S`` (see the module docstring)."""

    def __init__(self, path: Path, show: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._show = show
        self._clock = clock
        self._out: BinaryIO | None = None
        self._failed = False
        self._retry_at = 0.0
        self._open()

    def write(self, chunk: bytes) -> None:
        if self._out is None:
            if self._clock() < self._retry_at:
                return
            self._open()
            if self._out is None:
                return
        try:
            self._out.write(chunk)
            self._out.flush()
        except OSError as exc:
            self._fail(exc)

    def close(self) -> None:
        if self._out is not None:
            with contextlib.suppress(OSError):
                self._out.close()
            self._out = None

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._out = self.path.open("ab")
        except OSError as exc:
            self._fail(exc)
            return
        if self._failed:
            self._failed = False
            _show(self._show, f"[log file {self.path} takes writes again; what came "
                              "meanwhile was shown here only]")

    def _fail(self, exc: OSError) -> None:
        self.close()
        self._retry_at = self._clock() + RETRY_S
        if not self._failed:
            self._failed = True
            _show(self._show, f"[log file {self.path} stopped taking writes ({exc}); this "
                              f"output is shown here only, the file is tried again every "
                              f"{RETRY_S:g} s]")


async def relay(stream: asyncio.StreamReader, log: Path, show: Callable[[str], None]) -> None:
    """Copy ``stream`` to ``log`` and, line by line, to ``show``, until it ends.

    Nothing stops the reading but the end of the stream: a failure to show a
    line (a closed terminal) is ignored, and one to write the log file is said
    and tried again later (``LogFile``).
    """
    lines = Lines()
    out = LogFile(log, show)
    try:
        while chunk := await stream.read(CHUNK):
            out.write(chunk)
            for line, cut in lines.feed(chunk):
                _show(show, display(line, cut, log))
        for line, cut in lines.close():
            _show(show, display(line, cut, log))
    finally:
        out.close()


def _show(show: Callable[[str], None], text: str) -> None:
    with contextlib.suppress(Exception):
        show(text)
