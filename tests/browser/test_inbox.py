"""The interrupt inbox in a real browser, against the whole relay.

Each test starts runs the way a front end or ``curl`` would (tenant a's or
b's key), then uses the page: an approval answered from it and the resumed
run's events shown; a thread with two interrupts cannot be resumed with one
answered; an expired interrupt offers only cancel, and cancelling it
resumes the thread; an interrupt opened from another tab appears without a
reload; a resume the gatekeeper refuses shows its detail; tenant b's page
never shows tenant a's threads; tool calls' arguments edited before they
are approved (a form from the schema's ``arguments``, free JSON when it
names no fields) reach the resumed run. Screenshots go to ``.screenshots/``.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import orjson
import pytest
from hostile.stack import TENANTS, UpStack
from playwright.async_api import Browser, BrowserContext, Page, expect

from browser.pages import open_inbox, shot

pytestmark = pytest.mark.browser

WAIT_MS = 20_000


def thread_id(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:10]}"


async def start(relay: UpStack, tenant: str, agent: str, thread: str,
                **forwarded: Any) -> list[dict[str, Any]]:
    """Run ``agent`` on a new thread as ``tenant``; the events of the run (it interrupts)."""
    body = {"threadId": thread, "runId": f"r-{uuid.uuid4().hex[:8]}", "state": {},
            "tools": [], "context": [], "forwardedProps": forwarded,
            "messages": [{"id": "m1", "role": "user", "content": "Clean up /tmp"}]}
    headers = {"Authorization": f"Bearer {TENANTS[tenant]}", "Accept": "text/event-stream"}
    async with httpx.AsyncClient(base_url=relay.url, timeout=30) as http:
        response = await http.post(f"/agents/{agent}", json=body, headers=headers)
    assert response.status_code == 200, response.text
    return [orjson.loads(line[6:]) for line in response.text.splitlines()
            if line.startswith("data: ")]


def script(*interrupts: dict[str, Any]) -> dict[str, Any]:
    return {"script": {"interrupts": list(interrupts)}}


def article(page: Page, thread: str, interrupt: str) -> Any:
    return page.locator(f'[data-thread-id="{thread}"] [data-interrupt-id="{interrupt}"]')


async def test_an_approval_answered_from_the_page(context: BrowserContext,
                                                  relay: UpStack) -> None:
    thread = thread_id("approve")
    events = await start(relay, "tenant-a", "approval", thread)
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    page = await open_inbox(context, relay, "tenant-a")
    card = article(page, thread, interrupt["id"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.get_by_label("Tool call arguments")).to_contain_text('"paths"',
                                                                            timeout=WAIT_MS)
    await page.screenshot(path=shot("inbox"), full_page=True)
    section = page.locator(f'[data-thread-id="{thread}"]')
    resume = section.get_by_role("button", name="Resume thread")
    await expect(resume).to_be_disabled()
    await card.get_by_role("button", name="Approve").click()
    await expect(resume).to_be_enabled()
    await resume.click()
    await expect(section.get_by_role("status")).to_contain_text("Admitted", timeout=WAIT_MS)
    events_list = section.get_by_role("list", name="Resumed run events")
    await expect(events_list).to_contain_text("TOOL_CALL_RESULT", timeout=WAIT_MS)
    await expect(events_list).to_contain_text("RUN_FINISHED  success", timeout=WAIT_MS)
    await expect(card).to_have_count(0, timeout=WAIT_MS)
    await page.screenshot(path=shot("resumed"), full_page=True)
    await section.get_by_role("link", name="history").click()
    trail = page.get_by_role("list", name="Runs, decisions and interrupts in order")
    await expect(trail).to_contain_text("run finished: interrupt (1 opened)", timeout=WAIT_MS)
    await expect(trail).to_contain_text("decision admitted")
    await expect(trail).to_contain_text("run finished: success")


async def test_the_inbox_fits_a_phone(browser: Browser, relay: UpStack) -> None:
    thread = thread_id("phone")
    await start(relay, "tenant-a", "approval", thread)
    phone = await browser.new_context(viewport={"width": 375, "height": 740},
                                      is_mobile=True, has_touch=True)
    try:
        page = await open_inbox(phone, relay, "tenant-a")
        section = page.locator(f'[data-thread-id="{thread}"]')
        await expect(section.get_by_role("button", name="Approve")).to_be_visible(
            timeout=WAIT_MS)
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 375, f"the page is {width}px wide on a 375px screen"
        await section.screenshot(path=shot("phone"))
    finally:
        await phone.close()


async def test_a_partial_answer_cannot_be_submitted(context: BrowserContext,
                                                    relay: UpStack) -> None:
    thread = thread_id("partial")
    schema = {"type": "object", "properties": {"approved": {"type": "boolean"}},
              "required": ["approved"]}
    await start(relay, "tenant-a", "scripted", thread, **script(
        {"id": "first", "reason": "tool_approval", "message": "First?",
         "responseSchema": schema},
        {"id": "second", "reason": "input", "message": "Free answer?"},
        {"id": "third", "reason": "input", "message": "How many?", "responseSchema": {
            "type": "object", "required": ["count"],
            "properties": {"count": {"type": "integer", "minimum": 1, "title": "Count"}}}}))
    page = await open_inbox(context, relay, "tenant-a")
    first, second = article(page, thread, "first"), article(page, thread, "second")
    third = article(page, thread, "third")
    await expect(second).to_be_visible(timeout=WAIT_MS)
    resume = page.locator(f'[data-thread-id="{thread}"]').get_by_role(
        "button", name="Resume thread")
    await first.get_by_role("button", name="Approve").press("Enter")  # the keyboard works
    await expect(first.get_by_text("Answer: approve")).to_be_visible()
    await expect(resume).to_be_disabled()
    # the schema's form validates in the browser: 0 is below the minimum, no answer is taken
    await third.get_by_label("Count").fill("0")
    await third.get_by_role("button", name="Use this answer").click()
    await expect(third).to_contain_text("must be >= 1")
    await expect(third.get_by_text("No answer yet")).to_be_visible()
    await third.get_by_label("Count").fill("3")
    await third.get_by_role("button", name="Use this answer").click()
    await expect(third.get_by_text('Answer: {"count":3}')).to_be_visible()
    await expect(resume).to_be_disabled()
    await second.get_by_label("Answer (JSON)").fill("{not json")
    await second.get_by_role("button", name="Use this answer").click()
    await expect(second.get_by_role("alert")).to_contain_text("Not JSON")
    await expect(resume).to_be_disabled()
    await second.get_by_label("Answer (JSON)").fill('{"note": "fine"}')
    await second.get_by_role("button", name="Use this answer").click()
    await expect(resume).to_be_enabled()
    await second.get_by_role("button", name="Clear answer").click()
    await expect(resume).to_be_disabled()


async def test_an_expired_interrupt_is_offered_only_cancel(context: BrowserContext,
                                                           relay: UpStack) -> None:
    thread = thread_id("expired")
    await start(relay, "tenant-a", "scripted", thread, **script(
        {"id": "late", "reason": "tool_approval", "message": "Too late?",
         "expiresAt": "2020-01-01T00:00:00Z",
         "responseSchema": {"type": "object", "properties": {"approved": {"type": "boolean"}}}}))
    page = await open_inbox(context, relay, "tenant-a")
    card = article(page, thread, "late")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await expect(card.get_by_text("expired", exact=True)).to_be_visible()
    await expect(card.get_by_role("button")).to_have_count(1)
    await expect(card.get_by_role("button")).to_have_text("Cancel interrupt")
    await card.get_by_role("button", name="Cancel interrupt").click()
    section = page.locator(f'[data-thread-id="{thread}"]')
    await section.get_by_role("button", name="Resume thread").click()
    await expect(section.get_by_role("status")).to_contain_text("Admitted", timeout=WAIT_MS)
    await expect(section.get_by_role("list", name="Resumed run events")).to_contain_text(
        "late=cancelled", timeout=WAIT_MS)


async def test_an_interrupt_opened_in_another_tab_appears_live(context: BrowserContext,
                                                               relay: UpStack) -> None:
    page = await open_inbox(context, relay, "tenant-a")
    await expect(page.get_by_role("heading", name="Interrupt inbox")).to_be_visible()
    await page.wait_for_timeout(500)  # subscribed: the first listing is in
    other = await open_inbox(context, relay, "tenant-a")
    thread = thread_id("live")
    body = {"threadId": thread, "runId": "r-live", "state": {}, "tools": [], "context": [],
            "messages": [{"id": "m1", "role": "user", "content": "hi"}],
            "forwardedProps": script({"id": "fresh", "reason": "input", "message": "New!"})}
    status = await other.evaluate("""async (body) => {
        const key = sessionStorage.getItem("agui-relay-api-key");
        const r = await fetch("/agents/scripted", {method: "POST", body: JSON.stringify(body),
          headers: {"Content-Type": "application/json", "Authorization": "Bearer " + key}});
        await r.text();
        return r.status;
    }""", body)
    assert status == 200
    await expect(article(page, thread, "fresh")).to_be_visible(timeout=WAIT_MS)


async def test_a_rejection_is_shown_in_plain_words(context: BrowserContext,
                                                   relay: UpStack) -> None:
    thread = thread_id("refused")
    events = await start(relay, "tenant-a", "approval", thread)
    (interrupt,) = events[-1]["outcome"]["interrupts"]
    page = await context.new_page()
    await page.route("**/interrupts/stream", lambda route: route.abort())  # a stale page
    await page.goto(f"{relay.url}/inbox")
    await page.get_by_label("API key").fill(TENANTS["tenant-a"])
    await page.get_by_role("button", name="Use key").click()
    card = article(page, thread, interrupt["id"])
    await expect(card).to_be_visible(timeout=WAIT_MS)
    # meanwhile someone else answers it (as `curl` would)
    async with httpx.AsyncClient(base_url=relay.url, timeout=30) as http:
        answered = await http.post("/agents/approval", headers={
            "Authorization": f"Bearer {TENANTS['tenant-a']}", "Accept": "text/event-stream"},
            json={"threadId": thread, "runId": "r-other", "messages": [],
                  "resume": [{"interruptId": interrupt["id"], "status": "cancelled"}]})
    assert answered.status_code == 200, answered.text
    await card.get_by_role("button", name="Approve").click()
    section = page.locator(f'[data-thread-id="{thread}"]')
    await section.get_by_role("button", name="Resume thread").click()
    alert = section.get_by_role("alert")
    await expect(alert).to_contain_text("Refused", timeout=WAIT_MS)
    await expect(alert).to_contain_text(interrupt["id"])
    await page.screenshot(path=shot("refused"), full_page=True)


async def test_another_tenants_interrupts_are_never_visible(context: BrowserContext,
                                                            relay: UpStack) -> None:
    mine, theirs = thread_id("tenant-a"), thread_id("tenant-b")
    await start(relay, "tenant-a", "scripted", mine, **script({"id": "ia", "reason": "input"}))
    await start(relay, "tenant-b", "scripted", theirs, **script({"id": "ib", "reason": "input"}))
    page_b = await open_inbox(context, relay, "tenant-b")
    await expect(article(page_b, theirs, "ib")).to_be_visible(timeout=WAIT_MS)
    await expect(page_b.locator(f'[data-thread-id="{mine}"]')).to_have_count(0)
    await page_b.goto(f"{relay.url}/inbox#/threads/{mine}")
    await expect(page_b.get_by_role("alert")).to_contain_text("no thread", timeout=WAIT_MS)
    page_a = await open_inbox(await context.browser.new_context(), relay, "tenant-a")  # type: ignore[union-attr]
    await expect(article(page_a, mine, "ia")).to_be_visible(timeout=WAIT_MS)
    await expect(page_a.locator(f'[data-thread-id="{theirs}"]')).to_have_count(0)


async def test_edit_and_approve_sends_the_edited_arguments(context: BrowserContext,
                                                          relay: UpStack) -> None:
    thread = thread_id("edit")
    fields = {"type": "object", "required": ["approved"], "additionalProperties": False,
              "properties": {"approved": {"type": "boolean"}, "arguments": {
                  "type": "object", "required": ["path"], "additionalProperties": False,
                  "properties": {"path": {"type": "string", "title": "Path", "pattern": "^/tmp/"},
                                 "force": {"type": "boolean", "title": "Force"}}}}}
    free = {"type": "object", "required": ["approved"],
            "properties": {"approved": {"type": "boolean"}, "arguments": {"type": "object"}}}
    await start(relay, "tenant-a", "scripted", thread, script={
        "toolCalls": [
            {"id": "c-del", "name": "delete_files",
             "arguments": {"path": "/tmp/old", "force": True}},
            {"id": "c-mail", "name": "send_mail", "arguments": {"to": "ops@example.com"}}],
        "interrupts": [
            {"id": "del", "reason": "tool_approval", "message": "Delete /tmp/old?",
             "toolCallId": "c-del", "responseSchema": fields},
            {"id": "mail", "reason": "tool_approval", "message": "Send the report?",
             "toolCallId": "c-mail", "responseSchema": free}]})
    page = await open_inbox(context, relay, "tenant-a")
    delete, mail = article(page, thread, "del"), article(page, thread, "mail")
    await expect(delete.get_by_label("Tool call arguments")).to_contain_text('"/tmp/old"',
                                                                            timeout=WAIT_MS)
    await delete.get_by_role("button", name="Edit and approve").click()
    path = delete.get_by_label("Path")
    await expect(path).to_have_value("/tmp/old")  # the proposed arguments, prefilled
    await path.fill("/etc/passwd")
    await delete.get_by_role("button", name="Approve with these arguments").click()
    await expect(delete).to_contain_text('must match pattern "^/tmp/"')  # checked in the page
    await expect(delete.get_by_text("No answer yet")).to_be_visible()
    await page.set_viewport_size({"width": 375, "height": 740})  # the open form on a phone
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375, f"the page is {width}px wide on a 375px screen"
    await delete.screenshot(path=shot("edit-form"))
    await page.set_viewport_size({"width": 1000, "height": 900})
    await path.fill("/tmp/keep")
    await delete.get_by_role("button", name="Approve with these arguments").click()
    await expect(delete.get_by_text(
        'Answer: approve with edited arguments {"path":"/tmp/keep","force":true}')).to_be_visible()
    await mail.get_by_role("button", name="Edit and approve").press("Enter")  # the keyboard
    text = mail.get_by_label("Tool call arguments (JSON)")
    await expect(text).to_have_value(re.compile("ops@example.com"))
    await text.fill('{"to": "me@example.com"')
    await mail.get_by_role("button", name="Approve with these arguments").click()
    await expect(mail.get_by_role("alert")).to_contain_text("Not JSON")
    await text.fill('{"to": "me@example.com"}')
    await mail.get_by_role("button", name="Approve with these arguments").click()
    await expect(mail.get_by_text("Answer: approve with edited arguments")).to_be_visible()
    await page.screenshot(path=shot("edit"), full_page=True)
    section = page.locator(f'[data-thread-id="{thread}"]')
    await section.get_by_role("button", name="Resume thread").click()
    await expect(section.get_by_role("status")).to_contain_text("Admitted", timeout=WAIT_MS)
    events = section.get_by_role("list", name="Resumed run events")
    await expect(events).to_contain_text('ran delete_files with {"path":"/tmp/keep","force":true}',
                                         timeout=WAIT_MS)
    await expect(events).to_contain_text('ran send_mail with {"to":"me@example.com"}')


async def test_an_agents_hostile_text_stays_inside_the_page(context: BrowserContext,
                                                            relay: UpStack) -> None:
    """100,000 characters with no break, and a right-to-left override: the page stays as
    wide as the window and the override stays inside its heading."""
    thread = thread_id("wide")
    await start(relay, "tenant-a", "scripted", thread, **script(
        {"id": "wide", "reason": "input", "message": "w" * 100_000},
        {"id": "bidi", "reason": "input", "message": "approve \u202eevil"}))
    page = await open_inbox(context, relay, "tenant-a")
    await expect(article(page, thread, "wide")).to_be_visible(timeout=WAIT_MS)
    await expect(article(page, thread, "bidi")).to_be_visible()
    viewport = await page.evaluate("window.innerWidth")
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= viewport, f"the page is {width}px wide in a {viewport}px window"
    isolated = await article(page, thread, "bidi").locator("h3").evaluate(
        "h => getComputedStyle(h).unicodeBidi")
    assert isolated == "isolate"


async def test_a_malformed_thread_link_shows_the_page_not_a_blank(context: BrowserContext,
                                                                  relay: UpStack) -> None:
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(f"{relay.url}/inbox#/threads/%E0%A4%A")
    await expect(page.get_by_label("API key")).to_be_visible(timeout=WAIT_MS)
    assert errors == []


async def test_a_free_answer_that_json_cannot_carry_is_refused_not_sent_as_null(
        context: BrowserContext, relay: UpStack) -> None:
    """AG-UI takes any payload but a top-level null; 1e999 parses to Infinity, which
    JSON.stringify would send as null."""
    thread = thread_id("null")
    await start(relay, "tenant-a", "scripted", thread, **script(
        {"id": "free", "reason": "input", "message": "Anything?"}))
    page = await open_inbox(context, relay, "tenant-a")
    card = article(page, thread, "free")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    resume = page.locator(f'[data-thread-id="{thread}"]').get_by_role(
        "button", name="Resume thread")
    for typed, said in (("null", "cannot be null"), ('{"n": 1e999}', "out of range")):
        await card.get_by_label("Answer (JSON)").fill(typed)
        await card.get_by_role("button", name="Use this answer").click()
        await expect(card.get_by_role("alert")).to_contain_text(said)
        await expect(card.get_by_text("No answer yet")).to_be_visible()
        await expect(resume).to_be_disabled()
    await card.get_by_label("Answer (JSON)").fill('{"n": 1}')
    await card.get_by_role("button", name="Use this answer").click()
    await expect(resume).to_be_enabled()


async def test_a_pattern_that_backtracks_exponentially_does_not_freeze_the_page(
        context: BrowserContext, relay: UpStack) -> None:
    """``^(a+)+$`` against 40 a's and a "!" runs for minutes on the page's only thread; it
    is not checked in the browser (the agent checks its answers), a plain pattern still is."""
    thread = thread_id("redos")
    schema = {"type": "object", "required": ["word", "digits"], "properties": {
        "word": {"type": "string", "title": "Word", "pattern": "^(a+)+$",
                 "default": "a" * 40 + "!"},
        "digits": {"type": "string", "title": "Digits", "pattern": "^[0-9]+$"}}}
    await start(relay, "tenant-a", "scripted", thread, **script(
        {"id": "evil", "reason": "input", "message": "Spell it", "responseSchema": schema}))
    page = await open_inbox(context, relay, "tenant-a")
    card = article(page, thread, "evil")
    await expect(card).to_be_visible(timeout=WAIT_MS)
    await card.get_by_label("Digits").fill("abc")
    await card.get_by_role("button", name="Use this answer").click(timeout=WAIT_MS)
    await expect(card).to_contain_text("must match pattern", timeout=WAIT_MS)
    await card.get_by_label("Digits").fill("42")
    await card.get_by_role("button", name="Use this answer").click(timeout=WAIT_MS)
    await expect(card.get_by_text('"digits":"42"')).to_be_visible(timeout=WAIT_MS)
    assert await page.evaluate("1 + 1") == 2
