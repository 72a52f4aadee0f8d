"""agui-relay's own Kafka clients over SASL and TLS, configured only by environment.

Every test builds ``KafkaSettings`` from the environment variables a deployment
sets (``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_*``, ``KAFKA_SSL_*``) and then
uses the project's factories (``ensure_topics``, ``new_producer``,
``new_consumer``) to create the topic catalog and round-trip a record through
the real broker: SASL_PLAINTEXT with PLAIN and SCRAM-SHA-256/512 on the session
broker's SASL listener; SSL (server-verified, and with a client certificate)
and SASL_SSL on a broker of this module's own whose certificates keytool made.
Wrong passwords, untrusted brokers and untrusted client certificates are
refused; no secret shows in ``repr``, in dumps or in the clients' logs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pydantic import ValidationError

from deploy.kafka import launcher
from deploy.kafka.tls import TlsConfig
from services.kafka.admin import ensure_topics
from services.kafka.clients import KafkaError, new_consumer, new_producer
from services.runtime.settings import KafkaSettings
from tests.integration.security.certs import Certificates, make_certificates

if TYPE_CHECKING:
    from conftest import SaslEndpoint

pytestmark = pytest.mark.integration

TLS_USER = "relay-tls"
TLS_PASSWORD = "tls-user-pass-7"
READ_TIMEOUT_S = 20.0
REFUSAL_TIMEOUT_S = 30.0
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class TlsBroker:
    """This module's broker (SSL and SASL_SSL listeners) and its certificates."""

    broker: launcher.Broker
    certs: Certificates

    @property
    def ssl(self) -> str:
        assert self.broker.ssl_bootstrap is not None
        return self.broker.ssl_bootstrap

    @property
    def sasl_ssl(self) -> str:
        assert self.broker.sasl_ssl_bootstrap is not None
        return self.broker.sasl_ssl_bootstrap


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    """A local broker with TLS listeners; SSL asks for (and verifies) client certificates."""
    root = tmp_path_factory.mktemp("kafka-tls")
    certs = make_certificates(root / "certs")
    tls = TlsConfig(keystore=certs.broker_keystore, password=certs.store_password,
                    truststore=certs.truststore, client_auth="requested")
    try:
        launcher.fetch(quiet=True)
        broker = launcher.start(root / "broker", ssl_port=0, sasl_ssl_port=0, tls=tls,
                                scram_users={TLS_USER: TLS_PASSWORD}, ready_timeout=90,
                                quiet=True)
    except launcher.LauncherError as exc:
        pytest.fail(f"could not start the TLS broker: {exc}\n"
                    "fetch the jars: python -m deploy.kafka.launcher fetch", pytrace=False)
    try:
        yield TlsBroker(broker, certs)
    finally:
        broker.stop()


def settings_from_env(monkeypatch: pytest.MonkeyPatch, **env: str | Path) -> KafkaSettings:
    """``KafkaSettings`` as a service builds it: from these variables and nothing else."""
    for name in [f.alias for f in KafkaSettings.model_fields.values() if f.alias]:
        monkeypatch.delenv(str(name), raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("AGUI_TOPIC_PREFIX", f"sec{uuid.uuid4().hex[:10]}")
    monkeypatch.setenv("AGUI_PARTITIONS", "1")
    return KafkaSettings()


async def round_trip(settings: KafkaSettings) -> bytes:
    """Create the catalog, send one record to ``requests``, read it back; all over ``settings``."""
    reports = await ensure_topics(settings)
    assert all(r.created for r in reports)
    topic = settings.topics.requests
    value = f"over {settings.security_protocol} {uuid.uuid4().hex}".encode()
    producer = new_producer(settings, "security-test")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=b"thread-1")
    finally:
        await producer.stop()
    consumer = new_consumer(settings, "security-test", topic)
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), READ_TIMEOUT_S)
    finally:
        await consumer.stop()
    assert record.value == value
    return value


async def refused(settings: KafkaSettings) -> KafkaError:
    """The error a producer built from ``settings`` fails to start with."""
    producer = new_producer(settings, "security-test-refused")
    try:
        async with asyncio.timeout(REFUSAL_TIMEOUT_S):
            await producer.start()
    except KafkaError as exc:
        return exc
    finally:
        await producer.stop()
    pytest.fail(f"{settings.security_protocol} connection was accepted")


