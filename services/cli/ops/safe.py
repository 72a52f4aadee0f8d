"""Text from the topics made safe to print on a terminal.

Ids, messages, reasons and the rest come from clients and agents; printed
as they are, an ESC sequence among them acts on the operator's terminal
(its title, the screen, a hyperlink) and a ``[...]`` reads as rich markup.
``safe`` shows every control character (C0, DEL, C1) and every bidi
control as an escape (``\\x1b``, ``\\u202e``) — rich's ``Text`` strips only
a few of them and keeps ESC; ``markup`` also escapes rich markup, for the
f-strings printed with markup on.
"""

from __future__ import annotations

import re

from rich.markup import escape

from services.runtime.logging import CONTROLS

_UNSAFE = re.compile(f"[{CONTROLS}]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(value: object) -> str:
    """``value`` as text with its control and bidi characters shown as escapes."""
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_escaped, text) if _UNSAFE.search(text) else text


def markup(value: object) -> str:
    """``safe(value)``, rich markup escaped: for a value inside an f-string printed with
    markup."""
    return escape(safe(value))
