"""Fixtures of the hostile-input suite: one ``agui-relay up`` for the whole suite.

Every hostile test attacks the same running stack, because the point is
that no single request harms what serves everyone else: the stack starts
once (``relay``, ~30 s) and ``test_afterwards`` — moved after every other
hostile test, whatever order the files were given in — checks that it is
still whole (every service ready, an approval interrupt and resume on every
partition, no traceback logged) and that ``up`` stops on SIGINT within its
grace period. If that module does not run, the fixture stops the stack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from hostile.client import Tenant
from hostile.stack import TENANTS, UpStack

LAST_MODULE = "test_afterwards.py"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "hostile: single hostile requests against the whole stack under agui-relay up")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run ``test_afterwards`` right after the last other hostile test."""
    here = Path(__file__).parent
    hostile = [i for i, item in enumerate(items) if item.path.parent == here]
    if not hostile:
        return
    last = [items[i] for i in hostile if items[i].path.name == LAST_MODULE]
    moved = {id(item) for item in last}
    rest = [item for item in items if id(item) not in moved]
    others = [j for j, item in enumerate(rest) if item.path.parent == here]
    at = others[-1] + 1 if others else hostile[0]
    items[:] = [*rest[:at], *last, *rest[at:]]


@pytest.fixture(scope="session")
def relay(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    """``agui-relay up`` on the session broker, ready."""
    with UpStack(kafka_bootstrap, tmp_path_factory.mktemp("hostile")).running() as stack:
        yield stack


@pytest.fixture
async def tenant_a(relay: UpStack) -> AsyncIterator[Tenant]:
    async with Tenant(relay.url, TENANTS["tenant-a"]) as tenant:
        yield tenant


@pytest.fixture
async def tenant_b(relay: UpStack) -> AsyncIterator[Tenant]:
    async with Tenant(relay.url, TENANTS["tenant-b"]) as tenant:
        yield tenant
