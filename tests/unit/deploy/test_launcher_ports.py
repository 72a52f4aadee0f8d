"""The launcher's port check judges a port as the broker's bind will: TIME_WAIT is free.

Kafka binds its listeners with SO_REUSEADDR, so a broker restarts on its own
ports at once although the connections it accepted linger in TIME_WAIT for a
minute. The launcher checks a requested port before starting the JVM; that
check must not call such a port busy, and must still refuse one another
process listens on.
"""

from __future__ import annotations

import socket

import pytest

from deploy.kafka import launcher, probe

pytestmark = pytest.mark.unit


@pytest.fixture
def port_in_time_wait() -> int:
    """A loopback port with no listener, left with a connection in TIME_WAIT.

    The side that closes a TCP connection first keeps it in TIME_WAIT: here
    the accepting side, as a broker stopping closes its clients' connections.
    The listener sets SO_REUSEADDR as the JVM's server sockets do (the
    connections it accepts inherit it, and so does their TIME_WAIT).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((launcher.HOST, 0))
        listener.listen()
        port: int = listener.getsockname()[1]
        client = socket.create_connection((launcher.HOST, port), timeout=5)
        accepted, _ = listener.accept()
        accepted.close()  # the server's end closes first: TIME_WAIT on ``port``
        client.recv(1)  # the FIN arrived
        client.close()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((launcher.HOST, port))
        except OSError:
            pass
        else:
            pytest.fail(f"port {port} was expected in TIME_WAIT but binds without SO_REUSEADDR")
    return port


def test_a_port_in_time_wait_can_be_asked_for_again(port_in_time_wait: int) -> None:
    ports = launcher._choose_ports(port_in_time_wait, None, None)
    assert ports["port"] == port_in_time_wait


def test_a_port_another_process_listens_on_is_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind((launcher.HOST, 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(launcher.BrokerError, match="already in use"):
            launcher._choose_ports(port, None, None)


def test_a_picked_port_is_outside_the_range_outgoing_connections_take() -> None:
    """A port the OS picks for a listener may be taken by any process's next outgoing
    connection before the child it is meant for binds it; a picked port is below the
    kernel's ephemeral range, which outgoing connections never leave."""
    start = probe._ephemeral_start()
    picked = {launcher.free_port() for _ in range(50)}
    assert all(probe.LOWEST_PICKED <= port < start for port in picked)
    assert len(picked) > 40  # random over the range, not the same few ports


def test_two_adjacent_ports_are_both_free() -> None:
    port = launcher.free_port(count=2)
    for taken in (port, port + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((launcher.HOST, taken))


def test_a_port_with_a_listener_is_never_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind((launcher.HOST, launcher.free_port()))
        listener.listen()
        taken = listener.getsockname()[1]
        picks = iter([taken, taken, taken + 1 if taken + 1 < 32_000 else taken - 1])
        monkeypatch.setattr(probe.random, "randrange", lambda *_: next(picks))
        assert launcher.free_port() != taken
