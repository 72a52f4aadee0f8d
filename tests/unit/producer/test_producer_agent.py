"""Loading agents by name: AGUI_AGENTS strings, bare sample names, bad entries."""

from __future__ import annotations

import pytest

from services.producer.agent import AgentDefinition, load_agents, load_object, parse_agents
from services.producer.errors import AgentLoadError

pytestmark = pytest.mark.unit


def test_no_spec_means_every_known_agent_including_the_samples() -> None:
    assert {"approval", "scripted", "planner"} <= set(parse_agents(None))


def test_named_module_object_and_bare_sample_names() -> None:
    agents = load_agents("mine=services.producer.agents.scripted:agent, approval")
    assert set(agents) == {"mine", "approval"}
    assert all(isinstance(a, AgentDefinition) for a in agents.values())
    assert agents["approval"].gated_tools == frozenset({"delete_files"})


@pytest.mark.parametrize("spec", [
    "nope",                       # unknown bare name
    "x=no_such_module:agent",     # import fails
    "x=services.producer.agent:no_such_object",
    "x=services.producer.agent",  # not module:object
    "a.b=services.producer.agents.scripted:agent",  # dotted name
    "x=services.producer.agents.scripted:agent,x=services.producer.agents.planner:agent",
    "x=services.producer.agent:ENTRY_POINT_GROUP",  # not callable
])
def test_bad_specs_say_what_is_wrong(spec: str) -> None:
    with pytest.raises(AgentLoadError):
        load_agents(spec)


def test_plain_async_function_is_wrapped() -> None:
    definition = load_object("services.producer.agents.scripted:agent")
    assert callable(definition.run)
