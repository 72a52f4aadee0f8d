"""The inbox against what an agent controls: its expiresAt.

An ``expiresAt`` without an offset is UTC to the gatekeeper but local time to
the browser's ``Date.parse``: the page now takes the instant the service
read (``expiresAtMs``), so a browser east of UTC does not show a live
interrupt as expired, nor one west of it a countdown hours off.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from typing import Any

import pytest
from hostile.stack import UpStack
from playwright.async_api import Browser, BrowserContext, Page, expect

from browser.pages import open_inbox
from browser.test_inbox import WAIT_MS, article, script, start, thread_id

pytestmark = pytest.mark.browser


async def _live_card(browser: Browser, relay: UpStack, timezone: str
                     ) -> tuple[BrowserContext, Page, Any, dt.datetime]:
    """A tool approval expiring 3 h from now, written without an offset (UTC to the
    gatekeeper), in a browser set to ``timezone``."""
    thread = thread_id("tz")
    at = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=3)).replace(microsecond=0)
    await start(relay, "tenant-b", "scripted", thread, **script(
        {"id": "live", "reason": "tool_approval", "message": "Approve?",
         "expiresAt": at.strftime("%Y-%m-%dT%H:%M:%S"),
         "responseSchema": {"type": "object", "properties": {"approved": {"type": "boolean"}}}}))
    context = await browser.new_context(viewport={"width": 1000, "height": 900},
                                        timezone_id=timezone)
    page = await open_inbox(context, relay, "tenant-b")
    card = article(page, thread, "live")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    return context, page, card, at


async def test_a_live_interrupt_is_not_shown_expired_in_a_browser_east_of_utc(
        browser: Browser, relay: UpStack) -> None:
    context, _, card, _ = await _live_card(browser, relay, "Asia/Tokyo")
    try:
        await asyncio.sleep(1.5)  # a clock tick or two
        await expect(card.get_by_role("button", name="Approve")).to_be_visible()
        await expect(card.get_by_role("button", name="Reject")).to_be_visible()
        await expect(card.get_by_text("expired", exact=True)).to_have_count(0)
        await expect(card.locator(".countdown")).to_contain_text("expires in")
    finally:
        await context.close()


async def test_the_countdown_west_of_utc_counts_to_the_gatekeepers_instant(
        browser: Browser, relay: UpStack) -> None:
    """Los Angeles read the offset-less time as its own: 3 h became 10 or 11 h."""
    context, page, card, at = await _live_card(browser, relay, "America/Los_Angeles")
    try:
        shown = card.locator(".countdown time")
        await expect(shown).to_have_text(re.compile(r"^\d+:\d\d:\d\d$"))
        hours, minutes, seconds = map(int, (await shown.inner_text()).split(":"))
        # against the page's own clock (the server's `now`), not the test's duration
        page_now = await page.evaluate("Date.now()")
        expected = at.timestamp() - page_now / 1000
        left = hours * 3600 + minutes * 60 + seconds
        assert abs(left - expected) < 120, f"{hours}:{minutes:02}:{seconds:02} left, not ~3 h"
    finally:
        await context.close()
