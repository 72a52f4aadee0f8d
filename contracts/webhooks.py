"""The webhook payload: what the notifier POSTs when a thread waits, is answered or expires.

One JSON object per delivery, on the same base as the record envelopes
(camelCase, optional fields omitted, never ``null``, ``schemaVersion``), with
the AG-UI ``Interrupt`` objects embedded as the protocol's own model so a
receiver can show the interrupt exactly as a client would (``message``,
``responseSchema``, ``expiresAt``...). The body is signed as sent: the
``X-Agui-Signature`` header is ``sha256=`` and the hex HMAC-SHA256 of these
raw bytes under ``AGUI_WEBHOOK_SECRET``; ``X-Agui-Delivery`` (also
``deliveryId`` here) is the same for every attempt of one notification, so a
receiver that remembers the ids it handled handles each notification once.

- ``interrupted``: the thread waits; ``interrupts`` are the open interrupts
  run ``runId`` raised, ``interruptIds`` their ids.
- ``answered``: ``interruptIds`` of run ``runId`` were answered (resolved or
  cancelled) by the admitted resume ``decision``, when the thread state says
  which one (its ``runId`` is the resuming run), and ``answeredBy`` names
  who answered: the tenant, ``tenant#name`` for an API key with a name
  (``tenant-a#alice``), or ``policy:expiry``.
- ``expired``: ``interruptIds`` of run ``runId`` passed their ``expiresAt``
  (read as ``@ag-ui/client`` reads it) unanswered.
"""

from __future__ import annotations

from typing import Literal

from ag_ui.core.types import Interrupt
from pydantic import AwareDatetime, Field

from contracts.records import Envelope

__all__ = ["WebhookDecision", "WebhookEvent", "WebhookKind"]

WebhookKind = Literal["interrupted", "answered", "expired"]


class WebhookDecision(Envelope):
    """The gatekeeper's decision that admitted the answering resume."""

    request_id: str
    run_id: str | None = None
    """The resuming run."""
    message: str
    decided_at: AwareDatetime


class WebhookEvent(Envelope):
    """One notification (the body of one webhook POST)."""

    kind: WebhookKind
    delivery_id: str = Field(min_length=1)
    """Equal to the ``X-Agui-Delivery`` header: the same for every attempt of this event."""
    thread_id: str
    run_id: str
    """The run that raised the interrupts."""
    agent: str | None = None
    principal: str | None = None
    """The tenant the thread belongs to."""
    interrupt_ids: list[str]
    interrupts: list[Interrupt] | None = None
    """``interrupted`` only: the open interrupts in full."""
    decision: WebhookDecision | None = None
    """``answered`` only, when known."""
    answered_by: str | None = None
    """``answered`` only, with ``decision``: who answered (``tenant-a``, ``tenant-a#alice``
    for a named API key, or ``policy:expiry``); ``principal`` is the thread's tenant."""
    at: AwareDatetime
    """When it happened: the thread state's time, or the expiry instant."""
