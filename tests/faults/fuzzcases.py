"""Hypothesis strategies for malformed, oversized, wrongly typed and adversarial requests.

A ``Case`` is a small descriptor (what kind of mischief, with which
ingredients) drawn by Hypothesis; ``http_request`` and ``kafka_record``
turn it into what is actually sent — the agent path and body of ``POST
/agents/{agent}``, or the key and value of a ``requests`` record — so the
generator stays fast and the huge payloads (oversized bodies, enormous
resume lists, deep nesting) are built only when sent.

Kinds, both paths unless marked:

- ``garbage``: random bytes or text; ``not_object``: JSON that is not an
  object; ``deep``: nesting past any parser's recursion limit;
  ``surrogate``: a lone surrogate escape in a string;
- ``wrong_type`` / ``missing``: a valid input with one field replaced by a
  wrongly typed value, or removed;
- ``oversize``: a body over the record limit (and, over HTTP, some over the
  body limit);
- ``unicode``: a valid input whose threadId and runId are arbitrary unicode;
- ``resume``: a resume list — enormous, duplicated, unknown ids, bad
  statuses — aimed at an idle thread or at one of the threads the scenario
  left interrupted (interrupts with a non-date, a past and a future
  ``expiresAt``);
- ``duplicate``: a request reusing the thread and run (HTTP) or the
  requestId (Kafka) of an earlier case;
- ``valid``: an ordinary run, so valid work is interleaved with the rest;
- Kafka only: ``envelope`` (the RunRequest envelope wrongly typed: requestId,
  agent, submittedAt, schemaVersion), ``naive_time``, ``unknown_agent``,
  ``key`` (key missing or not the threadId), ``tombstone`` (no value);
- HTTP only: ``agent`` (an unknown or unicode agent name in the path).

Size extremes, where the limits are (``contracts.limits``, the services'
record and body limits), so Hypothesis searches at and just past each bound
rather than well inside them:

- ``long_id``: one id or name (any of ``ID_FIELDS``: input ids, message,
  tool and resume ids, the agent, and on Kafka the envelope's requestId and
  principal) of 255, 256 or 257 characters, or huge (up to 100,000);
- ``depth_edge``: nesting at 63-65 levels (the limit), 253-256 (orjson's
  serialiser) and 1,023-1,025 (its parser), in arrays or objects;
- HTTP only: ``body_edge``, a body a few bytes either side of the record
  limit or, one time in eight, of ``AGUI_MAX_BODY_BYTES``;
- Kafka only: ``record_edge``, a record (key + value + headers, as the
  broker counts) a few bytes either side of the services' record limit or,
  one time in eight, of the broker's, with a large share of it in the key
  and in headers. A record past the broker's limit is not sent (the broker
  would refuse it: it can never be on the topic).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import orjson
from hypothesis import strategies as st

from contracts.limits import DEFAULT_MAX_ID_LENGTH, DEFAULT_MAX_JSON_DEPTH
from services.kafka.sizing import record_size

COMMON = ["garbage", "not_object", "deep", "surrogate", "wrong_type", "missing", "oversize",
          "unicode", "resume", "resume", "resume", "duplicate", "valid", "valid",
          "long_id", "long_id", "depth_edge"]
KAFKA_ONLY = ["envelope", "envelope", "naive_time", "unknown_agent", "key", "tombstone",
              "record_edge"]
HTTP_ONLY = ["agent", "body_edge"]
INPUT_FIELDS = ["threadId", "runId", "messages", "tools", "context", "state", "forwardedProps",
                "resume", "parentRunId"]
REQUIRED_FIELDS = ["threadId", "runId", "messages", "tools", "context", "state",
                   "forwardedProps"]
STATUSES = ["resolved", "cancelled", "maybe", "", "RESOLVED"]
ID_LIMIT = DEFAULT_MAX_ID_LENGTH
ID_LENGTHS = [ID_LIMIT - 1, ID_LIMIT - 1, ID_LIMIT, ID_LIMIT, ID_LIMIT + 1, ID_LIMIT + 1,
              4 * ID_LIMIT, 30_000, 100_000]
ID_FIELDS = ["threadId", "runId", "parentRunId", "messages/0/id", "messages/0/name",
             "toolCalls/0/id", "toolCalls/0/function/name", "toolCallId", "tools/0/name",
             "resume/0/interruptId", "agent", "requestId", "principal"]
ENVELOPE_IDS = frozenset({"agent", "requestId", "principal"})
"""Ids of the RunRequest envelope: over HTTP the agent is the path segment, and the
server chooses the others (such a case sends a long threadId instead)."""
PATH_ID_MAX = 20_000
"""The longest agent name sent in a URL (httpx refuses URLs over 64 KiB; past the
service's 16 KiB head limit the answer is a 431 anyway)."""
EDGE_DEPTHS = [DEFAULT_MAX_JSON_DEPTH - 1, DEFAULT_MAX_JSON_DEPTH, DEFAULT_MAX_JSON_DEPTH + 1,
               253, 254, 255, 256, 1023, 1024, 1025]
EDGE_OFFSETS = st.integers(-2, 2) | st.integers(-4096, 4096)


@dataclass(frozen=True)
class Case:
    """One piece of mischief: its kind and the ingredients Hypothesis drew for it."""

    kind: str
    n: int
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Targets:
    """What the cases may aim at: threads left interrupted, and their interrupt ids.

    Strategies use only the interrupt ids and limits, so cases can be drawn
    before the threads exist; ``interrupted`` is read when a case is sent.
    """

    interrupted: list[str]
    interrupt_ids: list[str]
    limit_bytes: int
    body_limit_bytes: int
    broker_limit_bytes: int = 1_048_576
    """The largest record the broker takes (``max.message.bytes`` is 1,048,588)."""


int64 = st.integers(-(2**63), 2**63 - 1)
json_leaf = st.one_of(st.none(), st.booleans(), int64, st.floats(allow_nan=False),
                      st.text(max_size=12))
json_values = st.one_of(json_leaf, st.lists(json_leaf, max_size=3),
                        st.dictionaries(st.text(max_size=6), json_leaf, max_size=3))
wrong_values = st.one_of(int64, st.lists(int64, max_size=3), st.none(), st.booleans(),
                         st.dictionaries(st.text(max_size=5), int64, max_size=2),
                         st.text(max_size=10))
ids = st.text(min_size=1, max_size=60) | st.integers(61, 2000).map(lambda n: "\u00e9" * n)


def entry_strategy(interrupt_ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({
        "interruptId": st.sampled_from([*interrupt_ids, "ghost", ""]) | ids,
        "status": st.sampled_from(STATUSES[:2]) | st.sampled_from(STATUSES),
    }, optional={"payload": json_values})


def case_strategy(targets: Targets, kinds: list[str]) -> st.SearchStrategy[Case]:
    """Cases of the given kinds (repeat a kind in the list to weight it)."""

    @st.composite
    def draw_case(draw: st.DrawFn) -> Case:
        kind = draw(st.sampled_from(kinds))
        n = draw(st.integers(0, 10**9))
        data: dict[str, Any] = {}
        if kind == "garbage":
            data["raw"] = draw(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
        elif kind == "not_object":
            data["value"] = draw(json_values.filter(lambda v: not isinstance(v, dict)))
        elif kind == "deep":
            data["depth"] = draw(st.integers(600, 5000))
        elif kind == "wrong_type":
            data["field"] = draw(st.sampled_from(INPUT_FIELDS))
            data["value"] = draw(wrong_values)
        elif kind == "missing":
            data["field"] = draw(st.sampled_from(REQUIRED_FIELDS))
        elif kind == "oversize":
            data["factor"] = draw(st.floats(1.05, 3.0))
            data["over_body"] = draw(st.integers(0, 19)) == 0
        elif kind == "unicode":
            data["thread"] = draw(ids)
            data["run"] = draw(ids)
        elif kind == "resume":
            pool = targets.interrupt_ids
            data["thread"] = draw(st.integers(0, 10**6) | st.none())  # an index, or idle
            data["entries"] = draw(st.lists(entry_strategy(pool), max_size=8))
            data["cover"] = draw(st.sampled_from(["none", "all", "all_cancel", "some"]))
            data["enormous"] = draw(st.sampled_from([0, 0, 0, 0, 0, 100, 600, 1200, 5000]))
        elif kind == "duplicate":
            data["back"] = draw(st.integers(1, 50))
        elif kind == "envelope":
            data["field"] = draw(st.sampled_from(["requestId", "agent", "submittedAt",
                                                  "schemaVersion", "input"]))
            data["value"] = draw(wrong_values | st.just("yesterday") | st.just(2))
        elif kind == "key":
            data["key"] = draw(st.none() | ids)
        elif kind == "agent":
            data["agent"] = draw(st.text(min_size=1, max_size=40))
        else:
            data.update(draw(_size_extremes(kind)))
        return Case(kind, n, data)

    return draw_case()


def _size_extremes(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    """The ingredients of the size-extreme kinds (an empty dict for the other kinds)."""
    rarely = st.integers(0, 7).map(lambda i: i == 0)
    if kind == "long_id":
        return st.fixed_dictionaries({"field": st.sampled_from(ID_FIELDS),
                                      "length": st.sampled_from(ID_LENGTHS)})
    if kind == "depth_edge":
        return st.fixed_dictionaries({"depth": st.sampled_from(EDGE_DEPTHS),
                                      "objects": st.booleans()})
    if kind == "body_edge":
        return st.fixed_dictionaries({"over": EDGE_OFFSETS, "body_limit": rarely})
    if kind == "record_edge":
        return st.fixed_dictionaries({
            "over": EDGE_OFFSETS, "broker": rarely,
            "key_share": st.sampled_from([0.0, 0.01, 0.3, 0.6, 0.9]),
            "header_share": st.sampled_from([0.0, 0.0, 0.05, 0.3]),
            "header_count": st.integers(1, 8)})
    return st.just({})


# --------------------------------------------------------------------------- materialising


def _input(thread_id: str, run_id: str, **extra: Any) -> dict[str, Any]:
    wire: dict[str, Any] = {
        "threadId": thread_id, "runId": run_id, "state": {}, "tools": [], "context": [],
        "messages": [{"id": f"m-{uuid.uuid4().hex[:8]}", "role": "user", "content": "hi"}],
        "forwardedProps": {},
    }
    wire.update(extra)
    return wire


def _fresh(case: Case, tag: str) -> tuple[str, str]:
    return f"fz{tag}-{case.n}-{uuid.uuid4().hex[:6]}", f"run-{uuid.uuid4().hex[:12]}"


def _resume(case: Case, targets: Targets) -> dict[str, Any]:
    index = case.data["thread"]
    run = f"run-{uuid.uuid4().hex[:12]}"
    if index is None or not targets.interrupted:
        thread, _ = _fresh(case, "idle")
    else:
        thread = targets.interrupted[index % len(targets.interrupted)]
    entries: list[dict[str, Any]] = list(case.data["entries"])
    cover = case.data["cover"]
    if cover in ("all", "all_cancel"):
        status = "resolved" if cover == "all" else "cancelled"
        entries = [{"interruptId": i, "status": status} for i in targets.interrupt_ids]
    elif cover == "some":
        entries += [{"interruptId": targets.interrupt_ids[0], "status": "resolved"}]
    size = case.data["enormous"]
    if size:
        entries += [{"interruptId": f"bulk-{i % 97}", "status": "cancelled"} for i in range(size)]
    return _input(thread, run, resume=entries)


def _valid(case: Case) -> dict[str, Any]:
    thread, run = _fresh(case, "ok")
    return _input(thread, run)


def sized_id(case: Case, length: int) -> str:
    """A unique id of exactly ``length`` characters (at least 1)."""
    head = f"fz{case.n}-{uuid.uuid4().hex[:8]}-"
    return (head + "x" * length)[:max(length, 1)]


def _long_id_input(case: Case) -> dict[str, Any]:
    """A valid input but for one id or name of ``case.data["length"]`` characters."""
    wire = _valid(case)
    value = sized_id(case, case.data["length"])
    name = case.data["field"]
    call = {"id": "call-1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    if name in ("threadId", "runId", "parentRunId") or name in ENVELOPE_IDS:
        wire["threadId" if name in ENVELOPE_IDS else name] = value
    elif name.startswith("messages/0/"):
        wire["messages"][0][name.rsplit("/", 1)[1]] = value
    elif name.startswith("toolCalls/"):
        if name.endswith("/id"):
            call["id"] = value
        else:
            call["function"]["name"] = value  # type: ignore[index]
        wire["messages"].insert(0, {"id": "a-1", "role": "assistant", "toolCalls": [call]})
    elif name == "toolCallId":
        wire["messages"].insert(0, {"id": "t-1", "role": "tool", "content": "done",
                                    "toolCallId": value})
    elif name == "tools/0/name":
        wire["tools"] = [{"name": value, "description": "d", "parameters": {}}]
    else:
        wire["resume"] = [{"interruptId": value, "status": "cancelled"}]
    return wire


def _nested(case: Case) -> bytes:
    """A valid input nested ``case.data["depth"]`` levels in all (the top object is 1)."""
    inner = case.data["depth"] - 1
    wire = _valid(case)
    wire["state"] = "@"
    if case.data["objects"]:
        filler = b'{"a":' * (inner - 1) + b"{}" + b"}" * (inner - 1)
    else:
        filler = b"[" * inner + b"]" * inner
    return orjson.dumps(wire).replace(b'"@"', filler, 1)


def _body_edge(case: Case, targets: Targets) -> bytes:
    """A valid input padded to a few bytes either side of the record or body limit."""
    limit = targets.body_limit_bytes if case.data["body_limit"] else targets.limit_bytes
    wire = _valid(case)
    wire["state"] = {"blob": ""}
    pad = limit + case.data["over"] - len(orjson.dumps(wire))
    wire["state"] = {"blob": "x" * max(pad, 0)}
    return orjson.dumps(wire)


def _body_for(case: Case, targets: Targets, history: list[dict[str, Any]],
              over_limit: int) -> bytes | None:
    """The input JSON of the kinds both paths share; None for the path-specific kinds.

    ``over_limit`` is the larger limit an ``oversize`` case may aim past (the
    HTTP body limit; on Kafka, the record limit again: the broker refuses more).
    """
    kind, data = case.kind, case.data
    if kind == "garbage":
        raw: bytes = data["raw"]
        return raw
    if kind == "not_object":
        return orjson.dumps(data["value"])
    if kind == "deep":
        depth: int = data["depth"]
        return b'{"threadId":"t","runId":"r","state":' + b"[" * depth + b"]" * depth + b"}"
    if kind == "depth_edge":
        return _nested(case)
    if kind == "long_id":
        return orjson.dumps(_long_id_input(case))
    if kind == "surrogate":
        return b'{"threadId":"\\ud800","runId":"r","messages":[],"tools":[],"context":[]}'
    if kind == "wrong_type":
        wire = _valid(case)
        wire[data["field"]] = data["value"]
        return orjson.dumps(wire)
    if kind == "missing":
        wire = _valid(case)
        wire.pop(data["field"], None)
        return orjson.dumps(wire)
    if kind == "oversize":
        limit = over_limit if data["over_body"] else targets.limit_bytes
        wire = _valid(case)
        wire["state"] = {"blob": "x" * int(limit * data["factor"])}
        return orjson.dumps(wire)
    if kind == "unicode":
        return orjson.dumps(_input(data["thread"], data["run"]))
    if kind == "resume":
        return orjson.dumps(_resume(case, targets))
    if kind == "duplicate":
        if not history:
            return orjson.dumps(_valid(case))
        return orjson.dumps(history[-min(data["back"], len(history))])
    if kind == "valid":
        wire = _valid(case)
        history.append(wire)
        return orjson.dumps(wire)
    return None


def http_request(case: Case, targets: Targets,
                 history: list[dict[str, Any]]) -> tuple[str, bytes]:
    """(agent path segment, body) of ``POST /agents/{agent}`` for ``case``."""
    if case.kind == "agent":
        return quote(case.data["agent"], safe=""), orjson.dumps(_valid(case))
    if case.kind == "long_id" and case.data["field"] == "agent":
        length = min(case.data["length"], PATH_ID_MAX)
        return sized_id(case, length), orjson.dumps(_valid(case))
    if case.kind == "body_edge":
        return "scripted", _body_edge(case, targets)
    body = _body_for(case, targets, history, targets.body_limit_bytes)
    assert body is not None, case.kind
    return "scripted", body


def _envelope(wire_input: Any, request_id: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"schemaVersion": 1, "requestId": request_id or str(uuid.uuid4()),
            "agent": "scripted", "input": wire_input,
            "submittedAt": datetime.now(UTC).isoformat(), **extra}


Headers = list[tuple[str, bytes]]


def kafka_record(case: Case, targets: Targets, history: list[dict[str, Any]],
                 request_ids: list[tuple[str, str]]
                 ) -> tuple[bytes | None, bytes | None, Headers | None]:
    """(key, value, headers) of the ``requests`` record for ``case``."""
    if case.kind == "record_edge":
        return _record_edge(case, targets)
    if case.kind == "long_id" and case.data["field"] in ENVELOPE_IDS:
        wire = _valid(case)
        env = _envelope(wire)
        env[case.data["field"]] = sized_id(case, case.data["length"])
        return wire["threadId"].encode(), orjson.dumps(env), None
    key, value = _key_value(case, targets, history, request_ids)
    return key, value, None


def _record_edge(case: Case, targets: Targets) -> tuple[bytes, bytes, Headers | None]:
    """A valid request whose record is ``over`` bytes past the record or broker limit,
    a share of it in the threadId (the key, and again in the value) and in headers."""
    data = case.data
    limit = targets.broker_limit_bytes if data["broker"] else targets.limit_bytes
    target = limit + data["over"]
    length = int(target * data["key_share"] / 2)  # the key is the threadId: twice in the record
    thread = sized_id(case, length) if length > 40 else _fresh(case, "edge")[0]
    key = thread.encode()
    budget = int(target * min(data["header_share"], max(0.95 - data["key_share"], 0.0)))
    count = data["header_count"]
    headers = [(f"x-fuzz-{i}", b"h" * (budget // count)) for i in range(count)] if budget \
        else None
    env = _envelope(_input(thread, f"run-{uuid.uuid4().hex[:12]}"))

    def value(pad: int) -> bytes:
        env["input"]["state"] = {"blob": "x" * pad}
        return orjson.dumps(env)

    pad = 0
    for _ in range(4):  # sizes are varint-encoded: a few steps find the exact size
        missing = target - record_size(key, value(pad), headers)
        if missing == 0:
            break
        pad = max(pad + missing, 0)
    return key, value(pad), headers


def _key_value(case: Case, targets: Targets, history: list[dict[str, Any]],
               request_ids: list[tuple[str, str]]) -> tuple[bytes | None, bytes | None]:
    """(key, value) of the ``requests`` record for the kinds without headers."""
    kind, data = case.kind, case.data
    if kind == "tombstone":
        return f"fz-tomb-{case.n}".encode(), None
    if kind == "duplicate" and request_ids:
        thread, request_id = request_ids[-min(data["back"], len(request_ids))]
        wire = _input(thread, f"run-{uuid.uuid4().hex[:12]}")
        return thread.encode(), orjson.dumps(_envelope(wire, request_id))
    if kind in ("envelope", "naive_time", "unknown_agent", "key"):
        wire = _valid(case)
        env = _envelope(wire)
        key: bytes | None = wire["threadId"].encode()
        if kind == "envelope":
            env[data["field"]] = data["value"]
        elif kind == "naive_time":
            env["submittedAt"] = "2025-01-01T00:00:00"
        elif kind == "unknown_agent":
            env["agent"] = f"nobody-{case.n}"
        else:
            key = data["key"].encode() if data["key"] is not None else None
        return key, orjson.dumps(env)
    body = _body_for(case, targets, history, targets.limit_bytes)
    assert body is not None, kind
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return f"fz-raw-{case.n}".encode(), body  # not JSON: sent as the whole value
    if not isinstance(parsed, dict) or kind in ("not_object", "deep", "depth_edge",
                                                "surrogate"):
        return f"fz-raw-{case.n}".encode(), _splice(body)
    env = _envelope(parsed)
    thread = parsed.get("threadId")
    key = thread.encode() if isinstance(thread, str) else f"fz-odd-{case.n}".encode()
    if isinstance(thread, str):
        request_ids.append((thread, env["requestId"]))
    return key, orjson.dumps(env)


def _splice(body: bytes) -> bytes:
    """A RunRequest envelope whose input is ``body`` verbatim (even if it is not valid)."""
    head = orjson.dumps(_envelope(None))
    return head.replace(b'"input":null', b'"input":' + body)
