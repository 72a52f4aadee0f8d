"""The relay as processes with one upstream agent: ``AGUI_AGENTS=refunds=<url>``.

The same gatekeeper, producer worker and consumer service as
``relay_system``, on a fresh topic prefix, except that the worker hosts no
sample: its one agent is the upstream AG-UI endpoint the test serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from relay_system import READY_S, Child, RelaySystem, service_env

from deploy.kafka import launcher
from services.kafka.admin import ensure_topics
from services.runtime.settings import KafkaSettings


@contextlib.asynccontextmanager
async def upstream_system(bootstrap: str, log_dir: Path,
                          agents: dict[str, str]) -> AsyncIterator[RelaySystem]:
    """The three services with ``agents`` (name → upstream URL) as the only agents."""
    kafka = KafkaSettings(KAFKA_BOOTSTRAP_SERVERS=bootstrap,
                          AGUI_TOPIC_PREFIX=f"up{uuid.uuid4().hex[:10]}", AGUI_PARTITIONS=2)
    await ensure_topics(kafka, tuple(agents))
    port = launcher.free_port()
    env = service_env(kafka, AGUI_HTTP_PORT=str(port))
    env["AGUI_AGENTS"] = ",".join(f"{name}={url}" for name, url in agents.items())
    system = RelaySystem(kafka, f"http://127.0.0.1:{port}", [
        Child(module, log_dir / f"{module.rsplit('.', 1)[-1]}.log", env)
        for module in ("services.gatekeeper", "services.producer", "services.consumer")])
    try:
        for child in system.children:
            await child.start()
        await ready(system, len(agents))
        yield system
    finally:
        for child in system.children:
            await child.stop()


async def ready(system: RelaySystem, agents: int) -> None:
    """/readyz answers 200, the gatekeeper and the worker own their partitions."""
    gatekeeper, producer, _ = system.children
    async with httpx.AsyncClient(base_url=system.url, timeout=3.0) as http:
        async with asyncio.timeout(READY_S):
            while True:
                for child in system.children:
                    child.check_alive()
                with contextlib.suppress(httpx.HTTPError):
                    if ((await http.get("/readyz")).status_code == 200
                            and "assigned partitions" in gatekeeper.log()
                            and producer.log().count("own partitions") >= agents):
                        return
                await asyncio.sleep(0.2)
