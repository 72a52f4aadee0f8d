"""One broker's lifecycle: format and start it, wait until it serves, find and stop it.

``start`` is what the Makefile, the CLI and the test fixture call for the
single-node KRaft broker (``process.roles=broker,controller``): ports, then
configs, then storage format, then a detached JVM, then readiness. Ready
means the JVM is alive, the log shows ``Kafka Server started`` (searched only
in what this run wrote) and every listener answers a real Kafka request; if
the JVM exits or the budget runs out, ``BrokerError`` carries the log tail.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from deploy.kafka import jvm, processes
from deploy.kafka.config import Layout, choose_ports, cluster_id, render
from deploy.kafka.defaults import HOST, STARTED_MARKER
from deploy.kafka.errors import BrokerError, last_lines, say
from deploy.kafka.jars import jar_version, require_jars
from deploy.kafka.probe import answers
from deploy.kafka.records import Broker, forget, record, recorded
from deploy.kafka.tls import TlsConfig, accepts


def start(
    data_dir: Path,
    port: int | None = None,
    controller_port: int | None = None,
    *,
    sasl_port: int | None = None,
    scram_users: Mapping[str, str] | None = None,
    ssl_port: int | None = None,
    sasl_ssl_port: int | None = None,
    tls: TlsConfig | None = None,
    persistent: bool = False,
    ready_timeout: float = 60,
    features: Mapping[str, int] | None = None,
    lib: Path | None = None,
    quiet: bool = False,
) -> Broker:
    """Format (KRaft) and launch a detached single-node broker; return when it serves.

    ``port``/``controller_port`` default to random free ports; ``sasl_port`` adds a
    SASL_PLAINTEXT listener (0 = random port) whose PLAIN and SCRAM users are
    ``scram_users``. ``ssl_port`` / ``sasl_ssl_port`` add SSL / SASL_SSL listeners
    (0 = random port) with the key material in ``tls``; the SASL_SSL listener
    knows the same users. ``persistent`` keeps an already formatted ``data_dir``.
    ``features`` are ``--feature name=level`` pairs for the storage format.
    Raises BrokerError with the log tail when the JVM exits or never serves.
    """
    t0 = time.monotonic()
    classpath = require_jars(lib)
    layout = Layout(data_dir.resolve())
    refuse_if_running(layout.root)
    if tls is None and (ssl_port is not None or sasl_ssl_port is not None):
        raise BrokerError("an SSL or SASL_SSL listener needs tls=TlsConfig(keystore, password)")
    ports = choose_ports(port, controller_port, sasl_port, ssl_port, sasl_ssl_port)
    make_dirs(layout)
    users = dict(scram_users or {})
    render(layout, ports, users, tls)
    java = jvm.java()
    jvm.format_storage(java, classpath, layout, users, cluster=cluster_id(),
                       persistent=persistent, features=features or {})
    log_offset = log_size(layout)
    pid = jvm.launch(java, classpath, layout)
    broker = Broker(
        bootstrap=f"{HOST}:{ports['port']}",
        pid=pid,
        data_dir=layout.root,
        log_path=layout.server_log,
        sasl_bootstrap=f"{HOST}:{ports['sasl_port']}" if "sasl_port" in ports else None,
        version=jar_version(classpath),
        ports=ports,
        ssl_bootstrap=f"{HOST}:{ports['ssl_port']}" if "ssl_port" in ports else None,
        sasl_ssl_bootstrap=(
            f"{HOST}:{ports['sasl_ssl_port']}" if "sasl_ssl_port" in ports else None
        ),
    )
    record(broker)
    await_ready(broker, layout, log_offset, t0 + ready_timeout)
    broker.started_in = time.monotonic() - t0
    record(broker)
    say(
        quiet,
        f"Kafka {broker.version} ready on {broker.bootstrap} "
        f"(pid {pid}, started in {broker.started_in:.1f} s)",
    )
    return broker


def status(data_dir: Path, timeout: float = 2.0) -> Broker | None:
    """The broker recorded in ``data_dir`` if its process is alive and it answers."""
    broker = recorded(data_dir)
    if broker is None or not running(broker):
        return None
    return broker if answers(broker.bootstrap, timeout) else None


def stop_dir(data_dir: Path, timeout: float = 20) -> bool:
    """Stop the broker recorded in ``data_dir``; False if none was running."""
    broker = recorded(data_dir)
    if broker is None:
        return False
    was_running = running(broker)
    broker.stop(timeout)
    return was_running


def running(broker: Broker) -> bool:
    """True when the recorded pid is alive and still this directory's broker."""
    return processes.alive(broker.pid) and processes.is_broker_of(broker.pid, broker.data_dir)


def refuse_if_running(root: Path) -> None:
    """BrokerError when ``root`` records a broker that is still running."""
    found = recorded(root)
    if found is not None and running(found):
        raise BrokerError(f"a broker (pid {found.pid}) already runs in {root}")


def make_dirs(layout: Layout) -> None:
    """Create the broker's directory, its data and its temp dir."""
    for d in (layout.root, layout.logs, layout.tmp):
        d.mkdir(parents=True, exist_ok=True)


def log_size(layout: Layout) -> int:
    """Where this run's part of ``server.log`` will start."""
    return layout.server_log.stat().st_size if layout.server_log.exists() else 0


def await_ready(broker: Broker, layout: Layout, log_offset: int, deadline: float) -> None:
    """Wait for the started marker in the log AND a Kafka protocol round trip."""
    marker_seen = False
    while True:
        if not processes.alive(broker.pid):
            forget(layout.root)
            raise BrokerError(f"the broker JVM exited during startup:\n{log_tail(layout)}")
        marker_seen = marker_seen or log_has(layout.server_log, log_offset, STARTED_MARKER)
        if marker_seen and serves(broker):
            return
        if time.monotonic() > deadline:
            broker.stop(timeout=5)
            raise BrokerError(f"the broker did not become ready in time:\n{log_tail(layout)}")
        time.sleep(0.2)


def serves(broker: Broker) -> bool:
    """True when every listener of ``broker`` answers (Kafka requests, TLS connects)."""
    endpoints: Sequence[str | None] = (broker.bootstrap, broker.sasl_bootstrap)
    tls_endpoints = [ep for ep in (broker.ssl_bootstrap, broker.sasl_ssl_bootstrap) if ep]
    return (all(answers(ep, 1.0) for ep in endpoints if ep)
            and all(accepts(ep) for ep in tls_endpoints))


def log_has(path: Path, offset: int, marker: str) -> bool:
    """True when ``marker`` is in ``path`` past byte ``offset`` (this run's part of a log)."""
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return marker.encode() in fh.read()
    except OSError:
        return False


def log_tail(layout: Layout) -> str:
    """The last lines of the broker's logs, for an error message."""
    parts = []
    for path in (layout.server_log, layout.stdout_log):
        if path.exists():
            text = path.read_text(errors="replace")
            parts.append(f"--- last lines of {path} ---\n{last_lines(text)}")
    return "\n".join(parts) or "(no log written)"
