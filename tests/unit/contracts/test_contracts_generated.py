"""The generated files in contracts/schema: fresh, parseable, and saying the right things.

Freshness regenerates in memory and compares bytes with the committed files.
The AsyncAPI document is parsed by the official parser (``@asyncapi/parser``,
pinned in tests/contracts_asyncapi); the other checks read the generated
documents back and hold them against the catalog and the codec.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
import yaml

from contracts import TopicCatalog, headers
from contracts.generate import ASYNCAPI_FILE, SCHEMA_DIR, main, render, stale

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
NPM_DIR = REPO / "tests" / "contracts_asyncapi"
INSTALL = "npm ci --prefix tests/contracts_asyncapi"


@pytest.fixture(scope="module")
def rendered() -> dict[str, bytes]:
    return render()


@pytest.fixture(scope="module")
def document(rendered: dict[str, bytes]) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(rendered[ASYNCAPI_FILE])
    return doc


def schema(rendered: dict[str, bytes], stem: str) -> dict[str, Any]:
    out: dict[str, Any] = orjson.loads(rendered[f"{stem}.schema.json"])
    return out


def test_committed_files_are_fresh(rendered: dict[str, bytes]) -> None:
    outdated = stale(SCHEMA_DIR, rendered)
    assert outdated == [], (
        f"contracts/schema is stale ({', '.join(outdated)}): run `make contracts` "
        "(.venv/bin/python -m contracts.generate) and commit the result"
    )


def test_rendering_twice_gives_the_same_bytes(rendered: dict[str, bytes]) -> None:
    assert render() == rendered


def test_check_mode_names_stale_and_leftover_files_and_write_mode_fixes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--out", str(tmp_path)]) == 0
    assert main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "decision.schema.json").write_bytes(b"{}\n")
    (tmp_path / "retired.schema.json").write_bytes(b"{}\n")
    capsys.readouterr()
    assert main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "decision.schema.json" in err
    assert "retired.schema.json" in err
    assert "make contracts" in err
    assert main(["--out", str(tmp_path)]) == 0
    assert not (tmp_path / "retired.schema.json").exists()
    assert main(["--check", "--out", str(tmp_path)]) == 0


def test_asyncapi_document_passes_the_official_parser() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail(f"node is not on PATH; install Node.js >= 18, then `{INSTALL}`")
    if not (NPM_DIR / "node_modules" / "@asyncapi" / "parser").is_dir():
        pytest.fail(f"@asyncapi/parser is not installed: run `{INSTALL}` (or `make install`)")
    result = subprocess.run(
        [node, str(NPM_DIR / "validate.mjs"), str(SCHEMA_DIR / ASYNCAPI_FILE)],
        capture_output=True, text=True, timeout=120, cwd=REPO, check=False,
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, f"the AsyncAPI parser refused the document:\n{report}"
    assert "valid AsyncAPI 3.0.0" in result.stdout


def test_every_catalog_topic_is_a_channel_with_its_bindings(document: dict[str, Any]) -> None:
    catalog = TopicCatalog()
    channels = document["channels"]
    for spec in catalog.specs(("{agent}",)):
        channel = channels[spec.role]
        assert channel["address"] == spec.name
        kafka = channel["bindings"]["kafka"]
        assert kafka["partitions"] == spec.partitions
        config = kafka["topicConfiguration"]
        assert config["cleanup.policy"] == spec.configs["cleanup.policy"].split(",")
        if "retention.ms" in spec.configs:
            assert config["retention.ms"] == int(spec.configs["retention.ms"])
        assert channel["x-copartitioned"] is spec.copartitioned
    assert channels["dispatch"]["address"] == "agui.dispatch.{agent}"
    assert set(channels["dispatch"]["parameters"]) == {"agent"}
    assert channels["threads"]["bindings"]["kafka"]["topicConfiguration"]["cleanup.policy"] == [
        "compact"
    ]


def test_event_messages_declare_their_headers_and_every_message_its_key(
    document: dict[str, Any],
) -> None:
    components = document["components"]
    event = components["messages"]["AgUiEvent"]
    ref = event["headers"]["$ref"].rsplit("/", 1)[-1]
    header_schema = components["schemas"][ref]
    names = {headers.RUN_ID, headers.EVENT_TYPE, headers.AGENT, headers.SEQ, headers.SCHEMA,
             headers.TRACEPARENT}
    assert set(header_schema["properties"]) == names
    assert set(header_schema["required"]) == names - {headers.TRACEPARENT}
    for message in components["messages"].values():
        assert message["bindings"]["kafka"]["key"]["type"] == "string"
        target = message["payload"]["$ref"].rsplit("/", 1)[-1]
        assert target in components["schemas"]


def test_each_service_has_operations_on_existing_channels(document: dict[str, Any]) -> None:
    services = {op["tags"][0]["name"] for op in document["operations"].values()}
    assert services == {"gatekeeper", "producer", "consumer-service", "cli"}
    for op in document["operations"].values():
        role = op["channel"]["$ref"].rsplit("/", 1)[-1]
        assert role in document["channels"]
        for message in op["messages"]:
            assert message["$ref"].startswith(f"#/channels/{role}/messages/")
    gatekeeper = {(op["action"], op["channel"]["$ref"]) for name, op in
                  document["operations"].items() if name.startswith("gatekeeper")}
    assert ("receive", "#/channels/requests") in gatekeeper
    assert ("send", "#/channels/decisions") in gatekeeper


def test_wire_schemas_omit_unset_optionals_and_require_what_is_always_written(
    rendered: dict[str, bytes],
) -> None:
    decision = schema(rendered, "decision")
    assert "schemaVersion" in decision["required"]
    assert "threadId" not in decision["required"]
    valid = {"schemaVersion": 1, "requestId": "r", "verdict": "admitted", "message": "ok",
             "decidedAt": "2026-03-01T12:00:00Z"}
    check = jsonschema.Draft202012Validator(decision)
    assert check.is_valid(valid)
    assert not check.is_valid({**valid, "threadId": None}), "null must never be valid"
    assert not check.is_valid({k: v for k, v in valid.items() if k != "schemaVersion"})
    assert not check.is_valid({**valid, "schemaVersion": 2})
    state = schema(rendered, "thread-state")
    assert {"status", "openInterrupts", "queued"} <= set(state["required"])


def test_event_schema_is_the_ag_ui_union_with_a_required_discriminator(
    rendered: dict[str, bytes],
) -> None:
    event = schema(rendered, "event")
    jsonschema.Draft202012Validator.check_schema(event)
    check = jsonschema.Draft202012Validator(event)
    assert check.is_valid({"type": "RUN_ERROR", "message": "boom"})
    assert not check.is_valid({"message": "boom"}), "type is always written, so required"
    assert not check.is_valid({"type": "RUN_STARTED", "threadId": "t", "runId": "r",
                               "parentRunId": None})
    assert event["x-kafka-headers"]["properties"][headers.SCHEMA]["const"] == "1"
