"""Finding 3: a client steered the services' log lines, and a long line froze a service.

Ids were logged verbatim, so a client chose a line's length and content:
two requests with a 200,000-character id froze the consumer service under
``agui-relay up`` (its relay gave up on lines over 64 KiB and never read
the pipe again: even ``/healthz`` timed out), 30,000-character ids blocked
the producer in a pipe write, and a ``threadId`` holding a newline and a
fake ``CRITICAL`` line forged a log line. Here the same requests are sent
(refused at the edge, and onto ``requests`` so the gatekeeper and the
worker see them too); afterwards every service answers, every log line is
one JSON object of bounded length, and the forged line is nowhere a line
of its own.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import orjson
import pytest
from faults.load import run_input

from hostile.client import Tenant, finished, fresh, sized
from hostile.stack import UpStack
from hostile.topics import envelope, publish

pytestmark = pytest.mark.hostile

LINE_MAX = 20_000
"""Bytes a log line may have: ids are clipped to 200 characters, messages bounded."""


def forged_line(marker: str) -> str:
    """A log line in the services' own JSON form, as a client would smuggle it."""
    return orjson.dumps({"ts": "1999-01-01T00:00:00.000+00:00", "level": "critical",
                         "service": "gatekeeper", "logger": "services.gatekeeper",
                         "msg": marker}).decode()


def log_problems(path: Path, marker: str) -> list[str]:
    """What is wrong with a service's JSON log file: long, non-JSON or forged lines."""
    wrong = []
    with path.open("rb") as log:
        for number, raw in enumerate(log, 1):
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            where = f"{path.name}:{number}"
            if len(line) > LINE_MAX:
                wrong.append(f"{where}: {len(line)} bytes")
                continue
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError:
                wrong.append(f"{where}: not JSON: {line[:120]!r}")
                continue
            if not isinstance(doc, dict):
                wrong.append(f"{where}: not an object: {line[:120]!r}")
            elif doc.get("msg") == marker or line.startswith(b'{"ts":"1999-01-01'):
                wrong.append(f"{where}: forged: {line[:200]!r}")
    return wrong


async def test_hostile_ids_neither_freeze_nor_forge_log_lines(relay: UpStack,
                                                              tenant_a: Tenant) -> None:
    settings = relay.settings
    marker = f"FORGED-{uuid.uuid4().hex}"
    forging = f"hx-forge-{uuid.uuid4().hex[:6]}\n{forged_line(marker)}\nmore"
    for length in (200_000, 200_000, 30_000, 30_000, 30_000):
        thread, run = fresh("log")
        result = await tenant_a.run("scripted", run_input(sized("log", length), run))
        assert 400 <= result.status < 500, result.status
        result = await tenant_a.run("scripted", run_input(thread, sized("log", length)))
        assert 400 <= result.status < 500, result.status
        huge = sized("log", length)
        await publish(settings, settings.topics.requests, huge.encode(),
                      orjson.dumps(envelope(run_input(huge, run))))
    # The forging id is short: it is admitted and runs through every service.
    _, run = fresh("forge")
    finished(await tenant_a.run("scripted", run_input(forging, run)), "success")
    finished(await tenant_a.run("scripted", run_input(*fresh("after-logs"))), "success")

    async with httpx.AsyncClient(timeout=5.0) as probe:
        alive = await probe.get(f"{relay.url}/healthz")
        assert alive.status_code == 200, alive.text[:300]
        for name, url in relay.readyz_urls().items():
            ready = await probe.get(url)
            assert ready.status_code == 200, f"{name}: {ready.text[:300]}"
    relay.check_alive()
    wrong = [w for path in relay.log_files().values() for w in log_problems(path, marker)]
    assert not wrong, f"{len(wrong)} bad log lines:\n" + "\n".join(wrong[:20])
