"""Problem documents: the status each rejection code gets, and the body's members."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import get_args

import orjson
import pytest

from contracts import Decision, RejectionCode
from services.consumer.problems import (
    PROBLEM_TYPE,
    REJECTIONS,
    DecisionTimeout,
    InvalidInput,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    Rejected,
)
from services.consumer.settings import ConsumerSettings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("thread_busy", 409),
        ("duplicate_run_id", 409),
        ("uncovered_interrupts", 422),
        ("unknown_interrupt", 422),
        ("duplicate_entry", 422),
        ("interrupt_expired", 422),
        ("invalid_input", 400),
        ("key_mismatch", 400),
    ],
)
def test_each_rejection_code_has_its_status(code: str, status: int) -> None:
    decision = Decision(request_id="q", verdict="rejected", code=code,  # type: ignore[arg-type]
                        message="no", interrupt_ids=["i1"], decided_at=datetime.now(UTC))
    problem = Rejected.from_decision(decision)
    assert problem.status == status
    body = orjson.loads(problem.response().body)
    assert body == {"type": f"urn:agui-relay:problem:{code}", "title": problem.title,
                    "status": status, "detail": "no", "code": code, "interruptIds": ["i1"]}


def test_every_rejection_code_has_a_row_in_the_one_table() -> None:
    codes = set(get_args(RejectionCode))
    assert codes, "RejectionCode is a Literal of the codes"
    assert codes - set(REJECTIONS) == set(), "a RejectionCode without its status"
    assert set(REJECTIONS) - codes == set()


def test_a_decision_without_a_code_is_a_plain_400() -> None:
    decision = Decision(request_id="q", verdict="rejected", message="no",
                        decided_at=datetime.now(UTC))
    problem = Rejected.from_decision(decision)
    assert (problem.status, problem.code) == (400, "rejected")


def test_method_not_allowed_names_the_methods_allowed() -> None:
    response = MethodNotAllowed("no GET here", ("POST",)).response()
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert orjson.loads(response.body)["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("problem", "status"),
    [(InvalidInput("invalid_json", "x"), 400), (NotFound("unknown_agent", "x"), 404),
     (PayloadTooLarge("payload_too_large", "x"), 413),
     (DecisionTimeout("decision_timeout", "x"), 504)],
)
def test_problem_responses_are_problem_json_without_empty_interrupt_ids(
        problem: InvalidInput, status: int) -> None:
    response = problem.response()
    assert response.status_code == status
    assert response.media_type == PROBLEM_TYPE
    body = orjson.loads(response.body)
    assert set(body) == {"type", "title", "status", "detail", "code"}


def test_agent_names_are_read_from_agui_agents() -> None:
    settings = ConsumerSettings(
        agents="approval=services.producer.agents.approval:agent, scripted=x:y ,,")
    assert settings.agent_names() == ("approval", "scripted")
