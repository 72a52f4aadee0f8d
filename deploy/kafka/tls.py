"""TLS listeners for the local broker: the key material and the properties it needs.

The security tests prove that agui-relay's clients speak SSL and SASL_SSL to a
real broker, so the launcher can add those listeners when given a keystore
(the broker's certificate and key) and, for client certificates, a truststore
(the CA that signs them), both made with the JDK's ``keytool``. Standard
library only, like the launcher.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Literal

ClientAuth = Literal["none", "requested", "required"]

_LISTENER = Template(
    """
# --- ${name} listener: TLS (security tests) ---
listener.name.${name}.ssl.keystore.type=${keystore_type}
listener.name.${name}.ssl.keystore.location=${keystore}
listener.name.${name}.ssl.keystore.password=${password}
listener.name.${name}.ssl.key.password=${password}
listener.name.${name}.ssl.client.auth=${client_auth}
"""
)
_TRUST = Template(
    """listener.name.${name}.ssl.truststore.type=${truststore_type}
listener.name.${name}.ssl.truststore.location=${truststore}
listener.name.${name}.ssl.truststore.password=${truststore_password}
"""
)


@dataclass(frozen=True)
class TlsConfig:
    """Key material for the broker's TLS listeners.

    ``keystore`` holds the broker's key and certificate (its SAN must name
    127.0.0.1, which clients verify); ``truststore`` holds the CA that client
    certificates must chain to. ``client_auth`` applies to the SSL listener
    (``required`` is mutual TLS); the SASL_SSL listener authenticates clients
    by SASL and never asks for a certificate.
    """

    keystore: Path
    password: str
    truststore: Path | None = None
    truststore_password: str | None = None
    client_auth: ClientAuth = "none"

    def properties(self, listener: str) -> str:
        """The ``listener.name.<listener>.ssl.*`` lines for ``SSL`` or ``SASL_SSL``."""
        name = listener.lower()
        client_auth = self.client_auth if name == "ssl" else "none"
        text = _LISTENER.substitute(
            name=name, keystore_type=_store_type(self.keystore), keystore=self.keystore.resolve(),
            password=self.password, client_auth=client_auth,
        )
        if self.truststore is not None:
            text += _TRUST.substitute(
                name=name, truststore_type=_store_type(self.truststore),
                truststore=self.truststore.resolve(),
                truststore_password=self.truststore_password or self.password,
            )
        return text


def _store_type(path: Path) -> str:
    return "JKS" if path.suffix.lower() == ".jks" else "PKCS12"


def accepts(bootstrap: str, timeout: float = 1.0) -> bool:
    """True when ``host:port`` accepts a TCP connection (a TLS listener is up)."""
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False
