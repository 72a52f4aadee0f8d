"""``agui-relay producer``: a producer worker hosting agents.

Agents come from ``--agents`` / ``AGUI_AGENTS`` (``name=module:object,...``,
or bare names of the samples and of installed ``agui_relay.agents`` entry
points; empty: all of them). A value that is an ``http(s)://`` URL names an
upstream AG-UI endpoint (``services.producer.upstream``), tuned by the
``AGUI_UPSTREAM_*`` variables the command's help lists. The other settings are environment variables
(``ProducerSettings``), overridable here. SIGINT/SIGTERM drain the runs in
progress (``AGUI_PRODUCER_DRAIN_S``), commit and leave the group; a second
signal stops at once. With ``AGUI_HEALTH_PORT`` set it serves /healthz,
/readyz (control listener and every agent's partitions restored) and
/metrics there.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import typer
from pydantic import ValidationError

from contracts.codec import validation_detail
from services.cli.environment import warn_about_environment
from services.cli.settings_errors import reporting_settings
from services.kafka.lookup import BrokerWatch
from services.producer.agent import load_agents
from services.producer.errors import AgentLoadError
from services.producer.settings import ProducerSettings
from services.producer.worker import Worker
from services.runtime.health import HealthSettings, serving_health
from services.runtime.lifecycle import run_until_signalled
from services.runtime.logging import configure
from services.runtime.settings import KafkaSettings

log = logging.getLogger("services.producer")


def producer(
    agents: str = typer.Option(None, envvar="AGUI_AGENTS",
                               help="name=module:object or name=http(s)://upstream/agui, "
                                    "comma-separated (default: every known agent)"),
    max_concurrent_runs: int = typer.Option(None, envvar="AGUI_MAX_CONCURRENT_RUNS",
                                            help="runs in flight per agent"),
    uncovered_policy: str = typer.Option(None, envvar="AGUI_UNCOVERED_POLICY",
                                         help="reject | reinterrupt"),
) -> None:
    """Run agents behind Kafka: dispatched inputs in, AG-UI events out, interrupts kept.

    Framework agents: name=module:object naming a framework's AG-UI agent
    object is hosted as it is, no wrapper: ag-ui-langgraph's LangGraphAgent
    (extra langgraph), ag-ui-adk's ADKAgent (extra adk). Keep their state
    outside the process (a durable LangGraph checkpointer, a durable ADK
    session service) for a thread to survive a move to another worker.

    Upstream agents: in AGUI_AGENTS, name=http(s)://host/path names an
    AG-UI endpoint served elsewhere (billing=http://billing:8080/agui).
    Each run is POSTed to it (RunAgentInput, protocolVersion 1.0, Accept:
    text/event-stream); its SSE stream is published under the guarantees
    of a hosted agent. A failure ends the run with one RUN_ERROR coded
    upstream_unreachable, upstream_status, upstream_protocol,
    upstream_dropped or upstream_timeout; the upstream's own RUN_ERROR
    (a late one after its RUN_FINISHED too) ends it coded upstream.<code>.

    Per upstream: AGUI_UPSTREAM_<NAME>_<SETTING> (NAME upper-cased, - as _);
    all but HEADERS also take a shared AGUI_UPSTREAM_<SETTING> default.
    HEADERS: extra request headers, never logged: JSON
      {"Authorization": "Bearer ..."} or "Name: value; Name: value"
    CONNECT_TIMEOUT_S (5): to connect and send the request
    IDLE_TIMEOUT_S (60): longest wait for the answer or the next event
    RUN_TIMEOUT_S (3600): longest a whole run may stream
    VERIFY (true): check the upstream's TLS certificate
    CA_FILE: the CA bundle to check it with
    CONCURRENCY (64): requests in flight to it from this worker
    RETRIES (2): when unreachable or 429/502/503/504, only before any
      event, not sooner than its Retry-After (past the run's end: no retry)
    MAX_EVENT_BYTES (4194304): the longest SSE event read from it
    """
    configure("producer")
    warn_about_environment(log)
    overrides: dict[str, Any] = {"agents": agents}
    if max_concurrent_runs is not None:
        overrides["max_concurrent_runs"] = max_concurrent_runs
    if uncovered_policy is not None:
        overrides["uncovered_policy"] = uncovered_policy
    try:
        settings = ProducerSettings(**overrides)
    except ValidationError as exc:
        raise typer.BadParameter(validation_detail(exc)) from exc
    kafka = KafkaSettings()
    try:
        hosted = load_agents(settings.agents)
    except AgentLoadError as exc:
        raise typer.BadParameter(str(exc), param_hint="--agents / AGUI_AGENTS") from exc
    log.info("producer starting on %s, topics %s.*, agents %s", kafka.bootstrap_servers,
             kafka.topic_prefix, ", ".join(hosted))

    health = HealthSettings()

    async def main(stop: asyncio.Event) -> None:
        worker = Worker(kafka, settings, hosted)
        async with serving_health(health.host, health.port, lambda: worker.ready,
                                  broker=BrokerWatch(kafka).why_not):
            await worker.run(stop)

    run_until_signalled(main)


def main() -> None:
    """Run ``producer`` with its options parsed from the command line."""
    reporting_settings(lambda: typer.run(producer))
