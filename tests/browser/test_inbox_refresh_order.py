"""The inbox page walks the listing once at a time, so an older listing never lands last.

Every change on ``/interrupts/stream`` (and every subscription) makes the page
walk the whole listing again (``listInterrupts``: ``limit=500`` pages until no
``next``) 50 ms later. It had done so without waiting for or cancelling the
walk under way, each walk's result replacing the page's whole list when it
arrived. On
a live relay with ~9,300 open interrupts and the expiry policy cancelling ~5 a
second, one tab had up to 12 walks (19 requests each) in flight at once, 831
``GET /interrupts`` in 90 s, a 240,000-node DOM, a JS heap swinging 260-870 MB
and the main thread unresponsive for up to 2.2 s. Walks that overlapped finished
in any order: one begun before an answer, finishing after the walk begun after
it, put the answered interrupt back on the page (with buttons to answer it
again), and nothing corrected it until the next change arrived. Now a change
during a walk asks for one more walk after it.

Here the service is played by routes (no relay needed): the first walk is
slow and still lists interrupt ``x``; the walk the subscription starts is fast
and lists nothing (``x`` was answered meanwhile). The page must end showing the
newer listing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlparse

import orjson
import pytest
from playwright.async_api import BrowserContext, Page, Route

from services.consumer.inbox_static import DIST

pytestmark = pytest.mark.browser
ORIGIN = "http://inbox.refresh"
X = {"id": "approve-x", "threadId": "thread-x", "runId": "run-x", "agent": "approval",
     "reason": "tool_approval", "message": "Delete /tmp/x?",
     "responseSchema": {"type": "object", "properties": {"approved": {"type": "boolean"}}},
     "expired": False, "openedAt": 1}


async def open_inbox(context: BrowserContext, api: Callable[[Route, str], Awaitable[None]]
                     ) -> Page:
    """The built page, its API played by ``api`` (route, path); any other path is 404."""
    async def serve(route: Route) -> None:
        path = urlparse(route.request.url).path
        if path.startswith("/interrupts"):
            await api(route, path)
        elif path.startswith("/inbox"):
            name = "index.html" if path in ("/inbox", "/inbox/") else path[7:]
            kind = {"js": "text/javascript", "css": "text/css"}.get(name.rsplit(".", 1)[-1],
                                                                    "text/html")
            await route.fulfill(body=(DIST / name).read_bytes(), content_type=kind)
        else:
            await route.fulfill(status=404, body=b"{}", content_type="application/json")
    await context.route(f"{ORIGIN}/**", serve)
    page = await context.new_page()
    await page.goto(f"{ORIGIN}/inbox")
    return page


async def test_a_slow_older_listing_does_not_overwrite_a_newer_one(
        context: BrowserContext) -> None:
    listings: list[float] = []
    feeds = 0
    done = asyncio.Event()

    async def api(route: Route, path: str) -> None:
        nonlocal feeds
        if path == "/interrupts/stream":
            feeds += 1
            if feeds == 1:  # subscribed: the page lists again (nothing between is lost)
                await route.fulfill(body=b": ready\n\n", content_type="text/event-stream")
                return
            await done.wait()  # later connections: a quiet feed
            await route.abort()
        else:
            listings.append(time.monotonic())
            if len(listings) == 1:  # the first walk: begun before x was answered, slow
                await asyncio.sleep(3)
                body = {"interrupts": [X], "total": 1, "now": int(time.time() * 1000)}
            else:  # every later walk: x answered
                body = {"interrupts": [], "total": 0, "now": int(time.time() * 1000)}
            await route.fulfill(body=orjson.dumps(body), content_type="application/json")

    page = await open_inbox(context, api)
    try:
        await page.get_by_text("No interrupt is waiting on you.").wait_for(timeout=10_000)
        await asyncio.sleep(4)  # the first, slow walk has landed by now
        assert len(listings) >= 2
        shown = await page.locator('[data-interrupt-id="approve-x"]').count()
        assert shown == 0, ("the page shows interrupt approve-x, answered, from a listing "
                            "older than the one it showed before (refreshes overlap and the "
                            "last to arrive wins)")
        assert len(listings) == 2  # the subscription's walk waited for the first
        assert listings[1] - listings[0] >= 2.9
    finally:
        done.set()
        await page.close()


async def test_the_page_walks_the_listing_by_cursor_and_keeps_an_interrupt_once(
        context: BrowserContext) -> None:
    """Each page after the first is asked by the previous page's ``next``; an interrupt
    a page repeats (an older service paging by offset) is kept once: a resume naming it
    twice is refused (``duplicate_entry``)."""
    y = {**X, "id": "approve-y", "threadId": "thread-y", "runId": "run-y"}
    asked: list[str] = []

    async def api(route: Route, path: str) -> None:
        if path == "/interrupts/stream":
            await route.abort()
        else:
            query = urlparse(route.request.url).query
            asked.append(query)
            first = "cursor=" not in query
            body = {"interrupts": [X] if first else [X, y], "total": 2,
                    "now": int(time.time() * 1000), **({"next": "c/1="} if first else {})}
            await route.fulfill(body=orjson.dumps(body), content_type="application/json")

    page = await open_inbox(context, api)
    try:
        await page.locator('[data-interrupt-id="approve-y"]').wait_for(timeout=10_000)
        assert await page.locator('[data-interrupt-id="approve-x"]').count() == 1
    finally:
        await page.close()
    assert asked[:2] == ["limit=500", "limit=500&cursor=c%2F1%3D"]
