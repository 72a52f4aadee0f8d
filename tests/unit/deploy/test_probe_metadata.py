"""The launcher's hand-written Metadata v1 request reads the cluster as Kafka writes it.

The cluster's readiness (every broker listed) and ``wait_in_sync`` (every
replica back in the ISR) rest on this parser, written with ``struct`` because
the launcher runs without the virtualenv. A loopback server replies with a
Metadata v1 body built field by field as the protocol defines it (brokers
with and without a rack, a partition without a leader, a shrunk ISR); a
reply cut short is a ValueError, never a wrong answer.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from deploy.kafka.probe import PartitionInfo, metadata

pytestmark = pytest.mark.unit


def _string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    return struct.pack(">h", len(value)) + value.encode()


def _int32s(values: list[int]) -> bytes:
    return struct.pack(">i", len(values)) + b"".join(struct.pack(">i", v) for v in values)


def _body(correlation: int) -> bytes:
    brokers = [(1, "127.0.0.1", 9092, None), (2, "127.0.0.1", 9094, "r1")]
    out = struct.pack(">ii", correlation, len(brokers))
    for node, host, port, rack in brokers:
        out += struct.pack(">i", node) + _string(host) + struct.pack(">i", port) + _string(rack)
    out += struct.pack(">i", 2)  # controller id
    partitions = [(0, 1, [1, 2, 3], [1, 2, 3]), (1, -1, [2, 3, 1], [2]), (2, 3, [3, 1], [1, 3])]
    out += struct.pack(">i", 1) + struct.pack(">h", 0) + _string("t.events") + struct.pack(">b", 0)
    out += struct.pack(">i", len(partitions))
    for index, leader, replicas, isr in partitions:
        out += struct.pack(">hii", 0, index, leader) + _int32s(replicas) + _int32s(isr)
    return out


@pytest.fixture
def server() -> Iterator[tuple[int, list[bytes], list[int]]]:
    """A one-shot server per connection: replies with ``_body`` cut to ``cut[0]`` bytes."""
    requests: list[bytes] = []
    cut = [0]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.1)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                (size,) = struct.unpack(">i", conn.recv(4))
                request = conn.recv(size)
                requests.append(request)
                (correlation,) = struct.unpack_from(">i", request, 4)
                body = _body(correlation)
                body = body[: cut[0]] if cut[0] else body
                conn.sendall(struct.pack(">i", len(body)) + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], requests, cut
    finally:
        done.set()
        thread.join(timeout=5)
        listener.close()


def test_brokers_controller_and_partitions_are_read_field_by_field(
        server: tuple[int, list[bytes], list[int]]) -> None:
    port, requests, _ = server
    meta = metadata("127.0.0.1", port)
    assert meta.brokers == {1: ("127.0.0.1", 9092), 2: ("127.0.0.1", 9094)}
    assert meta.controller == 2
    assert meta.partitions == (
        PartitionInfo("t.events", 0, 1, (1, 2, 3), (1, 2, 3)),
        PartitionInfo("t.events", 1, -1, (2, 3, 1), (2,)),
        PartitionInfo("t.events", 2, 3, (3, 1), (1, 3)),
    )
    api_key, version = struct.unpack_from(">hh", requests[0])
    assert (api_key, version) == (3, 1)
    assert requests[0].endswith(struct.pack(">i", -1)), "a null topic array asks for every topic"


def test_under_replicated_names_a_leaderless_or_shrunk_partition_only(
        server: tuple[int, list[bytes], list[int]]) -> None:
    port, _, _ = server
    assert [p.partition for p in metadata("127.0.0.1", port).under_replicated()] == [1]


def test_a_reply_cut_short_is_an_error(server: tuple[int, list[bytes], list[int]]) -> None:
    port, _, cut = server
    cut[0] = len(_body(0)) - 5
    with pytest.raises(ValueError, match="malformed"):
        metadata("127.0.0.1", port)
