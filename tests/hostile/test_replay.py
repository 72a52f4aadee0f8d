"""Finding 5: a replay that never ends.

``GET /threads/{t}/runs/{r}/events`` with ``Last-Event-ID`` at or past a
finished run's last event id — what a reconnecting browser ``EventSource``
sends — stayed open forever sending keep-alives, holding one of the
instance's stream slots. Now it answers ``204 No Content`` at once (an
EventSource stops reconnecting on 204), for a run that finished, stopped
interrupted or failed; one id before the end still replays the terminal
event. Every request here is bounded by a 10-second read timeout.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from faults.load import run_input

from hostile.client import Tenant, finished, fresh
from services.cli.ops.agui_http import sse_lines

pytestmark = pytest.mark.hostile

PROMPT_S = 10.0
"""A read timeout under the SSE keep-alive interval (AGUI_KEEPALIVE_S, 15 s), so a replay
left open sending keep-alives times out instead of holding the test."""
TERMINALS = ("RUN_FINISHED", "RUN_ERROR")
SCRIPTS: dict[str, dict[str, Any]] = {
    "success": {"text": "done"},
    "interrupt": {"interrupts": [{"id": "ask", "reason": "input_required"}]},
    "error": {"fail": "on purpose"},
}


async def replay(tenant: Tenant, thread: str, run: str,
                 last_event_id: int | None) -> tuple[int, list[tuple[int, dict[str, Any]]]]:
    """(status, [(id, event), ...] up to the terminal one) of one replay request."""
    headers = {"accept": "text/event-stream"}
    if last_event_id is not None:
        headers["last-event-id"] = str(last_event_id)
    frames: list[tuple[int, dict[str, Any]]] = []
    async with tenant.client.stream("GET", f"/threads/{thread}/runs/{run}/events",
                                    headers=headers, timeout=PROMPT_S) as response:
        if response.status_code != 200:
            await response.aread()
            return response.status_code, frames
        seq, data = -1, []
        async for line in sse_lines(response.aiter_text()):
            if line.startswith("id:"):
                seq = int(line[3:].strip())
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif line == "" and data:
                event = orjson.loads("\n".join(data))
                frames.append((seq, event))
                data = []
                if event.get("type") in TERMINALS:
                    break
    return 200, frames


@pytest.mark.parametrize("outcome", list(SCRIPTS))
async def test_a_replay_from_the_end_of_a_finished_run_answers_204(tenant_a: Tenant,
                                                                   outcome: str) -> None:
    thread, run = fresh(f"replay-{outcome}")
    answer = await tenant_a.run("scripted", run_input(thread, run, script=SCRIPTS[outcome]))
    assert answer.status == 200, answer
    assert answer.ending is not None, answer
    if outcome != "error":
        finished(answer, outcome)
    status, frames = await replay(tenant_a, thread, run, None)
    assert status == 200, status
    assert frames, "the replay sent no event"
    assert frames[-1][1]["type"] in TERMINALS, frames
    last = frames[-1][0]
    assert last >= 0, "the replay's frames carry no id"
    for after in (last, last + 1, last + 1000):
        try:
            status, tail = await replay(tenant_a, thread, run, after)
        except httpx.TimeoutException:
            pytest.fail(f"Last-Event-ID {after} (last event {last}): still open after "
                        f"{PROMPT_S:.0f} s")
        assert status == 204, f"Last-Event-ID {after} (last event {last}): {status} {tail}"
    status, tail = await replay(tenant_a, thread, run, last - 1)
    assert (status, [seq for seq, _ in tail]) == (200, [last]), tail
