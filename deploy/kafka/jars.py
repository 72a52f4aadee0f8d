"""The broker's classpath: Apache Kafka jars fetched from Maven Central, and checked.

There is no packaged Kafka on the project's machines, so ``fetch`` runs
``mvn dependency:copy-dependencies`` on the throw-away ``pom.xml`` into a
staging directory, checks that it holds a usable broker (the ``kafka_2.13``
jar with the server and storage-tool classes, the clients, the CLI parsers
and the SLF4J 1.x logging binding) and only then swaps it in, under a file
lock so concurrent fetches (two test sessions) do not race.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from deploy.kafka.defaults import KAFKA_DIR
from deploy.kafka.errors import FetchError, last_lines, say

POM = KAFKA_DIR / "pom.xml"
DEFAULT_LIB_DIR = KAFKA_DIR / ".cache" / "lib"


def lib_dir() -> Path:
    """The jar directory: env ``AGUI_KAFKA_LIB`` or ``deploy/kafka/.cache/lib``."""
    return Path(os.environ.get("AGUI_KAFKA_LIB") or DEFAULT_LIB_DIR)


LIB_DIR = lib_dir()


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
        raise FetchError(f"no single kafka_2.13 jar in {lib}; run: {fetch_hint()}")
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


def require_jars(lib: Path | None) -> Path:
    """The resolved jar directory, or FetchError saying how to fetch it."""
    classpath = (lib or lib_dir()).resolve()
    problem = check_jars(classpath)
    if problem is not None:
        raise FetchError(f"{problem}; fetch the broker jars first: {fetch_hint()}")
    return classpath


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


def fetch_hint() -> str:
    """The command that fetches the jars, for error messages."""
    return "python -m deploy.kafka.launcher fetch  (or: make kafka-fetch)"


def _fetch_locked(target: Path, version: str, quiet: bool) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FetchError("Maven (mvn) is not on PATH; install it (apt-get install maven)")
    staging = target.with_name(f"{target.name}.staging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    say(quiet, f"Fetching Apache Kafka {version} jars from Maven Central into {target} ...")
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
        raise FetchError(f"{problem}\n$ {' '.join(cmd)}\n{last_lines(done.stdout + done.stderr)}")
    _swap_in(staging, target)
    jars = list(target.glob("*.jar"))
    size_mb = sum(j.stat().st_size for j in jars) / 1e6
    say(quiet, f"Fetched {len(jars)} jars ({size_mb:.0f} MB) in {time.monotonic() - t0:.1f} s")


def _swap_in(staging: Path, target: Path) -> None:
    """Replace ``target`` by ``staging``; an old dir is removed only if it holds just jars."""
    if target.exists():
        if any(p.suffix != ".jar" for p in target.iterdir()):
            shutil.rmtree(staging, ignore_errors=True)
            raise FetchError(f"{target} has no usable Kafka jars but holds other files; empty it")
        shutil.rmtree(target)
    staging.rename(target)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[IO[str]]:
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield fh
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
