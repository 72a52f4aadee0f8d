"""The consumer service's settings that other instances depend on: the advertised URL."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.consumer.settings import ConsumerSettings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("url", ["http://10.0.0.5:8000", "http://consumer-1:8000",
                                 "http://[::1]:8000", "http://host:8000/", "http://h",
                                 "http://" + "h" * 248])
def test_an_advertised_url_other_instances_can_reach_is_taken(url: str) -> None:
    assert ConsumerSettings(AGUI_ADVERTISED_URL=url).advertised_url == url


@pytest.mark.parametrize("url", [
    "https://consumer-1:8000",  # instances speak plain HTTP/1.1 to each other
    "consumer-1:8000",  # no scheme
    "http://",  # no host
    "http://consumer-1:8000/relay",  # a path the forward would not send
    "http://consumer-1:8000?x=1",
    "http://user@consumer-1:8000",
    "http://consumer 1:8000",
    "http://" + "h" * 249,  # 256 characters: past what a forwarded head may add
    "http://127.0.0.1:18103x",  # no port a connection could use: every forward failed 500
    "http://127.0.0.1:99999",
    "http://127.0.0.1:0",
    "http://consumer-1:8000:8000",
    "http://[::1",
    "http://cönsumer:8000",
])
def test_an_advertised_url_no_forward_could_use_is_refused_at_start(url: str) -> None:
    with pytest.raises(ValidationError, match="AGUI_ADVERTISED_URL"):
        ConsumerSettings(AGUI_ADVERTISED_URL=url)
