"""``agui-relay up``: the whole system in the foreground, for development and demos.

Starts (or reuses) the local broker when ``KAFKA_BOOTSTRAP_SERVERS`` is unset,
creates the topics, then runs the gatekeeper, one producer worker hosting the
sample agents, and the consumer service as child processes. Each child's log
lines are shown prefixed with its name and kept in ``.run/logs/<service>.log``
(``AGUI_UP_LOG_DIR`` to put them elsewhere), whatever their length
(``childlog``). Ctrl-C or SIGTERM stops the children (SIGTERM, then SIGKILL
once ``GRACE_S`` has passed for all of them, or at once on a second signal)
and the broker if this command started it. With ``AGUI_UP_HEALTH_PORT_BASE``
set, the gatekeeper serves ``/healthz``, ``/readyz`` and ``/metrics`` on that
port, the producer on the next one and the notifier on the one after. With
``AGUI_WEBHOOK_URL`` set, the webhook notifier runs too.
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
from rich.markup import escape
from rich.text import Text

from deploy.kafka import launcher
from services.cli import childlog
from services.cli.settings_read import setting, with_settings
from services.consumer.settings import ConsumerSettings
from services.gatekeeper.settings import GatekeeperSettings
from services.kafka.admin import ensure_topics
from services.notifier.settings import NotifierSettings
from services.producer.settings import ProducerSettings
from services.runtime.logging import LogSettings
from services.runtime.settings import ConfigurationError, KafkaSettings, LimitSettings

console = Console(stderr=True, highlight=False)
LOG_DIR = launcher.REPO_ROOT / ".run" / "logs"
SAMPLE_AGENTS = (
    "approval=services.producer.agents.approval:agent,"
    "scripted=services.producer.agents.scripted:agent,"
    "planner=services.producer.agents.planner:agent,"
    "pipeline_parent=services.producer.agents.pipeline_parent:agent,"
    "pipeline_child=services.producer.agents.pipeline_child:agent"
)
DEFAULT_STATE_DIR = ".run/state"
"""Where ``up`` has the gatekeeper keep its thread stores unless ``AGUI_STATE_DIR`` says."""

COLOURS = {"gatekeeper": "magenta", "producer": "cyan", "consumer": "green",
           "notifier": "yellow"}
GRACE_S = 15.0
WEBHOOK = "AGUI_WEBHOOK_URL"
"""Set, in any case, the webhook notifier runs too."""


@dataclass
class Child:
    """One service process and where its output goes."""

    name: str
    process: asyncio.subprocess.Process
    log: Path


def agent_names(agents: str) -> tuple[str, ...]:
    """The names in an ``AGUI_AGENTS`` string (``name=module:object,...``)."""
    return tuple(part.split("=", 1)[0].strip() for part in agents.split(",") if part.strip())


def check_settings(agents: str) -> None:
    """Read every child's settings here first: a variable one of them would refuse stops
    ``up`` before the broker starts (``settings_errors`` reports it), not one child later."""
    KafkaSettings()
    LimitSettings()
    GatekeeperSettings()
    ProducerSettings(agents=agents)
    ConsumerSettings()
    LogSettings()
    if setting(NotifierSettings, WEBHOOK):
        NotifierSettings()
    health_ports()


def ensure_broker() -> tuple[str, launcher.Broker | None]:
    """The bootstrap to use, and the broker this command started (if any)."""
    given = setting(KafkaSettings, "KAFKA_BOOTSTRAP_SERVERS")
    if given:
        console.print(f"[bold]Kafka[/]: using KAFKA_BOOTSTRAP_SERVERS={escape(given)}")
        return given, None
    cluster = launcher.recorded_cluster(launcher.DEFAULT_RUN_DIR)
    if cluster is not None and any(node.alive() for node in cluster.nodes):
        console.print(f"[bold]Kafka[/]: using the local {len(cluster.nodes)}-node cluster on "
                      f"{escape(cluster.bootstrap)}")
        return cluster.bootstrap, None
    running = launcher.status(launcher.DEFAULT_RUN_DIR)
    if running is not None:
        console.print(f"[bold]Kafka[/]: reusing the local broker on {escape(running.bootstrap)}")
        return running.bootstrap, None
    with console.status("Fetching the Kafka jars from Maven Central (first run only)..."):
        launcher.fetch(quiet=True)
    with console.status("Starting Apache Kafka on 127.0.0.1:9092..."):
        broker = launcher.start(launcher.DEFAULT_RUN_DIR, launcher.DEFAULT_PORT,
                                launcher.DEFAULT_CONTROLLER_PORT, persistent=True, quiet=True)
    console.print(f"[bold]Kafka[/] {escape(broker.version)} ready on {escape(broker.bootstrap)} "
                  f"in {broker.started_in:.1f} s (pid {broker.pid})")
    return broker.bootstrap, broker


def log_dir() -> Path:
    """Where the children's log files go (``AGUI_UP_LOG_DIR``, else ``.run/logs``)."""
    given = os.environ.get("AGUI_UP_LOG_DIR")
    return Path(given) if given else LOG_DIR


