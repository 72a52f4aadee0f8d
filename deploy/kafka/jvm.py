"""How a Kafka JVM is run: the java binary, its flags, storage format and launch.

Kafka's shell scripts (and their ``KAFKA_HEAP_OPTS``) are not in the Maven
jars, so the command lines are built here: ``java <flags> -cp '<lib>/*'
<main class>``, with the broker's own log4j2 config and a temp dir inside its
directory (compression codecs unpack native libraries there). ``format``
runs ``kafka.tools.StorageTool format`` with a given cluster id; ``launch``
starts ``kafka.Kafka`` detached.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from deploy.kafka.config import Layout
from deploy.kafka.errors import BrokerError, last_lines
from deploy.kafka.processes import launch as launch_process

HEAP = ("-Xms256m", "-Xmx1g")
"""The single broker's heap (the cluster's nodes ask for less)."""
OTHER_FLAGS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")
JVM_FLAGS = (*HEAP, *OTHER_FLAGS)


def java() -> str:
    """``$JAVA_HOME/bin/java`` or the ``java`` on PATH; BrokerError when neither exists."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise BrokerError(
            "java is not on PATH; Kafka 4 needs a JDK 17+ (apt-get install openjdk-17-jdk)"
        )
    return found


def command(
    java_bin: str, classpath: Path, layout: Layout, main: str, heap: Sequence[str] = HEAP
) -> list[str]:
    """``java <flags> -cp '<lib>/*' <main>`` for the broker in ``layout``."""
    return [
        java_bin,
        *heap,
        *OTHER_FLAGS,
        f"-Dlog4j2.configurationFile={layout.log4j}",
        f"-Djava.io.tmpdir={layout.tmp}",
        "-cp",
        f"{classpath}/*",
        main,
    ]


def format_storage(
    java_bin: str,
    classpath: Path,
    layout: Layout,
    users: Mapping[str, str],
    *,
    cluster: str,
    persistent: bool,
    features: Mapping[str, int],
) -> None:
    """Format ``layout.logs`` for cluster id ``cluster`` (a formatted persistent dir is kept)."""
    if persistent and (layout.logs / "meta.properties").exists():
        return  # already formatted; -g would still insist on the same cluster id
    cmd = command(java_bin, classpath, layout, "kafka.tools.StorageTool")
    cmd += ["format", "-t", cluster, "-c", str(layout.props)]
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
            f"{last_lines(done.stdout + done.stderr)}"
        )


def launch(
    java_bin: str, classpath: Path, layout: Layout, heap: Sequence[str] = HEAP
) -> int:
    """Start ``kafka.Kafka server.properties`` detached; its pid."""
    cmd = [*command(java_bin, classpath, layout, "kafka.Kafka", heap), str(layout.props)]
    return launch_process(cmd, layout.root, layout.stdout_log)
