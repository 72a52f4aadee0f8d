"""A library's repeated line is let through once per window, with a count; the relay's never."""

from __future__ import annotations

import logging

from services.runtime.log_repeats import RepeatFilter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(name: str, msg: str, *args: object, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args or None, None)


def passed(f: RepeatFilter, *records: logging.LogRecord) -> list[str]:
    return [r.getMessage() for r in records if f.filter(r)]


def test_a_library_line_in_a_tight_loop_passes_once_per_window_then_with_a_count() -> None:
    clock = Clock()
    f = RepeatFilter(window_s=10.0, clock=clock)
    missing = "Topic %s not found in cluster metadata"
    assert passed(f, *[record("aiokafka.cluster", missing, "p.events") for _ in range(2_700)]
                  ) == ["Topic p.events not found in cluster metadata"]
    clock.now += 10.5
    assert passed(f, record("aiokafka.cluster", missing, "p.events")) == [
        "Topic p.events not found in cluster metadata (2699 more like it in the last 10 s)"]
    clock.now += 1.0
    assert passed(f, record("aiokafka.cluster", missing, "p.events")) == []


def test_other_arguments_levels_and_loggers_are_other_lines() -> None:
    f = RepeatFilter(clock=Clock())
    missing = "Topic %s not found in cluster metadata"
    assert len(passed(f, record("aiokafka.cluster", missing, "p.events"),
                      record("aiokafka.cluster", missing, "p.requests"),
                      record("aiokafka.cluster", missing, "p.events", level=logging.WARNING),
                      record("aiokafka.client", missing, "p.events"),
                      record("kafka.conn", missing, "p.events"))) == 5


def test_the_relays_own_lines_and_look_alike_loggers_are_never_held_back() -> None:
    f = RepeatFilter(clock=Clock())
    for name in ("services.consumer.sse", "aiokafkax", "root"):
        lines = [record(name, "the same line %s", "again") for _ in range(3)]
        assert len(passed(f, *lines)) == 3, name


def test_what_is_remembered_is_bounded() -> None:
    clock = Clock()
    f = RepeatFilter(keys=8, clock=clock)
    assert len(passed(f, *[record("aiokafka", "Unable connect to %r", f"node {i}")
                           for i in range(100)])) == 100
    assert len(f._seen) == 8
    assert passed(f, record("aiokafka", "Unable connect to %r", "node 99")) == []
    assert passed(f, record("aiokafka", "Unable connect to %r", "node 0")) == [
        "Unable connect to 'node 0'"]  # forgotten: let through again


def test_arguments_that_cannot_be_hashed_are_compared_by_their_text() -> None:
    f = RepeatFilter(clock=Clock())
    assert len(passed(f, record("aiokafka", "offsets %s", [1, 2]),
                      record("aiokafka", "offsets %s", [1, 2]),
                      record("aiokafka", "offsets %s", [1, 3]))) == 2


def test_a_new_exception_with_the_same_text_each_time_is_the_same_line() -> None:
    """aiokafka logs "Unable connect to node with id %s: %s" with a new exception object
    at each attempt: compared as arguments, every one was new, and a broker down got 65
    to 210 of them a second through per service (found by probing)."""
    f = RepeatFilter(clock=Clock())
    attempts = [record("aiokafka.client", "Unable connect to node with id %s: %s", 1,
                       ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9092)"))
                for _ in range(200)]
    assert len(passed(f, *attempts)) == 1
