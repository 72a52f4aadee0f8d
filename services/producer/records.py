"""A run's records: each event validated, timestamped and numbered, in one place.

Whatever reaches the sink — the runtime's ``RUN_STARTED``, an agent's event,
a closing event or the terminal one — becomes an ``EventRecord`` here: its
wire form validated against the ``ag-ui-protocol`` models (an event that
fails is an ``AgentProtocolError`` ``invalid_event``, so nothing invalid is
published), timestamped when it has none, serialised once, and given the
next per-run sequence number. The port (``services.producer.port``) and the
run driver (``services.producer.runner``) share one ``RunRecords`` per run,
so numbering has a single owner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from ag_ui.core import PROTOCOL_VERSION, BaseEvent, RunAgentInput
from pydantic import ValidationError

from contracts.codec import EVENT_DECODER, to_wire, validation_detail
from services.producer.agent import AgentItem
from services.producer.errors import AgentProtocolError
from services.producer.sink import EventRecord
from services.producer.wire import plain_wire

log = logging.getLogger(__name__)


def checked(item: AgentItem | BaseEvent) -> tuple[BaseEvent, dict[str, Any]]:
    """Validate one event against the ag-ui-protocol models; returns it and its wire form."""
    try:
        wire: dict[str, Any] = (dict(item) if isinstance(item, dict)
                                else item.model_dump(mode="json", by_alias=True))
        event: BaseEvent = EVENT_DECODER.validate_python(wire)
    except ValidationError as exc:
        raise AgentProtocolError(f"invalid event: {validation_detail(exc)}",
                                 code="invalid_event") from exc
    except (ValueError, TypeError, AttributeError) as exc:
        raise AgentProtocolError(f"not a valid AG-UI event ({type(item).__name__}): {exc}",
                                 code="invalid_event") from exc
    return event, wire


def validated_as(kind: type[BaseEvent], wire: dict[str, Any]) -> BaseEvent:
    """``wire`` validated as a ``kind`` event (``AgentProtocolError`` if it is not one)."""
    try:
        event: BaseEvent = kind.__pydantic_validator__.validate_python(wire)
    except ValidationError as exc:
        raise AgentProtocolError(f"invalid event: {validation_detail(exc)}",
                                 code="invalid_event") from exc
    return event


class RunRecords:
    """Numbering and serialisation of one run's records."""

    def __init__(self, clock_ms: Callable[[], int], room: int,
                 log_fields: Mapping[str, Any]) -> None:
        self.seq = 0
        """The next record's sequence number (= records numbered so far)."""
        self._clock_ms = clock_ms
        self.room = room
        """The most value bytes an event record of this run can have (``sizes``)."""
        self._log = dict(log_fields)

    def value(self, wire: dict[str, Any]) -> bytes:
        """``wire`` (timestamped if it has no timestamp) as bytes."""
        if wire.get("timestamp") is None:
            wire["timestamp"] = self._clock_ms()
        return orjson.dumps(wire)

    def numbered(self, value: bytes, kind: str) -> EventRecord:
        """The next record: ``value`` numbered."""
        record = EventRecord(self.seq, value, kind)
        self.seq += 1
        return record

    def record(self, event: BaseEvent, wire: dict[str, Any] | None = None) -> EventRecord:
        """Number one event and fix its bytes (validating it unless ``wire`` already was).

        A runtime-built event (closing, terminal) has its wire assembled from its parts
        when they are plain (``wire.plain_wire``) and that is validated; else it takes
        the agents' path (serialise, then validate).
        """
        if wire is None:
            plain = plain_wire(event)
            if plain is None:
                event, wire = checked(event)
            else:
                validated_as(type(event), plain)
                wire = plain
        kind = wire["type"]
        return self.numbered(self.value(wire), kind if type(kind) is str else event.type.value)

    def run_started(self, run_input: RunAgentInput, input_wire: Any) -> EventRecord:
        """RUN_STARTED, the input echoed: built from the input, which was validated
        when it was read (so no model of it is built and checked again). Without
        the echo when that would not fit a record (the input is optional)."""
        wire: dict[str, Any] = {"type": "RUN_STARTED", "threadId": run_input.thread_id,
                                "runId": run_input.run_id, "protocolVersion": PROTOCOL_VERSION}
        if run_input.parent_run_id is not None:
            wire["parentRunId"] = run_input.parent_run_id
        wire["input"] = input_wire if input_wire is not None else to_wire(run_input)
        value = self.value(wire)
        if len(value) > self.room:
            log.warning("RUN_STARTED sent without the input echo (%d bytes)", len(value),
                        extra=self._log)
            del wire["input"]
            value = orjson.dumps(wire)
        return self.numbered(value, "RUN_STARTED")
