"""``bench.consumer``'s sweep: each rate's overhead over the baseline, its ratio to that
rate's floor, and the cores the charged processes keep busy, load generators left out."""

from __future__ import annotations

import pytest

from bench.__main__ import _swept
from bench.consumer import swept

pytestmark = pytest.mark.unit


def point(rate: float) -> dict[str, object]:
    return {
        "rate": rate,
        "baseline": {"p50_ms": 1.0, "p99_ms": 2.0, "errors": 0},
        "relay": {"p50_ms": 11.0, "p99_ms": 42.0, "errors": 1,
                  "cpu_ms_per_run": {"gatekeeper": 2.0, "producer": 1.5, "consumer": 1.5,
                                     "broker": 3.0, "client": 0.5}},
        "kafka_floor": {"p50_ms": 5.0, "p99_ms": 10.0,
                        "cpu_ms_per_request": {"transactional": 1.0, "worker": 0.5,
                                               "broker": 2.5, "load and reader": 0.7}},
    }


def test_a_rate_is_summed_up_as_overhead_ratio_and_cores() -> None:
    got = swept(point(200))
    assert got["overhead"] == {"p50_ms": 10.0, "p99_ms": 40.0}
    assert got["ratio"] == {"p50_ms": 2.0, "p99_ms": 4.0}
    assert got["relay_cores"] == 1.6  # 8 ms a run, the client's 0.5 left out
    assert got["floor_cores"] == 0.8  # 4 ms a request, the load's 0.7 left out
    assert got["errors"] == 1


def test_a_rate_without_latencies_has_cores_but_no_ratio() -> None:
    p = point(50)
    p["relay"] = {"errors": 50, "cpu_ms_per_run": {"gatekeeper": 4.0}}
    got = swept(p)
    assert "ratio" not in got
    assert got["relay_cores"] == 0.2


def test_the_summary_reads_a_figure_at_one_rate_of_the_sweep() -> None:
    doc = {"sweep": [swept(point(50)), swept(point(200))]}
    assert _swept(doc, 50, "ratio", "p50_ms") == 2.0
    assert _swept(doc, 200, "relay_cores") == 1.6
    assert _swept(doc, 100, "ratio", "p50_ms") is None
    assert _swept(None, 50, "relay_cores") is None
