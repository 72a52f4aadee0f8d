"""Message and resume-entry counts of a RunAgentInput: checked before validation, 413 beyond."""

from __future__ import annotations

from typing import Any

import pytest

from contracts.limits import InputLimits
from services.consumer.limits import check_counts
from services.consumer.problems import PayloadTooLarge
from services.consumer.runs import parse_input
from services.consumer.settings import ConsumerSettings

pytestmark = pytest.mark.unit


def wire(messages: int = 1, resume: int | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "threadId": "t1", "runId": "r1",
        "messages": [{"id": f"m{i}", "role": "user", "content": "hi"} for i in range(messages)],
    }
    if resume is not None:
        doc["resume"] = [{"interruptId": f"i{i}", "status": "cancelled"} for i in range(resume)]
    return doc


def test_up_to_the_limits_passes() -> None:
    check_counts(wire(5, 3), max_messages=5, max_resume=3)
    check_counts(wire(0), max_messages=1, max_resume=1)


@pytest.mark.parametrize(
    ("doc", "member", "variable"),
    [(wire(6), "messages has 6 items", "AGUI_MAX_MESSAGES"),
     (wire(1, 4), "resume has 4 items", "AGUI_MAX_RESUME_ENTRIES")],
)
def test_beyond_a_limit_is_a_413_naming_it(doc: dict[str, Any], member: str,
                                          variable: str) -> None:
    with pytest.raises(PayloadTooLarge) as err:
        check_counts(doc, max_messages=5, max_resume=3)
    assert err.value.status == 413
    assert err.value.code == "payload_too_large"
    assert member in err.value.detail
    assert variable in err.value.detail


def test_members_of_the_wrong_type_are_left_to_validation() -> None:
    check_counts({"messages": "x" * 100, "resume": {"a": 1}}, max_messages=1, max_resume=1)


def test_parse_input_counts_before_it_validates() -> None:
    settings = ConsumerSettings(max_messages=2)
    with pytest.raises(PayloadTooLarge):  # junk messages: still counted first, not a 400
        parse_input(b'{"threadId": "t", "runId": "r", "messages": [1, 2, 3]}', settings,
                    InputLimits())
    with pytest.raises(PayloadTooLarge):  # resume entries counted against the shared limit
        parse_input(b'{"threadId": "t", "runId": "r", "messages": [], "resume": [1, 2, 3]}',
                    settings, InputLimits(max_resume_entries=2))
    assert len(parse_input(
        b'{"threadId": "t", "runId": "r", "messages": []}', settings,
        InputLimits()).messages) == 0
