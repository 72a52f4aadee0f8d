"""Text from the topics made safe to print on a terminal.

Ids, messages, reasons and the rest come from clients and agents; printed
as they are, an ESC sequence among them acts on the operator's terminal
(its title, the screen, a hyperlink), a ``[...]`` reads as rich markup and
an invisible character makes one id pass for another (``alpha\\u200b``
prints as ``alpha``). ``safe`` shows every character of
``services.runtime.logging.CONTROLS`` (C0, DEL, C1, bidi and the other
format characters, the spaces but U+0020, the ones drawn as nothing) as an
escape (``\\x1b``, ``\\u202e``, ``\\u200b``) — rich's ``Text`` strips only a
few of them and keeps ESC — and the backslash that starts an escape as
``\\\\``, so a printed form names one text: ``victim\\x20x`` typed by a client
no longer prints as the id ``victim x`` does, nor ``alpha\\u200b`` as ``alpha``
followed by U+200B (found by probing); ``markup`` also escapes rich markup, for the
f-strings printed with markup on; ``safe_id`` also shows a space as
``\\x20``, so an id is one word wherever it is printed; ``shell_word`` quotes
an id for a command to paste, exact to a shell in any locale and as inert (and
``typable`` says whether any command can be given it); ``safe_json``
pretty-prints a JSON value with the same escapes (rich's ``JSON`` escapes
only C0).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from rich.highlighter import JSONHighlighter
from rich.markup import escape
from rich.text import Text

from services.runtime.logging import CONTROLS

_UNSAFE = re.compile(f"[{CONTROLS}]")
_SHOWN = re.compile(f"[\\\\{CONTROLS}]")
"""What ``safe`` escapes: the unsafe characters, and the backslash its escapes start with."""
_SHELL_SHOWN = re.compile(f"[\\\\'{CONTROLS}]")


def _escape_of(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    return "\\\\" if char == "\\" else _escape_of(char)


def safe(value: object) -> str:
    """``value`` as text with its control, bidi and invisible characters shown as escapes,
    and its backslashes doubled: read as Python reads an escape, it gives ``value`` back."""
    text = value if isinstance(value, str) else str(value)
    return _SHOWN.sub(_escaped, text) if _SHOWN.search(text) else text


def safe_id(value: object) -> str:
    """``safe(value)`` with its spaces shown as ``\\x20`` too: an id printed among other
    words or columns, which no id can then pass for several of (``victim   interrupted``)
    or, by a trailing space, for another."""
    return safe(value).replace(" ", "\\x20")


def _argument_bytes(value: str) -> bytes:
    """``value`` as the bytes of a command's argument; Python reads argv's undecodable
    bytes back as the lone surrogates ``surrogateescape`` makes of them."""
    return value.encode("utf-8", "surrogateescape")


def typable(value: str) -> bool:
    """True when a command's argument can carry ``value``: not when it holds a NUL (an
    argument ends there) or a lone surrogate no byte reads back as."""
    if "\x00" in value:
        return False
    try:
        _argument_bytes(value)
    except UnicodeEncodeError:
        return False
    return True


def _shell_escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in "\\'":
        return "\\" + char
    return "".join(f"\\x{byte:02x}" for byte in _argument_bytes(char))


def shell_word(value: str) -> str:
    """``value`` as one shell word that a shell reads back exactly and a terminal shows
    inert: ``shlex.quote``'s, or, when it holds an unsafe character, bash's and zsh's
    ``$'...'`` with each such character as its UTF-8 bytes (``$'alpha\\xe2\\x80\\x8b'``:
    bash decodes ``\\u200b`` in its locale, and leaves it as it is in the POSIX one);
    ``safe`` of a command would change its backslashes. ``ValueError`` for a value no
    argument can carry (``typable``)."""
    if not typable(value):
        raise ValueError(f"{safe(value)} cannot be typed: no command argument holds it")
    if _UNSAFE.search(value) is None:
        return shlex.quote(value)
    return "$'" + _SHELL_SHOWN.sub(_shell_escaped, value) + "'"


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
