"""Settings from the environment, one pydantic-settings object per concern.

``KafkaSettings`` is shared by every service and the CLI (bootstrap,
security, topic prefix); each service adds its own object next to its code.
Nothing reads the environment at import time: ``from_env()`` is called by
the CLI and the object is passed in.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.limits import (
    DEFAULT_MAX_ID_LENGTH,
    DEFAULT_MAX_JSON_CONTAINERS,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_RESUME_ENTRIES,
    InputLimits,
)
from contracts.topics import DEFAULT_PARTITIONS, DEFAULT_PREFIX, TopicCatalog
from services.runtime.kafka_checks import bootstrap_problem, tls_problem

LOCAL_BOOTSTRAP = "127.0.0.1:9092"



def _named(value: object) -> object:
    """An empty ``AGUI_STATE_DIR`` (compose's ``${VAR}`` of an unset variable) is refused:
    as a path it is the working directory, where stores would land unseen."""
    if isinstance(value, str) and not value.strip():
        raise ValueError("is empty: name a directory, or leave it unset to keep state in memory")
    return value


def _usable(path: Path | None) -> Path | None:
    """The directory exists and can be written, or can be made where it is named: checked
    before the service joins its group (it would join, fail its first assignment and leave,
    churning the group on every restart)."""
    if path is None:
        return None
    probe = path
    while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{probe} cannot be written by this process")
    return path


StateDirectory = Annotated[Path | None, BeforeValidator(_named), AfterValidator(_usable)]
"""``AGUI_STATE_DIR``: where a service keeps its on-disk stores (None: in memory)."""

MAX_RECORD_BYTES_CEILING = 100 * 1024 * 1024
"""No broker takes more in a request by default (``socket.request.max.bytes``, 100 MiB);
past it, a limit is a typo (``1e23`` had started services whose fetches then failed in a
loop)."""


class ConfigurationError(Exception):
    """What a service found at start that its configuration gets wrong against the
    cluster (the environment alone is checked by the settings classes): one line to the
    operator, exit status 2, no traceback."""


class KafkaSettings(BaseSettings):
    """How to reach the brokers and which topics to use.

    Security: ``KAFKA_SECURITY_PROTOCOL`` SASL_PLAINTEXT / SASL_SSL need the SASL
    mechanism (PLAIN when unset), user and password; SSL / SASL_SSL verify the
    brokers against ``KAFKA_SSL_CAFILE`` (else the system trust store) and send
    a client certificate when ``KAFKA_SSL_CERTFILE`` is set (mutual TLS). The
    passwords are ``SecretStr``: masked in ``repr``, dumps and validation errors.
    """

    # hide_input_in_errors: a validation error must not echo the environment
    # (which holds the SASL and key passwords) into a traceback or a log.
    model_config = SettingsConfigDict(
        allow_inf_nan=False, env_prefix="", extra="ignore", populate_by_name=True,
        hide_input_in_errors=True,
    )

    bootstrap_servers: str = Field(LOCAL_BOOTSTRAP, alias="KAFKA_BOOTSTRAP_SERVERS")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", alias="KAFKA_SECURITY_PROTOCOL"
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, alias="KAFKA_SASL_MECHANISM"
    )
    sasl_username: str | None = Field(None, alias="KAFKA_SASL_USERNAME")
    sasl_password: SecretStr | None = Field(None, alias="KAFKA_SASL_PASSWORD")
    ssl_cafile: Path | None = Field(None, alias="KAFKA_SSL_CAFILE")
    ssl_certfile: Path | None = Field(None, alias="KAFKA_SSL_CERTFILE")
    ssl_keyfile: Path | None = Field(None, alias="KAFKA_SSL_KEYFILE")
    ssl_key_password: SecretStr | None = Field(None, alias="KAFKA_SSL_KEY_PASSWORD")
    topic_prefix: str = Field(DEFAULT_PREFIX, alias="AGUI_TOPIC_PREFIX",
                              pattern=r"^[A-Za-z0-9._-]{1,200}$")
    """What Kafka allows in a topic name, and room for the names it begins (empty had
    made topics named ``.requests``; a space or ``é``, a traceback when creating them)."""
    partitions: int = Field(DEFAULT_PARTITIONS, alias="AGUI_PARTITIONS", ge=1, le=1024)
    max_record_bytes: int = Field(1_048_576, alias="AGUI_MAX_RECORD_BYTES", ge=1024,
                                  le=MAX_RECORD_BYTES_CEILING)

    @field_validator("bootstrap_servers")
    @classmethod
    def _bootstrap_is_addresses(cls, value: str) -> str:
        """``host:port`` entries (aiokafka failed on ``127.0.0.1:notaport`` at the first
        client built, with ``invalid literal for int()``)."""
        if problem := bootstrap_problem(value):
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _security_is_complete(self) -> KafkaSettings:
        """Refuse at startup what the brokers would refuse later, less clearly."""
        if self.security_protocol.startswith("SASL_") and (
            not self.sasl_username or self.sasl_password is None
        ):
            raise ValueError(
                f"KAFKA_SECURITY_PROTOCOL={self.security_protocol} needs KAFKA_SASL_USERNAME "
                "and KAFKA_SASL_PASSWORD (and KAFKA_SASL_MECHANISM unless PLAIN)"
            )
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ValueError("KAFKA_SSL_KEYFILE needs KAFKA_SSL_CERTFILE (the client certificate)")
        if self.security_protocol in ("SSL", "SASL_SSL"):
            password = self.ssl_key_password
            problem = tls_problem(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile,
                                  password.get_secret_value() if password else "")
            if problem:
                raise ValueError(problem)
        return self

    @property
    def topics(self) -> TopicCatalog:
        """The topic names under this deployment's prefix."""
        return TopicCatalog(self.topic_prefix, self.partitions, self.partitions)

    def with_prefix(self, prefix: str) -> KafkaSettings:
        """A copy under another topic prefix (tests isolate themselves this way)."""
        return self.model_copy(update={"topic_prefix": prefix})


class LimitSettings(BaseSettings):
    """The input limits every service enforces (``contracts.limits``), from the environment.

    One object for all services, so the consumer service's ``400`` at the edge
    and the gatekeeper's and producer's checks of records other clients wrote
    agree on the numbers.
    """

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True,
                                      allow_inf_nan=False)

    max_id_length: int = Field(DEFAULT_MAX_ID_LENGTH, alias="AGUI_MAX_ID_LENGTH", ge=8,
                               le=65_536)
    max_json_depth: int = Field(DEFAULT_MAX_JSON_DEPTH, alias="AGUI_MAX_JSON_DEPTH", ge=4,
                                le=200)
    max_resume_entries: int = Field(DEFAULT_MAX_RESUME_ENTRIES, alias="AGUI_MAX_RESUME_ENTRIES",
                                    ge=1, le=65_536)
    max_json_containers: int = Field(DEFAULT_MAX_JSON_CONTAINERS,
                                     alias="AGUI_MAX_JSON_CONTAINERS", ge=64, le=10_000_000)

    @property
    def limits(self) -> InputLimits:
        return InputLimits(self.max_id_length, self.max_json_depth, self.max_resume_entries,
                           self.max_json_containers)
