"""Fixtures of the browser suite: the whole relay under ``agui-relay up``, headless Chromium.

The inbox is tested as a person uses it: the real gatekeeper, producer
workers and consumer service (``hostile.stack.UpStack``: two tenants' API
keys, the session broker) and the page in Debian's Chromium, driven by
Playwright (``executable_path``: Playwright cannot download its own browser
here). The page must have been built (``make install`` runs ``npm run
build`` in ``services/consumer/inbox``); a missing build or browser fails
the suite, saying which.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hostile.stack import UpStack
from playwright.async_api import Browser, BrowserContext, async_playwright

from services.consumer.inbox_static import DIST

CHROMIUM = os.environ.get("AGUI_CHROMIUM", "/usr/bin/chromium")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: the inbox page in headless Chromium")


@pytest.fixture(scope="session")
def relay(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpStack]:
    assert (DIST / "index.html").is_file(), (
        f"the inbox is not built ({DIST}): run `make install` "
        "(npm ci && npm run build in services/consumer/inbox)")
    assert Path(CHROMIUM).is_file(), f"no Chromium at {CHROMIUM}: apt-get install -y chromium"
    with UpStack(kafka_bootstrap, tmp_path_factory.mktemp("browser")).running() as stack:
        yield stack


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        found = await playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                 args=["--no-sandbox"])
        try:
            yield found
        finally:
            await found.close()


@pytest.fixture
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    found = await browser.new_context(viewport={"width": 1000, "height": 900})
    try:
        yield found
    finally:
        await found.close()
