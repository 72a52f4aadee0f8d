"""``make bench``'s summary names each target's figure as the benchmark wrote it: the
end-to-end ratio to its floor and the batched gatekeeper's figure beside its floor, and
``n/a`` for a benchmark that wrote nothing (rather than a row that breaks the table)."""

from __future__ import annotations

from typing import Any

import pytest

from bench.__main__ import BENCHES, summarise

pytestmark = pytest.mark.unit


def row(rows: list[dict[str, str]], starts: str) -> dict[str, str]:
    (found,) = [r for r in rows if r["measure"].strip().startswith(starts)]
    return found


def test_the_end_to_end_ratio_and_the_batched_gatekeeper_are_headlines() -> None:
    results: dict[str, dict[str, Any] | None] = dict.fromkeys(BENCHES)
    results["consumer"] = {"relay_overhead_to_floor": {"p50_ms": 2.94, "p99_ms": 2.5}}
    results["gatekeeper"] = {"streaming": {"batched": {
        "cpu_us_per_content_event": 1.17, "floor": {"cpu_us_per_content_event": 0.61}}}}
    rows = summarise(results)
    assert row(rows, "relay overhead / floor") == {
        "bench": "consumer", "measure": "relay overhead / floor at 200 runs/s, p50 / p99",
        "value": "2.9x / 2.5x", "target": "≤ 2x"}
    batched = row(rows, "batching (BATCH_MS")
    assert (batched["value"], batched["target"]) == ("1.17 / 0.61", "≤ 1")


def test_a_benchmark_that_wrote_nothing_shows_not_available() -> None:
    rows = summarise(dict.fromkeys(BENCHES))
    assert {r["value"] for r in rows} == {"n/a"}


def test_the_sse_ratio_is_shown_against_both_readers() -> None:
    results: dict[str, dict[str, Any] | None] = dict.fromkeys(BENCHES)
    results["consumer_throughput"] = {"phases": {
        "20": {"ratio": 0.33, "ratio_bare": 0.35}, "100": {"ratio": 0.34, "ratio_bare": 0.42}}}
    rows = summarise(results)
    assert row(rows, "SSE events/s / plain reader's")["value"] == "0.33 / 0.34"
    assert row(rows, "the same against aiokafka on its defaults")["value"] == "0.35 / 0.42"
