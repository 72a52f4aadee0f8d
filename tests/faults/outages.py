"""A broker a fault scenario may stop and start again (the ``own_broker`` fixture's)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from deploy.kafka import launcher


class OwnBroker:
    """A broker of the test's own, for outages: stopped and started again on the same
    ports and data, so clients and services find it where it was."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.broker = launcher.start(data_dir, persistent=True, quiet=True)
        self.ports = self.broker.ports

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    async def stop(self) -> None:
        await asyncio.to_thread(self.broker.stop)

    async def start_again(self) -> launcher.Broker:
        self.broker = await asyncio.to_thread(
            launcher.start, self.data_dir, self.ports["port"], self.ports["controller_port"],
            persistent=True, quiet=True)
        return self.broker
