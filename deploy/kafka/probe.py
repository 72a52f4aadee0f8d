"""Is something listening, and is it Kafka: socket-level checks with no client library.

The launcher runs before the virtualenv has aiokafka, so readiness is proven
with a real Kafka request written by hand: ``api_versions`` sends an
ApiVersions v0 request (a few lines of ``struct``) and reads the reply. The
port helpers judge a port as the broker's own bind will (SO_REUSEADDR), so a
port left in TIME_WAIT by a stopped broker counts as free.
"""

from __future__ import annotations

import random
import socket
import struct

from deploy.kafka.defaults import HOST

METADATA_API = 3
API_VERSIONS_API = 18


def api_versions(host: str, port: int, timeout: float = 2.0) -> dict[int, tuple[int, int]]:
    """One Kafka ApiVersions v0 round trip; returns {api_key: (min, max)}.

    Raises OSError when nothing answers, ValueError on a malformed or error reply.
    """
    client_id = b"agui-relay-launcher"
    correlation = random.randrange(1, 2**31)
    request = struct.pack(">hhih", API_VERSIONS_API, 0, correlation, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(request)) + request)
        (size,) = struct.unpack(">i", recv_exact(sock, 4))
        body = recv_exact(sock, size)
    got, error, count = struct.unpack_from(">ihi", body)
    if got != correlation or error != 0 or len(body) < 10 + 6 * count:
        raise ValueError(f"bad ApiVersions reply (correlation {got}, error {error})")
    return {key: (lo, hi) for key, lo, hi in struct.iter_unpack(">hhh", body[10 : 10 + 6 * count])}


def answers(bootstrap: str, timeout: float = 2.0) -> bool:
    """True when ``host:port`` speaks the Kafka protocol (and serves Metadata)."""
    host, _, port = bootstrap.rpartition(":")
    try:
        return METADATA_API in api_versions(host, int(port), timeout)
    except (OSError, ValueError, struct.error):
        return False


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock``; ConnectionError if it closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-reply")
        buf += chunk
    return bytes(buf)


def free_port(host: str = HOST) -> int:
    """A TCP port on ``host`` that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


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
