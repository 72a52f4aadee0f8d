"""The run and thread routes served by ``direct.DirectRoutes`` alone: one front door.

The app is the real one from ``create_app``, never started (no broker): the
route answers from what it checks before publishing, so each request below
shows who served it and in which order — authentication first, then the
route's own problems, a 405 for another method, and FastAPI's 404 for a
path no route has. FastAPI has no route that could call their endpoints;
the OpenAPI document still lists them. The full run on the real broker is
in ``tests/integration/consumer``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from services.consumer import direct
from services.consumer.app import create_app
from services.consumer.routes import served
from services.consumer.settings import ConsumerSettings
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit

TOKEN = "tok-direct-0123456789abcdef"
UNREACHABLE = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1")
JSON = {"Content-Type": "application/json"}


def app(**settings: object) -> FastAPI:
    return create_app(ConsumerSettings(AGUI_AGENTS="scripted=x:y", **settings), UNREACHABLE)


@pytest.fixture
async def http(caplog: pytest.LogCaptureFixture) -> AsyncIterator[httpx.AsyncClient]:
    caplog.set_level(logging.CRITICAL)
    transport = httpx.ASGITransport(app=app())
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def problem(response: httpx.Response) -> dict[str, object]:
    assert response.headers["content-type"] == "application/problem+json"
    doc: dict[str, object] = orjson.loads(response.content)
    return doc


async def test_the_route_renders_its_problems(http: httpx.AsyncClient) -> None:
    # no broker answers the lookup: not "no such agent", but ask again
    unknown = await http.post("/agents/nobody", content=b"{}", headers=JSON)
    assert unknown.status_code == 503
    assert problem(unknown)["code"] == "agent_lookup_deferred"
    assert unknown.headers["retry-after"] == "1"
    decoded = await http.post("/agents/a%20b", content=b"{}", headers=JSON)
    assert str(problem(decoded)["detail"]).startswith(
        "agent 'a b' is not known here yet and could not be looked up now")
    not_ready = await http.post("/agents/scripted", content=b"{}", headers=JSON)
    assert not_ready.status_code == 503
    assert problem(not_ready)["code"] == "not_ready"


async def test_an_id_that_is_not_utf_8_once_decoded_is_400_not_replaced(
        http: httpx.AsyncClient) -> None:
    """``%ff%fe`` had read as the thread "\ufffd\ufffd", as had any other bytes that are
    not UTF-8: one name for many ids."""
    for path in ("/threads/%ff%fe", "/threads/t/runs/%ED%A0%80/events",
                 "/threads/%C0%AF/runs/r/cancel"):
        method = "POST" if path.endswith("cancel") else "GET"
        answer = await http.request(method, path)
        assert (answer.status_code, problem(answer)["code"]) == (400, "invalid_request"), path
    quick = httpx.ASGITransport(app=app(AGUI_FORWARD_SETTLE_S=0.1))  # no owner: not 15 s
    async with httpx.AsyncClient(transport=quick, base_url="http://test") as client:
        replaced = await client.get("/threads/%EF%BF%BD")  # U+FFFD is an id like any other
    assert (replaced.status_code, problem(replaced)["code"]) == (503, "owner_unavailable")


async def test_another_method_is_a_405_and_another_path_fastapis_404(
        http: httpx.AsyncClient) -> None:
    wrong_method = await http.get("/agents/scripted")
    assert wrong_method.status_code == 405
    assert wrong_method.headers["allow"] == "POST"
    assert problem(wrong_method)["code"] == "method_not_allowed"
    on_thread = await http.delete("/threads/t1")
    assert (on_thread.status_code, on_thread.headers["allow"]) == (405, "GET")
    no_agent = await http.post("/agents/", content=b"{}")
    assert problem(no_agent)["code"] == "not_found"
    slash = await http.post("/agents/scripted/", content=b"{}")
    assert slash.status_code == 404
    assert problem(slash)["code"] == "not_found"


def test_fastapi_has_no_route_to_the_served_endpoints() -> None:
    endpoints = {r.endpoint for r in served.routes if isinstance(r, APIRoute)}
    assert len(endpoints) == 4
    reachable = set(direct.mounted_endpoints(app().router.routes))
    assert reachable, "the app's own routes (health, readiness, metrics) are FastAPI's"
    assert not reachable & endpoints


async def test_authentication_runs_before_the_route(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL)
    transport = httpx.ASGITransport(app=app(AGUI_API_KEYS=f"{TOKEN}=tenant-a"))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        refused = await client.post("/agents/nobody", content=b"{}", headers=JSON)
        admitted = await client.post("/agents/nobody", content=b"{}",
                                     headers={**JSON, "Authorization": f"Bearer {TOKEN}"})
    assert refused.status_code == 401
    assert problem(refused)["code"] == "unauthorized"
    assert problem(admitted)["code"] == "agent_lookup_deferred"  # past authentication


def test_the_route_stays_in_the_openapi_document() -> None:
    doc = app().openapi()
    operation = doc["paths"]["/agents/{agent}"]["post"]
    assert [p["name"] for p in operation["parameters"]] == ["agent"]
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/RunAgentInput"}


def test_a_served_route_cannot_be_mounted_as_well() -> None:
    twice = FastAPI()
    twice.include_router(served)
    with pytest.raises(ValueError, match="included in the app as well"):
        direct.install(twice, served)
    only = APIRouter()
    only.add_api_websocket_route("/ws", test_a_served_route_cannot_be_mounted_as_well)
    with pytest.raises(TypeError):
        direct.install(FastAPI(), only)
    once = FastAPI()
    direct.install(once, served)
    assert [m.cls for m in once.user_middleware] == [direct.DirectRoutes]
