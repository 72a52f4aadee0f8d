"""Session fixtures: one real Apache Kafka broker for the whole test run.

The broker is chosen in this order (see shared design KAFKA.md):

1. ``KAFKA_BOOTSTRAP_SERVERS`` when set (an external broker; SASL only if
   ``KAFKA_SASL_BOOTSTRAP`` is set too, with ``KAFKA_SASL_USERNAME`` and
   ``KAFKA_SASL_PASSWORD``);
2. an ``apache/kafka`` container via testcontainers when a Docker daemon
   answers (skipped when ``AGUI_KAFKA_BROKER=local``);
3. the local JVM broker from ``deploy/kafka/launcher.py`` on random ports in a
   temp dir, with a SASL_PLAINTEXT listener and one SCRAM user.

Nothing here skips: if no broker can be had the tests fail and say how to
fetch the jars, because a suite that silently skips Kafka proves nothing.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis  # noqa: F401  (see below)
import pytest

# Imported here, not first by hypothesis's own terminal-summary hook: that
# import rewrites and compiles hypothesis's modules at the very end of a run,
# and on Python 3.11 a compile during which the collector finalizes an object
# that logs a traceback (whose caret positions are found with ast.parse)
# fails with "SystemError: AST constructor recursion depth mismatch"
# (cpython#106905): a passing run of integration tests alone then exits 1.

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # plain `pytest` without an installed package
    sys.path.insert(0, str(REPO_ROOT))

from deploy.kafka import launcher  # noqa: E402

DOCKER_IMAGE = "apache/kafka:4.4.0"  # the same line as the Maven-fetched broker and compose
SASL_USER = "agui"
SASL_PASSWORD = "agui-secret"
FETCH_HELP = (
    "No Kafka broker is available. Fetch the broker jars with "
    "`python -m deploy.kafka.launcher fetch` (needs Maven and JDK 17+), or point the "
    "tests at a broker with KAFKA_BOOTSTRAP_SERVERS=host:port."
)

MARKERS = {
    "unit": "pure logic, no I/O",
    "integration": "runs against a real Apache Kafka broker",
    "interop": "the reference client @ag-ui/client and ag-ui-validate against the running system",
    "faults": "kills, restarts and fuzzing with an independent checker",
}


SHARED_STACK_SUITES = ("browser", "cluster", "hostile", "interop", "unit/deploy")
"""Folders whose tests share one process-wide fixture (a stack, a cluster, a browser)
and may depend on each other's order (``hostile``'s ``test_afterwards`` stops its stack)."""


def pytest_configure(config: pytest.Config) -> None:
    for name, help_text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {help_text}")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test`` (``-n 2 --dist loadscope``): hand pytest-xdist's workers whole suites
    of ``SHARED_STACK_SUITES`` and, elsewhere, whole files (their module fixtures), each
    in collection order. Each worker's session fixture starts a local broker of its own
    (an external ``KAFKA_BOOTSTRAP_SERVERS`` is shared; every test has topics of its
    own either way). (``--dist loadgroup`` cannot do this on pytest 9: xdist marks
    a group in ``item._nodeid``, which pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # in collection order, not xdist's default of the scopes with the most tests first:
    # that put the single-test fault scenarios (minutes each) last, one worker idle
    # while the other ran them
    config.option.loadscopereorder = False

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            where = path.removeprefix("tests/")
            return next((s for s in SHARED_STACK_SUITES if where.startswith(s + "/")), path)

    return SuiteScheduling(config, log)


@dataclass(frozen=True)
class SaslEndpoint:
    """A SASL_PLAINTEXT listener and one user known to it (PLAIN and SCRAM)."""

    bootstrap: str
    username: str
    password: str


@dataclass(frozen=True)
class KafkaCluster:
    """What the session broker offers and where it came from."""

    bootstrap: str
    source: str  # "external" | "docker" | "local"
    sasl: SaslEndpoint | None = None
    broker: launcher.Broker | None = None


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """The session's Kafka broker (external, Docker or local JVM, in that order)."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        cluster = KafkaCluster(bootstrap=external, source="external", sasl=_external_sasl())
        _SWEEPER.bootstrap = external
        yield cluster
        _SWEEPER.sweep()  # a long-lived broker keeps nothing of the session's
    elif _docker_answers():
        for cluster in _docker_cluster():
            _SWEEPER.bootstrap = cluster.bootstrap
            yield cluster
    else:
        for cluster in _local_cluster(tmp_path_factory.mktemp("kafka")):
            _SWEEPER.bootstrap = cluster.bootstrap
            yield cluster


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_cluster: KafkaCluster) -> str:
    """``host:port`` of the session broker's PLAINTEXT listener."""
    return kafka_cluster.bootstrap


@pytest.fixture(scope="session")
def kafka_broker(kafka_cluster: KafkaCluster) -> launcher.Broker | None:
    """The launcher's Broker when the local JVM broker is used, else None."""
    return kafka_cluster.broker


