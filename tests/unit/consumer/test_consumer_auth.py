"""The bearer-token middleware on a small app: who gets through, as whom, and what 401 says.

The app here has the consumer service's problem handlers and one route of
each kind (a protected route echoing the principal, the probes, /metrics);
the middleware under test is the real one, installed by ``auth.install``
from real ``ConsumerSettings``. The whole service is tested route by route on
the real broker in ``tests/interop/test_interop_tenancy.py``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI, Request
from prometheus_client import CollectorRegistry, generate_latest
from starlette.responses import JSONResponse, PlainTextResponse

from services.consumer import auth, problems
from services.consumer.app import create_app
from services.consumer.auth import bearer_token
from services.consumer.keys import KeyConfigError
from services.consumer.settings import ConsumerSettings
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit

TOKEN_A = "tok-a-0123456789abcdef"
TOKEN_B = "tok-b-0123456789abcdef"
TOKEN_A2 = "tok-a2-0123456789abcdef"
METRICS = "metrics-0123456789abcdef"
WRONG = "wrong-0123456789abcdef"


def small_app(registry: CollectorRegistry, **settings: Any) -> FastAPI:
    app = FastAPI()
    problems.install(app)

    @app.post("/agents/{agent}")
    async def run(agent: str, request: Request) -> JSONResponse:
        named = getattr(request.state, "key_name", None)
        return JSONResponse({"principal": getattr(request.state, "principal", None),
                             "bytes": len(await request.body()),
                             **({"keyName": named} if named is not None else {})})

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        return JSONResponse({"status": "ready"})

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(registry).decode())

    config = ConsumerSettings(**settings)
    auth.install(app, config, auth.load_keys(config), registry)
    return app


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = small_app(CollectorRegistry(),
                    api_keys=f"{TOKEN_A}=tenant-a,{TOKEN_B}=tenant-b,{TOKEN_A2}=tenant-a#bob")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://relay") as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_each_key_acts_as_its_tenant(client: httpx.AsyncClient) -> None:
    a = await client.post("/agents/x", headers=bearer(TOKEN_A), content=b"{}")
    b = await client.post("/agents/x", headers={"authorization": f"bearer  {TOKEN_B} "})
    assert (a.status_code, a.json()) == (200, {"principal": "tenant-a", "bytes": 2})
    assert b.json()["principal"] == "tenant-b"


async def test_a_named_key_acts_as_its_tenant_and_says_its_name(
        client: httpx.AsyncClient) -> None:
    named = await client.post("/agents/x", headers=bearer(TOKEN_A2))
    nameless = await client.post("/agents/x", headers=bearer(TOKEN_A))
    assert named.json() == {"principal": "tenant-a", "bytes": 0, "keyName": "bob"}
    assert "keyName" not in nameless.json()


@pytest.mark.parametrize(
    ("headers", "challenge"),
    [
        ({}, 'Bearer realm="agui-relay"'),
        ({"Authorization": "Bearer"}, 'Bearer realm="agui-relay"'),
        ({"Authorization": f"Basic {TOKEN_A}"}, 'Bearer realm="agui-relay"'),
        ({"Authorization": TOKEN_A}, 'Bearer realm="agui-relay"'),
        (bearer(WRONG), 'Bearer realm="agui-relay", error="invalid_token"'),
        (bearer(TOKEN_A.upper()), 'Bearer realm="agui-relay", error="invalid_token"'),
        (bearer(METRICS), 'Bearer realm="agui-relay", error="invalid_token"'),
    ],
)
async def test_no_valid_key_gets_a_401_problem_with_a_bearer_challenge(
        client: httpx.AsyncClient, headers: dict[str, str], challenge: str) -> None:
    response = await client.post("/agents/x", headers=headers, content=b"x" * 10_000)
    assert response.status_code == 401
    assert response.headers["content-type"] == problems.PROBLEM_TYPE
    assert response.headers["www-authenticate"] == challenge
    body = response.json()
    assert body["code"] == "unauthorized"
    assert body["status"] == 401
    assert TOKEN_A not in response.text
    assert WRONG not in response.text


async def test_unknown_routes_are_behind_the_key_too(client: httpx.AsyncClient) -> None:
    assert (await client.get("/threads/t1")).status_code == 401
    assert (await client.get("/openapi.json")).status_code == 401
    assert (await client.get("/threads/t1", headers=bearer(TOKEN_A))).status_code == 404


async def test_probes_and_metrics_are_open_by_default(client: httpx.AsyncClient) -> None:
    await client.get("/agents/x")
    await client.post("/agents/x", headers=bearer(WRONG))
    assert (await client.get("/healthz")).status_code == 200
    assert (await client.get("/readyz")).status_code == 200
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert 'agui_consumer_auth_failures_total{reason="missing"} 1.0' in metrics.text
    assert 'agui_consumer_auth_failures_total{reason="invalid"} 1.0' in metrics.text


async def test_a_metrics_token_protects_metrics_and_only_it_opens_them() -> None:
    app = small_app(CollectorRegistry(), api_keys=f"{TOKEN_A}=tenant-a", metrics_token=METRICS)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://relay") as http:
        anonymous = await http.get("/metrics")
        tenant = await http.get("/metrics", headers=bearer(TOKEN_A))
        scraper = await http.get("/metrics", headers=bearer(METRICS))
        probe = await http.get("/healthz")
    assert (anonymous.status_code, tenant.status_code, scraper.status_code) == (401, 401, 200)
    assert probe.status_code == 200
    assert METRICS not in scraper.text


async def test_without_keys_authentication_is_off_and_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="services.consumer.auth"):
        app = small_app(CollectorRegistry())
    assert "authentication is OFF" in caplog.text
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://relay") as http:
        open_run = await http.post("/agents/x")
        ignored = await http.post("/agents/x", headers=bearer(WRONG))
    assert open_run.json()["principal"] is None  # the routes fall back to AGUI_PRINCIPAL
    assert ignored.status_code == 200


async def test_metrics_token_alone_protects_only_metrics() -> None:
    app = small_app(CollectorRegistry(), metrics_token=METRICS)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://relay") as http:
        assert (await http.post("/agents/x")).status_code == 200
        assert (await http.get("/metrics")).status_code == 401
        assert (await http.get("/metrics", headers=bearer(METRICS))).status_code == 200


async def test_no_token_is_ever_logged(client: httpx.AsyncClient,
                                       caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        small_app(CollectorRegistry(), api_keys=f"{TOKEN_A}=tenant-a,short=weak")
        await client.post("/agents/x", headers=bearer(WRONG))
        await client.post("/agents/x", headers=bearer(TOKEN_A))
        await client.post("/agents/x")
    assert "refused POST /agents/x: invalid bearer token" in caplog.text
    assert "weak" in caplog.text  # the short key's tenant is named ...
    for secret in (TOKEN_A, WRONG, "short="):  # ... never a token
        assert secret not in caplog.text


async def test_a_broken_keys_file_refuses_to_start(tmp_path: Path) -> None:
    file = tmp_path / "keys"
    file.write_text(f"{TOKEN_A}\n", "utf-8")
    with pytest.raises(KeyConfigError) as err:
        small_app(CollectorRegistry(), api_keys_file=file)
    assert TOKEN_A not in str(err.value)


@pytest.mark.parametrize(
    ("value", "token"),
    [(None, None), ("", None), ("Bearer", None), ("Bearer ", None), ("Token x", None),
     ("Bearer x", "x"), ("BEARER  x ", "x"), ("bearer a=b", "a=b")],
)
def test_bearer_token(value: str | None, token: str | None) -> None:
    assert bearer_token(value) == token


def test_the_openapi_document_declares_the_bearer_scheme_when_keys_are_set() -> None:
    secured = create_app(ConsumerSettings(api_keys=f"{TOKEN_A}=tenant-a"),
                         KafkaSettings(bootstrap_servers="127.0.0.1:9")).openapi()
    assert secured["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert secured["security"] == [{"bearerAuth": []}]
    assert secured["paths"]["/healthz"]["get"]["security"] == []
    assert secured["paths"]["/metrics"]["get"]["security"] == []
    assert "security" not in secured["paths"]["/threads/{thread_id}"]["get"]
    assert TOKEN_A not in orjson.dumps(secured).decode()
    guarded = create_app(ConsumerSettings(api_keys=f"{TOKEN_A}=tenant-a", metrics_token=METRICS),
                         KafkaSettings(bootstrap_servers="127.0.0.1:9")).openapi()
    assert "security" not in guarded["paths"]["/metrics"]["get"]
    open_app = create_app(ConsumerSettings(), KafkaSettings(bootstrap_servers="127.0.0.1:9"))
    assert "security" not in open_app.openapi()
