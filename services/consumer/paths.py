"""Path parameters read from the raw path, so an id may hold a ``/``.

Starlette routes on ``scope["path"]``, which the server has already
percent-decoded: ``/threads/p%2Fchild-1`` reaches the router as
``/threads/p/child-1`` and matches no route, so a thread whose id holds a
``/`` — every pipeline child's (``<parent>/<key>-<token>``) — could be
neither read, replayed nor cancelled. A ``PathTemplate`` matches
``scope["raw_path"]`` instead: split on the literal ``/`` the client wrote,
then each segment percent-decoded (UTF-8), so ``%2F`` inside a segment is part
of the id. A route's parameter whose bytes are not UTF-8 is refused by the
caller rather than replaced (the server's decoding would replace them, and
two ids would read as one).
Pure: bytes in, parameters out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

_PARAM = re.compile(r"^\{(\w+)\}$")


@dataclass(frozen=True, slots=True)
class PathTemplate:
    """A route path such as ``/threads/{thread_id}/runs/{run_id}/events``."""

    parts: tuple[str | None, ...]
    """Each segment: its literal text, or None for a parameter."""
    names: tuple[str, ...]
    """The parameters' names, in order."""

    @classmethod
    def parse(cls, path: str) -> PathTemplate:
        if not path.startswith("/"):
            raise ValueError(f"a route path starts with '/': {path!r}")
        parts: list[str | None] = []
        names: list[str] = []
        for segment in path[1:].split("/"):
            param = _PARAM.match(segment)
            if param is not None:
                names.append(param.group(1))
                parts.append(None)
            elif "{" in segment:
                raise ValueError(f"a parameter takes a whole segment: {path!r}")
            else:
                parts.append(segment)
        return cls(tuple(parts), tuple(names))

    def match(self, segments: list[str]) -> dict[str, str] | None:
        """The parameters when ``segments`` (``segments(raw_path)``) fit, else None."""
        if len(segments) != len(self.parts):
            return None
        params: dict[str, str] = {}
        names = iter(self.names)
        for part, segment in zip(self.parts, segments, strict=True):
            if part is None:
                if not segment:
                    return None
                params[next(names)] = segment
            elif segment != part:
                return None
        return params


def segments(raw_path: bytes, errors: str = "replace") -> list[str] | None:
    """The decoded segments of a raw path (query string cut); None unless it starts with '/'.

    ``errors="strict"``: ``UnicodeDecodeError`` for a segment whose bytes are not UTF-8
    once percent-decoded (replaced, ``%ff`` and ``%EF%BF%BD`` would name one thread).
    """
    path, _, _ = raw_path.partition(b"?")
    if not path.startswith(b"/"):
        return None
    text = path[1:].decode("latin-1")
    return [unquote(s, errors=errors) if "%" in s else s for s in text.split("/")]
