"""``agui-relay up``: the whole system in the foreground, for development and demos.

Starts (or reuses) the local broker when ``KAFKA_BOOTSTRAP_SERVERS`` is unset,
creates the topics, then runs the gatekeeper, one producer worker hosting the
sample agents, and the consumer service as child processes. Each child's log
lines are shown prefixed with its name and kept in ``.run/logs/<service>.log``.
Ctrl-C stops the children (SIGTERM, then SIGKILL after a grace period) and
the broker if this command started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import typer
from rich.console import Console

from deploy.kafka import launcher
from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings

console = Console(stderr=True, highlight=False)
LOG_DIR = launcher.REPO_ROOT / ".run" / "logs"
SAMPLE_AGENTS = (
    "approval=services.producer.agents.approval:agent,"
    "scripted=services.producer.agents.scripted:agent,"
    "planner=services.producer.agents.planner:agent,"
    "pipeline_parent=services.producer.agents.pipeline_parent:agent,"
    "pipeline_child=services.producer.agents.pipeline_child:agent"
)
COLOURS = {"gatekeeper": "magenta", "producer": "cyan", "consumer": "green"}
GRACE_S = 15.0


@dataclass
class Child:
    """One service process and where its output goes."""

    name: str
    process: asyncio.subprocess.Process
    log: Path


def agent_names(agents: str) -> tuple[str, ...]:
    """The names in an ``AGUI_AGENTS`` string (``name=module:object,...``)."""
    return tuple(part.split("=", 1)[0].strip() for part in agents.split(",") if part.strip())


def ensure_broker() -> tuple[str, launcher.Broker | None]:
    """The bootstrap to use, and the broker this command started (if any)."""
    given = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if given:
        console.print(f"[bold]Kafka[/]: using KAFKA_BOOTSTRAP_SERVERS={given}")
        return given, None
    running = launcher.status(launcher.DEFAULT_RUN_DIR)
    if running is not None:
        console.print(f"[bold]Kafka[/]: reusing the local broker on {running.bootstrap}")
        return running.bootstrap, None
    with console.status("Fetching the Kafka jars from Maven Central (first run only)..."):
        launcher.fetch(quiet=True)
    with console.status("Starting Apache Kafka on 127.0.0.1:9092..."):
        broker = launcher.start(launcher.DEFAULT_RUN_DIR, launcher.DEFAULT_PORT,
                                launcher.DEFAULT_CONTROLLER_PORT, persistent=True, quiet=True)
    console.print(f"[bold]Kafka[/] {broker.version} ready on {broker.bootstrap} "
                  f"in {broker.started_in:.1f} s (pid {broker.pid})")
    return broker.bootstrap, broker


async def spawn(name: str, module: str, env: dict[str, str]) -> Child:
    """Start ``python -m module`` with its output piped to us."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    return Child(name, process, LOG_DIR / f"{name}.log")


async def relay_output(child: Child) -> None:
    """Copy a child's lines to its log file and, prefixed, to the terminal."""
    assert child.process.stdout is not None
    colour = COLOURS.get(child.name, "white")
    with child.log.open("ab") as log:
        async for line in child.process.stdout:
            log.write(line)
            log.flush()
            text = line.decode("utf-8", "replace").rstrip()
            console.print(f"[{colour}]{child.name:>10}[/] | {text}", markup=True,
                          soft_wrap=True, emoji=False)


async def wait_ready(url: str, children: list[Child], within_s: float = 60.0) -> bool:
    """Poll the consumer service's /readyz until it answers 200 or a child dies."""
    deadline = time.monotonic() + within_s
    async with httpx.AsyncClient(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if any(c.process.returncode is not None for c in children):
                return False
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{url}/readyz")).status_code == 200:
                    return True
            await asyncio.sleep(0.5)
    return False


async def stop_children(children: list[Child]) -> None:
    """SIGTERM every child, SIGKILL whoever outlives the grace period."""
    for child in children:
        if child.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signal.SIGTERM)
    for child in children:
        try:
            await asyncio.wait_for(child.process.wait(), GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                child.process.kill()
            await child.process.wait()


async def supervise(bootstrap: str, agents: str) -> int:
    """Create topics, run the three services, stop them on a signal or a crash."""
    settings = KafkaSettings(bootstrap_servers=bootstrap)
    with console.status("Creating topics..."):
        reports = await ensure_topics(settings, agent_names(agents))
    created = sum(r.created for r in reports)
    console.print(f"[bold]Topics[/]: {created} created, {len(reports) - created} found "
                  f"under prefix '{settings.topic_prefix}'")
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "AGUI_AGENTS": agents,
           "AGUI_LOG_FORMAT": os.environ.get("AGUI_LOG_FORMAT", "text"),
           "PYTHONUNBUFFERED": "1"}
    children = [
        await spawn("gatekeeper", "services.gatekeeper", env),
        await spawn("producer", "services.producer", env),
        await spawn("consumer", "services.consumer", env),
    ]
    relays = [asyncio.create_task(relay_output(c)) for c in children]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    host = os.environ.get("AGUI_HTTP_HOST", "127.0.0.1")
    url = f"http://{host}:{os.environ.get('AGUI_HTTP_PORT', '8000')}"
    if await wait_ready(url, children):
        console.print(f"\n[bold green]agui-relay is up[/]: {url}  (agents: "
                      f"{', '.join(agent_names(agents))}; logs in {LOG_DIR}; Ctrl-C stops)\n")
    exits = [asyncio.create_task(c.process.wait()) for c in children]
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([stopper, *exits], return_when=asyncio.FIRST_COMPLETED)
    crashed = [c.name for c in children if c.process.returncode is not None]
    if crashed:
        console.print(f"[red]{', '.join(crashed)} exited; stopping the rest[/]")
    console.print("Stopping services...")
    await stop_children(children)
    await asyncio.gather(*relays, return_exceptions=True)
    stopper.cancel()
    return 1 if crashed and not stop.is_set() else 0


def up(
    agents: str = typer.Option(SAMPLE_AGENTS, envvar="AGUI_AGENTS",
                               help="Agents to host: name=module:object, comma separated."),
) -> None:
    """Run the whole system in the foreground until Ctrl-C.

    Starts the local broker (unless KAFKA_BOOTSTRAP_SERVERS is set), creates the topics,
    and runs the gatekeeper, a producer worker hosting the sample agents, and the HTTP
    service on AGUI_HTTP_HOST:AGUI_HTTP_PORT (127.0.0.1:8000).
    """
    try:
        bootstrap, broker = ensure_broker()
    except launcher.LauncherError as exc:
        console.print(f"[red]Kafka did not start:[/] {exc}")
        raise typer.Exit(1) from exc
    code = 0
    try:
        code = asyncio.run(supervise(bootstrap, agents))
    except KeyboardInterrupt:
        pass
    finally:
        if broker is not None:
            with console.status("Stopping Kafka..."):
                broker.stop()
            console.print("Kafka stopped")
    raise typer.Exit(code)
