"""Finding 7: the smaller ones — media type, duplicate credentials, child threads, probing.

- The ``Content-Type`` was ignored, so with keys off a cross-site
  ``text/plain`` POST from any web page could start runs: now ``415
  unsupported_media_type`` unless it is JSON (``application/json`` with
  parameters, or ``application/*+json``).
- Two ``Authorization`` headers were accepted (the first won): now ``400
  duplicate_header``, before authentication.
- A pipeline child's thread id holds a ``/`` (``<parent>/review-<token>``)
  and could not be read, replayed or cancelled over HTTP: now it can, with
  the slash encoded as ``%2F``.
- A resume entry on another tenant's thread answered ``404`` but ``422`` on
  an unused id, so a tenant could probe which threads exist: now a foreign
  thread and an unknown one get byte-identical problems (up to the id
  itself) on every route.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import pytest
from faults.load import resume_all, run_input

from hostile.client import Tenant, finished, fresh, problem_of, refused
from hostile.rawhttp import Conn, head
from hostile.stack import TENANTS, UpStack

pytestmark = pytest.mark.hostile

REFUSED_TYPES = ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=x", None]
ACCEPTED_TYPES = ["application/json; charset=utf-8", "application/vnd.agui+json"]


@pytest.mark.parametrize("content_type", REFUSED_TYPES)
async def test_a_body_that_is_not_declared_json_gets_415(tenant_a: Tenant,
                                                         content_type: str | None) -> None:
    result = await tenant_a.run("scripted", run_input(*fresh("ctype")),
                                content_type=content_type)
    refused(result, 415, "unsupported_media_type")


@pytest.mark.parametrize("content_type", ACCEPTED_TYPES)
async def test_json_with_parameters_or_a_json_suffix_is_served(tenant_a: Tenant,
                                                               content_type: str) -> None:
    result = await tenant_a.run("scripted", run_input(*fresh("ctype")),
                                content_type=content_type)
    finished(result, "success")


async def test_a_cancel_with_a_non_json_body_gets_415(tenant_a: Tenant) -> None:
    thread, run = fresh("cancel415")
    finished(await tenant_a.run("scripted", run_input(thread, run)), "success")
    response = await tenant_a.post(f"/threads/{thread}/runs/{run}/cancel", content=b"stop=1",
                                   headers={"content-type": "text/plain"})
    assert response.status_code == 415, response.text[:300]
    assert problem_of(response)["code"] == "unsupported_media_type"


@pytest.mark.parametrize(("method", "path"), [("GET", "/threads/hx-dup"),
                                              ("POST", "/agents/scripted")])
@pytest.mark.parametrize("second", ["same", "other tenant", "invalid"])
async def test_two_authorization_headers_get_400(relay: UpStack, method: str, path: str,
                                                 second: str) -> None:
    other = {"same": TENANTS["tenant-a"], "other tenant": TENANTS["tenant-b"],
             "invalid": "not-a-key"}[second]
    body = b'{"threadId":"hx-dup","runId":"r","messages":[]}' if method == "POST" else b""
    data = head(method, path, [("Host", f"127.0.0.1:{relay.http_port}"),
                               ("Authorization", f"Bearer {TENANTS['tenant-a']}"),
                               ("Authorization", f"Bearer {other}"),
                               ("Content-Type", "application/json"),
                               ("Content-Length", str(len(body)))]) + body
    conn = await Conn.open(relay.http_port)
    try:
        assert await conn.send(data)
        answer = await conn.read_answer(10.0)
    finally:
        await conn.close()
    assert (answer.status, answer.problem_code()) == (400, "duplicate_header"), answer


async def test_a_child_thread_is_readable_replayable_and_cancellable_through_2f(
        tenant_a: Tenant, tenant_b: Tenant) -> None:
    parent, run = fresh("pipeline")
    ending = finished(await tenant_a.run("pipeline_parent", run_input(parent, run,
                                                                      text="the report")),
                      "interrupt")
    child = ending["outcome"]["interrupts"][0]["metadata"]["agui-relay.child"]
    child_thread, child_run = child["threadId"], child["runId"]
    assert child_thread.startswith(f"{parent}/"), child_thread
    assert child_thread != f"{parent}/review", "the child's thread id is predictable"
    encoded, run = quote(child_thread, safe=""), quote(child_run, safe="")  # both hold a '/'
    view = await tenant_a.get(f"/threads/{encoded}")
    assert view.status_code == 200, view.text[:300]
    assert view.json()["threadId"] == child_thread
    events = await tenant_a.get(f"/threads/{encoded}/runs/{run}/events",
                                headers={"accept": "text/event-stream"}, timeout=10.0)
    assert events.status_code == 200, events.text[:300]
    assert "RUN_FINISHED" in events.text, events.text[-300:]
    foreign = await tenant_b.get(f"/threads/{encoded}")
    assert foreign.status_code == 404, foreign.text[:300]
    cancel = await tenant_a.post(f"/threads/{encoded}/runs/{run}/cancel")
    assert cancel.status_code == 202, cancel.text[:300]


async def probe(tenant: Tenant, route: str, thread: str, run: str) -> httpx.Response:
    """What ``tenant`` gets asking ``route`` about ``thread``."""
    if route == "thread":
        return await tenant.get(f"/threads/{thread}")
    if route == "replay":
        return await tenant.get(f"/threads/{thread}/runs/{run}/events", timeout=10.0)
    if route == "cancel":
        return await tenant.post(f"/threads/{thread}/runs/{run}/cancel")
    wire: dict[str, Any] = resume_all(thread, "run-probe", [{"id": "ask"}], {"ok": True})
    if route == "post":
        wire.pop("resume")
    return await tenant.post("/agents/scripted", json=wire, timeout=20.0,
                             headers={"accept": "text/event-stream"})


@pytest.mark.parametrize("route", ["thread", "replay", "cancel", "resume"])
async def test_a_foreign_thread_answers_exactly_as_an_unknown_one(
        tenant_a: Tenant, tenant_b: Tenant, route: str) -> None:
    owned, run = fresh("owned")
    script = {"interrupts": [{"id": "ask", "reason": "input_required"}]}
    finished(await tenant_a.run("scripted", run_input(owned, run, script=script)), "interrupt")
    unknown, _ = fresh("owned")
    assert len(unknown) == len(owned)
    foreign = await probe(tenant_b, route, owned, run)
    unused = await probe(tenant_b, route, unknown, run)
    assert foreign.status_code == unused.status_code, (
        foreign.status_code, foreign.text[:300], unused.status_code, unused.text[:300])
    assert foreign.status_code >= 400, foreign.text[:300]
    assert foreign.headers.get("content-type") == unused.headers.get("content-type")
    problem_of(foreign)
    assert foreign.content.replace(owned.encode(), b"<id>") == \
        unused.content.replace(unknown.encode(), b"<id>"), (foreign.text, unused.text)


async def test_a_new_run_on_a_foreign_thread_is_404(tenant_a: Tenant,
                                                    tenant_b: Tenant) -> None:
    owned, run = fresh("owned-post")
    finished(await tenant_a.run("scripted", run_input(owned, run)), "success")
    response = await probe(tenant_b, "post", owned, run)
    assert response.status_code == 404, response.text[:300]
    assert problem_of(response)["code"] == "unknown_thread"
