"""Delivering one notification: POST, and on failure try again with exponential backoff.

An attempt succeeds on a 2xx answer within ``AGUI_WEBHOOK_TIMEOUT_S``; a
connection error, a timeout or any other status fails it. After a failure
the next attempt waits ``AGUI_WEBHOOK_BACKOFF_S`` doubled per failure (at
most ``AGUI_WEBHOOK_BACKOFF_MAX_S``), ``AGUI_WEBHOOK_RETRIES`` times; after
the last the caller dead-letters the notification with ``Outcome.last``
(the last status or error). Every attempt sends the same bytes, signature
and delivery id. Neither the secret nor the URL (which may hold a token)
appears in a log line or a reason. A stop signal ends the waiting between
attempts: the notification is then left undelivered (not dead-lettered),
and the next owner of the partition delivers it again from the committed
offset.

Partitions deliver at the same time (``services.notifier.service``): at
most ``CONNECTIONS`` attempts are under way at once, the size of the
client's connection pool, and an attempt's timeout starts once it has its
connection slot, so waiting behind other partitions' slow receivers never
fails an attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import httpx

from contracts import encode
from contracts.webhooks import WebhookEvent
from services.notifier import metrics
from services.notifier.settings import NotifierSettings, safe_url
from services.notifier.signing import headers

__all__ = ["Outcome", "Webhook", "backoff_s"]

log = logging.getLogger(__name__)
for _chatty in ("httpx", "httpcore"):  # their request lines name the full URL (its query too)
    logging.getLogger(_chatty).setLevel(logging.WARNING)
_ERROR_MAX = 300
CONNECTIONS = 100
"""Attempts under way at once, the connection pool's size (httpx's default)."""


def backoff_s(failures: int, base_s: float, cap_s: float) -> float:
    """The wait after ``failures`` failed attempts (1, 2, ...): base doubled each time, capped."""
    return min(base_s * 2.0 ** (failures - 1), cap_s)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the attempts at one notification ended."""

    delivered: bool
    attempts: int
    last: str
    """The last attempt's answer: ``HTTP 204``, ``HTTP 500``, ``timeout after 0.5 s``, ..."""


class Webhook:
    """POSTs notifications to ``AGUI_WEBHOOK_URL``, signed, with retries."""

    def __init__(self, settings: NotifierSettings) -> None:
        self._settings = settings
        self._url = str(settings.url)
        self._secret = settings.secret_bytes
        self._client = httpx.AsyncClient(
            timeout=settings.timeout_s, follow_redirects=False,
            limits=httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=20))
        self._slots = asyncio.Semaphore(CONNECTIONS)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def deliver(self, event: WebhookEvent, stop: asyncio.Event) -> Outcome | None:
        """Try until delivered or out of retries; None when ``stop`` interrupts the waiting."""
        body = encode(event)
        sent = headers(self._secret, body, event.delivery_id)
        s = self._settings
        attempts = 0
        while True:
            attempts += 1
            ok, last = await self._attempt(body, sent)
            if ok:
                metrics.delivered(event.kind)
                return Outcome(True, attempts, last)
            if attempts > s.retries:
                return Outcome(False, attempts, last)
            metrics.retried(event.kind)
            wait = backoff_s(attempts, s.backoff_s, s.backoff_max_s)
            log.warning("webhook %s %s for thread %s failed (%s), attempt %d of %d; "
                        "next in %.2f s", event.kind, event.delivery_id, event.thread_id, last,
                        attempts, s.retries + 1, wait, extra={"threadId": event.thread_id})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
            if stop.is_set():
                return None

    async def _attempt(self, body: bytes, sent: dict[str, str]) -> tuple[bool, str]:
        """One POST, bounded as a whole by ``timeout_s`` (httpx's timeout bounds each read,
        and a receiver trickling its answer a byte at a time never trips it); only the
        answer's status is read, never its body (a receiver answering 200 with an endless
        one would otherwise fill the notifier's memory). The timeout starts once a connection
        slot is free (``CONNECTIONS``)."""
        try:
            async with (self._slots, asyncio.timeout(self._settings.timeout_s),
                        self._client.stream("POST", self._url, content=body,
                                            headers=sent) as answer):
                return answer.is_success, f"HTTP {answer.status_code}"
        except (TimeoutError, httpx.TimeoutException):
            return False, f"timeout after {self._settings.timeout_s:g} s"
        except httpx.HTTPError as exc:
            text = str(exc).replace(self._url, safe_url(self._url))[:_ERROR_MAX]
            return False, f"{type(exc).__name__}: {text or 'the connection broke'}"
