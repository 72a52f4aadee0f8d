"""The README's agent example runs as written: interrupt, then an approved resume."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from ag_ui.core import Interrupt
from producer_support import assert_conformant, make_input, outcome_of, resolved, run_agent

from services.producer.effects import MemoryLedger

pytestmark = pytest.mark.unit

README = Path(__file__).resolve().parents[3] / "README.md"


def readme_agent() -> dict[str, Any]:
    """Execute the README's ``python`` block and return its namespace."""
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    block = next(b for b in blocks if "async def agent(" in b)
    namespace: dict[str, Any] = {}
    exec(compile(block, str(README), "exec"), namespace)
    return namespace


async def test_the_readme_agent_interrupts_then_acts_on_the_approval() -> None:
    example = readme_agent()
    first = await run_agent(example["agent"], make_input(run_id="r1"))
    assert_conformant(first)
    interrupts = outcome_of(first)["interrupts"]
    assert [i["id"] for i in interrupts] == ["approve-1"]
    assert interrupts[0]["expiresAt"] == "2030-01-01T00:00:00Z"
    assert example["deleted"] == []

    second = await run_agent(
        example["agent"],
        make_input(run_id="r2", resume=[resolved("approve-1", {"approved": True})]),
        open_interrupts=[Interrupt.model_validate(i) for i in interrupts],
        ledger=MemoryLedger(),
    )
    assert_conformant(second)
    assert outcome_of(second)["type"] == "success"
    assert example["deleted"] == ["a", "b"]
    assert "SUBAGENT_FINISHED" in second.types
