"""``KAFKA_BOOTSTRAP_SERVERS`` read as aiokafka reads it, refused when no client could use it."""

from __future__ import annotations

import pytest

from services.runtime.kafka_checks import bootstrap_problem

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("servers", [
    "127.0.0.1:9092", "kafka-0:9092, kafka-1:9093", "broker", "[::1]:9092", "::1", "[::1]",
    "b:1,b:65535",
])
def test_what_aiokafka_reads_passes(servers: str) -> None:
    assert bootstrap_problem(servers) is None


@pytest.mark.parametrize(("servers", "said"), [
    ("127.0.0.1:notaport", "entry 1 of 1: the port is not a number from 1 to 65535"),
    ("a:1,b:0", "entry 2 of 2: the port"),
    ("a:99999", "the port"),
    ("a:١٢", "the port"),  # Arabic-Indic digits: int() takes them, a socket would not
    ("a:", "the port"),
    ("", "is empty"),
    ("a:1,,b:2", "entry 2 of 3 is empty"),
    (":9092", "expected host:port"),
    ("a b:9092", "expected host:port"),
    ("[::1]9092", "[addr]:port"),
    ("fe80::zz", "expected host:port"),
])
def test_what_no_client_could_use_is_said(servers: str, said: str) -> None:
    assert said in (bootstrap_problem(servers) or ""), bootstrap_problem(servers)
