"""RFC 9112 section 3.2: an HTTP/1.1 request without ``Host``, or with two, is a 400.

The service checked ``Host`` against ``AGUI_ALLOWED_HOSTS`` (DNS rebinding) line by
line, so two allowed names passed, and a request with none passed too (HTTP/1.0 may omit
it; HTTP/1.1 may not): ``GET /healthz HTTP/1.1`` with no ``Host``, and with
``Host: 127.0.0.1`` then ``Host: localhost``, were answered 200. A proxy in front that
picks the other ``Host`` line than this service checked routes and logs the request
under another name.
"""

from __future__ import annotations

import pytest
from consumer_harness import Backstage, serving
from wire import Wire

from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_an_http11_request_without_or_with_two_hosts_gets_400(
        kafka: KafkaSettings, backstage: Backstage) -> None:
    async with serving(kafka) as app:
        port = int(app.url.rsplit(":", 1)[1])
        answers = {}
        for name, data in {
                "no Host": b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n",
                "two Hosts": b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: localhost\r\n"
                             b"Connection: close\r\n\r\n",
                "HTTP/1.0, no Host": b"GET /healthz HTTP/1.0\r\n\r\n"}.items():
            with Wire(port) as wire:
                await wire.send(data)
                reply = await wire.response(5.0)
                answers[name] = (reply.status, reply.code)
    assert answers == {"no Host": (400, "invalid_host"), "two Hosts": (400, "invalid_host"),
                       "HTTP/1.0, no Host": (200, None)}, answers