def assert_no_secret(texts: list[str], *secrets: str) -> None:
    leaked = [s for s in secrets for t in texts if s in t]
    assert not leaked, f"secret(s) found in output: {len(leaked)}"


# --------------------------------------------------------------------------- SASL_PLAINTEXT


@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
async def test_sasl_plaintext_round_trip_from_env(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    kafka_sasl: SaslEndpoint, mechanism: str,
) -> None:
    settings = settings_from_env(
        monkeypatch, KAFKA_BOOTSTRAP_SERVERS=kafka_sasl.bootstrap,
        KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT", KAFKA_SASL_MECHANISM=mechanism,
        KAFKA_SASL_USERNAME=kafka_sasl.username, KAFKA_SASL_PASSWORD=kafka_sasl.password,
    )
    assert settings.sasl_mechanism == mechanism
    with caplog.at_level(logging.DEBUG), caplog.at_level(logging.DEBUG, logger="aiokafka"):
        await round_trip(settings)
    assert_no_secret([caplog.text, repr(settings), str(settings), settings.model_dump_json()],
                     kafka_sasl.password)


@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
async def test_sasl_plaintext_refuses_a_wrong_password(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    kafka_sasl: SaslEndpoint, mechanism: str,
) -> None:
    wrong = f"not-{kafka_sasl.password}-{mechanism}"
    settings = settings_from_env(
        monkeypatch, KAFKA_BOOTSTRAP_SERVERS=kafka_sasl.bootstrap,
        KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT", KAFKA_SASL_MECHANISM=mechanism,
        KAFKA_SASL_USERNAME=kafka_sasl.username, KAFKA_SASL_PASSWORD=wrong,
    )
    with caplog.at_level(logging.DEBUG), caplog.at_level(logging.DEBUG, logger="aiokafka"):
        error = await refused(settings)
    assert "SaslAuthenticationFailed" in caplog.text, error
    assert "Authentication failed" in caplog.text
    assert_no_secret([caplog.text, repr(error)], wrong)


def test_incomplete_sasl_settings_fail_at_startup_without_echoing_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValidationError) as caught:
        settings_from_env(monkeypatch, KAFKA_SECURITY_PROTOCOL="SASL_SSL",
                          KAFKA_SASL_PASSWORD="only-a-password-4")
    assert "KAFKA_SASL_USERNAME" in str(caught.value)
    assert_no_secret([str(caught.value), repr(caught.value)], "only-a-password-4")
    with pytest.raises(ValidationError, match="KAFKA_SSL_CERTFILE"):
        settings_from_env(monkeypatch, KAFKA_SECURITY_PROTOCOL="SSL",
                          KAFKA_SSL_KEYFILE="/nonexistent/client.key")


# --------------------------------------------------------------------------- TLS


def ssl_settings(
    monkeypatch: pytest.MonkeyPatch, tls_broker: TlsBroker, client: str | None = None,
    ca: Path | None = None, key_password: bool = True,
) -> KafkaSettings:
    """SSL settings from env: trust ``ca`` (the test CA), present ``client``'s certificate."""
    certs = tls_broker.certs
    env: dict[str, str | Path] = {"KAFKA_SSL_CAFILE": ca or certs.ca_pem}
    if client is not None:
        env["KAFKA_SSL_CERTFILE"] = getattr(certs, f"{client}_cert")
        env["KAFKA_SSL_KEYFILE"] = getattr(certs, f"{client}_key")
        if key_password:
            env["KAFKA_SSL_KEY_PASSWORD"] = certs.key_password
    return settings_from_env(monkeypatch, KAFKA_BOOTSTRAP_SERVERS=tls_broker.ssl,
                             KAFKA_SECURITY_PROTOCOL="SSL", **env)


async def test_ssl_round_trip_verifying_the_broker_against_the_ca(
    monkeypatch: pytest.MonkeyPatch, tls_broker: TlsBroker,
) -> None:
    settings = ssl_settings(monkeypatch, tls_broker)
    assert settings.ssl_cafile == tls_broker.certs.ca_pem
    await round_trip(settings)


