"""A Kafka setting no client can use is refused at start: exit 2, the variable named.

README, Configuration: "A value a service cannot use stops it at start with exit
status 2 and one line per variable naming it and what is wrong". These values
passed the settings classes and then failed deep inside aiokafka or ``ssl`` at the
first client built: a page of rich traceback, exit status 1, and a last line that
named neither the variable nor the value (``invalid literal for int() with base
10``, ``[Errno 2] No such file or directory``; found by probing). No broker is
needed: each is refused before any connection.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.cli.settings_errors import USAGE_ERROR

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
NOT_PEM = Path(__file__)
"""A readable file that holds no certificate or key."""


def run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))}
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False,
                          env={**clean, "COLUMNS": "200", "AGUI_TOPIC_PREFIX": "refused-kafka",
                               **env})


NOT_A_PORT = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:notaport"}
SSL = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "KAFKA_SECURITY_PROTOCOL": "SSL"}
MISSING_CA = {**SSL, "KAFKA_SSL_CAFILE": "/nonexistent/ca.pem"}
CLI = ["-m", "services.cli.main"]


@pytest.mark.parametrize(("args", "env", "named"), [
    ([*CLI, "threads"], NOT_A_PORT, "KAFKA_BOOTSTRAP_SERVERS"),
    ([*CLI, "tail", "--exit"], NOT_A_PORT, "KAFKA_BOOTSTRAP_SERVERS"),
    ([*CLI, "topics", "create"], NOT_A_PORT, "KAFKA_BOOTSTRAP_SERVERS"),
    (["-m", "services.gatekeeper"], NOT_A_PORT, "KAFKA_BOOTSTRAP_SERVERS"),
    (["-m", "services.producer"], NOT_A_PORT, "KAFKA_BOOTSTRAP_SERVERS"),
    (["-m", "services.consumer"], {"KAFKA_BOOTSTRAP_SERVERS": "b1:9092,b2:65536"},
     "KAFKA_BOOTSTRAP_SERVERS: Value error, entry 2 of 2: the port is not a number"),
    ([*CLI, "threads"], MISSING_CA, "KAFKA_SSL_CAFILE: /nonexistent/ca.pem cannot be read"),
    (["-m", "services.gatekeeper"], MISSING_CA, "KAFKA_SSL_CAFILE"),
    (["-m", "services.consumer"], {**SSL, "KAFKA_SSL_CAFILE": str(NOT_PEM)},
     "KAFKA_SSL_CAFILE"),
    ([*CLI, "lag"], {**SSL, "KAFKA_SSL_CERTFILE": str(NOT_PEM)}, "KAFKA_SSL_CERTFILE"),
    ([*CLI, "lag"], {**SSL, "KAFKA_SSL_CERTFILE": str(NOT_PEM),
                     "KAFKA_SSL_KEYFILE": "/nonexistent/client.key"}, "KAFKA_SSL_KEYFILE"),
], ids=["threads-port", "tail-port", "topics-port", "gatekeeper-port", "producer-port",
        "consumer-port-range", "threads-cafile", "gatekeeper-cafile", "consumer-cafile-not-pem",
        "lag-certfile-not-pem", "lag-keyfile-missing"])
def test_an_unusable_kafka_setting_is_named_with_exit_2_not_a_traceback(
        args: list[str], env: dict[str, str], named: str) -> None:
    done = run(args, env)
    said = done.stdout + done.stderr
    assert "Traceback" not in said, said[-600:]
    assert "╭─" not in said, said[-600:]
    assert done.returncode == USAGE_ERROR, (done.returncode, said[-600:])
    assert "invalid configuration" in done.stderr, said[-600:]
    assert named in said, said[-600:]
