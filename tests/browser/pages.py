"""What the browser tests do on the page more than once: open it with a key, screenshot it."""

from __future__ import annotations

from pathlib import Path

from hostile.stack import TENANTS, UpStack
from playwright.async_api import BrowserContext, Page

SHOTS = Path(__file__).parent / ".screenshots"
"""Screenshots of the tests (git-ignored); ``bench/inbox.png`` is a copy of one."""


async def open_inbox(context: BrowserContext, relay: UpStack, tenant: str) -> Page:
    """A tab on /inbox with ``tenant``'s key typed in once."""
    page = await context.new_page()
    await page.goto(f"{relay.url}/inbox")
    await page.get_by_label("API key").fill(TENANTS[tenant])
    await page.get_by_role("button", name="Use key").click()
    return page


def shot(name: str) -> Path:
    SHOTS.mkdir(exist_ok=True)
    return SHOTS / f"{name}.png"
