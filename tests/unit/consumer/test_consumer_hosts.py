"""``hosts``: which ``Host`` names an instance answers (the DNS rebinding guard)."""

from __future__ import annotations

import pytest

from services.consumer.hosts import (
    allowed_hosts,
    answered,
    host_lines_fault,
    host_name,
    is_loopback,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("value", "name"), [
    (b"127.0.0.1:8000", b"127.0.0.1"), (b"[::1]:8000", b"::1"), (b"[::1]", b"::1"),
    (b"LocalHost.", b"localhost"), (b" relay.internal:80 ", b"relay.internal"),
    (b"[broken", b"[broken"), (b"", b"")])
def test_a_host_headers_name_is_without_port_case_brackets_and_final_dot(
        value: bytes, name: bytes) -> None:
    assert host_name(value) == name


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.9.9.9", True), ("::1", True), ("[::1]", True),
    ("localhost", True), ("0.0.0.0", False), ("::", False), ("10.0.0.1", False),
    ("relay.internal", False)])
def test_loopback_listen_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_on_loopback_only_loopback_names_its_own_and_addresses_are_answered() -> None:
    allowed = allowed_hosts(None, "127.0.0.1", "http://relay-0.local:8000")
    for host in (b"localhost:1", b"127.0.0.1", b"[::1]:2", b"relay-0.local:8000",
                 b"10.0.0.7", b"[fe80::1]"):
        assert answered(host, allowed), host
    for host in (b"attacker.example", b"localhost.attacker.example", b"127.0.0.1.nip.io",
                 b"relay-0.local.evil"):
        assert not answered(host, allowed), host


def test_on_other_interfaces_any_host_unless_some_are_named() -> None:
    assert allowed_hosts(None, "0.0.0.0", None) is None
    assert answered(b"anything.example", None)
    named = allowed_hosts("a.example, B.example:80", "0.0.0.0", None)
    assert named is not None
    assert answered(b"b.example", named)
    assert answered(b"localhost", named)
    assert not answered(b"c.example", named)


def test_a_star_answers_any_host_even_on_loopback() -> None:
    assert allowed_hosts(" * ", "127.0.0.1", None) is None


@pytest.mark.parametrize(("version", "lines", "faulty"), [
    ("1.1", 1, False), ("1.0", 0, False), ("1.0", 1, False),
    ("1.1", 0, True), ("1.1", 2, True), ("1.0", 2, True)])
def test_http11_needs_exactly_one_host_line_and_any_request_at_most_one(
        version: str, lines: int, faulty: bool) -> None:
    assert (host_lines_fault(version, lines) is not None) is faulty
