"""An upstream's event stream read as SSE events, holding an unfinished event as bytes.

httpx-sse's decoder keeps a ``str`` per ``data:`` line until the blank line
ends the event: an event of ``data:ab`` lines costs some 60 bytes of Python
objects per 8 bytes on the wire, so an event just under ``MAX_EVENT_BYTES``
(which counts wire bytes) held about eight times that limit. Here the lines
of an event are decoded as bytes: its data goes into one ``bytearray`` (each
line's value, ``\\n`` between them), and the line being read into another, so
an unfinished event holds no more than its bytes on the wire. Its data is
decoded once, as UTF-8 (an event stream is UTF-8, whatever charset the
response names), when the event ends.

``EventSource(response).aiter_sse()`` is a drop-in for httpx-sse's, with the
same events (``ServerSentEvent``) and the same parsing of the WHATWG rules
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
lines end at CR, LF or CRLF; a line starting ``:`` is a comment; ``field:
value`` loses one space after the colon; ``event``, ``data``, ``id`` and
``retry`` are read, other fields ignored. The caller checks the content type.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import cast

import httpx
from httpx_sse import ServerSentEvent

__all__ = ["EventSource", "SSEBytesDecoder"]


class SSEBytesDecoder:
    """Feeds on the body's reads; returns the events each one completes."""

    def __init__(self) -> None:
        self._line = bytearray()
        self._after_cr = False
        """The last read ended with a CR: a LF that starts the next one belongs to it."""
        self._event = ""
        self._data = bytearray()
        self._data_lines = 0
        self._last_event_id = ""
        self._retry: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events the lines ended in ``chunk`` complete. A CR ends its line at once
        (an event whose blank line is a CR at the end of a read is not kept waiting for
        the upstream's next byte); a LF at the start of the next read is then its CRLF's."""
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
            self._after_cr = False
        if chunk:
            self._after_cr = chunk.endswith(b"\r")
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *ended, rest = chunk.split(b"\n")
        out: list[ServerSentEvent] = []
        for part in ended:
            line: bytes | bytearray = part
            if self._line:
                self._line += part
                line, self._line = self._line, bytearray()
            sse = self._decode(line)
            if sse is not None:
                out.append(sse)
        self._line += rest
        return out

    def flush(self) -> list[ServerSentEvent]:
        """At the body's end: a last line without its end still ends a line (the event
        it belongs to is not dispatched without a blank line)."""
        if self._line:
            line, self._line = self._line, bytearray()
            sse = self._decode(line)
            return [sse] if sse is not None else []
        return []

    def _decode(self, line: bytes | bytearray) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(b":"):
            return None
        if line.startswith(b"data:") or line == b"data":
            self._data_line(memoryview(line)[6 if line.startswith(b"data: ") else 5:])
            return None
        name, _, raw = bytes(line).partition(b":")
        text = raw.decode("utf-8", "replace")
        text = text[1:] if text.startswith(" ") else text
        if name == b"event":
            self._event = text
        elif name == b"id":
            if "\0" not in text:
                self._last_event_id = text
        elif name == b"retry":
            self._retry = int(text) if text.isascii() and text.isdigit() else self._retry
        return None

    def _data_line(self, value: memoryview) -> None:
        if self._data_lines:
            self._data += b"\n"
        self._data += value
        self._data_lines += 1

    def _dispatch(self) -> ServerSentEvent | None:
        if not (self._event or self._data_lines or self._last_event_id
                or self._retry is not None):
            return None
        sse = ServerSentEvent(event=self._event, data=self._data.decode("utf-8", "replace"),
                              id=self._last_event_id, retry=self._retry)
        self._event, self._data, self._data_lines, self._retry = "", bytearray(), 0, None
        return sse  # the last event id is kept, as the rules say


class EventSource:
    """A response's body as SSE events (``aiter_sse``), as httpx-sse's ``EventSource``."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response

    async def aiter_sse(self) -> AsyncGenerator[ServerSentEvent, None]:
        decoder = SSEBytesDecoder()
        reads = cast(AsyncGenerator[bytes, None], self.response.aiter_bytes())
        try:
            async for chunk in reads:
                for sse in decoder.feed(chunk):
                    yield sse
            for sse in decoder.flush():
                yield sse
        finally:
            await reads.aclose()
