"""A reflection sweep over every envelope in contracts: round trip, camelCase, no nulls.

Every subclass of ``Envelope`` defined in ``contracts`` is found by reflection
(a new envelope is swept without touching this file) and instances are built
by Hypothesis from the model's own field annotations, each optional field
either left unset or given a value. For each instance: ``decode(encode(m))``
equals ``m``; the wire JSON holds no ``null`` (no generated value contains
one, so any null is an unset optional written out); every key the envelope or
an AG-UI model writes is its field's camelCase alias, and no other key is
written; and the bytes validate against the generated JSON Schema when the
envelope is a topic record. AG-UI payloads get hand-written strategies: their
own models are the ag-ui-protocol package's to sweep.
"""

from __future__ import annotations

import re
import types
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import jsonschema
import orjson
import pytest
from ag_ui.core import (
    AssistantMessage,
    Context,
    FunctionCall,
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    Tool,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import AwareDatetime, BaseModel
from pydantic.alias_generators import to_camel

from contracts import decode, encode, records
from contracts.generate import SCHEMA_DIR
from contracts.wire_schema import RECORDS

pytestmark = pytest.mark.unit

CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")
OMIT = object()


def envelopes() -> list[type[records.Envelope]]:
    """Every Envelope subclass defined in the contracts package, recursively."""
    found: list[type[records.Envelope]] = []
    pending = list(records.Envelope.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("contracts.") and cls not in found:
            found.append(cls)
    return sorted(found, key=lambda c: c.__name__)


ENVELOPES = envelopes()

# --- value strategies -------------------------------------------------------------

text = st.text(min_size=1, max_size=12)
ids = st.from_regex(r"[A-Za-z0-9_.:-]{1,16}", fullmatch=True)
json_scalars = (st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
                | st.floats(allow_nan=False, allow_infinity=False))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=8,
)
"""Any JSON value except null, so a null on the wire can only be an unset optional."""
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=3)
datetimes = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1),
                         timezones=st.just(UTC))


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(OMIT), strategy)


def build(cls: type[BaseModel], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``cls`` built from ``fields``; a field drawn as OMIT is left unset."""
    return st.fixed_dictionaries(fields).map(
        lambda kw: cls(**{k: v for k, v in kw.items() if v is not OMIT})
    )


interrupts = build(
    Interrupt, id=ids, reason=text, message=maybe(text), tool_call_id=maybe(ids),
    response_schema=maybe(json_objects), expires_at=maybe(text), metadata=maybe(json_objects),
    subagent_run_id=maybe(ids),
)
resume_entries = build(
    ResumeEntry, interrupt_id=ids, status=st.sampled_from(["resolved", "cancelled"]),
    payload=maybe(json_values), metadata=maybe(json_objects),
)
tool_calls = build(ToolCall, id=ids, function=build(FunctionCall, name=ids, arguments=text))
messages = st.one_of(
    build(UserMessage, id=ids, content=text, name=maybe(text)),
    build(AssistantMessage, id=ids, content=maybe(text),
          tool_calls=maybe(st.lists(tool_calls, min_size=1, max_size=2))),
    build(ToolMessage, id=ids, content=text, tool_call_id=ids),
)
run_inputs = build(
    RunAgentInput, thread_id=ids, run_id=ids, messages=st.lists(messages, max_size=3),
    parent_run_id=maybe(ids), protocol_version=maybe(st.just("1.0")),
    state=maybe(json_values), forwarded_props=maybe(json_values),
    tools=maybe(st.lists(build(Tool, name=ids, description=text, parameters=json_objects),
                         max_size=2)),
    context=maybe(st.lists(build(Context, description=text, value=text), max_size=2)),
    resume=maybe(st.lists(resume_entries, max_size=3)),
)
AG_UI: dict[type[BaseModel], st.SearchStrategy[Any]] = {
    RunAgentInput: run_inputs, Interrupt: interrupts,
}


def for_type(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy for one field annotation of an envelope."""
    origin = get_origin(tp)
    if origin is Annotated:
        return for_type(get_args(tp)[0])
    if origin is Literal:
        return st.sampled_from(get_args(tp))
    if origin in (Union, types.UnionType):
        return st.one_of(*(for_type(a) for a in get_args(tp) if a is not type(None)))
    if origin is list:
        return st.lists(for_type(get_args(tp)[0]), max_size=2)
    if origin is dict:
        return st.dictionaries(text, for_type(get_args(tp)[1]), max_size=3)
    if tp is str:
        return text
    if tp is int:
        return st.integers(0, 2**31 - 1)
    if tp is bool:
        return st.booleans()
    if tp is datetime or tp is AwareDatetime:
        return datetimes
    if tp in AG_UI:
        return AG_UI[tp]
    if isinstance(tp, type) and issubclass(tp, records.Envelope):
        return st.deferred(lambda: envelope(tp))
    raise TypeError(f"no strategy for {tp!r}: teach test_contracts_reflection.for_type")


def envelope(cls: type[BaseModel]) -> st.SearchStrategy[Any]:
    """Any instance of ``cls``, optional fields sometimes unset."""
    fields = {}
    for name, field in cls.model_fields.items():
        value = for_type(field.annotation)
        fields[name] = value if field.is_required() else maybe(value)
    return build(cls, **fields)


# --- checks -----------------------------------------------------------------------


def nulls(value: Any, path: str = "$") -> list[str]:
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in nulls(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in nulls(v, f"{path}[{i}]")]
    return []


def check_keys(model: BaseModel, wire: Any, path: str = "$") -> None:
    """The model's wire object has exactly its written fields, under camelCase aliases."""
    assert isinstance(wire, dict), path
    expected = set()
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        omittable = not field.is_required() and field.default is None
        if value is None and omittable:
            continue
        key = field.alias or name
        assert key == to_camel(name), f"{path}.{key} is not the alias of {name}"
        assert CAMEL.match(key), f"{path}.{key} is not camelCase"
        expected.add(key)
        for i, item in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(item, BaseModel):
                check_keys(item, wire[key][i] if isinstance(value, list) else wire[key],
                           f"{path}.{key}")
    assert set(wire) == expected, f"{path}: keys {sorted(set(wire) ^ expected)} differ"


SCHEMAS = {model.__name__: stem for stem, model, _ in RECORDS}


def schema_validator(cls: type[BaseModel]) -> jsonschema.Draft202012Validator | None:
    stem = SCHEMAS.get(cls.__name__)
    if stem is None:
        return None
    return jsonschema.Draft202012Validator(
        orjson.loads((SCHEMA_DIR / f"{stem}.schema.json").read_bytes()))


def test_the_sweep_finds_every_envelope() -> None:
    names = {cls.__name__ for cls in ENVELOPES}
    assert names >= {"RunRequest", "Dispatch", "Decision", "ThreadState", "OpenInterrupt",
                     "RememberedDecision", "ControlCommand", "DeadLetter"}
    assert set(SCHEMAS) <= names


@pytest.mark.parametrize("cls", ENVELOPES, ids=lambda c: c.__name__)
def test_every_envelope_round_trips_in_camel_case_without_nulls(
    cls: type[records.Envelope],
) -> None:
    validator = schema_validator(cls)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(envelope(cls))
    def round_trip(model: records.Envelope) -> None:
        data = encode(model)
        wire = orjson.loads(data)
        assert nulls(wire) == [], f"null written for an unset optional: {nulls(wire)}"
        check_keys(model, wire)
        assert wire["schemaVersion"] == 1
        assert decode(cls, data) == model
        if validator is not None:
            errors = [e.message for e in validator.iter_errors(wire)]
            assert errors == [], errors

    round_trip()
