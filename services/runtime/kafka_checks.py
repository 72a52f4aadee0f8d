"""The Kafka connection settings checked as values, before any client is built.

``KafkaSettings`` took any text for ``KAFKA_BOOTSTRAP_SERVERS`` and any path
for the TLS files; aiokafka (or ``ssl``) then failed at the first client
built, deep in a service's start: a page of traceback, exit status 1, and a
last line naming neither the variable nor the value (``invalid literal for
int()``, ``[Errno 2] No such file or directory``; found by probing). Each
check returns what is wrong in the operator's terms, naming the variable,
or None; the settings class raises it so every service and command refuses
the value at start, one line, exit status 2 (the bootstrap check's line is
put under the variable's name by pydantic, the TLS check's names its own).
Values are not echoed (a broker entry is named by its place in the list),
but for the TLS files' paths.
"""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path


def _port_problem(which: str, port: str) -> str | None:
    if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        return f"{which}: the port is not a number from 1 to 65535"
    return None


def bootstrap_problem(servers: str) -> str | None:
    """``host:port`` entries, comma separated, as aiokafka reads them (``host`` alone uses
    port 9092; an IPv6 address with a port is written ``[addr]:port``)."""
    entries = [entry.strip() for entry in servers.strip().split(",")]
    if entries == [""]:
        return "is empty: name the brokers, host:port[,host:port...]"
    for number, entry in enumerate(entries, 1):
        which = f"entry {number} of {len(entries)}"
        if not entry:
            return f"{which} is empty (two commas in a row?)"
        if entry.startswith("["):
            host, bracket, rest = entry[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                return f"{which}: write an IPv6 address as [addr]:port"
            port = rest[1:] if rest else None
        elif entry.count(":") > 1:  # a bare IPv6 address: no port can be told apart
            host, port = entry, None
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                return f"{which}: expected host:port"
        else:
            host, colon, given = entry.partition(":")
            port = given if colon else None
        if not host or any(c.isspace() for c in host):
            return f"{which}: expected host:port"
        if port is not None and (problem := _port_problem(which, port)):
            return problem
    return None


def _unreadable(name: str, path: Path) -> str | None:
    try:
        with path.open("rb") as file:
            file.read(1)
    except OSError as exc:
        return f"{name}: {path} cannot be read ({exc.strerror or exc})"
    return None


def tls_problem(cafile: Path | None, certfile: Path | None, keyfile: Path | None,
                key_password: str) -> str | None:
    """The TLS files readable and loadable as the clients will load them (the context is
    built once here and dropped: cheap, and the only way to know a key and its password
    go together). ``key_password`` is always given (empty when none is set), as the
    clients give it: without one OpenSSL prompts on the terminal for an encrypted key."""
    for name, path in (("KAFKA_SSL_CAFILE", cafile), ("KAFKA_SSL_CERTFILE", certfile),
                       ("KAFKA_SSL_KEYFILE", keyfile)):
        if path is not None and (problem := _unreadable(name, path)):
            return problem
    try:
        context = ssl.create_default_context(cafile=str(cafile) if cafile else None)
    except ssl.SSLError as exc:
        return f"KAFKA_SSL_CAFILE: {cafile} holds no usable PEM certificate ({exc.reason})"
    if certfile is None:
        return None
    try:
        context.load_cert_chain(str(certfile), str(keyfile) if keyfile else None,
                                password=key_password)
    except ssl.SSLError as exc:
        return (f"KAFKA_SSL_CERTFILE / KAFKA_SSL_KEYFILE: {certfile}"
                f"{f' with {keyfile}' if keyfile else ''} is no usable PEM certificate "
                f"and private key, or KAFKA_SSL_KEY_PASSWORD does not open the key "
                f"({exc.reason})")
    return None
