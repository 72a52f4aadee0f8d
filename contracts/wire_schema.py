"""JSON Schemas (draft 2020-12) of every record's *wire form*.

"Wire form" means what ``contracts.encode`` writes. Pydantic generates the
schema with camelCase aliases (serialization mode, the output side); then the
one rule pydantic cannot see is applied, the ag-ui base model's omission of
unset optionals (a ``model_serializer``): a field that defaults to ``None`` is
optional and never ``null``; every other field is always written, so it is
required. Serialization and validation mode must agree (this module
refuses to produce anything otherwise), so the same schema also says what
``decode`` accepts from a correct writer. ``contracts.generate`` writes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ag_ui.core import Event
from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode

from contracts import headers
from contracts.records import (
    SCHEMA_VERSION,
    ControlCommand,
    DeadLetter,
    Decision,
    Dispatch,
    RunRequest,
    ThreadState,
)
from contracts.webhooks import WebhookEvent

DIALECT = "https://json-schema.org/draft/2020-12/schema"
WEBHOOK_FILE = "webhook-event"
"""The notifier's POST body: not a topic record, so not in ``RECORDS``."""
EVENT_TITLE = "AgUiEvent"

Schema = dict[str, Any]

RECORDS: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("run-request", RunRequest, "requests"),
    ("decision", Decision, "decisions"),
    ("dispatch", Dispatch, "dispatch"),
    ("thread-state", ThreadState, "threads"),
    ("control-command", ControlCommand, "control"),
    ("dead-letter", DeadLetter, "deadletter"),
)
"""File stem, envelope and the catalog role of the topic it is written to."""

EVENT_FILE = "event"


class _NoFieldTitles(GenerateJsonSchema):
    """Pydantic's generator without per-field titles ("Requestid" helps nobody)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _pydantic_schema(of: Callable[[JsonSchemaMode], Schema], what: str) -> Schema:
    serialization = of("serialization")
    if serialization != of("validation"):
        raise RuntimeError(
            f"{what}: serialization and validation JSON Schemas differ, so the wire form is "
            "ambiguous; make them agree (or teach contracts.generate which one is the contract)"
        )
    return serialization


def wire_form(schema: Any) -> Any:
    """Rewrite every object schema to the ag-ui base model's omission rule (see module doc)."""
    if isinstance(schema, list):
        return [wire_form(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: wire_form(v) for k, v in schema.items()}
    props = out.get("properties")
    if isinstance(props, dict) and out.get("type") == "object":
        required = list(out.get("required", []))
        for name, prop in props.items():
            if name in required:
                continue
            if "default" in prop and prop["default"] is None:
                props[name] = _drop_null(prop)
            else:
                required.append(name)
        if required:
            out["required"] = required
    return out


def _drop_null(prop: Schema) -> Schema:
    """An optional property without its ``null`` branch and its ``default: null``."""
    out = {k: v for k, v in prop.items() if k != "default"}
    branches = out.pop("anyOf", None)
    if branches is None:
        return out
    kept = [b for b in branches if b != {"type": "null"}]
    if len(kept) == 1:
        return {**kept[0], **out}
    return {**out, "anyOf": kept}


def record_schema(stem: str, model: type[BaseModel]) -> Schema:
    """The JSON Schema (2020-12) of one envelope's wire form."""
    schema = _pydantic_schema(
        lambda mode: model.model_json_schema(
            by_alias=True, mode=mode, schema_generator=_NoFieldTitles
        ),
        model.__name__,
    )
    return {"$schema": DIALECT, "$id": _schema_id(stem), **wire_form(schema)}


def event_headers_schema() -> Schema:
    """The Kafka headers of an ``events`` record, as a JSON Schema of string values."""
    return {
        "type": "object",
        "title": "EventHeaders",
        "description": (
            "Kafka headers of every record on the events topic (UTF-8 values). A reader "
            "filters on agui-event-type before decoding the value; RUN_ERROR carries no "
            "runId, so agui-run-id is the run a record belongs to."
        ),
        "properties": {
            headers.RUN_ID: {"type": "string", "minLength": 1,
                             "description": "The run this event belongs to."},
            headers.EVENT_TYPE: {"type": "string", "minLength": 1,
                                 "description": "The AG-UI event type, as in the value."},
            headers.AGENT: {"type": "string", "minLength": 1,
                            "description": "The agent that produced the run."},
            headers.SEQ: {"type": "string", "pattern": "^[0-9]+$",
                          "description": "Per-run sequence number (decimal): consumers "
                                         "restore order and drop duplicates with it."},
            headers.SCHEMA: {"type": "string", "const": str(SCHEMA_VERSION),
                             "description": "Version of this record contract."},
            headers.TRACEPARENT: {"type": "string",
                                  "pattern": "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
                                  "description": "W3C trace context, when tracing."},
        },
        "required": [headers.RUN_ID, headers.EVENT_TYPE, headers.AGENT, headers.SEQ,
                     headers.SCHEMA],
        "additionalProperties": {"type": "string"},
    }


def request_headers_schema() -> Schema:
    """The Kafka headers of a ``requests`` record: hints, none required."""
    return {
        "type": "object",
        "title": "RequestHeaders",
        "description": (
            "Kafka headers of a record on the requests topic (UTF-8 values), all optional: "
            "the value alone decides the request. agui-agent lets the gatekeeper look up an "
            "agent it does not know yet without parsing the value."
        ),
        "properties": {
            headers.AGENT: {"type": "string", "minLength": 1,
                            "description": "The agent the request names (its agent field)."},
            headers.TRACEPARENT: {"type": "string",
                                  "pattern": "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
                                  "description": "W3C trace context, when tracing."},
        },
        "additionalProperties": {"type": "string"},
    }


def event_schema() -> Schema:
    """The ``events`` record: one AG-UI event (the protocol's union), plus its headers."""
    adapter: TypeAdapter[Event] = TypeAdapter(Event)
    schema = _pydantic_schema(
        lambda mode: adapter.json_schema(by_alias=True, mode=mode, schema_generator=_NoFieldTitles),
        "Event",
    )
    return {
        "$schema": DIALECT,
        "$id": _schema_id(EVENT_FILE),
        "title": EVENT_TITLE,
        "description": (
            "One AG-UI event per record on the events topic, exactly the protocol's wire JSON "
            "(ag-ui-protocol's Event union, discriminated by type). Keyed by threadId; the "
            "headers are described by x-kafka-headers."
        ),
        **wire_form(schema),
        "x-kafka-headers": event_headers_schema(),
    }


def _schema_id(stem: str) -> str:
    return f"urn:agui-relay:contracts:v{SCHEMA_VERSION}:{stem}"


def json_schemas() -> dict[str, Schema]:
    """Every record schema by file stem."""
    out = {stem: record_schema(stem, model) for stem, model, _ in RECORDS}
    out[EVENT_FILE] = event_schema()
    out[WEBHOOK_FILE] = record_schema(WEBHOOK_FILE, WebhookEvent)
    return out
