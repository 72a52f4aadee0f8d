"""The wire form of an event the runtime built itself, assembled from its parts.

The ``ag-ui-protocol`` models serialise through a Python hook per nested
model (it drops optionals left unset), which makes ``model_dump`` of a
RUN_FINISHED cost about three times what validating its wire form does. The
runtime builds its terminal and closing events from parts it already
holds, so ``plain_wire`` writes their wire dict directly — the same keys,
order and values the model's serialiser gives (the unit tests compare the
two) — and the runner still validates that dict against the protocol's
model before it is published. Whatever is not plainly scalar (a ``result``,
extra members, any ``dict`` value) is left to the serialiser: ``None``.
"""

from __future__ import annotations

import functools
from enum import Enum
from typing import Any

from pydantic import BaseModel

_NOT_PLAIN = object()
_SCALARS = (str, int, bool)
"""No float: a non-finite one serialises differently, and no event the runtime builds has one."""


@functools.cache
def _layout(model: type[BaseModel]) -> tuple[tuple[str, str, bool], ...]:
    """Per field, in declaration order: (attribute, wire key, omitted when None)."""
    return tuple((name, field.serialization_alias or field.alias or name,
                  not field.is_required() and field.default is None)
                 for name, field in model.model_fields.items())


def plain_wire(model: BaseModel) -> dict[str, Any] | None:
    """``model``'s wire dict when every value is a scalar, an enum, or a list or model of
    such values; None otherwise (serialise it with ``to_wire`` then)."""
    if model.__pydantic_extra__:
        return None
    out: dict[str, Any] = {}
    for name, key, omittable in _layout(type(model)):
        value = getattr(model, name)
        if value is None:
            if omittable:
                continue
        else:
            value = _plain(value)
            if value is _NOT_PLAIN:
                return None
        out[key] = value
    return out


def _plain(value: Any) -> Any:
    """One value's wire form, or ``_NOT_PLAIN``."""
    if isinstance(value, Enum):  # before the scalars: the event types are str enums
        return value.value
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, BaseModel):
        wire = plain_wire(value)
        return _NOT_PLAIN if wire is None else wire
    if isinstance(value, list):
        items = [_plain(item) for item in value]
        return _NOT_PLAIN if any(item is _NOT_PLAIN for item in items) else items
    return _NOT_PLAIN
