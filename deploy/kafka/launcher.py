"""Fetch and run a real single-node Apache Kafka broker (KRaft) on 127.0.0.1.

Why this exists: the project's machines have no Docker and no packaged Kafka,
so the broker comes from Maven Central as jars (``deploy/kafka/pom.xml``) and
runs on the local JDK. The Makefile, the CLI and the pytest fixture all use
this one module. It imports only the standard library because it runs before
the virtualenv has any dependencies.

    python -m deploy.kafka.launcher fetch|up|down|status [--dir .run/kafka] [--port 9092]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import string
import struct
import subprocess
import sys
import threading
import time
import uuid
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from deploy.kafka.tls import TlsConfig, accepts

HOST = "127.0.0.1"
KAFKA_DIR = Path(__file__).resolve().parent
REPO_ROOT = KAFKA_DIR.parent.parent
POM = KAFKA_DIR / "pom.xml"
DEFAULT_LIB_DIR = KAFKA_DIR / ".cache" / "lib"
DEFAULT_RUN_DIR = REPO_ROOT / ".run" / "kafka"
DEFAULT_PORT = 9092
DEFAULT_CONTROLLER_PORT = 9093
STARTED_MARKER = "Kafka Server started"
JVM_FLAGS = (
    "-Xms256m",
    "-Xmx1g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-Djava.awt.headless=true",
)
BROKER_JSON = "broker.json"
BROKER_PID = "broker.pid"
TAIL_LINES = 40

# Popen handles of brokers started by this process, so they are reaped
# (a dead child would otherwise linger as a zombie and look alive).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class LauncherError(RuntimeError):
    """Base class for launcher failures; the message says what to do."""


class FetchError(LauncherError):
    """The broker jars could not be fetched or are incomplete."""


class BrokerError(LauncherError):
    """The broker could not be formatted, started or stopped."""


def lib_dir() -> Path:
    """The jar directory: env ``AGUI_KAFKA_LIB`` or ``deploy/kafka/.cache/lib``."""
    return Path(os.environ.get("AGUI_KAFKA_LIB") or DEFAULT_LIB_DIR)


LIB_DIR = lib_dir()


# --------------------------------------------------------------------------- fetch


def pom_kafka_version() -> str:
    """The Kafka version the POM asks for (``<kafka.version>``)."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    node = ET.parse(POM).getroot().find("m:properties/m:kafka.version", ns)
    if node is None or not node.text:
        raise FetchError(f"{POM} has no <kafka.version> property")
    return node.text.strip()


def kafka_jar(lib: Path) -> Path | None:
    """The ``kafka_2.13-<version>.jar`` in ``lib``, if exactly one is there."""
    jars = sorted(lib.glob("kafka_2.13-*.jar"))
    return jars[0] if len(jars) == 1 else None


def jar_version(lib: Path) -> str:
    """The Kafka version of the jars in ``lib`` (from the kafka_2.13 jar name)."""
    jar = kafka_jar(lib)
    if jar is None:
        raise FetchError(f"no single kafka_2.13 jar in {lib}; run: {_fetch_hint()}")
    return jar.stem.removeprefix("kafka_2.13-")


def check_jars(lib: Path, version: str | None = None) -> str | None:
    """Return why ``lib`` is not a usable broker classpath, or None if it is."""
    jar = kafka_jar(lib)
    if jar is None:
        return f"no single kafka_2.13-*.jar in {lib}"
    if version is not None and jar.stem != f"kafka_2.13-{version}":
        return f"{jar.name} in {lib} is not Kafka {version}"
    try:
        with zipfile.ZipFile(jar) as zf:
            names = set(zf.namelist())
    except (OSError, zipfile.BadZipFile) as exc:
        return f"{jar} is unreadable: {exc}"
    for cls in ("kafka/Kafka.class", "kafka/tools/StorageTool.class"):
        if cls not in names:
            return f"{jar.name} lacks {cls}"
    for prefix in ("kafka-clients-", "argparse4j-", "jopt-simple-", "log4j-slf4j-impl-"):
        if not any(lib.glob(f"{prefix}*.jar")):
            return f"{lib} lacks {prefix}*.jar"
    return None


