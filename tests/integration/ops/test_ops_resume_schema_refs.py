"""``agui-relay resume`` against a ``responseSchema`` a record chose: nothing it names is
fetched, and a schema that cannot be checked is said so, never a traceback or a hang."""

from __future__ import annotations

import socket
import threading

import pytest
from ag_ui.core import Interrupt
from ops_support import Writer, run_cli

from deploy.kafka.probe import free_port
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

USER = {"id": "u1", "role": "user", "content": "go"}
NOT_CHECKED = "answer not checked against the schema"


async def interrupted_with(writer: Writer, thread: str, schema: dict[str, object]) -> None:
    run = "run-1"
    await writer.event(thread, run, {"type": "RUN_STARTED", "threadId": thread, "runId": run,
                                     "input": {"threadId": thread, "runId": run,
                                               "messages": [USER]}})
    interrupt = Interrupt(id="ask-1", reason="input", response_schema=schema)
    await writer.event(thread, run, {
        "type": "RUN_FINISHED", "threadId": thread, "runId": run,
        "outcome": {"type": "interrupt", "interrupts": [
            interrupt.model_dump(mode="json", by_alias=True, exclude_none=True)]}})
    await writer.interrupted(thread, run, [interrupt])


class Silent:
    """A loopback listener that accepts connections, never answers, and counts them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", free_port()))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


async def test_resume_never_fetches_a_remote_ref_a_record_names(
        ops_settings: KafkaSettings, writer: Writer) -> None:
    silent = Silent()
    url = f"http://127.0.0.1:{silent.port}/schema.json"
    await interrupted_with(writer, "t-ref", {"$ref": url})
    try:
        try:
            result = await run_cli(ops_settings, "resume", "t-ref", "--resolve",
                                   'ask-1={"a": 1}', "--dry-run", within_s=30)
        except TimeoutError:
            result = None
        contacted = len(silent.accepted)
    finally:
        silent.close()
    assert contacted == 0, f"the CLI fetched {url} ({contacted} connection(s))"
    assert result is not None, "the CLI hung on the remote $ref for 30 s"
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.code == 0, result.stderr
    assert NOT_CHECKED in result.stderr
    assert url in result.stderr


async def test_resume_with_a_ref_to_a_closed_port_says_not_checked(
        ops_settings: KafkaSettings, writer: Writer) -> None:
    await interrupted_with(writer, "t-closed", {"$ref": f"http://127.0.0.1:{free_port()}/x"})
    result = await run_cli(ops_settings, "resume", "t-closed", "--resolve", 'ask-1={"a": 1}',
                           "--dry-run", within_s=30)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.code == 0, result.stderr
    assert NOT_CHECKED in result.stderr


async def test_resume_survives_a_self_referencing_schema(
        ops_settings: KafkaSettings, writer: Writer) -> None:
    await interrupted_with(writer, "t-self", {"$ref": "#"})
    result = await run_cli(ops_settings, "resume", "t-self", "--resolve", 'ask-1={"a": 1}',
                           "--dry-run", within_s=30)
    assert "Traceback" not in result.stderr, result.stderr[-1500:]
    assert result.code == 0, result.stderr
    assert NOT_CHECKED in result.stderr
