"""One codec for every record: orjson bytes, camelCase, optionals omitted.

``encode`` serialises any envelope or AG-UI event through the ag-ui base
model's serializer (which drops unset optionals instead of writing ``null``)
and orjson; ``decode`` parses with orjson and validates with pydantic. Any
failure to read a record is a ``DecodeError`` carrying a short reason, so the
loops can turn it into a decision or a dead letter in one place.
"""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from ag_ui.core import Event
from pydantic import BaseModel, TypeAdapter, ValidationError

M = TypeVar("M", bound=BaseModel)

EVENT_DECODER: TypeAdapter[Event] = TypeAdapter(Event)
"""Validates any AG-UI event by its ``type`` discriminator."""


class DecodeError(ValueError):
    """A record that is not valid JSON or not valid for its schema."""

    def __init__(self, reason: str, *, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def to_wire(model: BaseModel) -> Any:
    """The JSON-ready wire form (camelCase keys, unset optionals omitted)."""
    return model.model_dump(mode="json", by_alias=True)


def encode(model: BaseModel) -> bytes:
    """Serialise an envelope or AG-UI model to the bytes written to Kafka."""
    return orjson.dumps(to_wire(model))


def encode_event(event: BaseModel) -> bytes:
    """Serialise one AG-UI event exactly as it goes on the wire."""
    return orjson.dumps(to_wire(event))


def load_json(data: bytes | str) -> Any:
    """Parse JSON, raising ``DecodeError('invalid_json')``."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("invalid_json", detail=str(exc)) from exc


def validation_lines(exc: ValidationError) -> list[str]:
    """Each error of a pydantic validation error as ``where: what`` (no input values)."""
    return [f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
            for err in exc.errors()]


def validation_detail(exc: ValidationError, limit: int = 3) -> str:
    """A short, human-readable summary of a pydantic validation error."""
    more = exc.error_count() - limit
    return "; ".join(validation_lines(exc)[:limit]) + (f" (+{more} more)" if more > 0 else "")


def decode(model: type[M], data: bytes | str) -> M:
    """Parse and validate one record as ``model``."""
    raw = load_json(data)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise DecodeError("schema_invalid", detail=validation_detail(exc)) from exc


def decode_event(data: bytes | str) -> Event:
    """Parse and validate one AG-UI event."""
    raw = load_json(data)
    try:
        return EVENT_DECODER.validate_python(raw)
    except ValidationError as exc:
        raise DecodeError("schema_invalid", detail=validation_detail(exc)) from exc
