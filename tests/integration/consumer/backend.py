"""The real gatekeeper and producer worker behind in-process consumer apps.

``backend(kafka, log_dir)`` starts ``python -m services.gatekeeper`` and one
producer worker (``python -m services.producer``) hosting the ``approval``
and ``scripted`` sample agents on the test's topics, each logging JSON to a
file, waits until the gatekeeper has its partitions and the worker owns its
dispatch partitions, and stops both by their own pids (SIGTERM, then
SIGKILL) however the test ends. The consumer apps come from
``consumer_harness.serving``, in the test's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings

REPO = Path(__file__).resolve().parents[3]
AGENTS = {"approval": "services.producer.agents.approval:agent",
          "scripted": "services.producer.agents.scripted:agent"}
READY_S = 90.0
STOP_S = 20.0


def _env(kafka: KafkaSettings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "AGUI_"))}
    env.update(KAFKA_BOOTSTRAP_SERVERS=kafka.bootstrap_servers,
               AGUI_TOPIC_PREFIX=kafka.topic_prefix, AGUI_PARTITIONS=str(kafka.partitions),
               AGUI_AGENTS=",".join(f"{n}={t}" for n, t in AGENTS.items()),
               AGUI_LOG_FORMAT="json", PYTHONUNBUFFERED="1",
               AGUI_GATEKEEPER_SESSION_TIMEOUT_MS="6000",
               AGUI_PRODUCER_SESSION_TIMEOUT_MS="6000")
    return env


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), STOP_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


@contextlib.asynccontextmanager
async def backend(kafka: KafkaSettings, log_dir: Path) -> AsyncIterator[None]:
    """Gatekeeper and producer worker, ready, until the block ends."""
    await ensure_topics(kafka, tuple(AGENTS))
    env = _env(kafka)
    logs = {m: log_dir / f"{m.rsplit('.', 1)[-1]}.log"
            for m in ("services.gatekeeper", "services.producer")}
    processes: list[asyncio.subprocess.Process] = []
    try:
        for module, path in logs.items():
            with path.open("ab") as out:
                processes.append(await asyncio.create_subprocess_exec(
                    sys.executable, "-m", module, cwd=REPO, env=env, stdout=out,
                    stderr=asyncio.subprocess.STDOUT, start_new_session=True))
        gatekeeper, producer = (p.read_text("utf-8", "replace") for p in logs.values())
        async with asyncio.timeout(READY_S):
            while True:
                for process, path in zip(processes, logs.values(), strict=True):
                    if process.returncode is not None:
                        raise AssertionError(f"{path.name}: exited {process.returncode}\n"
                                             f"{path.read_text('utf-8', 'replace')[-3000:]}")
                gatekeeper, producer = (p.read_text("utf-8", "replace")
                                        for p in logs.values())
                if ("assigned partitions" in gatekeeper
                        and producer.count("own partitions") >= len(AGENTS)):
                    break
                await asyncio.sleep(0.2)
        yield
    finally:
        for process in processes:
            await _stop(process)