def fetch(quiet: bool = False, *, lib: Path | None = None) -> Path:
    """Copy the broker jars from Maven Central into ``lib`` unless already there.

    Runs ``mvn dependency:copy-dependencies`` on ``deploy/kafka/pom.xml`` into a
    staging directory, checks it, then swaps it in. Returns the jar directory.
    """
    target = (lib or lib_dir()).resolve()
    version = pom_kafka_version()
    if check_jars(target, version) is None:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / ".fetch.lock"):
        if check_jars(target, version) is None:
            return target
        _fetch_locked(target, version, quiet)
    return target


def _fetch_locked(target: Path, version: str, quiet: bool) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FetchError("Maven (mvn) is not on PATH; install it (apt-get install maven)")
    staging = target.with_name(f"{target.name}.staging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    _say(quiet, f"Fetching Apache Kafka {version} jars from Maven Central into {target} ...")
    t0 = time.monotonic()
    cmd = [
        mvn,
        "-B",
        "-q",
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    problem = check_jars(staging, version) if done.returncode == 0 else "mvn failed"
    if problem is not None:
        shutil.rmtree(staging, ignore_errors=True)
        raise FetchError(f"{problem}\n$ {' '.join(cmd)}\n{_last_lines(done.stdout + done.stderr)}")
    _swap_in(staging, target)
    jars = list(target.glob("*.jar"))
    size_mb = sum(j.stat().st_size for j in jars) / 1e6
    _say(quiet, f"Fetched {len(jars)} jars ({size_mb:.0f} MB) in {time.monotonic() - t0:.1f} s")


def _swap_in(staging: Path, target: Path) -> None:
    """Replace ``target`` by ``staging``; an old dir is removed only if it holds just jars."""
    if target.exists():
        if any(p.suffix != ".jar" for p in target.iterdir()):
            shutil.rmtree(staging, ignore_errors=True)
            raise FetchError(f"{target} has no usable Kafka jars but holds other files; empty it")
        shutil.rmtree(target)
    staging.rename(target)


def _fetch_hint() -> str:
    return "python -m deploy.kafka.launcher fetch  (or: make kafka-fetch)"


# --------------------------------------------------------------------------- protocol


def api_versions(host: str, port: int, timeout: float = 2.0) -> dict[int, tuple[int, int]]:
    """One Kafka ApiVersions v0 round trip; returns {api_key: (min, max)}.

    Raises OSError when nothing answers, ValueError on a malformed or error reply.
    """
    client_id = b"agui-relay-launcher"
    correlation = random.randrange(1, 2**31)
    request = struct.pack(">hhih", 18, 0, correlation, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(request)) + request)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        body = _recv_exact(sock, size)
    got, error, count = struct.unpack_from(">ihi", body)
    if got != correlation or error != 0 or len(body) < 10 + 6 * count:
        raise ValueError(f"bad ApiVersions reply (correlation {got}, error {error})")
    return {key: (lo, hi) for key, lo, hi in struct.iter_unpack(">hhh", body[10 : 10 + 6 * count])}


def answers(bootstrap: str, timeout: float = 2.0) -> bool:
    """True when ``host:port`` speaks the Kafka protocol (and serves Metadata)."""
    host, _, port = bootstrap.rpartition(":")
    try:
        return 3 in api_versions(host, int(port), timeout)
    except (OSError, ValueError, struct.error):
        return False


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-reply")
        buf += chunk
    return bytes(buf)


# --------------------------------------------------------------------------- processes


def free_port(host: str = HOST) -> int:
    """A TCP port on ``host`` that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_free(port: int, host: str = HOST) -> bool:
    """True when the broker could bind ``port`` now.

    SO_REUSEADDR, as the JVM binds Kafka's listeners: connections a stopped
    broker leaves in TIME_WAIT on its port (for a minute) do not make it busy,
    while a process listening on it still does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "Z"


def _is_broker_of(pid: int, data_dir: Path) -> bool:
    """Guard against a recycled pid: the process must be kafka.Kafka for this dir."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not Path("/proc/self/cmdline").exists():
        return _alive(pid)  # no procfs (macOS): trust the pid file
    try:
        args = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return b"kafka.Kafka" in args and str(data_dir / "server.properties").encode() in args


def _wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    _CHILDREN.pop(pid, None)
    return True


def _terminate(pid: int, timeout: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; signals this one pid only."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _wait_exit(pid, timeout):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not _wait_exit(pid, 10):
        raise BrokerError(f"broker pid {pid} survived SIGKILL")


# --------------------------------------------------------------------------- broker


@dataclass
class Broker:
    """A running broker started by :func:`start` (or found by :func:`status`)."""

    bootstrap: str
    pid: int
    data_dir: Path
    log_path: Path
    sasl_bootstrap: str | None = None
    version: str = ""
    started_in: float = 0.0
    ports: dict[str, int] = field(default_factory=dict)
    ssl_bootstrap: str | None = None
    sasl_ssl_bootstrap: str | None = None

    def alive(self) -> bool:
        """True while the broker process exists."""
        return _alive(self.pid)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM the broker (SIGKILL after ``timeout`` s), wait, forget its records."""
        if _alive(self.pid) and _is_broker_of(self.pid, self.data_dir):
            _terminate(self.pid, timeout)
        _CHILDREN.pop(self.pid, None)
        _forget(self.data_dir)

    def to_json(self) -> dict[str, Any]:
        return {
            "bootstrap": self.bootstrap,
            "sasl_bootstrap": self.sasl_bootstrap,
            "pid": self.pid,
            "data_dir": str(self.data_dir),
            "log_path": str(self.log_path),
            "version": self.version,
            "started_in": round(self.started_in, 2),
            "ports": self.ports,
            "ssl_bootstrap": self.ssl_bootstrap,
            "sasl_ssl_bootstrap": self.sasl_ssl_bootstrap,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Broker:
        return cls(
            bootstrap=str(raw["bootstrap"]),
            pid=int(raw["pid"]),
            data_dir=Path(raw["data_dir"]),
            log_path=Path(raw["log_path"]),
            sasl_bootstrap=raw.get("sasl_bootstrap"),
            version=str(raw.get("version", "")),
            started_in=float(raw.get("started_in", 0.0)),
            ports={str(k): int(v) for k, v in dict(raw.get("ports", {})).items()},
            ssl_bootstrap=raw.get("ssl_bootstrap"),
            sasl_ssl_bootstrap=raw.get("sasl_ssl_bootstrap"),
        )


@dataclass(frozen=True)
class _Layout:
    """Where a broker keeps its files inside ``data_dir``."""

    root: Path

    @property
    def props(self) -> Path:
        return self.root / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.root / "log4j2.properties"

    @property
    def logs(self) -> Path:
        return self.root / "data"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def server_log(self) -> Path:
        return self.root / "server.log"

    @property
    def stdout_log(self) -> Path:
        return self.root / "stdout.log"


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
    classpath = _require_jars(lib)
    layout = _Layout(data_dir.resolve())
    _refuse_if_running(layout.root)
    if tls is None and (ssl_port is not None or sasl_ssl_port is not None):
        raise BrokerError("an SSL or SASL_SSL listener needs tls=TlsConfig(keystore, password)")
    ports = _choose_ports(port, controller_port, sasl_port, ssl_port, sasl_ssl_port)
    for d in (layout.root, layout.logs, layout.tmp):
        d.mkdir(parents=True, exist_ok=True)
    users = dict(scram_users or {})
    _render(layout, ports, users, tls)
    java = _java()
    _format(java, classpath, layout, users, persistent=persistent, features=features or {})
    log_offset = layout.server_log.stat().st_size if layout.server_log.exists() else 0
    pid = _launch(java, classpath, layout)
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
    _record(broker)
    _await_ready(broker, layout, log_offset, t0 + ready_timeout)
    broker.started_in = time.monotonic() - t0
    _record(broker)
    _say(
        quiet,
        f"Kafka {broker.version} ready on {broker.bootstrap} "
        f"(pid {pid}, started in {broker.started_in:.1f} s)",
    )
    return broker


def status(data_dir: Path, timeout: float = 2.0) -> Broker | None:
    """The broker recorded in ``data_dir`` if its process is alive and it answers."""
    broker = _recorded(data_dir)
    if broker is None or not _alive(broker.pid) or not _is_broker_of(broker.pid, broker.data_dir):
        return None
    return broker if answers(broker.bootstrap, timeout) else None


def stop_dir(data_dir: Path, timeout: float = 20) -> bool:
    """Stop the broker recorded in ``data_dir``; False if none was running."""
    broker = _recorded(data_dir)
    if broker is None:
        return False
    running = _alive(broker.pid) and _is_broker_of(broker.pid, broker.data_dir)
    broker.stop(timeout)
    return running


def _require_jars(lib: Path | None) -> Path:
    classpath = (lib or lib_dir()).resolve()
    problem = check_jars(classpath)
    if problem is not None:
        raise FetchError(f"{problem}; fetch the broker jars first: {_fetch_hint()}")
    return classpath


def _refuse_if_running(root: Path) -> None:
    running = _recorded(root)
    if running is not None and _alive(running.pid) and _is_broker_of(running.pid, root):
        raise BrokerError(f"a broker (pid {running.pid}) already runs in {root}")


def _choose_ports(
    port: int | None,
    controller: int | None,
    sasl: int | None,
    ssl: int | None = None,
    sasl_ssl: int | None = None,
) -> dict[str, int]:
    wanted = {"port": port, "controller_port": controller}
    for name, optional in (("sasl_port", sasl), ("ssl_port", ssl), ("sasl_ssl_port", sasl_ssl)):
        if optional is not None:
            wanted[name] = optional or None
    chosen: dict[str, int] = {}
    for name, value in wanted.items():
        if value is not None and not _port_free(value):
            raise BrokerError(f"{HOST}:{value} ({name}) is already in use")
        while value is None or value in chosen.values():
            value = free_port()
        chosen[name] = value
    return chosen


def _render(
    layout: _Layout,
    ports: Mapping[str, int],
    users: Mapping[str, str],
    tls: TlsConfig | None = None,
) -> None:
    listeners = [f"PLAINTEXT://{HOST}:{ports['port']}"]
    protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
    security_section = ""
    plain = "".join(f' user_{name}="{_jaas_quote(pw)}"' for name, pw in users.items())
    for protocol, key in (("SASL_PLAINTEXT", "sasl_port"), ("SSL", "ssl_port"),
                          ("SASL_SSL", "sasl_ssl_port")):
        if key not in ports:
            continue
        listeners.append(f"{protocol}://{HOST}:{ports[key]}")
        protocols.append(f"{protocol}:{protocol}")
        if protocol.startswith("SASL_"):
            security_section += _template("sasl.properties.template").substitute(
                listener=protocol.lower(), plain_users=plain
            )
        if protocol.endswith("SSL") and tls is not None:
            security_section += tls.properties(protocol)
    advertised = ",".join(listeners)
    props = _template("server.properties.template").substitute(
        controller_port=ports["controller_port"],
        listeners=",".join([*listeners, f"CONTROLLER://{HOST}:{ports['controller_port']}"]),
        advertised_listeners=advertised,
        protocol_map=",".join(protocols),
        log_dirs=layout.logs,
        sasl_section=security_section,
    )
    layout.props.write_text(props)
    log4j = _template("log4j2.properties.template").substitute(log_path=layout.server_log)
    layout.log4j.write_text(log4j)


def _template(name: str) -> string.Template:
    return string.Template((KAFKA_DIR / name).read_text())


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _cluster_id() -> str:
    """16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise BrokerError(
            "java is not on PATH; Kafka 4 needs a JDK 17+ (apt-get install openjdk-17-jdk)"
        )
    return found


def _jvm(java: str, classpath: Path, layout: _Layout, main: str) -> list[str]:
    return [
        java,
        *JVM_FLAGS,
        f"-Dlog4j2.configurationFile={layout.log4j}",
        f"-Djava.io.tmpdir={layout.tmp}",
        "-cp",
        f"{classpath}/*",
        main,
    ]


def _format(
    java: str,
    classpath: Path,
    layout: _Layout,
    users: Mapping[str, str],
    *,
    persistent: bool,
    features: Mapping[str, int],
) -> None:
    if persistent and (layout.logs / "meta.properties").exists():
        return  # already formatted; -g would still insist on the same cluster id
    cmd = _jvm(java, classpath, layout, "kafka.tools.StorageTool")
    cmd += ["format", "-t", _cluster_id(), "-c", str(layout.props)]
    if persistent:
        cmd.append("-g")
    for name, password in users.items():
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            cmd += ["--add-scram", f"{mech}=[name={name},password={password}]"]
    for feature, level in features.items():
        cmd += ["--feature", f"{feature}={level}"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    (layout.root / "format.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise BrokerError(
            f"formatting {layout.logs} failed (exit {done.returncode}):\n"
            f"{_last_lines(done.stdout + done.stderr)}"
        )


def _launch(java: str, classpath: Path, layout: _Layout) -> int:
    cmd = [*_jvm(java, classpath, layout, "kafka.Kafka"), str(layout.props)]
    with layout.stdout_log.open("ab") as out:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=layout.root,
            start_new_session=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc.pid


def _await_ready(broker: Broker, layout: _Layout, log_offset: int, deadline: float) -> None:
    """Wait for the started marker in the log AND a Kafka protocol round trip."""
    marker_seen = False
    while True:
        if not _alive(broker.pid):
            _forget(layout.root)
            raise BrokerError(f"the broker JVM exited during startup:\n{_log_tail(layout)}")
        marker_seen = marker_seen or _log_has(layout.server_log, log_offset, STARTED_MARKER)
        endpoints = [broker.bootstrap] + ([broker.sasl_bootstrap] if broker.sasl_bootstrap else [])
        tls_endpoints = [ep for ep in (broker.ssl_bootstrap, broker.sasl_ssl_bootstrap) if ep]
        if (marker_seen and all(answers(ep, 1.0) for ep in endpoints)
                and all(accepts(ep) for ep in tls_endpoints)):
            return
        if time.monotonic() > deadline:
            broker.stop(timeout=5)
            raise BrokerError(f"the broker did not become ready in time:\n{_log_tail(layout)}")
        time.sleep(0.2)


def _log_has(path: Path, offset: int, marker: str) -> bool:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return marker.encode() in fh.read()
    except OSError:
        return False


def _log_tail(layout: _Layout) -> str:
    parts = []
    for path in (layout.server_log, layout.stdout_log):
        if path.exists():
            text = path.read_text(errors="replace")
            parts.append(f"--- last lines of {path} ---\n{_last_lines(text)}")
    return "\n".join(parts) or "(no log written)"


def _last_lines(text: str, n: int = TAIL_LINES) -> str:
    return "\n".join(text.splitlines()[-n:])


def _record(broker: Broker) -> None:
    (broker.data_dir / BROKER_PID).write_text(f"{broker.pid}\n")
    tmp = broker.data_dir / f"{BROKER_JSON}.tmp"
    tmp.write_text(json.dumps(broker.to_json(), indent=2) + "\n")
    tmp.replace(broker.data_dir / BROKER_JSON)


def _recorded(data_dir: Path) -> Broker | None:
    try:
        raw = json.loads((data_dir.resolve() / BROKER_JSON).read_text())
        return Broker.from_json(raw)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _forget(data_dir: Path) -> None:
    for name in (BROKER_JSON, BROKER_PID):
        (data_dir / name).unlink(missing_ok=True)


# --------------------------------------------------------------------------- helpers


def _say(quiet: bool, message: str) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[IO[str]]:
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield fh
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- CLI

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_NOT_RUNNING = 3  # LSB "program is not running"


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_RUN_DIR,
        help="broker data directory (default: .run/kafka)",
    )
    parser = argparse.ArgumentParser(
        prog="python -m deploy.kafka.launcher",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="copy the Kafka jars from Maven Central (if missing)")
    up = sub.add_parser("up", parents=[common], help="start the dev broker (idempotent)")
    up.add_argument("--port", type=int, default=DEFAULT_PORT)
    up.add_argument("--controller-port", type=int, default=DEFAULT_CONTROLLER_PORT)
    up.add_argument("--timeout", type=float, default=60.0, help="readiness budget in seconds")
    up.add_argument(
        "--foreground", action="store_true", help="stay attached; stop the broker on SIGINT/SIGTERM"
    )
    sub.add_parser("down", parents=[common], help="stop the dev broker")
    sub.add_parser("status", parents=[common], help="exit 0 running, 1 stale, 3 stopped")
    return parser


def _cmd_fetch(_: argparse.Namespace) -> int:
    lib = fetch()
    print(f"Kafka {jar_version(lib)} jars in {lib}")
    return EXIT_OK


def _cmd_up(args: argparse.Namespace) -> int:
    data_dir: Path = args.dir.resolve()
    running = status(data_dir)
    if running is not None:
        print(
            f"Kafka {running.version} already running on {running.bootstrap} "
            f"(pid {running.pid}, dir {data_dir})"
        )
        if args.foreground:
            print(
                "--foreground needs a broker it started itself; run `down` first", file=sys.stderr
            )
            return EXIT_FAIL
        return EXIT_OK
    fetch()
    broker = start(
        data_dir,
        args.port,
        args.controller_port,
        persistent=True,
        ready_timeout=args.timeout,
        quiet=True,
    )
    print(
        f"Kafka {broker.version} ready on {broker.bootstrap} "
        f"(pid {broker.pid}, started in {broker.started_in:.1f} s)",
        flush=True,
    )
    return _foreground(broker) if args.foreground else EXIT_OK


def _foreground(broker: Broker) -> int:
    stop_requested = threading.Event()

    def _handler(signum: int, _frame: object) -> None:
        stop_requested.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _handler)
    while not stop_requested.wait(0.5):
        if not broker.alive():
            print(f"Kafka broker pid {broker.pid} exited; see {broker.log_path}", file=sys.stderr)
            _forget(broker.data_dir)
            return EXIT_FAIL
    broker.stop()
    print("Kafka stopped")
    return EXIT_OK


def _cmd_down(args: argparse.Namespace) -> int:
    data_dir: Path = args.dir.resolve()
    print("Kafka stopped" if stop_dir(data_dir) else f"Kafka was not running ({data_dir})")
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    data_dir: Path = args.dir.resolve()
    running = status(data_dir)
    if running is not None:
        print(
            f"Kafka {running.version} running on {running.bootstrap} "
            f"(pid {running.pid}, dir {data_dir})"
        )
        return EXIT_OK
    recorded = _recorded(data_dir)
    if recorded is not None and _alive(recorded.pid):
        print(f"Kafka pid {recorded.pid} is alive but does not answer on {recorded.bootstrap}")
        return EXIT_FAIL
    print(f"Kafka is not running ({data_dir})")
    return EXIT_NOT_RUNNING


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the process exit code."""
    args = _parser().parse_args(argv)
    commands = {"fetch": _cmd_fetch, "up": _cmd_up, "down": _cmd_down, "status": _cmd_status}
    try:
        return commands[args.command](args)
    except LauncherError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
