"""Which ``Host`` an instance answers: the guard against DNS rebinding. Pure, no I/O.

An instance listening on loopback with authentication off (``make run``,
``agui-relay up``) answers any local client, and a web page is one: a page
on ``attacker.example`` whose name is re-pointed at 127.0.0.1 after it has
loaded sends its requests to the instance as same-origin requests, with
``Host: attacker.example``, and could read the inbox and answer interrupts
(found by probing). A browser always sends the name it resolved, so an
instance on loopback answers only the names that mean loopback, its own
advertised host and listen address, and IP literals (a page can rebind a
name, never an address: a request with ``Host: 1.2.3.4`` went where that
address goes); ``AGUI_ALLOWED_HOSTS`` names others, or ``*`` for any. An
instance listening on other interfaces answers any ``Host`` unless the
setting lists some: behind a load balancer the names are the operator's.
An HTTP/1.0 request without ``Host`` is no browser's, and is answered.

RFC 9112 section 3.2 asks more of the ``Host`` lines themselves
(``host_lines_fault``): an HTTP/1.1 request without one, or any request with
two, is a ``400``. Each name was checked line by line, so two allowed names
passed, and a proxy in front that takes the other line than this service
checked routes and logs the request under another name.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({b"localhost", b"127.0.0.1", b"::1"})


def host_name(value: bytes) -> bytes:
    """A ``Host`` header's name: lower case, without its port or an IPv6 literal's
    brackets (``[::1]:8000`` → ``::1``), and without a final dot."""
    value = value.strip().lower()
    if value.startswith(b"["):
        return value[1:value.find(b"]")] if b"]" in value else value
    name, _, _ = value.partition(b":")
    return name.rstrip(b".")


def is_loopback(host: str) -> bool:
    """Whether a listen address is loopback only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(setting: str | None, http_host: str,
                  advertised_url: str | None) -> frozenset[bytes] | None:
    """The ``Host`` names answered (None: any), from ``AGUI_ALLOWED_HOSTS`` (comma
    separated names, or ``*``), the listen address and the advertised URL."""
    if setting is not None and setting.strip() == "*":
        return None
    own = {host_name(http_host.encode())}
    if advertised_url is not None:
        own.add(host_name((urlsplit(advertised_url).netloc or "").encode()))
    if setting is not None and setting.strip():
        named = {host_name(part.encode()) for part in setting.split(",") if part.strip()}
        return frozenset(named | own | LOOPBACK_NAMES)
    if not is_loopback(http_host):
        return None
    return frozenset(own | LOOPBACK_NAMES)


def host_lines_fault(http_version: str, host_lines: int) -> str | None:
    """What a head's count of ``Host`` lines breaks (None: nothing): HTTP/1.1 needs
    exactly one, any version at most one."""
    if host_lines > 1:
        return "the request has more than one Host header; send exactly one"
    if host_lines == 0 and http_version == "1.1":
        return "an HTTP/1.1 request must carry a Host header (RFC 9112 section 3.2)"
    return None


def answered(value: bytes, allowed: frozenset[bytes] | None) -> bool:
    """Whether a request with ``Host: value`` is answered (see the module docstring)."""
    if allowed is None:
        return True
    name = host_name(value)
    if name in allowed:
        return True
    try:
        ipaddress.ip_address(name.decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return False
    return True
