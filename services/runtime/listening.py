"""A service's listening socket, bound before it serves, or one line saying why not.

The consumer service (``AGUI_HTTP_HOST``/``AGUI_HTTP_PORT``) and the other
services' health door (``AGUI_HEALTH_HOST``/``AGUI_HEALTH_PORT``) bind their
socket themselves and hand it to uvicorn. A port already taken had stopped
the consumer service with 80 lines of traceback ending ``OSError: [Errno 98]
Address already in use``, naming neither the port nor the variable, and the
health door with uvicorn's line and exit status 3 (found by probing): a
``ConfigurationError`` naming both is said in one line, exit status 2, as
any setting a service cannot use.
"""

from __future__ import annotations

import socket

from services.runtime.settings import ConfigurationError


def listen(host: str, port: int, variables: str, backlog: int) -> socket.socket:
    """A socket listening on ``host:port`` (port 0: a free one), inheritable as uvicorn
    makes its own; ``variables`` names the settings, for the error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise ConfigurationError(f"{variables}: cannot listen on {where}: "
                                 f"{exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock
