"""``GET /interrupts``' ``cursor`` parameter on the real app: beside ``offset``, and
forged.

Found by probing: ``cursor`` and ``offset`` together were taken together, the page
starting ``offset`` items *after* the cursor, silently (the documentation offers one
or the other; an older client that keeps sending its ``offset`` beside the ``next`` it
now follows skipped items without a word). Forged, huge, non-ASCII, nested and
type-confused cursors are each a plain 400.
"""

from __future__ import annotations

import base64
from urllib.parse import quote

import orjson
import pytest
from consumer_harness import Backstage, serving
from test_consumer_interrupts_broker import new_tenant, opened_in_turn, until

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


async def test_cursor_beside_offset_is_refused_and_hostile_cursors_are_400(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    token, tenant, c = new_tenant()
    threads = await opened_in_turn(backstage, tenant, "c", 6)
    async with serving(kafka, api_keys=f"{token}={tenant}") as app:
        await until(lambda: all(app.relay.threads.get(t) is not None for t in threads))
        first = (await app.http.get("/interrupts?limit=2", headers=c)).json()
        cursor = first["next"]
        hostile = {
            "nested": b64(b"[" * 3000 + b"]" * 3000),
            "bool": b64(orjson.dumps([True, "t", 0, "i"])),
            "float": b64(orjson.dumps([1.5, "t", 0, "i"])),
            "big-int": b64(b'[99999999999999999999999999,"t",0,"i"]'),
            "not-utf8": b64(b"\xff\xfe\xfd"),
            "non-ascii": quote("é" * 10),
            "huge": "A" * 60_000,
        }
        answers = {name: (await app.http.get(f"/interrupts?cursor={value}", headers=c))
                   for name, value in hostile.items()}
        alone = (await app.http.get(f"/interrupts?limit=2&cursor={cursor}", headers=c))
        both = (await app.http.get(f"/interrupts?limit=2&cursor={cursor}&offset=2",
                                   headers=c))
        zero = (await app.http.get(f"/interrupts?limit=2&offset=0&cursor={cursor}",
                                   headers=c))
    huge = answers.pop("huge")
    assert huge.status_code in (400, 414, 431)  # the server's own limit on a request line
    assert {n: r.status_code for n, r in answers.items()} == dict.fromkeys(answers, 400)
    assert alone.status_code == 200
    assert len(alone.json()["interrupts"]) == 2
    shown = [i["threadId"] for i in both.json().get("interrupts", ())]
    assert both.status_code == 400, (
        f"cursor+offset=2 gave {shown}, the cursor alone "
        f"{[i['threadId'] for i in alone.json()['interrupts']]}: two items after the "
        f"cursor skipped without a word")
    problem = both.json()
    assert both.headers["content-type"].startswith("application/problem+json")
    assert problem["code"] == "invalid_input"
    assert problem["fields"] == ["cursor", "offset"]
    assert "cursor" in problem["detail"]
    assert "offset" in problem["detail"]
    assert zero.status_code == 400  # even an offset that would skip nothing: never both
