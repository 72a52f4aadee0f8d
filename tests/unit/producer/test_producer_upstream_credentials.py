"""What an upstream request carries that an echoed error page must not quote."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import httpx
import pytest
from ag_ui.core import RunAgentInput

from services.producer.errors import RunFailedError
from services.producer.upstream.client import BODY_QUOTE_BYTES, UpstreamAgent
from services.producer.upstream.config import UpstreamConfig
from services.producer.upstream.credentials import (
    REDACTED,
    redacted,
    redacted_head,
    request_secrets,
)

pytestmark = pytest.mark.unit


def quote(url: str, body: str, headers: dict[str, str] | None = None) -> str:
    return redacted(body.encode(), request_secrets(url, headers or {})).decode()


def test_configured_header_values_and_their_words_are_redacted() -> None:
    said = quote("http://h/agui", "auth=Bearer s3cret-token-value tenant=acme "
                 "token=s3cret-token-value",
                 {"Authorization": "Bearer s3cret-token-value", "X-Tenant": "acme"})
    # 'acme' is too short to redact
    assert said == "auth=[redacted] tenant=acme token=[redacted]"


@pytest.mark.parametrize("url", ["http://h/agui?code=QUERY-SECRET-1&lang=en",
                                 "http://h/agui?lang=en&code=QUERY%2DSECRET%2D1"])
def test_the_urls_query_values_are_redacted_as_sent_and_decoded(url: str) -> None:
    line = "POST /agui?" + url.split("?")[1]
    said = quote(url, f"{line} code=QUERY-SECRET-1")
    assert "SECRET" not in said, said
    assert said.count(REDACTED.decode()) == 2


def test_the_urls_userinfo_its_password_and_the_basic_token_are_redacted() -> None:
    token = base64.b64encode(b"alice:pa ss-word-1").decode()
    said = quote("http://alice:pa%20ss-word-1@h/agui",
                 f"Authorization: Basic {token}; userinfo alice:pa%20ss-word-1; "
                 "password pa ss-word-1; user alice")
    assert said == ("Authorization: Basic [redacted]; userinfo [redacted]; "
                    "password [redacted]; user alice")


def test_a_url_without_credentials_redacts_nothing() -> None:
    assert request_secrets("https://h:8443/agui", {}) == ()


@pytest.mark.parametrize("past", [1, 20, 49])
async def test_a_secret_the_quotes_cut_runs_through_is_not_quoted(past: int) -> None:
    """Only ``BODY_QUOTE_BYTES`` of an error page are read: a token the cut ran through
    was not whole there, so not redacted, and the quote (whitespace collapsed) held all
    but its last ``past`` bytes."""
    token = "s3cret-token-0123456789-abcdefghijklmnopqrstuvwxyz"
    echoed = b"Authorization: Bearer " + token.encode()  # the page echoes the request
    page = b" " * (BODY_QUOTE_BYTES - len(echoed) + past) + echoed + b" " * 100

    async def body() -> AsyncIterator[bytes]:
        yield page

    up = UpstreamAgent(UpstreamConfig(name="up", url="http://upstream.test/agui", retries=0,
                                      headers={"Authorization": f"Bearer {token}"}))
    up._client = httpx.AsyncClient(transport=httpx.MockTransport(
        lambda _: httpx.Response(400, content=body())))
    run_input = RunAgentInput(thread_id="t1", run_id="r1", state={}, messages=[], tools=[],
                              context=[], forwarded_props={})
    with pytest.raises(RunFailedError) as failed:
        async for _ in up(run_input, None):  # type: ignore[arg-type]
            pass
    said = failed.value.message
    assert f"Bearer {token[:len(token) - past]}" not in said, said
    assert said == "upstream http://upstream.test/agui answered 400: Authorization:"


def test_only_what_could_begin_a_secret_is_dropped_from_the_heads_end() -> None:
    secrets = request_secrets("http://h/agui", {"X-Key": "key-0123456789"})
    assert redacted_head(b"key-0123456789 at key-01", secrets) == b"[redacted] at "
    assert redacted_head(b"key-0123456789 at home", secrets) == b"[redacted] at home"
