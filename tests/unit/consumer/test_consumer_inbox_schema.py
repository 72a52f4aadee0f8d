"""The inbox page's check of an agent's responseSchema (``inbox/src/schema.ts``), run in Node.

What react-jsonschema-form must not be handed: a ``$ref`` it cannot resolve
(``#``, a URL, a name that is not there, a cycle), a schema it would expand
without bound (``minItems``, definitions each used twice, an ``allOf`` of
``anyOf``s, a huge ``enum`` or default, deep nesting) or a
``patternProperties`` name it would run unguarded. Ordinary schemas, local
definitions included, pass unchanged but for their base-URI keywords.
The module is bundled with the inbox's own esbuild (``make install``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from services.consumer.inbox_static import DIST

INBOX = DIST.parent
ESBUILD = INBOX / "node_modules" / ".bin" / "esbuild"
RUN = """
import { formSchema } from "./schema.mjs";
let text = "";
for await (const chunk of process.stdin) text += chunk;
console.log(JSON.stringify(JSON.parse(text).map((schema) => formSchema(schema))));
"""


def _doubling(levels: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{n}": {"type": "object", "properties": {
        "x": {"$ref": f"#/definitions/d{n + 1}"}, "y": {"$ref": f"#/definitions/d{n + 1}"}}}
        for n in range(levels)}
    defs[f"d{levels}"] = {"type": "string"}
    return {"definitions": defs, "$ref": "#/definitions/d0"}


def _nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "self-ref": ({"$ref": "#"}, "refers to itself"),
    "remote-ref": ({"$ref": "http://127.0.0.1:1/x.json"}, "not a reference within the schema"),
    "relative-ref": ({"$ref": "other.json#/a"}, "not a reference within the schema"),
    "missing-ref": ({"$ref": "#/definitions/nope"}, "names nothing"),
    "cycle": ({"definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"$ref": "#/definitions/a"}},
               "$ref": "#/definitions/a"}, "refers to itself"),
    "unused-cycle": ({"type": "string", "definitions": {"a": {"$ref": "#/definitions/a"}}},
                     "refers to itself"),
    "recursive-object": ({"definitions": {"n": {"type": "object", "properties": {
        "next": {"$ref": "#/definitions/n"}}}}, "$ref": "#/definitions/n"}, "refers to itself"),
    "min-items": ({"type": "array", "minItems": 100_000_000, "items": {"type": "string"}},
                  "at least 100000000 items"),
    "nested-min-items": ({"type": "array", "minItems": 100, "items": {
        "type": "array", "minItems": 100, "items": {"type": "string"}}}, "more than 5000 parts"),
    "min-items-text": ({"type": "array", "minItems": "100000000"}, "at least 100000000 items"),
    "doubling": (_doubling(13), "more than 5000 parts"),
    "deep": (_nested(40), "deeper than 32 levels"),
    "all-of-any-of": ({"allOf": [{"anyOf": [{"required": [f"a{n}"]}, {"required": [f"b{n}"]}]}
                                 for n in range(8)]}, "more than 64 alternatives"),
    "enum": ({"type": "string", "enum": [f"v{n}" for n in range(6000)]}, "more than 5000 parts"),
    "default": ({"type": "array", "items": {"type": "object", "properties": {
        "a": {"type": "string"}, "b": {"type": "string"}}}, "default": [{}] * 2000},
        "more than 5000 parts"),
    "pattern-properties-backtracking": ({"type": "object", "patternProperties": {
        "^(a+)+$": {"type": "string"}}}, "may backtrack exponentially"),
    "pattern-properties-broken": ({"type": "object", "patternProperties": {"(": {}}},
                                  "not a regular expression"),
    "not-a-schema": ({"type": "object", "properties": {"a": 5}}, "/properties/a is not a schema"),
}

ACCEPTED: dict[str, dict[str, Any]] = {
    "approval": {"type": "object", "properties": {"approved": {"type": "boolean"}}},
    "edit": {"type": "object", "required": ["approved"], "properties": {
        "approved": {"type": "boolean"}, "arguments": {"type": "object", "required": ["path"],
        "properties": {"path": {"type": "string", "pattern": "^/tmp/"}}}}},
    "local-refs": {"definitions": {"p": {"type": "string"}}, "type": "object", "properties": {
        "a": {"$ref": "#/definitions/p"}, "b": {"$ref": "#/definitions/p"}}},
    "escaped-ref": {"$defs": {"a/b c": {"type": "string"}}, "$ref": "#/$defs/a~1b%20c"},
    "a-few-items": {"type": "array", "minItems": 3, "items": {"type": "string"}},
    "any-of": {"anyOf": [{"type": "string"}, {"type": "number"}]},
    "boolean-subschema": {"type": "object", "properties": {"a": True}},
}


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    node = shutil.which("node")
    assert node is not None, "node is not on PATH (make install)"
    assert ESBUILD.is_file(), f"no {ESBUILD}: run `make install`"
    out = tmp_path_factory.mktemp("inbox-schema")
    subprocess.run([str(ESBUILD), str(INBOX / "src" / "schema.ts"), "--bundle", "--format=esm",
                    "--platform=node", f"--outfile={out / 'schema.mjs'}", "--log-level=warning"],
                   check=True, timeout=60)
    (out / "run.mjs").write_text(RUN)
    base_uri = {"$id": "http://example.com/s", "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object", "properties": {"$id": {"type": "string"},
                                                 "a": {"$id": "#a", "type": "string"}}}
    names = [*REFUSED, *ACCEPTED, "base-uri"]
    schemas = [*(s for s, _ in REFUSED.values()), *ACCEPTED.values(), base_uri]
    done = subprocess.run([node, str(out / "run.mjs")], input=json.dumps(schemas), text=True,
                          capture_output=True, check=True, timeout=60, cwd=out)
    return dict(zip(names, json.loads(done.stdout), strict=True))


@pytest.mark.parametrize("name", REFUSED)
def test_a_schema_the_form_must_not_get_is_refused_saying_why(
        checked: dict[str, dict[str, Any]], name: str) -> None:
    found = checked[name]
    assert found["ok"] is False
    assert REFUSED[name][1] in found["why"]


@pytest.mark.parametrize("name", ACCEPTED)
def test_an_ordinary_schema_passes_unchanged(checked: dict[str, dict[str, Any]], name: str) -> None:
    assert checked[name] == {"ok": True, "schema": ACCEPTED[name]}


def test_base_uri_keywords_are_dropped(checked: dict[str, dict[str, Any]]) -> None:
    """An ``$id`` of the agent's choosing would be the key of the schema ajv compiled for
    another card with the same one; ``$schema`` names a meta-schema ajv may not have."""
    assert checked["base-uri"] == {"ok": True, "schema": {
        "type": "object", "properties": {"$id": {"type": "string"}, "a": {"type": "string"}}}}