def health_ports() -> dict[str, str]:
    """Each service's ``AGUI_HEALTH_PORT`` under ``AGUI_UP_HEALTH_PORT_BASE`` (else none);
    ``ConfigurationError`` for a base that is not a port with two more above it (``abc``
    had been ignored, and no service had health ports)."""
    base = os.environ.get("AGUI_UP_HEALTH_PORT_BASE", "").strip()
    if not base:
        return {}
    if not (base.isascii() and base.isdigit() and 1 <= int(base) <= 65_533):
        raise ConfigurationError(f"AGUI_UP_HEALTH_PORT_BASE={base[:20]!r} is not a port "
                                 "from 1 to 65533 (it and the two above it are used)")
    return {"gatekeeper": base, "producer": str(int(base) + 1),
            "notifier": str(int(base) + 2)}


async def spawn(name: str, module: str, env: dict[str, str]) -> Child:
    """Start ``python -m module`` with its output piped to us."""
    directory = log_dir()
    directory.mkdir(parents=True, exist_ok=True)
    port = health_ports().get(name)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, env={**env, "AGUI_HEALTH_PORT": port} if port else env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    return Child(name, process, directory / f"{name}.log")


async def relay_output(child: Child) -> None:
    """Copy a child's output to its log file and, line by line and prefixed, to the terminal."""
    assert child.process.stdout is not None
    prefix = Text(f"{child.name:>10}", style=COLOURS.get(child.name, "white"))

    def show(text: str) -> None:
        console.print(Text.assemble(prefix, " | ", text), soft_wrap=True, emoji=False,
                      markup=False, highlight=False)

    await childlog.relay(child.process.stdout, child.log, show)


async def wait_ready(url: str, children: list[Child], stop: asyncio.Event,
                     within_s: float = 60.0) -> bool:
    """Poll the consumer service's /readyz until it answers 200, a child dies or we stop."""
    deadline = time.monotonic() + within_s
    async with httpx.AsyncClient(timeout=2.0) as client:
        while time.monotonic() < deadline and not stop.is_set():
            if any(c.process.returncode is not None for c in children):
                return False
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{url}/readyz")).status_code == 200:
                    return True
            await asyncio.sleep(0.5)
    return False


async def stop_children(children: list[Child], hurry: asyncio.Event | None = None,
                        grace_s: float = GRACE_S) -> None:
    """SIGTERM every child; SIGKILL whoever outlives ``grace_s`` (all children together), or
    everyone left at once when ``hurry`` is set (a second Ctrl-C)."""
    for child in children:
        if child.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(signal.SIGTERM)
    waits = [asyncio.ensure_future(c.process.wait()) for c in children]
    hurried = asyncio.ensure_future((hurry or asyncio.Event()).wait())
    deadline = time.monotonic() + grace_s
    while not hurried.done() and (left := [w for w in waits if not w.done()]):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        await asyncio.wait([*left, hurried], timeout=remaining,
                           return_when=asyncio.FIRST_COMPLETED)
    hurried.cancel()
    for child in children:
        if child.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                child.process.kill()
    await asyncio.gather(*waits)


def children_settings(bootstrap: str, agents: str) -> dict[str, str]:
    """What ``up`` sets for its children: the broker and agents it uses, and the user's
    log format, state directory and gatekeeper identity (read as the services read them,
    in any case) or ``up``'s own defaults."""
    return {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "AGUI_AGENTS": agents,
            "AGUI_LOG_FORMAT": setting(LogSettings, "AGUI_LOG_FORMAT") or "text",
            "AGUI_STATE_DIR": setting(GatekeeperSettings, "AGUI_STATE_DIR") or DEFAULT_STATE_DIR,
            # the one gatekeeper's static identity: restarted, it takes its partitions back
            # at once instead of after the session of the process it replaces
            "AGUI_GATEKEEPER_INSTANCE_ID": setting(GatekeeperSettings,
                                                   "AGUI_GATEKEEPER_INSTANCE_ID") or "gatekeeper-0",
            "PYTHONUNBUFFERED": "1"}


