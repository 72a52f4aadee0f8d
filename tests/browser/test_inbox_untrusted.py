"""The inbox against what an agent controls: its responseSchema and its expiresAt.

A schema react-jsonschema-form cannot resolve (``$ref`` to ``#``, to a URL, a
cycle of definitions) threw while the page rendered and blanked every card
of the tenant; one that makes it expand without bound (1e8 ``minItems``
defaults, or 1,000 arrays of 1,000, an ``allOf`` of ``anyOf``s merged into
every combination) froze the tab. Such a schema now affects its
own card only: it is answered as free JSON, with a note. And an
``expiresAt`` without an offset is UTC to the gatekeeper but local time to
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

FREE_JSON_NOTE = "cannot be shown as a form"


async def _one_hostile_schema(context: BrowserContext, relay: UpStack, schema: dict[str, Any]
                              ) -> tuple[Page, str, str, list[str]]:
    """tenant a's inbox with an ordinary interrupt and, on another thread, one of ``schema``."""
    good, bad = thread_id("good"), thread_id("bad")
    await start(relay, "tenant-a", "scripted", good, **script(
        {"id": "fine", "reason": "input", "message": "An ordinary question"}))
    await start(relay, "tenant-a", "scripted", bad, **script(
        {"id": "evil", "reason": "input", "message": "hostile", "responseSchema": schema}))
    page = await open_inbox(context, relay, "tenant-a")
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return page, good, bad, errors


async def _answers_in_free_json(page: Page, bad: str) -> None:
    """The hostile card says why it has no form, and takes a JSON answer."""
    card = article(page, bad, "evil")
    await expect(card).to_contain_text(FREE_JSON_NOTE, timeout=WAIT_MS)
    await card.get_by_label("Answer (JSON)").fill('{"answer": 42}')
    await card.get_by_role("button", name="Use this answer").click()
    await expect(card.get_by_text('Answer: {"answer":42}')).to_be_visible()
    await expect(page.locator(f'[data-thread-id="{bad}"]').get_by_role(
        "button", name="Resume thread")).to_be_enabled()


@pytest.mark.parametrize("schema", [
    {"$ref": "#"},
    {"$ref": "http://127.0.0.1:1/x.json"},
    {"definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"$ref": "#/definitions/a"}},
     "$ref": "#/definitions/a"},
], ids=["self-ref", "remote-ref", "definitions-cycle"])
async def test_a_schema_rjsf_cannot_resolve_does_not_blank_the_whole_inbox(
        context: BrowserContext, relay: UpStack, schema: dict[str, Any]) -> None:
    page, good, bad, errors = await _one_hostile_schema(context, relay, schema)
    await expect(article(page, good, "fine")).to_be_visible(timeout=WAIT_MS)
    await asyncio.sleep(3)  # the evil card's form would mount lazily, once on screen
    await expect(article(page, good, "fine")).to_be_visible()
    await _answers_in_free_json(page, bad)
    await expect(article(page, good, "fine").get_by_label("Answer (JSON)")).to_be_editable()
    assert errors == []


@pytest.mark.parametrize("schema", [
    {"type": "array", "minItems": 100_000_000, "items": {"type": "string"}},
    {"type": "array", "minItems": 1000,
     "items": {"type": "array", "minItems": 1000, "items": {"type": "string"}}},
    {"allOf": [{"anyOf": [{"properties": {f"a{n}": {"type": "string"}}},
                          {"properties": {f"b{n}": {"type": "number"}}}]} for n in range(24)]},
], ids=["min-items", "nested-min-items", "all-of-any-of"])
async def test_a_schema_that_expands_without_bound_does_not_freeze_the_page(
        context: BrowserContext, relay: UpStack, schema: dict[str, Any]) -> None:
    page, good, bad, errors = await _one_hostile_schema(context, relay, schema)
    await asyncio.sleep(5)  # time for the evil card's form to mount, and freeze the tab
    assert await asyncio.wait_for(page.evaluate("1 + 1"), 10) == 2
    await expect(article(page, good, "fine")).to_be_visible(timeout=WAIT_MS)
    await _answers_in_free_json(page, bad)
    assert errors == []


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
