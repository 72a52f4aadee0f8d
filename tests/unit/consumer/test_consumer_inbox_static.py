"""The inbox's files: served before authentication, flat names of the build directory only."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest

from services.consumer import inbox_static, interrupt_routes
from services.consumer.app import create_app
from services.consumer.inbox_static import InboxStatic, resolve
from services.consumer.lookback import BUSY_RETRY_AFTER_S
from services.consumer.settings import ConsumerSettings
from services.kafka.thread_log import ThreadRecords
from services.runtime.settings import KafkaSettings

TOKEN = "key-0123456789abcdef0123"


@pytest.mark.parametrize(("path", "name"), [
    ("/inbox", "index.html"), ("/inbox/", "index.html"), ("/inbox/inbox.js", "inbox.js")])
def test_names_resolve_inside_the_build(path: str, name: str, tmp_path: Path) -> None:
    assert resolve(path, tmp_path) == tmp_path / name


@pytest.mark.parametrize("path", ["/inbox/../app.py", "/inbox/a/b.js", "/inbox/.hidden",
                                  "/inboxes", "/inbox/..", "/inbox/%2e%2e"])
def test_nothing_else_resolves(path: str, tmp_path: Path) -> None:
    assert resolve(path, tmp_path) is None


async def test_the_page_loads_without_a_key_the_api_does_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL)
    (tmp_path / "index.html").write_text("<!doctype html><title>inbox</title>")
    monkeypatch.setattr(inbox_static, "DIST", tmp_path)
    app = create_app(ConsumerSettings(AGUI_API_KEYS=f"{TOKEN}=tenant-a"),
                     KafkaSettings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        page = await client.get("/inbox")
        missing = await client.get("/inbox/nothing.js")
        posted = await client.post("/inbox")
        api = await client.get("/interrupts")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert missing.status_code == 404
    assert posted.status_code == 405
    assert api.status_code == 401


async def test_an_unbuilt_inbox_says_how_to_build_it(tmp_path: Path) -> None:
    app = InboxStatic(lambda *_: None, dist=tmp_path)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = await client.get("/inbox")
    assert (answer.status_code, answer.json()["code"]) == (503, "inbox_not_built")
    assert "make install" in answer.json()["detail"]


def test_the_inbox_routes_are_in_the_openapi_document() -> None:
    app = create_app(ConsumerSettings(), KafkaSettings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9"))
    paths = app.openapi()["paths"]
    assert {"/interrupts", "/interrupts/stream", "/interrupts/threads/{thread_id}"} <= set(paths)
    assert "/threads/{thread_id}" in paths


async def test_thread_histories_read_at_once_are_bounded(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL)
    release = asyncio.Event()
    reads = 0

    async def slow_read(*_: object, **__: object) -> ThreadRecords:
        nonlocal reads
        reads += 1
        await release.wait()
        return ThreadRecords("t", None)

    monkeypatch.setattr(interrupt_routes, "read_thread", slow_read)
    app = create_app(ConsumerSettings(), KafkaSettings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        held = [asyncio.create_task(client.get(f"/interrupts/threads/t{n}"))
                for n in range(interrupt_routes.HISTORY_READS)]
        while reads < interrupt_routes.HISTORY_READS:
            await asyncio.sleep(0.01)
        refused = await asyncio.wait_for(client.get("/interrupts/threads/one-more"), 5)
        release.set()
        answered = await asyncio.gather(*held)
    assert (refused.status_code, refused.json()["code"]) == (503, "busy")
    assert refused.headers["retry-after"] == str(BUSY_RETRY_AFTER_S)
    assert [a.status_code for a in answered] == [200] * interrupt_routes.HISTORY_READS
