"""The shared metrics helpers record what they say, in the default registry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Histogram, generate_latest

from services.runtime import metrics
from services.runtime.metrics import LagRow, sample_value

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def value(name: str, **labels: str) -> float:
    return sample_value(name, labels) or 0.0


def test_instruments_are_registered_once_and_prefixed() -> None:
    assert metrics.instruments() is metrics.instruments()
    names = [m.name for m in REGISTRY.collect() if m.name.startswith("agui_")]
    for expected in ("agui_decisions", "agui_decision_latency_seconds",
                     "agui_gatekeeper_processing_seconds", "agui_runs_started",
                     "agui_runs_finished", "agui_runs_in_flight", "agui_open_interrupts",
                     "agui_expired_interrupts", "agui_threads_running_too_long",
                     "agui_dead_letters", "agui_consumer_lag"):
        assert expected in names


def test_a_decision_counts_by_verdict_and_code_and_observes_its_latency() -> None:
    before = value("agui_decisions_total", verdict="rejected", code="thread_busy")
    admitted = value("agui_decisions_total", verdict="admitted", code="none")
    seen = value("agui_decision_latency_seconds_count")
    fast = value("agui_decision_latency_seconds_bucket", le="0.005")
    metrics.decision("rejected", "thread_busy", NOW - timedelta(milliseconds=3), NOW)
    metrics.decision("admitted", None, None, NOW)  # no submission time: counted, not timed
    assert value("agui_decisions_total", verdict="rejected", code="thread_busy") == before + 1
    assert value("agui_decisions_total", verdict="admitted", code="none") == admitted + 1
    assert value("agui_decision_latency_seconds_count") == seen + 1
    assert value("agui_decision_latency_seconds_bucket", le="0.005") == fast + 1


def test_a_clock_skewed_submission_counts_as_no_wait() -> None:
    zero = value("agui_decision_latency_seconds_bucket", le="0.001")
    metrics.decision("admitted", None, NOW + timedelta(seconds=5), NOW)
    assert value("agui_decision_latency_seconds_bucket", le="0.001") == zero + 1


async def test_a_run_is_in_flight_inside_the_block_and_counted_once_it_ends() -> None:
    started = value("agui_runs_started_total", agent="unit")
    with metrics.running("unit"):
        assert value("agui_runs_in_flight", agent="unit") == 1
        assert value("agui_runs_started_total", agent="unit") == started + 1
    assert value("agui_runs_in_flight", agent="unit") == 0
    with pytest.raises(RuntimeError), metrics.running("unit"):
        raise RuntimeError("the run failed")
    assert value("agui_runs_in_flight", agent="unit") == 0
    for outcome in metrics.OUTCOMES:
        before = value("agui_runs_finished_total", agent="unit", outcome=outcome)
        metrics.run_finished("unit", outcome)
        assert value("agui_runs_finished_total", agent="unit", outcome=outcome) == before + 1
    with pytest.raises(ValueError, match="unknown run outcome"):
        metrics.run_finished("unit", "exploded")


def test_dead_letters_count_by_service_and_reason() -> None:
    before = value("agui_dead_letters_total", service="unit", reason="invalid_json")
    metrics.dead_letter("unit", "invalid_json")
    assert value("agui_dead_letters_total", service="unit", reason="invalid_json") == before + 1


def test_lag_is_replaced_per_group_and_given_up_partitions_disappear() -> None:
    metrics.set_lag("g-unit", [LagRow("t.requests", 0, 5), LagRow("t.requests", 1, -3)])
    assert value("agui_consumer_lag", group="g-unit", topic="t.requests", partition="0") == 5
    assert value("agui_consumer_lag", group="g-unit", topic="t.requests", partition="1") == 0
    metrics.set_lag("g-other", [LagRow("t.events", 0, 2)])
    metrics.set_lag("g-unit", [LagRow("t.requests", 1, 7)])
    assert sample_value("agui_consumer_lag",
                        {"group": "g-unit", "topic": "t.requests", "partition": "0"}) is None
    assert value("agui_consumer_lag", group="g-unit", topic="t.requests", partition="1") == 7
    assert value("agui_consumer_lag", group="g-other", topic="t.events", partition="0") == 2
    metrics.set_lag("g-unit", ())
    metrics.set_lag("g-other", ())
    assert b'group="g-unit"' not in generate_latest(REGISTRY)


def test_the_loop_histogram_exposes_what_a_prometheus_histogram_would() -> None:
    buckets = (0.01, 0.1, 1.0)
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    loop = metrics.LoopHistogram("h_seconds", "doc", buckets, ours)
    reference = Histogram("h_seconds", "doc", buckets=buckets, registry=theirs)
    for value in (0.0, 0.01, 0.0100001, 0.5, 1.0, 7.0, 0.05):
        loop.observe(value)
        reference.observe(value)
    assert generate_latest(ours) == b"\n".join(
        line for line in generate_latest(theirs).split(b"\n") if b"_created" not in line)
