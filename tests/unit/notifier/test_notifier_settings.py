"""The notifier's settings: URL and secret required, the secret and the URL's token never shown."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.notifier.settings import NotifierSettings, safe_url

pytestmark = pytest.mark.unit


def test_url_and_secret_are_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGUI_WEBHOOK_URL", raising=False)
    monkeypatch.delenv("AGUI_WEBHOOK_SECRET", raising=False)
    with pytest.raises(ValidationError) as missing:
        NotifierSettings()
    assert {e["loc"][0] for e in missing.value.errors()} == {"AGUI_WEBHOOK_URL",
                                                             "AGUI_WEBHOOK_SECRET"}
    monkeypatch.setenv("AGUI_WEBHOOK_URL", "ftp://example.com/hook")
    monkeypatch.setenv("AGUI_WEBHOOK_SECRET", "hunter2")
    with pytest.raises(ValidationError) as wrong:
        NotifierSettings()
    assert "hunter2" not in str(wrong.value)


def test_the_environment_sets_everything_and_the_secret_stays_masked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"AGUI_WEBHOOK_URL": "https://hooks.example.com/agui?token=abc",
                        "AGUI_WEBHOOK_SECRET": "hunter2", "AGUI_WEBHOOK_RETRIES": "2",
                        "AGUI_WEBHOOK_BACKOFF_S": "0.5", "AGUI_WEBHOOK_TIMEOUT_S": "3"}.items():
        monkeypatch.setenv(name, value)
    s = NotifierSettings()
    assert (s.retries, s.backoff_s, s.timeout_s, s.secret_bytes) == (2, 0.5, 3.0, b"hunter2")
    assert "hunter2" not in repr(s)
    assert safe_url(s.url) == "https://hooks.example.com/…"
    assert safe_url("http://user:pw@127.0.0.1:8080/x?t=1") == "http://127.0.0.1:8080/…"
