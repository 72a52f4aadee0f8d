"""Agents: what one is, and how a worker finds the ones it hosts.

An agent is an async callable ``agent(input, ctx)`` taking the run's
``RunAgentInput`` and a ``RunContext``. It is either an async generator
yielding ``ag-ui-protocol`` events (or their wire dicts), or a coroutine that
emits through the context's helpers (and may return the run's result). Both
styles mix: a generator may use ``ctx`` helpers too. Run lifecycle belongs to
the runtime — it opens the run and ends it — so an agent that yields its own
``RUN_FINISHED``/``RUN_ERROR`` only says how it wants to end.

``agent_definition`` wraps a callable with what the runtime should know
about it (the tools whose calls need approval). A worker loads agents by
name from ``AGUI_AGENTS`` (``name=module:object,...``; a bare ``name`` is
looked up) or from the ``agui_relay.agents`` entry point group; the sample
agents are always available under their names. A value that is an
``http://`` or ``https://`` URL names an upstream AG-UI endpoint instead
(``services.producer.upstream``): ``billing=http://billing-agent:8080/agui``;
an object that is a framework's AG-UI agent (``LangGraphAgent``) is hosted
as it is (``services.producer.framework``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, TypeAlias

from ag_ui.core import BaseEvent, RunAgentInput

from services.producer.errors import AgentLoadError
from services.producer.upstream.config import is_upstream_url, upstream_config

if TYPE_CHECKING:
    from services.producer.context import RunContext

ENTRY_POINT_GROUP = "agui_relay.agents"
SAMPLES = {
    "approval": "services.producer.agents.approval:agent",
    "scripted": "services.producer.agents.scripted:agent",
    "planner": "services.producer.agents.planner:agent",
}
"""The sample agents, loadable by name even when the distribution is not installed."""

AgentItem: TypeAlias = BaseEvent | dict[str, Any]
AgentFn: TypeAlias = Callable[
    ["RunAgentInput", "RunContext"], AsyncIterator[AgentItem] | Awaitable[Any]
]


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """An agent and what the runtime needs to know about it."""

    run: AgentFn
    gated_tools: frozenset[str] = field(default_factory=frozenset)
    """Tools whose calls wait for approval: a call of one in ``messages`` with
    neither a result nor a resume entry is an uncovered interrupt (never run)."""
    description: str = ""


def agent_definition(
    run: AgentFn, *, gated_tools: Iterable[str] = (), description: str = ""
) -> AgentDefinition:
    """Describe ``run`` for the runtime (use as ``agent = agent_definition(fn, ...)``)."""
    return AgentDefinition(run, frozenset(gated_tools), description or (run.__doc__ or "").strip())


def as_definition(obj: object, origin: str = "agent") -> AgentDefinition:
    """Accept an ``AgentDefinition``, a bare async callable, or a framework's AG-UI
    agent object (``services.producer.framework``: ``LangGraphAgent``, ``ADKAgent``)."""
    if isinstance(obj, AgentDefinition):
        return obj
    if callable(obj):
        return agent_definition(obj)
    from services.producer.framework import framework_definition, is_framework_agent

    if is_framework_agent(obj):
        return framework_definition(obj, origin)
    raise AgentLoadError(f"{origin} is {type(obj).__name__}, not an agent callable")


def load_object(spec: str) -> AgentDefinition:
    """Import ``module:object`` (``object`` may be dotted) and return it as an agent."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AgentLoadError(f"agent {spec!r} is not a 'module:object' string")
    try:
        target: object = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise AgentLoadError(f"cannot load agent {spec!r}: {exc}") from exc
    return as_definition(target, spec)


def known_agents() -> dict[str, str]:
    """Agents available by name: the samples, then the installed entry points."""
    found = dict(SAMPLES)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found[ep.name] = ep.value
    return found


def parse_agents(spec: str | None) -> dict[str, str]:
    """``name=module:object,...`` (or bare known names) → {name: import string}.

    An empty or missing spec means every known agent.
    """
    known = known_agents()
    if not spec or not spec.strip():
        return known
    out: dict[str, str] = {}
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        name, sep, target = item.partition("=")
        name, target = name.strip(), target.strip()
        if not sep:
            if name not in known:
                raise AgentLoadError(f"unknown agent {name!r}: use name=module:object "
                                     f"(known: {', '.join(sorted(known))})")
            target = known[name]
        if not name or not target or "." in name:
            raise AgentLoadError(f"bad AGUI_AGENTS entry {item!r}: expected name=module:object "
                                 "(names are topic suffixes: no dots)")
        if name in out:
            raise AgentLoadError(f"agent {name!r} named twice in AGUI_AGENTS")
        out[name] = target
    return out


def load_target(name: str, target: str) -> AgentDefinition:
    """Agent ``name``: an upstream endpoint when ``target`` is a URL, else ``module:object``."""
    if is_upstream_url(target):
        from services.producer.upstream.client import UpstreamAgent  # imports this module

        return UpstreamAgent(upstream_config(name, target, os.environ)).definition()
    return load_object(target)


def load_agents(spec: str | None) -> dict[str, AgentDefinition]:
    """Load every agent ``spec`` names (see ``parse_agents``)."""
    return {name: load_target(name, target) for name, target in parse_agents(spec).items()}