@pytest.fixture(scope="session")
def kafka_sasl(kafka_cluster: KafkaCluster) -> SaslEndpoint:
    """The SASL_PLAINTEXT listener; fails (never skips) when the broker has none."""
    if kafka_cluster.sasl is None:
        pytest.fail(
            f"the {kafka_cluster.source} broker at {kafka_cluster.bootstrap} has no SASL "
            "listener: set KAFKA_SASL_BOOTSTRAP (+ KAFKA_SASL_USERNAME/KAFKA_SASL_PASSWORD) "
            "or run with AGUI_KAFKA_BROKER=local and without KAFKA_BOOTSTRAP_SERVERS"
        )
    return kafka_cluster.sasl


class TopicSweeper:
    """Deletes the topics of finished tests, every 25 tests' worth (about 900 partitions).

    Every test makes its own topics (``topic_prefix``), and each partition
    keeps a file open in the broker: a whole session made about 9,400
    partitions, half this machine's open-file limit, and runs against a
    long-lived broker (``KAFKA_BOOTSTRAP_SERVERS``) piled them up until the
    broker stopped.
    """

    EVERY = 25
    """Prefixes handed out before their topics are deleted (one listing, a few deletes);
    a test's topics come to about 37 partitions."""

    def __init__(self) -> None:
        self.bootstrap: str | None = None
        self.used: list[str] = []

    def sweep(self, *, at_least: int = 1) -> None:
        """Delete the topics of every prefix used so far, once there are ``at_least``."""
        if self.bootstrap is None or len(self.used) < at_least:
            return
        from services.kafka.admin import delete_prefixed_now
        from services.runtime.settings import KafkaSettings
        prefixes, self.used = tuple(self.used), []
        delete_prefixed_now(KafkaSettings(bootstrap_servers=self.bootstrap), prefixes)


_SWEEPER = TopicSweeper()


@pytest.fixture
def topic_prefix() -> str:
    """A unique topic/group name prefix per test, so tests never share state; its topics
    are deleted some time after the test (``TopicSweeper``)."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    _SWEEPER.used.append(prefix)
    return prefix


@pytest.fixture(autouse=True)
def _sweep_topics() -> Iterator[None]:
    """After the test (and every fixture of it) is done: delete earlier tests' topics."""
    yield
    _SWEEPER.sweep(at_least=TopicSweeper.EVERY)


@pytest.fixture
def delete_topics(kafka_bootstrap: str) -> Callable[..., Awaitable[None]]:
    """Delete topics by name, as an operator undeploying an agent would."""
    async def delete(*names: str) -> None:
        from services.kafka.clients import new_admin
        from services.runtime.settings import KafkaSettings
        admin = new_admin(KafkaSettings(bootstrap_servers=kafka_bootstrap), "test-deleter")
        await admin.start()
        try:
            await admin.delete_topics(list(names))
        finally:
            await admin.close()
    return delete


def _external_sasl() -> SaslEndpoint | None:
    bootstrap = os.environ.get("KAFKA_SASL_BOOTSTRAP")
    if not bootstrap:
        return None
    return SaslEndpoint(
        bootstrap=bootstrap,
        username=os.environ.get("KAFKA_SASL_USERNAME", SASL_USER),
        password=os.environ.get("KAFKA_SASL_PASSWORD", SASL_PASSWORD),
    )


def _local_cluster(data_dir: Path) -> Iterator[KafkaCluster]:
    try:
        launcher.fetch()
        broker = launcher.start(
            data_dir, sasl_port=0, scram_users={SASL_USER: SASL_PASSWORD}, ready_timeout=90
        )
    except launcher.LauncherError as exc:
        pytest.fail(f"{FETCH_HELP}\n{exc}", pytrace=False)
    assert broker.sasl_bootstrap is not None
    sasl = SaslEndpoint(broker.sasl_bootstrap, SASL_USER, SASL_PASSWORD)
    try:
        yield KafkaCluster(bootstrap=broker.bootstrap, source="local", sasl=sasl, broker=broker)
    finally:
        broker.stop()


def _docker_answers() -> bool:
    """True when a Docker daemon answers a ping within a few seconds."""
    if os.environ.get("AGUI_KAFKA_BROKER") == "local":
        return False
    if not os.environ.get("DOCKER_HOST") and not Path("/var/run/docker.sock").exists():
        return False
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # any failure means: no usable daemon
        return False


def _docker_cluster() -> Iterator[KafkaCluster]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    port = launcher.free_port()
    container: Any = DockerContainer(DOCKER_IMAGE)
    host = container.get_docker_client().host()
    env = {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:9092,CONTROLLER://localhost:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{host}:{port}",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        # as the launcher's broker: no controlled shutdown on one node (it drops
        # transaction markers; see deploy/kafka/server.properties.template)
        "KAFKA_CONTROLLED_SHUTDOWN_ENABLE": "false",
    }
    container.with_envs(**env).with_bind_ports(9092, port)
    container.waiting_for(LogMessageWaitStrategy(launcher.STARTED_MARKER))
    try:
        container.start()
    except Exception as exc:
        pytest.fail(f"Docker answered but {DOCKER_IMAGE} did not start: {exc}\n{FETCH_HELP}")
    try:
        yield KafkaCluster(bootstrap=f"{host}:{port}", source="docker", sasl=_external_sasl())
    finally:
        container.stop()
