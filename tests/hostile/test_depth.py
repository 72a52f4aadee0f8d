"""Finding 6: ``500`` with tracebacks for JSON nested 253 to 1,024 levels.

orjson parses up to 1,024 levels but serialises only 255, so an input
nested 253 levels or more was accepted and failed later, when the request
was written as a record: a ``500`` against the README's "no 5xx". Now a
document deeper than ``AGUI_MAX_JSON_DEPTH`` (64, the top object being
level 1) is ``400 json_too_deep`` naming where and the limit, and one at
the limit runs. The depths tried sit around each boundary: the limit,
orjson's serialiser and its parser.
"""

from __future__ import annotations

import pytest
from faults.load import run_input

from hostile.client import Tenant, body_of, finished, fresh, refused

pytestmark = pytest.mark.hostile

LIMIT = 64
DEPTHS = [63, 64, 65, 253, 254, 255, 1023, 1024, 1025]


def nested(depth: int, where: str) -> bytes:
    """A RunAgentInput nested ``depth`` levels in all (the top object is level 1)."""
    thread, run = fresh(f"deep{depth}")
    wire = run_input(thread, run)
    inner = depth - 1
    if where == "state":  # arrays
        wire["state"] = "@"
        filler = b"[" * inner + b"]" * inner
    else:  # objects
        wire["forwardedProps"] = "@"
        filler = b'{"a":' * (inner - 1) + b"{}" + b"}" * (inner - 1)
    return body_of(wire).replace(b'"@"', filler, 1)


@pytest.mark.parametrize("where", ["state", "forwardedProps"])
@pytest.mark.parametrize("depth", DEPTHS)
async def test_deep_json_is_refused_past_the_limit_and_never_a_5xx(
        tenant_a: Tenant, depth: int, where: str) -> None:
    result = await tenant_a.run("scripted", nested(depth, where))
    assert result.status < 500, f"{result.status}: {result.problem}"
    if depth <= LIMIT:
        finished(result, "success")
    else:
        problem = refused(result, 400, "json_too_deep")
        assert problem.get("limit") == LIMIT, problem
        assert isinstance(problem.get("field"), str), problem
