"""Who answered: the principal written into each admitted resume entry.

An agent that gates a side effect on an approval must be able to tell who
gave it, and a client must not be able to claim to be someone else. The
request's principal (the tenant) and key name are set by the consumer
service from the API key (``anonymous`` and no name with authentication
off), so on admission the gatekeeper writes who answered into every resume
entry's ``metadata`` under the namespaced key ``agui-relay.principal``
(``contracts.records.PRINCIPAL_KEY``), the place the AG-UI model gives a
resume entry for what travels with it. The value is the request's
``identity`` (``tenant-a``, or ``tenant-a#alice`` when its key has a name,
so two people of one tenant are told apart), or ``policy:expiry`` for
entries the expiry policy cancelled. Whatever a client put under that key
is replaced, or removed when the request names no principal, so the key is
only ever the gatekeeper's word. The rest of an entry's metadata is kept as
sent. The producer reads it back as ``RunContext.answered_by``. Pure.
"""

from __future__ import annotations

from ag_ui.core import ResumeEntry, RunAgentInput

from contracts.records import EXPIRY_ANSWERER, PRINCIPAL_KEY, RunRequest, identity


def answerer(request: RunRequest) -> str | None:
    """Who answers the request's resume entries: its policy, else its principal and key."""
    return (EXPIRY_ANSWERER if request.policy == "expiry"
            else identity(request.principal, request.key_name))


def attributed(request: RunRequest) -> RunAgentInput:
    """The request's input with every resume entry naming who answered it.

    An input without resume entries is returned as it is (no copy).
    """
    entries = request.input.resume
    if not entries:
        return request.input
    who = answerer(request)
    return request.input.model_copy(update={"resume": [_entry(e, who) for e in entries]})


def _entry(entry: ResumeEntry, who: str | None) -> ResumeEntry:
    metadata = {k: v for k, v in (entry.metadata or {}).items() if k != PRINCIPAL_KEY}
    if who is not None:
        metadata[PRINCIPAL_KEY] = who
    return entry.model_copy(update={"metadata": metadata or None})
