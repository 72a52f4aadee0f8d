"""Text from the topics made safe to print on a terminal.

Ids, messages, reasons and the rest come from clients and agents; printed
as they are, an ESC sequence among them acts on the operator's terminal
(its title, the screen, a hyperlink), a ``[...]`` reads as rich markup and
an invisible character makes one id pass for another (``alpha\\u200b``
prints as ``alpha``). ``safe`` shows every character of
``services.runtime.logging.CONTROLS`` (C0, DEL, C1, bidi and the other
format characters, the spaces but U+0020, the ones drawn as nothing) as an
escape (``\\x1b``, ``\\u202e``, ``\\u200b``) — rich's ``Text`` strips only a
few of them and keeps ESC; ``markup`` also escapes rich markup, for the
f-strings printed with markup on; ``safe_id`` also shows a space as
``\\x20``, so an id is one word wherever it is printed; ``safe_json``
pretty-prints a JSON value with the same escapes (rich's ``JSON`` escapes
only C0).
"""

from __future__ import annotations

import json
import re
from typing import Any

from rich.highlighter import JSONHighlighter
from rich.markup import escape
from rich.text import Text

from services.runtime.logging import CONTROLS

_UNSAFE = re.compile(f"[{CONTROLS}]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def safe(value: object) -> str:
    """``value`` as text with its control, bidi and invisible characters shown as escapes."""
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_escaped, text) if _UNSAFE.search(text) else text


def safe_id(value: object) -> str:
    """``safe(value)`` with its spaces shown as ``\\x20`` too: an id printed among other
    words or columns, which no id can then pass for several of (``victim   interrupted``)
    or, by a trailing space, for another."""
    return safe(value).replace(" ", "\\x20")


def markup(value: object) -> str:
    """``safe(value)``, rich markup escaped: for a value inside an f-string printed with
    markup."""
    return escape(safe(value))


def _json_escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x0A:  # the indentation's: JSON escapes every C0 inside a string itself
        return "\n"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # JSON spells it as a surrogate pair
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


def safe_json(value: Any, indent: int = 2) -> Text:
    """``value`` as highlighted, indented JSON whose strings show every unsafe character
    as a JSON escape (``\\u202e``): still JSON, and inert on a terminal."""
    text = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    shown = JSONHighlighter()(_UNSAFE.sub(_json_escaped, text))
    shown.no_wrap = True
    shown.overflow = None
    return shown
