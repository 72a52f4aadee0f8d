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

``Lines`` is the pure part (bytes in, finished display lines out).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

CHUNK = 65_536
SHOWN = 8_192
"""Bytes of one line shown on the terminal (the log file keeps all of it)."""


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


async def relay(stream: asyncio.StreamReader, log: Path, show: Callable[[str], None]) -> None:
    """Copy ``stream`` to ``log`` and, line by line, to ``show``, until it ends.

    Nothing stops the reading but the end of the stream: a failure to show a
    line (a closed terminal) is ignored, and one to write the log file stops
    only the file.
    """
    lines = Lines()
    out: BinaryIO | None = None
    with contextlib.suppress(OSError):
        log.parent.mkdir(parents=True, exist_ok=True)
        out = log.open("ab")
    try:
        while chunk := await stream.read(CHUNK):
            if out is not None:
                try:
                    out.write(chunk)
                    out.flush()
                except OSError:
                    out = None
            for line, cut in lines.feed(chunk):
                _show(show, display(line, cut, log))
        for line, cut in lines.close():
            _show(show, display(line, cut, log))
    finally:
        if out is not None:
            out.close()


def _show(show: Callable[[str], None], text: str) -> None:
    with contextlib.suppress(Exception):
        show(text)
