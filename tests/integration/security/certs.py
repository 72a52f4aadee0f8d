"""Throw-away TLS material for the security tests, made with the JDK's keytool.

A test CA signs the broker's certificate (SAN 127.0.0.1, which clients verify)
and a client certificate for mutual TLS; a self-signed "rogue" certificate
that the broker does not trust stands for an intruder. The broker gets PKCS12
key and trust stores; clients get PEM files (the CA to trust, their own
certificate and key). keytool cannot export a private key, so the client keys
(and, to spare JVM starts, the certificates) are taken out of their PKCS12
stores with ``openssl pkcs12`` (a format conversion only; every key and
certificate is made and signed by keytool), the keys encrypted
with ``key_password`` so the tests also prove KAFKA_SSL_KEY_PASSWORD.
"""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

STORE_PASSWORD = "store-pass-1"
KEY_PASSWORD = "client-key-pass-1"
VALIDITY_DAYS = "2"
INSTALL_HINT = "install a JDK 17+ (keytool) and openssl: apt-get install openjdk-17-jdk openssl"


@dataclass(frozen=True)
class Certificates:
    """Paths of everything the broker and the clients need."""

    ca_pem: Path
    broker_keystore: Path
    truststore: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path
    rogue_key: Path
    store_password: str = STORE_PASSWORD
    key_password: str = KEY_PASSWORD


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"`{name}` is not on PATH; {INSTALL_HINT}", pytrace=False)
    return found


def _run(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"$ {' '.join(cmd)}\n{done.stdout}{done.stderr}")


# A short-lived JVM: the C1 compiler and the serial collector halve keytool's start-up.
_FAST_JVM = ("-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "-J-Xshare:auto")


def _keytool(*args: str) -> None:
    _run(_tool("keytool"), *_FAST_JVM, *args, "-noprompt", "-storepass", STORE_PASSWORD)


def _new_key(store: Path, alias: str, dname: str, *ext: str) -> None:
    _keytool("-genkeypair", "-alias", alias, "-keyalg", "EC", "-groupname", "secp256r1",
             "-dname", dname, "-validity", VALIDITY_DAYS, "-storetype", "PKCS12",
             "-keystore", str(store), *ext)


def _export_cert(store: Path, pem: Path) -> None:
    """The store's certificate as PEM (openssl: the same bytes, without a JVM start)."""
    _run(_tool("openssl"), "pkcs12", "-in", str(store), "-nokeys", "-clcerts",
         "-passin", f"pass:{STORE_PASSWORD}", "-out", str(pem))


def _signed(root: Path, ca: Path, ca_pem: Path, name: str, dname: str, *ext: str) -> Path:
    """A key in ``<name>.p12`` whose certificate the CA signed (chain imported)."""
    store, csr, pem = root / f"{name}.p12", root / f"{name}.csr", root / f"{name}.pem"
    _new_key(store, name, dname)
    _keytool("-certreq", "-alias", name, "-keystore", str(store), "-file", str(csr))
    _keytool("-gencert", "-alias", "ca", "-keystore", str(ca), "-infile", str(csr),
             "-outfile", str(pem), "-rfc", "-validity", VALIDITY_DAYS, *ext)
    chain = root / f"{name}-chain.pem"
    chain.write_text(pem.read_text() + ca_pem.read_text())
    _keytool("-importcert", "-alias", name, "-keystore", str(store), "-file", str(chain))
    return store


def _pem_key(store: Path, out: Path) -> None:
    _run(_tool("openssl"), "pkcs12", "-in", str(store), "-nocerts",
         "-passin", f"pass:{STORE_PASSWORD}", "-passout", f"pass:{KEY_PASSWORD}", "-out", str(out))


def _rogue(root: Path) -> tuple[Path, Path]:
    store = root / "rogue.p12"
    _new_key(store, "rogue", "CN=rogue-client")
    _export_cert(store, root / "rogue.pem")
    _pem_key(store, root / "rogue.key")
    return root / "rogue.pem", root / "rogue.key"


def _client(root: Path, ca: Path, ca_pem: Path) -> tuple[Path, Path]:
    store = _signed(root, ca, ca_pem, "client", "CN=agui-relay-client",
                    "-ext", "KU:c=digitalSignature", "-ext", "EKU=clientAuth")
    _pem_key(store, root / "client.key")
    return root / "client.pem", root / "client.key"


def make_certificates(root: Path) -> Certificates:
    """Make the CA, the broker's stores and the client PEMs under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    ca, ca_pem = root / "ca.p12", root / "ca.pem"
    _new_key(ca, "ca", "CN=agui-relay test CA", "-ext", "bc:c=ca:true",
             "-ext", "KU:c=keyCertSign,cRLSign")
    _export_cert(ca, ca_pem)
    truststore = root / "truststore.p12"
    with ThreadPoolExecutor(max_workers=3) as pool:
        broker = pool.submit(
            _signed, root, ca, ca_pem, "broker", "CN=127.0.0.1",
            "-ext", "SAN=ip:127.0.0.1,dns:localhost",
            "-ext", "KU:c=digitalSignature,keyEncipherment", "-ext", "EKU=serverAuth",
        )
        client = pool.submit(_client, root, ca, ca_pem)
        rogue = pool.submit(_rogue, root)
        _keytool("-importcert", "-alias", "ca", "-file", str(ca_pem), "-storetype", "PKCS12",
                 "-keystore", str(truststore))
        client_cert, client_key = client.result()
        rogue_cert, rogue_key = rogue.result()
        broker_keystore = broker.result()
    return Certificates(
        ca_pem=ca_pem, broker_keystore=broker_keystore, truststore=truststore,
        client_cert=client_cert, client_key=client_key,
        rogue_cert=rogue_cert, rogue_key=rogue_key,
    )
