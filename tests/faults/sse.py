"""Reading an AG-UI SSE body as a client would: one JSON event per ``data:`` frame.

Frames are separated by a blank line; ``data:`` lines of one frame are
joined with LF (the SSE rule); comment lines (``:`` keepalives) and ``id:``
lines are skipped. Lines end at CRLF, LF or CR only (``sse_lines``): httpx's
``aiter_lines`` also splits at U+0085, U+2028 and U+2029, which JSON leaves
unescaped in ids and text. Reading stops after the terminal event (the
server closes the body then anyway).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson

from services.cli.ops.agui_http import sse_lines

TERMINALS = frozenset({"RUN_FINISHED", "RUN_ERROR"})


async def read_stream(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The events of an SSE response body, in order, up to the terminal one."""
    data: list[str] = []
    async for line in sse_lines(response.aiter_text()):
        if line == "":
            if data:
                event = orjson.loads("\n".join(data))
                data = []
                yield event
                if isinstance(event, dict) and event.get("type") in TERMINALS:
                    return
            continue
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield orjson.loads("\n".join(data))
