"""The notifier's settings, from the environment (``AGUI_WEBHOOK_*``).

The URL and the secret are required: a notifier without a receiver has
nothing to do, and an unsigned webhook would let anyone who learns the URL
forge notifications. The secret is a ``SecretStr`` (masked in ``repr``,
dumps and validation errors) and the URL is logged without its user info,
path or query, which may hold a token too (``safe_url``).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import AnyHttpUrl, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["NotifierSettings", "safe_url"]


class NotifierSettings(BaseSettings):
    """Where to POST, how to sign, how hard to try."""

    model_config = SettingsConfigDict(
        allow_inf_nan=False, env_prefix="", extra="ignore", populate_by_name=True,
        hide_input_in_errors=True,
    )

    url: AnyHttpUrl = Field(alias="AGUI_WEBHOOK_URL")
    secret: SecretStr = Field(alias="AGUI_WEBHOOK_SECRET", min_length=1)
    retries: int = Field(5, alias="AGUI_WEBHOOK_RETRIES", ge=0, le=100)
    """Attempts after the first; then the notification is dead-lettered."""
    backoff_s: float = Field(1.0, alias="AGUI_WEBHOOK_BACKOFF_S", ge=0, le=86_400)
    """The wait before the first retry; doubled before each next one."""
    backoff_max_s: float = Field(60.0, alias="AGUI_WEBHOOK_BACKOFF_MAX_S", gt=0, le=86_400)
    """The longest wait between two attempts."""
    timeout_s: float = Field(10.0, alias="AGUI_WEBHOOK_TIMEOUT_S", gt=0, le=600)
    """One attempt's limit (connect, send, answer)."""
    poll_s: float = Field(1.0, alias="AGUI_NOTIFIER_POLL_S", gt=0, le=60)
    """The longest wait for records before the expiry clock is moved."""
    max_batch: int = Field(100, alias="AGUI_NOTIFIER_MAX_BATCH", ge=1)
    """Records taken per poll."""
    session_timeout_ms: int = Field(10_000, alias="AGUI_NOTIFIER_SESSION_TIMEOUT_MS",
                                    ge=6_000, le=1_800_000)

    @property
    def secret_bytes(self) -> bytes:
        return self.secret.get_secret_value().encode("utf-8")


def safe_url(url: object) -> str:
    """``url`` as logs may show it: scheme, host and port only."""
    parts = urlsplit(str(url))
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}/…"
