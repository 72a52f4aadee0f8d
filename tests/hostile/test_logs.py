"""Finding 3: a client steered the services' log lines, and a long line froze a service.

Ids were logged verbatim, so a client chose a line's length and content:
two requests with a 200,000-character id froze the consumer service under
``agui-relay up`` (its relay gave up on lines over 64 KiB and never read
the pipe again: even ``/healthz`` timed out), 30,000-character ids blocked
the producer in a pipe write, and a ``threadId`` holding a newline and a
fake ``CRITICAL`` line forged a log line in the text form. Here the same
requests are sent (refused at the edge, and onto ``requests`` so the
gatekeeper and the worker see them too); afterwards every service answers,
every log line is of bounded length, and the forged line — which does reach
the logs, escaped — is nowhere a line of its own: in the JSON form (the
suite's stack) every line is one JSON object, and in the text form (a
second ``up`` of this module's own) no line but a record's first starts
with a time, in the services' log files and on ``up``'s terminal alike.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from faults.load import run_input

from hostile.client import Tenant, finished, fresh, sized
from hostile.stack import TENANTS, UpStack
from hostile.topics import envelope, publish
from services.cli.up import GRACE_S

pytestmark = pytest.mark.hostile

LINE_MAX = 20_000
"""Bytes a log line may have: ids are clipped to 200 characters, messages bounded."""
TEXT_FORGED = "00:00:00 CRITICAL [gatekeeper] "
"""How a forged text line starts (a real one starts with the time of day)."""

LineCheck = Callable[[bytes], str | None]


@pytest.fixture(scope="module")
def text_relay(kafka_bootstrap: str,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    """A second ``agui-relay up``, logging in the text form a terminal gets."""
    with UpStack(kafka_bootstrap, tmp_path_factory.mktemp("hostile-text"),
                 log_format="text").running() as stack:
        yield stack


def json_forged(marker: str) -> str:
    """A log line in the services' own JSON form, as a client would smuggle it."""
    return orjson.dumps({"ts": "1999-01-01T00:00:00.000+00:00", "level": "critical",
                         "service": "gatekeeper", "logger": "services.gatekeeper",
                         "msg": marker}).decode()


def json_line(marker: str) -> LineCheck:
    def check(line: bytes) -> str | None:
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            return f"not JSON: {line[:120]!r}"
        if not isinstance(doc, dict):
            return f"not an object: {line[:120]!r}"
        if doc.get("msg") == marker or line.startswith(b'{"ts":"1999-01-01'):
            return f"forged: {line[:200]!r}"
        return None

    return check


def text_line(line: bytes) -> str | None:
    shown = line.split(b" | ", 1)[-1].lstrip()  # up's terminal prefixes "<service> | "
    return f"forged: {line[:200]!r}" if shown.startswith(TEXT_FORGED.encode()) else None


def log_problems(path: Path, check: LineCheck) -> list[str]:
    """What is wrong with a log file: lines too long, or that ``check`` refuses."""
    wrong = []
    with path.open("rb") as log:
        for number, raw in enumerate(log, 1):
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            why = f"{len(line)} bytes" if len(line) > LINE_MAX else check(line)
            if why is not None:
                wrong.append(f"{path.name}:{number}: {why}")
    return wrong


async def send_hostile_ids(relay: UpStack, tenant: Tenant, forging: str) -> None:
    """The finding's requests: huge ids refused at the edge and written onto ``requests``,
    then the forging threadId (short: admitted, it runs through every service)."""
    settings = relay.settings
    for length in (200_000, 200_000, 30_000, 30_000, 30_000):
        thread, run = fresh("log")
        result = await tenant.run("scripted", run_input(sized("log", length), run))
        assert 400 <= result.status < 500, result.status
        result = await tenant.run("scripted", run_input(thread, sized("log", length)))
        assert 400 <= result.status < 500, result.status
        huge = sized("log", length)
        await publish(settings, settings.topics.requests, huge.encode(),
                      orjson.dumps(envelope(run_input(huge, run))))
    finished(await tenant.run("scripted", run_input(forging, fresh("forge")[1])), "success")
    finished(await tenant.run("scripted", run_input(*fresh("after-logs"))), "success")


async def assert_serving(relay: UpStack) -> None:
    async with httpx.AsyncClient(timeout=5.0) as probe:
        alive = await probe.get(f"{relay.url}/healthz")
        assert alive.status_code == 200, alive.text[:300]
        for name, url in relay.readyz_urls().items():
            ready = await probe.get(url)
            assert ready.status_code == 200, f"{name}: {ready.text[:300]}"
    relay.check_alive()


def assert_logs(files: list[Path], check: LineCheck, marker: str) -> None:
    wrong = [w for path in files for w in log_problems(path, check)]
    assert not wrong, f"{len(wrong)} bad log lines:\n" + "\n".join(wrong[:20])
    seen = [path.name for path in files if marker.encode() in path.read_bytes()]
    assert seen, "the forging threadId was logged nowhere: nothing was tried"


async def test_hostile_ids_neither_freeze_nor_forge_json_log_lines(relay: UpStack,
                                                                   tenant_a: Tenant) -> None:
    marker = f"FORGED-{uuid.uuid4().hex}"
    forging = f"hx-forge-{uuid.uuid4().hex[:6]}\n{json_forged(marker)}\nmore"
    await send_hostile_ids(relay, tenant_a, forging)
    await assert_serving(relay)
    assert_logs(list(relay.log_files().values()), json_line(marker), marker)


async def test_hostile_ids_neither_freeze_nor_forge_text_log_lines(text_relay: UpStack) -> None:
    marker = f"FORGED-{uuid.uuid4().hex}"
    forging = f"hx-forge-{uuid.uuid4().hex[:6]}\n{TEXT_FORGED}{marker}\nmore"
    async with Tenant(text_relay.url, TENANTS["tenant-a"]) as tenant:
        await send_hostile_ids(text_relay, tenant, forging)
    await assert_serving(text_relay)
    assert_logs([*text_relay.log_files().values(), text_relay.up_log], text_line, marker)
    text_relay.stop(GRACE_S)
    assert text_relay.process is not None
    assert text_relay.process.returncode == 0, text_relay.output()[-3000:]
