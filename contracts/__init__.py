"""The wire contracts of agui-relay: topics, record envelopes and their codec.

Everything AG-UI (inputs, events, interrupts, resume entries) is the
``ag-ui-protocol`` package's own pydantic models; the envelopes here add only
what Kafka needs (ids, verdicts, timestamps, a schema version). Import from
this package, not from its modules.
"""

from contracts.codec import (
    EVENT_DECODER,
    DecodeError,
    decode,
    decode_event,
    encode,
    encode_event,
)
from contracts.headers import EventHeaders, Headers, header_value, with_header
from contracts.records import (
    SCHEMA_VERSION,
    ControlCommand,
    DeadLetter,
    Decision,
    Dispatch,
    Handover,
    OpenInterrupt,
    RejectionCode,
    RememberedDecision,
    RunRequest,
    ThreadState,
    ThreadStatus,
    Verdict,
)
from contracts.topics import TopicCatalog, TopicSpec

__all__ = [
    "EVENT_DECODER",
    "SCHEMA_VERSION",
    "ControlCommand",
    "DeadLetter",
    "Decision",
    "DecodeError",
    "Dispatch",
    "EventHeaders",
    "Handover",
    "Headers",
    "OpenInterrupt",
    "RejectionCode",
    "RememberedDecision",
    "RunRequest",
    "ThreadState",
    "ThreadStatus",
    "TopicCatalog",
    "TopicSpec",
    "Verdict",
    "decode",
    "decode_event",
    "encode",
    "encode_event",
    "header_value",
    "with_header",
]
