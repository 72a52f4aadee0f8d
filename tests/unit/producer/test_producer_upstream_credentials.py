"""What an upstream request carries that an echoed error page must not quote."""

from __future__ import annotations

import base64

import pytest

from services.producer.upstream.credentials import REDACTED, redacted, request_secrets

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