async def test_ssl_round_trip_with_a_client_certificate(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tls_broker: TlsBroker,
) -> None:
    settings = ssl_settings(monkeypatch, tls_broker, client="client")
    with caplog.at_level(logging.DEBUG), caplog.at_level(logging.DEBUG, logger="aiokafka"):
        await round_trip(settings)
    assert_no_secret([caplog.text, repr(settings), settings.model_dump_json()],
                     tls_broker.certs.key_password)


def test_an_encrypted_client_key_without_its_password_fails_instead_of_prompting(
    monkeypatch: pytest.MonkeyPatch, tls_broker: TlsBroker,
) -> None:
    """Refused by the settings at start, naming the variable (the key is loaded there as
    the clients load it, with an empty password rather than none)."""
    with pytest.raises(ValidationError, match="KAFKA_SSL_KEY_PASSWORD does not open the key"):
        ssl_settings(monkeypatch, tls_broker, client="client", key_password=False)


async def test_ssl_refuses_a_client_certificate_the_broker_does_not_trust(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tls_broker: TlsBroker,
) -> None:
    settings = ssl_settings(monkeypatch, tls_broker, client="rogue")
    with caplog.at_level(logging.DEBUG, logger="aiokafka"):
        await refused(settings)
    # The broker checked the certificate the client sent and rejected it.
    assert "CERTIFICATE_UNKNOWN" in caplog.text


async def test_ssl_refuses_a_broker_the_ca_did_not_sign(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tls_broker: TlsBroker,
) -> None:
    settings = ssl_settings(monkeypatch, tls_broker, ca=tls_broker.certs.rogue_cert)
    with caplog.at_level(logging.DEBUG, logger="aiokafka"):
        await refused(settings)
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text


async def test_sasl_ssl_scram_round_trip_and_refusal(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tls_broker: TlsBroker,
) -> None:
    env = {"KAFKA_BOOTSTRAP_SERVERS": tls_broker.sasl_ssl, "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": TLS_USER,
           "KAFKA_SSL_CAFILE": str(tls_broker.certs.ca_pem)}
    with caplog.at_level(logging.DEBUG), caplog.at_level(logging.DEBUG, logger="aiokafka"):
        await round_trip(settings_from_env(monkeypatch, **env, KAFKA_SASL_PASSWORD=TLS_PASSWORD))
        await refused(settings_from_env(monkeypatch, **env, KAFKA_SASL_PASSWORD="wrong-pass-9"))
    assert "SaslAuthenticationFailed" in caplog.text
    assert_no_secret([caplog.text], TLS_PASSWORD, "wrong-pass-9")


# --------------------------------------------------------------------------- the CLI


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``agui-relay ARGS`` in a fresh process whose only configuration is ``env``."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("KAFKA_", "AGUI_"))}
    return subprocess.run([sys.executable, "-m", "services.cli.main", *args],
                          env={**clean, **env, "AGUI_LOG_LEVEL": "DEBUG"},
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_cli_creates_topics_over_sasl_ssl_from_env(tls_broker: TlsBroker) -> None:
    env = {"KAFKA_BOOTSTRAP_SERVERS": tls_broker.sasl_ssl, "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
           "KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "KAFKA_SASL_USERNAME": TLS_USER,
           "KAFKA_SSL_CAFILE": str(tls_broker.certs.ca_pem),
           "AGUI_TOPIC_PREFIX": f"cli{uuid.uuid4().hex[:8]}", "AGUI_PARTITIONS": "1",
           "AGUI_AGENTS": "scripted"}
    done = run_cli({**env, "KAFKA_SASL_PASSWORD": TLS_PASSWORD}, "topics", "create", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"created"' in done.stdout
    assert f"{env['AGUI_TOPIC_PREFIX']}.dispatch.scripted" in done.stdout
    wrong = run_cli({**env, "KAFKA_SASL_PASSWORD": "cli-wrong-pass-3"}, "topics", "create")
    assert wrong.returncode != 0
    assert "SaslAuthenticationFailed" in wrong.stdout + wrong.stderr
    assert_no_secret([done.stdout, done.stderr, wrong.stdout, wrong.stderr],
                     TLS_PASSWORD, "cli-wrong-pass-3")
