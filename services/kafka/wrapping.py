"""One of aiokafka's methods wrapped once, however often the client factories ask.

The repairs in this package (``stale_leaders``, ``offset_fetch_refusals``,
``refused_sequences``, ``retention_losses``) each wrap a method of an aiokafka
class, and every ``new_consumer`` / ``new_producer`` / ``new_admin`` asks them
to install. ``wrap_once`` marks what it installed with the wrapper's name,
keeps the marks of wrappers installed before (two repairs may wrap one
method), and does nothing when the mark is there already.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def mark_of(wrapper: Callable[..., Any]) -> str:
    """The attribute a method wrapped by ``wrapper`` carries."""
    return f"_wrapped_by_{wrapper.__module__}.{wrapper.__qualname__}"


def wrap_once(owner: type, name: str, wrapper: Callable[[Any], Any]) -> None:
    """Replace ``owner.name`` by ``wrapper(owner.name)``, unless that was done already."""
    current = getattr(owner, name)
    mark = mark_of(wrapper)
    if getattr(current, mark, False):
        return
    wrapped = functools.update_wrapper(wrapper(current), current)
    setattr(wrapped, mark, True)
    setattr(owner, name, wrapped)
