"""Upstream agents' configuration: AGUI_AGENTS URL values and AGUI_UPSTREAM_* settings."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from services.cli.up import agent_names
from services.consumer.settings import ConsumerSettings
from services.producer.agent import load_agents, parse_agents
from services.producer.errors import AgentLoadError
from services.producer.upstream import is_upstream_url, upstream_config
from services.producer.upstream.client import (
    BoundedStream,
    EventTooLongError,
    UpstreamAgent,
    quoted,
    safe_url,
)
from services.producer.upstream.config import parse_headers

pytestmark = pytest.mark.unit

AGENTS = "billing=https://user:pw@billing-agent:8443/agui?tenant=a=b,approval"


def test_a_url_value_names_an_upstream_and_every_service_reads_only_the_name() -> None:
    assert parse_agents(AGENTS)["billing"] == "https://user:pw@billing-agent:8443/agui?tenant=a=b"
    assert agent_names(AGENTS) == ("billing", "approval")
    assert ConsumerSettings.model_validate({"AGUI_AGENTS": AGENTS}).agent_names() == (
        "billing", "approval")
    assert is_upstream_url("HTTP://x/agui")
    assert not is_upstream_url("services.producer.agents.approval:agent")


def test_load_agents_builds_an_upstream_agent_for_a_url() -> None:
    loaded = load_agents("billing=http://127.0.0.1:9/agui")
    agent = loaded["billing"].run
    assert isinstance(agent, UpstreamAgent)
    assert agent.config.url == "http://127.0.0.1:9/agui"
    with pytest.raises(AgentLoadError, match="not an http"):
        load_agents("billing=http://")


def test_per_agent_settings_override_the_shared_ones_and_headers_are_never_shared() -> None:
    env = {"AGUI_UPSTREAM_IDLE_TIMEOUT_S": "7", "AGUI_UPSTREAM_RUN_TIMEOUT_S": "70",
           "AGUI_UPSTREAM_HEADERS": "Authorization: Bearer shared",
           "AGUI_UPSTREAM_BILLING_AGENT_IDLE_TIMEOUT_S": "3",
           "AGUI_UPSTREAM_BILLING_AGENT_VERIFY": "false",
           "AGUI_UPSTREAM_BILLING_AGENT_CA_FILE": "/etc/ca.pem",
           "AGUI_UPSTREAM_BILLING_AGENT_CONCURRENCY": "4",
           "AGUI_UPSTREAM_BILLING_AGENT_RETRIES": "0",
           "AGUI_UPSTREAM_BILLING_AGENT_CONNECT_TIMEOUT_S": "1.5"}
    config = upstream_config("billing-agent", "http://b/agui", env)
    assert (config.idle_timeout_s, config.run_timeout_s, config.connect_timeout_s) == (3, 70, 1.5)
    assert (config.verify, config.ca_file, config.concurrency, config.retries) == (
        False, "/etc/ca.pem", 4, 0)
    assert config.headers == {}
    other = upstream_config("other", "http://o/agui", env)
    assert (other.idle_timeout_s, other.verify, other.concurrency, other.retries) == (
        7, True, 64, 2)


def test_headers_read_as_json_or_name_value_pairs_and_stay_out_of_reprs() -> None:
    env = {"AGUI_UPSTREAM_A_HEADERS": "Authorization: Bearer t0ken; X-Team:  blue ;"}
    config = upstream_config("a", "http://a/agui", env)
    assert config.headers == {"Authorization": "Bearer t0ken", "X-Team": "blue"}
    assert "t0ken" not in repr(config)
    assert parse_headers('{"Authorization": "Bearer j"}', "V") == {"Authorization": "Bearer j"}
    assert parse_headers("  ", "V") == {}


@pytest.mark.parametrize(("variable", "value", "why"), [
    ("HEADERS", "{not json", "not a JSON object"),
    ("HEADERS", '{"A": 1}', "string values"),
    ("HEADERS", "no colon here", "no ':'"),
    ("HEADERS", "Bad Name: v", "not a valid header"),
    ("IDLE_TIMEOUT_S", "soon", "not a number"),
    ("RUN_TIMEOUT_S", "0", "at least"),
    ("CONCURRENCY", "0", "at least 1"),
    ("CONCURRENCY", "2.5", "not a number"),
    ("VERIFY", "maybe", "true or false"),
])
def test_a_bad_setting_is_refused_naming_its_variable(variable: str, value: str,
                                                     why: str) -> None:
    name = f"AGUI_UPSTREAM_A_{variable}"
    with pytest.raises(AgentLoadError, match=why) as caught:
        upstream_config("a", "http://a/agui", {name: value})
    assert name in str(caught.value)
    assert value not in str(caught.value) or variable != "HEADERS"


def test_what_messages_name_of_an_upstream_and_its_answers_is_bounded() -> None:
    assert safe_url("https://user:pw@h:8443/agui?token=x") == "https://h:8443/agui"
    assert quoted(b'{"title":\n  "down"}') == '{"title": "down"}'
    long = quoted(b"x" * 5000)
    assert len(long) == 501
    assert long.endswith("…")
    assert quoted(b"\xff ok") == "\ufffd ok"


class Chunks(httpx.AsyncByteStream):
    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk


async def read(stream: BoundedStream) -> bytes:
    return b"".join([chunk async for chunk in stream])


async def test_the_bounded_stream_counts_bytes_since_the_last_event_end() -> None:
    event = b"data: " + b"x" * 90 + b"\n\n"  # 98 bytes, an event each
    # many events, each under the limit, boundaries split across chunks (\r\n\r\n too)
    body = (event * 5 + b"data: y\r\n\r\n") * 3
    chunks = [body[i:i + 7] for i in range(0, len(body), 7)]
    assert await read(BoundedStream(Chunks(*chunks), 100)) == body
    with pytest.raises(EventTooLongError, match="over 100 bytes"):
        await read(BoundedStream(Chunks(event, b"data: " + b"z" * 50, b"z" * 50), 100))