def services() -> list[tuple[str, str]]:
    """The services ``up`` runs, by name and module: the notifier too when a webhook URL
    is set (in any case, as the notifier reads it)."""
    started = [("gatekeeper", "services.gatekeeper"), ("producer", "services.producer"),
               ("consumer", "services.consumer")]
    if setting(NotifierSettings, WEBHOOK):
        started.append(("notifier", "services.notifier"))
    return started


def chosen_agents(given: str | None) -> str:
    """``--agents``, else ``AGUI_AGENTS`` (in any case, as the workers read it), else the
    sample agents."""
    return given or setting(ProducerSettings, "AGUI_AGENTS") or SAMPLE_AGENTS


async def supervise(bootstrap: str, agents: str) -> int:
    """Create topics, run the three services, stop them on a signal or a crash."""
    settings = KafkaSettings(bootstrap_servers=bootstrap)
    with console.status("Creating topics..."):
        reports = await ensure_topics(settings, agent_names(agents))
    created = sum(r.created for r in reports)
    console.print(f"[bold]Topics[/]: {created} created, {len(reports) - created} found "
                  f"under prefix '{settings.topic_prefix}'")
    env = with_settings(os.environ, children_settings(bootstrap, agents))
    stop, hurry = asyncio.Event(), asyncio.Event()

    def signalled() -> None:
        if stop.is_set():
            say("[yellow]Second signal: killing the services[/]")
            hurry.set()
        stop.set()

    # before the first child: a signal while they start must stop those already started
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, signalled)
    children: list[Child] = []
    relays: list[asyncio.Task[None]] = []
    crashed: list[str] = []
    try:  # whatever ends this (a terminal gone, a cancel), the children are stopped
        for name, module in services():
            if stop.is_set():
                break
            children.append(await spawn(name, module, env))
        relays = [asyncio.create_task(relay_output(c)) for c in children]
        http = ConsumerSettings()
        url = f"http://{http.http_host}:{http.http_port}"
        if not stop.is_set() and await wait_ready(url, children, stop):
            say(f"\n[bold green]agui-relay is up[/]: {url}  (agents: "
                f"{', '.join(agent_names(agents))}; logs in {log_dir()}; Ctrl-C stops)\n")
        exits = [asyncio.create_task(c.process.wait()) for c in children]
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait([stopper, *exits], return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        crashed = [c.name for c in children if c.process.returncode is not None]
        if crashed:
            say(f"[red]{', '.join(crashed)} exited; stopping the rest[/]")
    finally:
        say("Stopping services...")
        await stop_children(children, hurry)
        await asyncio.gather(*relays, return_exceptions=True)
    return 1 if crashed and not stop.is_set() else 0


def say(message: str) -> None:
    """Print to the terminal, if there still is one: a reader gone (``up | tee`` and
    Ctrl-C) or a full disk under a redirected output must not end ``up`` before it has
    stopped its services (it did, and they ran on without it)."""
    with contextlib.suppress(OSError, SystemExit):  # rich: a broken pipe is SystemExit
        console.print(message)


def up(
    agents: str | None = typer.Option(
        None, help="Agents to host: name=module:object, comma separated (default: "
        "AGUI_AGENTS, else the sample agents)."),
) -> None:
    """Run the whole system in the foreground until Ctrl-C.

    Starts the local broker (unless KAFKA_BOOTSTRAP_SERVERS is set) and creates the topics.
    Runs the gatekeeper, a producer worker hosting the sample agents and the HTTP service.
    The HTTP service listens on AGUI_HTTP_HOST:AGUI_HTTP_PORT (127.0.0.1:8000).
    """
    agents = chosen_agents(agents)
    check_settings(agents)
    try:
        bootstrap, broker = ensure_broker()
    except launcher.LauncherError as exc:
        console.print(f"[red]Kafka did not start:[/] {escape(str(exc))}")
        raise typer.Exit(1) from exc
    code = 0
    try:
        code = asyncio.run(supervise(bootstrap, agents))
    except KeyboardInterrupt:
        pass
    finally:
        if broker is not None:
            say("Stopping Kafka...")
            broker.stop()
            say("Kafka stopped")
    raise typer.Exit(code)
