"""Record envelopes: the values written to agui-relay's topics.

Each envelope is a pydantic model on the ``ag-ui-protocol`` base
(``GeneratedBaseModel``): camelCase on the wire, optional fields omitted when
unset (never ``null``), snake_case attributes in Python. AG-UI payloads
(``RunAgentInput``, ``Interrupt``) are embedded as the protocol's own models,
never re-declared. Every envelope carries ``schemaVersion`` so a reader can
refuse what it does not understand instead of misreading it.

Topic → envelope: requests → RunRequest, decisions → Decision,
dispatch.<agent> → Dispatch, threads → ThreadState, control →
ControlCommand, deadletter → DeadLetter; events carry bare AG-UI events
(see ``contracts.headers`` for their Kafka headers).
"""

from __future__ import annotations

from typing import Literal

from ag_ui.core.types import ConfiguredBaseModel, Interrupt, RunAgentInput
from pydantic import AwareDatetime, ConfigDict, Field

SCHEMA_VERSION: Literal[1] = 1
"""Bumped on any change a reader of the previous version would misread."""

Verdict = Literal["admitted", "rejected", "queued"]
RequestPolicy = Literal["expiry", "delegation"]
"""What in the relay made a request itself (absent: a client sent it): ``expiry``, the
gatekeeper cancelling a thread's expired interrupts; ``delegation``, a worker's parent
run starting or resuming its child (``services.producer.delegation``). A client's
request never carries one: the consumer service builds every ``RunRequest`` it sends."""

PRINCIPAL_KEY = "agui-relay.principal"
"""The key of a dispatched resume entry's ``metadata`` naming who answered it: the
request's ``identity`` (``tenant-a``, or ``tenant-a#alice`` for a named key), or
``EXPIRY_ANSWERER``; set by the gatekeeper, a client's own value under it is replaced
(removed when the request names no principal)."""
EXPIRY_ANSWERER = "policy:expiry"
"""Who answered an interrupt the expiry policy (``AGUI_ON_EXPIRY=cancel``) cancelled."""
CHILD_KEY = "agui-relay.child"
"""The key of a carried-up interrupt's ``metadata`` naming the child run it came from
(``threadId``, ``runId``, ``interruptId``, ``agent``): written by the delegation
(``services.producer.delegation.CHILD_METADATA``), read by the operator's commands."""
CHILD_SEPARATOR = "/"
"""A child thread is ``<parent thread>/<key>-<token>``: its parent's id is all before the
last separator (``parent_thread``)."""
KEY_NAME_SEPARATOR = "#"
"""Between a tenant and its API key's name in an ``identity``: no tenant name may contain it."""


def identity(principal: str | None, key_name: str | None) -> str | None:
    """Who a request speaks for: its tenant, with ``#`` and the key's name when the key
    has one (``tenant-a#alice``); None when it names no principal."""
    if principal is None or key_name is None:
        return principal
    return f"{principal}{KEY_NAME_SEPARATOR}{key_name}"


def parent_thread(thread_id: str) -> str:
    """The thread a child thread was delegated from (its id up to the last ``/``)."""
    return thread_id.rpartition(CHILD_SEPARATOR)[0]


def tenant_of(answerer: str) -> str:
    """The tenant part of an ``identity`` (all of it when it names no key)."""
    return answerer.partition(KEY_NAME_SEPARATOR)[0]


ThreadStatus = Literal["idle", "running", "interrupted"]
RejectionCode = Literal[
    "invalid_input",
    "key_mismatch",
    "duplicate_run_id",
    "thread_busy",
    "duplicate_entry",
    "unknown_interrupt",
    "uncovered_interrupts",
    "interrupt_expired",
    "answer_at_parent",
]


class Envelope(ConfiguredBaseModel):
    """Base of every envelope: unknown members are ignored, not kept.

    The AG-UI base keeps unknown fields (``extra="allow"``) so intermediaries
    can forward them; an envelope is ours, so a newer writer's additions are
    dropped on read and the schema version decides compatibility.
    """

    model_config = ConfigDict(extra="ignore")

    schema_version: Literal[1] = SCHEMA_VERSION


REQUEST_ID_MAX_LENGTH = 200
"""The longest ``RunRequest.request_id`` (an instance's own are uuid4 strings, 36)."""

EXPIRY_REQUEST_PREFIX = "expiry:"
"""The expiry policy's request ids: ``expiry:<interruptedRunId>``, derived, not drawn."""
DELEGATION_REQUEST_PREFIX = "delegation:"
"""A delegated child run's request ids (the parent's worker draws them)."""
OPS_REQUEST_PREFIX = "ops:"
"""Requests an operator's ``agui-relay`` command sends itself."""
RELAY_REQUEST_PREFIXES = (EXPIRY_REQUEST_PREFIX, DELEGATION_REQUEST_PREFIX, OPS_REQUEST_PREFIX)
"""The relay's own request-id namespace: a request id a client chooses (``agui-request-id``)
may not begin so, so no client request can take one of the relay's (the expiry policy's is
predictable) and be answered in its place."""


