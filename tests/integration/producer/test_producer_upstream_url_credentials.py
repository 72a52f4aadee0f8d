"""Credentials in an upstream's URL never reach the run's clients or the worker's log.

The upstream is an error page echoing the request (as some proxies' do): its line with
the query, and the ``Authorization`` header httpx derives from a ``user:password@`` URL.
``safe_url`` keeps them out of the messages the worker writes; the quote of the body is
redacted of them too (``services.producer.upstream.credentials``).
"""

from __future__ import annotations

import base64
import logging

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from producer_harness import Relay, first_input, in_process_worker

from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings
from tests.asgi_server import served

pytestmark = pytest.mark.integration

QUERY_SECRET = "QUERYSECRET-0123456789"
USER_SECRET = "USERSECRET-0123456789"


def echoing() -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"error": "who are you?",
                             "request": f"POST {request.url.path}?{request.url.query}",
                             "authorization": request.headers.get("authorization")},
                            status_code=401)

    return app


@pytest.mark.parametrize("where", ["query", "userinfo"])
async def test_credentials_in_the_upstream_url_are_not_quoted_to_clients_or_logs(
        kafka: KafkaSettings, relay: Relay, caplog: pytest.LogCaptureFixture,
        where: str) -> None:
    caplog.set_level(logging.DEBUG, logger="services")
    secrets = (QUERY_SECRET, USER_SECRET,
               base64.b64encode(f"alice:{USER_SECRET}".encode()).decode())
    await ensure_topics(kafka, ("up_echo_url",))
    async with served(echoing()) as port:
        url = (f"http://127.0.0.1:{port}/echo?code={QUERY_SECRET}" if where == "query"
               else f"http://alice:{USER_SECRET}@127.0.0.1:{port}/echo")
        async with in_process_worker(kafka, f"up_echo_url={url}", AGUI_LOG_LEVEL="DEBUG"):
            view = await relay.run("up_echo_url",
                                   first_input(f"t-echo-{where}", f"echo-{where}"))
    assert view.terminal.get("code") == "upstream_status", view.terminal
    message = view.terminal["message"]
    leaked = [s for s in secrets if s in message]
    assert not leaked, f"the RUN_ERROR every client of the run reads quotes {leaked}: {message}"
    assert "401" in message
    assert "[redacted]" in message, message
    assert not [s for s in secrets if s in caplog.text], "the worker's log holds the secret"
