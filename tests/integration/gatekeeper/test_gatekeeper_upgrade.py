"""An upgraded gatekeeper starts on ``runs`` with no offsets there, and misses no run's end.

The README's upgrade: the workers are rolled first (they write boundaries to
``runs`` too), then every old gatekeeper, which read ``events``, is stopped
and the new ones start. What the old ones left is laid down here: committed
thread states, and on ``runs`` the boundaries new workers wrote since they
were rolled — some the old gatekeepers had applied from ``events``, one end
written after they stopped. The new gatekeeper has no committed offset on
``runs``, reads it from its beginning, applies the end it never saw, and
re-applying the others changes no thread.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from ag_ui.core import Interrupt, RunFinishedEvent, RunStartedEvent
from gatekeeper_harness import Topics, group_offsets, resolved, run_request

from contracts import ThreadState, encode
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

ASK = Interrupt(id="ask", reason="confirm")


async def test_a_new_gatekeeper_reads_runs_from_its_beginning_and_misses_no_end(
    kafka: KafkaSettings, topics: Topics, in_process: Callable[..., Any]
) -> None:
    now = datetime.now(UTC)
    left = {
        # admitted by an old gatekeeper; its worker (a new one) ends it after the switch
        "t-open": ThreadState(thread_id="t-open", status="running", agent="scripted",
                              run_id="o1", recent_run_ids=["o0", "o1"], updated_at=now),
        # its run's end was on events and applied by an old gatekeeper
        "t-done": ThreadState(thread_id="t-done", status="idle", agent="scripted",
                              run_id="d1", recent_run_ids=["d0", "d1"], updated_at=now),
    }
    for thread_id, state in left.items():
        await topics.raw_thread_state(thread_id, encode(state))
    # on runs since the workers were rolled: d1 whole (already applied from events), o1
    # started, then its end, written once the old gatekeepers had stopped
    await topics.event("t-done", "d1", RunStartedEvent(thread_id="t-done", run_id="d1"))
    await topics.event("t-open", "o1", RunStartedEvent(thread_id="t-open", run_id="o1"))
    await topics.event("t-done", "d1", RunFinishedEvent(thread_id="t-done", run_id="d1"))
    await topics.finished("t-open", "o1", ASK)

    await in_process(kafka)
    await topics.until(lambda: getattr(topics.threads.get("t-open"), "status", "")
                       == "interrupted", within=60, what="the end it never saw, applied")
    assert topics.threads["t-open"].open_interrupts[0].interrupt.id == "ask"
    resumed = await topics.decide(run_request("q-open", "t-open", "o2", resume=resolved("ask")))
    assert resumed.verdict == "admitted"
    again = await topics.decide(run_request("q-done", "t-done", "d2"))
    assert again.verdict == "admitted", "the replayed d1 left t-done idle"
    assert topics.thread_writes["t-done"] == 2, "replaying d1 wrote nothing (then d2's admission)"

    offsets = await group_offsets(kafka)
    assert sum(o for tp, o in offsets.items() if tp.topic == kafka.topics.runs) == 4


@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "state-dir"])
async def test_a_thread_state_keyed_for_another_thread_is_taken_as_none(
    kafka: KafkaSettings, topics: Topics, in_process: Callable[..., Any], tmp_path: Any,
    on_disk: bool,
) -> None:
    """Another writer's state on ``threads``, keyed ``t-key`` but naming ``t-key-other``:
    restored under its key, deciding a request for ``t-key`` raised ``request for thread
    't-key' decided against 't-key-other'``, for that thread at every restart (found by
    probing). It is skipped with a warning, as a state that does not decode is."""
    now = datetime.now(UTC)
    foreign = ThreadState(thread_id="t-key-other", status="interrupted", agent="scripted",
                          run_id="x1", recent_run_ids=["x1"], updated_at=now)
    await topics.raw_thread_state("t-key", encode(foreign))
    env = {"AGUI_STATE_DIR": str(tmp_path)} if on_disk else {}
    processor = await in_process(kafka, **env)
    decided = await topics.decide(run_request("q-key", "t-key", "k1"))
    assert decided.verdict == "admitted", decided.message
    assert processor.assigned.is_set()
