"""--since parsing and the record filter of `tail`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.cli.ops.filters import RecordFilter, parse_since, split_types, to_epoch_ms
from services.kafka.records import OpsRecord

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def event(key: str, run: str, kind: str, agent: str = "scripted") -> OpsRecord:
    headers = {"agui-run-id": run, "agui-event-type": kind, "agui-agent": agent, "agui-seq": "1"}
    return OpsRecord("p.events", "events", 0, 0, 0, key, headers, {"type": kind})


def decision(key: str, run: str | None, agent: str = "scripted") -> OpsRecord:
    body = {"requestId": "r", "threadId": key, "verdict": "admitted", "message": "ok",
            "agent": agent, **({"runId": run} if run else {})}
    return OpsRecord("p.decisions", "decisions", 0, 0, 0, key, {}, body)


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-11-30T10:00:00Z", datetime(2026, 11, 30, 10, tzinfo=UTC)),
    ("2026-11-30T10:00:00+02:00", datetime(2026, 11, 30, 8, tzinfo=UTC)),
    ("2026-11-30T10:00:00.250Z", datetime(2026, 11, 30, 10, 0, 0, 250_000, tzinfo=UTC)),
    ("2026-11-30T10:00", datetime(2026, 11, 30, 10, tzinfo=UTC)),
    ("2026-11-30", datetime(2026, 11, 30, tzinfo=UTC)),
    ("90s", NOW - timedelta(seconds=90)),
    ("10m", NOW - timedelta(minutes=10)),
    ("2h", NOW - timedelta(hours=2)),
    ("1D", NOW - timedelta(days=1)),
    ("1.5h", NOW - timedelta(minutes=90)),
])
def test_since_reads_iso_and_durations(text: str, expected: datetime) -> None:
    assert parse_since(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "10 minutes", "", "2026-13-01", "-5m"])
def test_since_refuses_what_it_cannot_read(text: str) -> None:
    with pytest.raises(ValueError, match="--since"):
        parse_since(text, NOW)


def test_epoch_ms_is_kafka_timestamp() -> None:
    assert to_epoch_ms(datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)) == 1000


def test_types_are_split_and_upper_cased() -> None:
    assert split_types(["run_started,RUN_FINISHED", " run_error "]) == {
        "RUN_STARTED", "RUN_FINISHED", "RUN_ERROR"}


def test_empty_filter_keeps_everything() -> None:
    f = RecordFilter()
    assert f.matches(event("t", "r", "RUN_STARTED"))
    assert f.matches(decision("t", None))


def test_event_filters_use_key_and_headers() -> None:
    rec = event("t1", "r1", "TEXT_MESSAGE_CONTENT", agent="approval")
    assert RecordFilter(thread="t1", run="r1", agent="approval").matches(rec)
    assert not RecordFilter(thread="t2").matches(rec)
    assert not RecordFilter(run="r2").matches(rec)
    assert not RecordFilter(agent="scripted").matches(rec)
    assert RecordFilter(types=frozenset({"TEXT_MESSAGE_CONTENT"})).matches(rec)
    assert not RecordFilter(types=frozenset({"RUN_STARTED"})).matches(rec)


def test_run_error_is_matched_by_its_run_header() -> None:
    rec = OpsRecord("p.events", "events", 0, 0, 0, "t", {"agui-run-id": "r9",
                    "agui-event-type": "RUN_ERROR"}, {"type": "RUN_ERROR", "message": "x"})
    assert RecordFilter(run="r9").matches(rec)


def test_decisions_pass_type_filter_but_not_other_run() -> None:
    rec = decision("t1", "r1")
    assert RecordFilter(types=frozenset({"RUN_STARTED"})).matches(rec)
    assert RecordFilter(thread="t1", run="r1").matches(rec)
    assert not RecordFilter(run="r2").matches(rec)
    assert not RecordFilter(thread="t2").matches(rec)


def test_deadletter_matches_the_original_key() -> None:
    rec = OpsRecord("p.deadletter", "deadletter", 0, 0, 0, None, {},
                    {"key": "t1", "reason": "bad", "code": "invalid_json"})
    assert RecordFilter(thread="t1").matches(rec)
    assert not RecordFilter(thread="t2").matches(rec)
    assert RecordFilter(run="anything").matches(rec)
