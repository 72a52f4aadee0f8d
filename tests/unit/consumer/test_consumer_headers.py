"""Header guards of the app: one Authorization header, JSON bodies only (415)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.requests import Request

from services.consumer.app import create_app
from services.consumer.forward import FORWARDED_BY, REQUEST_ID, arrived_as
from services.consumer.headers import is_json, require_json
from services.consumer.problems import InvalidInput, UnsupportedMediaType
from services.consumer.settings import ConsumerSettings
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit

TOKEN = "tok-headers-0123456789abcdef"
UNREACHABLE = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1")


@pytest.mark.parametrize("value", ["application/json", "Application/JSON; charset=utf-8",
                                   "application/vnd.agui+json", " application/json ;q=1"])
def test_json_media_types(value: str) -> None:
    assert is_json(value)
    require_json(value, required=True)


@pytest.mark.parametrize("value", ["text/plain", "text/plain;charset=UTF-8", "text/json",
                                   "application/x-www-form-urlencoded", "multipart/form-data",
                                   "application/jsonp", "", "json"])
def test_other_media_types_are_415(value: str) -> None:
    assert not is_json(value)
    with pytest.raises(UnsupportedMediaType) as err:
        require_json(value, required=False)
    assert (err.value.status, err.value.code) == (415, "unsupported_media_type")


def test_an_absent_content_type_is_415_only_where_a_body_is_required() -> None:
    require_json(None, required=False)
    with pytest.raises(UnsupportedMediaType):
        require_json(None, required=True)


@pytest.fixture(params=["off", "on"])
async def http(request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
               ) -> AsyncIterator[httpx.AsyncClient]:
    caplog.set_level(logging.CRITICAL)
    keys = {"AGUI_API_KEYS": f"{TOKEN}=tenant-a"} if request.param == "on" else {}
    app = create_app(ConsumerSettings(AGUI_AGENTS="scripted=x:y", **keys), UNREACHABLE)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        yield client


async def test_two_authorization_headers_are_400_before_authentication(
        http: httpx.AsyncClient) -> None:
    twice = [("Authorization", f"Bearer {TOKEN}"), ("authorization", f"Bearer {TOKEN}")]
    for response in (await http.get("/threads/t", headers=twice),
                     await http.post("/agents/scripted", content=b"{}", headers=twice),
                     await http.get("/healthz", headers=twice)):
        assert response.status_code == 400
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["code"] == "duplicate_header"


async def test_two_last_event_id_headers_are_400_not_the_first_taken(
        http: httpx.AsyncClient) -> None:
    twice = [("Authorization", f"Bearer {TOKEN}"), ("Last-Event-ID", "3"),
             ("last-event-id", "40")]
    response = await http.get("/threads/t/runs/r/events", headers=twice)
    assert (response.status_code, response.json()["code"]) == (400, "duplicate_header")
    assert "Last-Event-ID" in response.json()["detail"]


async def test_a_run_with_a_body_that_is_not_json_is_415_after_authentication(
        http: httpx.AsyncClient) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for headers in ({**auth, "Content-Type": "text/plain"}, auth):
        response = await http.post("/agents/scripted", content=b"{}", headers=headers)
        assert response.status_code == 415, response.text
        assert response.json()["code"] == "unsupported_media_type"
    cancel = await http.post("/threads/t/runs/r/cancel", content=b"x",
                             headers={**auth, "Content-Type": "text/plain"})
    assert cancel.status_code == 415
    nobody = await http.post("/agents/scripted", content=b"{}",
                             headers={"Content-Type": "text/plain"})
    assert nobody.status_code in (401, 415)  # 401 when authentication is on


def forwarded_with(request_id: str) -> Request:
    """A request carrying the forwarding headers, as any client may send them."""
    return Request({"type": "http", "method": "POST", "path": "/agents/a", "headers": [
        (FORWARDED_BY.encode(), b"http://127.0.0.1:1"),
        (REQUEST_ID.encode(), request_id.encode())]})


@pytest.mark.parametrize("request_id", ["expiry:run-1", "delegation:x", "ops:y"])
def test_a_request_id_in_the_relays_own_namespace_is_refused(request_id: str) -> None:
    with pytest.raises(InvalidInput) as err:
        arrived_as(forwarded_with(request_id))
    assert (err.value.status, err.value.code) == (400, "invalid_header")
    assert "namespace" in err.value.detail


def test_a_client_chosen_request_id_elsewhere_is_taken() -> None:
    assert arrived_as(forwarded_with("my-expiry:1")).request_id == "my-expiry:1"