class RunRequest(Envelope):
    """A consumer's request to run ``agent`` with ``input`` (topic ``requests``).

    ``request_id`` is the idempotency key: the gatekeeper answers a repeated
    request id with the decision it already made, and never dispatches twice.
    """

    request_id: str = Field(min_length=1, max_length=REQUEST_ID_MAX_LENGTH)
    agent: str = Field(min_length=1, max_length=200)
    input: RunAgentInput
    submitted_at: AwareDatetime
    principal: str | None = None
    """The tenant that submitted the request; threads belong to one tenant."""
    key_name: str | None = Field(None, min_length=1, max_length=200)
    """The name of the API key it came with, when the key has one (``AGUI_API_KEYS``
    ``token=tenant#name``): who, within the tenant; ``identity`` joins the two."""
    policy: RequestPolicy | None = None
    """Set when the relay made the request (``expiry``: the gatekeeper cancelling a
    thread's expired interrupts, its principal then the thread's owner; ``delegation``:
    a parent run's child request, the only kind that may answer a child's interrupts)."""


class Handover(Envelope):
    """The thread's previous run, when another agent ran it (``Dispatch.handover``)."""

    run_id: str
    agent: str


class Dispatch(RunRequest):
    """An admitted request on its way to the agent's workers (``dispatch.<agent>``)."""

    warnings: list[str] | None = None
    """Policy warnings the producer should surface (e.g. lenient resume entries)."""
    handover: Handover | None = None
    """Set when the thread's previous run went to another agent, whose workers write
    the thread's checkpoint too: the worker reads what that run left there before
    this one starts (``CheckpointStore.handover``)."""
    decided_at: AwareDatetime


class Decision(Envelope):
    """The gatekeeper's verdict on one request (topic ``decisions``)."""

    request_id: str
    thread_id: str | None = None
    run_id: str | None = None
    agent: str | None = None
    verdict: Verdict
    code: RejectionCode | None = None
    message: str
    interrupt_ids: list[str] | None = None
    warnings: list[str] | None = None
    principal: str | None = None
    """Who asked: the request's principal (absent when it named none)."""
    key_name: str | None = None
    """Who asked within the tenant: the request's key name (absent when it named none)."""
    policy: RequestPolicy | None = None
    """The relay policy that made the request, when not a client (``expiry``)."""
    decided_at: AwareDatetime
    replayed: bool | None = None
    """True on a decision made before, answered again for its repeated requestId: an
    admitted run may have begun, or ended, before this answer was written."""


class OpenInterrupt(Envelope):
    """An interrupt still waiting for an answer, with the run that raised it."""

    run_id: str
    interrupt: Interrupt
    opened_at: AwareDatetime | None = None
    """When the gatekeeper applied the run's interrupted end (its clock then: the
    ``updatedAt`` of that state), kept while the interrupt is open: the inbox's order, the
    same on every instance whatever part of the thread's history it read. Absent in
    states written before it was added (their ``updatedAt`` stands in)."""


class RememberedDecision(Envelope):
    """What a thread keeps of a past decision, to answer a retried request id."""

    request_id: str
    run_id: str | None = None
    verdict: Verdict
    code: RejectionCode | None = None
    message: str
    interrupt_ids: list[str] | None = None
    warnings: list[str] | None = None
    principal: str | None = None
    """Who asked: the request's principal (absent when it named none)."""
    key_name: str | None = None
    """Who asked within the tenant: the request's key name (absent when it named none)."""
    policy: RequestPolicy | None = None
    """The relay policy that made the request, when not a client (``expiry``)."""
    decided_at: AwareDatetime


class ThreadState(Envelope):
    """One thread as the gatekeeper knows it (compacted topic ``threads``).

    Bounded by design: the open interrupts, the current run, and the last few
    run ids and decisions, so deciding costs the same on every run.
    """

    thread_id: str
    status: ThreadStatus = "idle"
    agent: str | None = None
    principal: str | None = None
    run_id: str | None = None
    """The current run while running; the last run otherwise."""
    parent_run_id: str | None = None
    """The ``parentRunId`` of that run: set, the thread is a delegation's child, whose
    interrupts are carried up to its parent (``parent_thread``) and answered there, never
    here (``answer_at_parent``); absent for a run a client started."""
    interrupted_run_id: str | None = None
    open_interrupts: list[OpenInterrupt] = Field(default_factory=list)
    lapsed: list[str] | None = None
    """Ids of the interrupts the expiry policy cancelled last on this thread: a late
    answer naming one (not open again) is rejected ``interrupt_expired``."""
    queued: list[RunRequest] = Field(default_factory=list)
    recent_run_ids: list[str] = Field(default_factory=list)
    recent_decisions: list[RememberedDecision] = Field(default_factory=list)
    run_started_at: AwareDatetime | None = None
    updated_at: AwareDatetime | None = None


class ControlCommand(Envelope):
    """Ask the workers to stop a run (topic ``control``)."""

    kind: Literal["cancel"] = "cancel"
    thread_id: str
    run_id: str
    requested_by: str
    requested_at: AwareDatetime


class DeadLetter(Envelope):
    """A record no service could use, kept with where it came from and why."""

    source_topic: str
    partition: int
    offset: int
    key: str | None = None
    value: str
    """The raw value: UTF-8 text, or base64 when ``value_encoding`` says so."""
    value_encoding: Literal["utf-8", "base64"] = "utf-8"
    headers: dict[str, str] | None = None
    reason: str
    code: str
    service: str
    failed_at: AwareDatetime
