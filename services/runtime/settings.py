"""Settings from the environment, one pydantic-settings object per concern.

``KafkaSettings`` is shared by every service and the CLI (bootstrap,
security, topic prefix); each service adds its own object next to its code.
Nothing reads the environment at import time: ``from_env()`` is called by
the CLI and the object is passed in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.topics import DEFAULT_PARTITIONS, DEFAULT_PREFIX, TopicCatalog

LOCAL_BOOTSTRAP = "127.0.0.1:9092"


class KafkaSettings(BaseSettings):
    """How to reach the brokers and which topics to use."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

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
    topic_prefix: str = Field(DEFAULT_PREFIX, alias="AGUI_TOPIC_PREFIX")
    partitions: int = Field(DEFAULT_PARTITIONS, alias="AGUI_PARTITIONS", ge=1, le=1024)
    max_record_bytes: int = Field(1_048_576, alias="AGUI_MAX_RECORD_BYTES", ge=1024)

    @property
    def topics(self) -> TopicCatalog:
        """The topic names under this deployment's prefix."""
        return TopicCatalog(self.topic_prefix, self.partitions, self.partitions)

    def with_prefix(self, prefix: str) -> KafkaSettings:
        """A copy under another topic prefix (tests isolate themselves this way)."""
        return self.model_copy(update={"topic_prefix": prefix})
