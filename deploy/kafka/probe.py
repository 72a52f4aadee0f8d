"""Is something listening, and is it Kafka: socket-level checks with no client library.

The launcher runs before the virtualenv has aiokafka, so readiness is proven
with real Kafka requests written by hand: ``api_versions`` sends an
ApiVersions v0 request (a few lines of ``struct``) and reads the reply, and
``metadata`` a Metadata v1 request, which names the live brokers and each
partition's leader, replicas and in-sync replicas (a cluster's readiness). The
port helpers judge a port as the broker's own bind will (SO_REUSEADDR), so a
port left in TIME_WAIT by a stopped broker counts as free.
"""

from __future__ import annotations

import random
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from deploy.kafka.defaults import HOST

METADATA_API = 3
API_VERSIONS_API = 18


def api_versions(host: str, port: int, timeout: float = 2.0) -> dict[int, tuple[int, int]]:
    """One Kafka ApiVersions v0 round trip; returns {api_key: (min, max)}.

    Raises OSError when nothing answers, ValueError on a malformed or error reply.
    """
    correlation, body = _round_trip(host, port, API_VERSIONS_API, 0, b"", timeout)
    got, error, count = struct.unpack_from(">ihi", body)
    if got != correlation or error != 0 or len(body) < 10 + 6 * count:
        raise ValueError(f"bad ApiVersions reply (correlation {got}, error {error})")
    return {key: (lo, hi) for key, lo, hi in struct.iter_unpack(">hhh", body[10 : 10 + 6 * count])}


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as the metadata reports it (``leader`` -1: none)."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class Metadata:
    """A broker's view of the cluster: live brokers by node id, partitions of every topic."""

    brokers: dict[int, tuple[str, int]]
    controller: int
    partitions: tuple[PartitionInfo, ...]

    def under_replicated(self) -> list[PartitionInfo]:
        """Partitions with no leader or an in-sync set smaller than their replica set."""
        return [p for p in self.partitions if p.leader < 0 or set(p.isr) != set(p.replicas)]


def metadata(host: str, port: int, timeout: float = 2.0) -> Metadata:
    """One Metadata v1 round trip for all topics (internal ones included).

    Raises OSError when nothing answers, ValueError on a malformed reply.
    """
    every_topic = struct.pack(">i", -1)  # a null topic array
    correlation, body = _round_trip(host, port, METADATA_API, 1, every_topic, timeout)
    reader = _Reader(body)
    try:
        if reader.int32() != correlation:
            raise ValueError("Metadata reply for another request")
        brokers: dict[int, tuple[str, int]] = {}
        for _ in range(reader.int32()):
            node, host_name, node_port = reader.int32(), reader.string(), reader.int32()
            reader.string()  # rack
            brokers[node] = (host_name or "", node_port)
        controller = reader.int32()
        partitions: list[PartitionInfo] = []
        for _ in range(reader.int32()):
            reader.int16()  # topic error code
            topic = reader.string() or ""
            reader.int8()  # is_internal
            for _ in range(reader.int32()):
                reader.int16()  # partition error code (leader -1 says what matters)
                index, leader = reader.int32(), reader.int32()
                replicas, isr = reader.int32s(), reader.int32s()
                partitions.append(PartitionInfo(topic, index, leader, replicas, isr))
    except struct.error as exc:
        raise ValueError(f"malformed Metadata reply: {exc}") from exc
    return Metadata(brokers, controller, tuple(partitions))


class _Reader:
    """Big-endian Kafka primitives read off one response body."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.at = 0

    def _take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.body, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def int8(self) -> int:
        return self._take(">b")

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def string(self) -> str | None:
        size = self.int16()
        if size < 0:
            return None
        raw = self.body[self.at : self.at + size]
        if len(raw) != size:
            raise struct.error("string past the end of the reply")
        self.at += size
        return raw.decode()

    def int32s(self) -> tuple[int, ...]:
        return tuple(self.int32() for _ in range(max(self.int32(), 0)))


def answers(bootstrap: str, timeout: float = 2.0) -> bool:
    """True when ``host:port`` speaks the Kafka protocol (and serves Metadata)."""
    host, _, port = bootstrap.rpartition(":")
    try:
        return METADATA_API in api_versions(host, int(port), timeout)
    except (OSError, ValueError, struct.error):
        return False


def _round_trip(
    host: str, port: int, api: int, version: int, payload: bytes, timeout: float
) -> tuple[int, bytes]:
    """Send one request (header v1: key, version, correlation, client id); its reply body."""
    client_id = b"agui-relay-launcher"
    correlation = random.randrange(1, 2**31)
    header = struct.pack(">hhih", api, version, correlation, len(client_id)) + client_id
    request = header + payload
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(request)) + request)
        (size,) = struct.unpack(">i", recv_exact(sock, 4))
        return correlation, recv_exact(sock, size)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock``; ConnectionError if it closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-reply")
        buf += chunk
    return bytes(buf)


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PICKED = 10_000


def _ephemeral_start() -> int:
    """Where the kernel starts picking ports for outgoing connections (32768 by default)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port(host: str = HOST, *, count: int = 1) -> int:
    """A TCP port on ``host`` (with the ``count - 1`` after it) free right now, for a
    process started next to bind.

    Picked below the kernel's ephemeral range: a port the OS hands out (bind to 0) is
    also what the next outgoing connection of any process may take before the child
    binds it ("Address already in use"), and a test run makes thousands of those.
    """
    top = _ephemeral_start() - count
    if top <= LOWEST_PICKED:
        return _os_picked(host, count)
    for _ in range(500):
        port = random.randrange(LOWEST_PICKED, top)
        if all(_bindable(host, port + i) for i in range(count)):
            return port
    return _os_picked(host, count)


def _os_picked(host: str, count: int) -> int:
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
        if port + count <= 65536 and all(_bindable(host, port + i) for i in range(count)):
            return port
    raise OSError(f"no {count} adjacent free ports on {host}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def port_free(port: int, host: str = HOST) -> bool:
    """True when the broker could bind ``port`` now.

    SO_REUSEADDR, as the JVM binds Kafka's listeners: connections a stopped
    broker leaves in TIME_WAIT on its port (for a minute) do not make it busy,
    while a process listening on it still does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True
