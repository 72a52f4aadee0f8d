"""Client factories: every aiokafka producer, consumer and admin is built here.

Defaults are the exactly-once ones, not aiokafka's: producers are idempotent
with ``acks=all``; consumers read committed records only, never auto-commit,
and use the range assignor so co-partitioned topics land on one instance.
Security (SASL PLAIN/SCRAM, TLS) comes from ``KafkaSettings`` so every
service and the CLI connect the same way; SASL clients get aiokafka's debug
trace of the authentication exchange redacted (``services.kafka.redaction``).
Consumers read a record whose header names are not UTF-8 instead of stopping
at it for ever (``services.kafka.lenient_records``), and find a partition's
new leader when a former one refuses an offset lookup
(``services.kafka.stale_leaders``). Consumers and admins take a committed-offset
lookup refused for the whole group for an error, not for "nothing committed"
(``services.kafka.offset_fetch_refusals``). Producers reuse the sequence numbers of a
batch the broker refused for its size, so the partition's next batch is taken
(``services.kafka.refused_sequences``). A group's consumer logs an ERROR and counts
the records retention removed before it read them (``services.kafka.retention_losses``).
Producers place a thread's records among ``AGUI_PARTITIONS`` partitions
(``services.kafka.partitioning``).
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.consumer.subscription_state import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import (
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    OffsetOutOfRangeError,
)
from aiokafka.helpers import create_ssl_context

from services.kafka import (
    lenient_records,
    metadata_pacing,
    offset_fetch_refusals,
    refused_sequences,
    retention_losses,
    stale_leaders,
)
from services.kafka.partitioning import ThreadPartitioner
from services.kafka.redaction import redact_sasl_logging
from services.runtime.settings import KafkaSettings

__all__ = [
    "AIOKafkaAdminClient",
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "KafkaError",
    "KafkaTimeoutError",
    "MessageSizeTooLargeError",
    "NewTopic",
    "OffsetOutOfRangeError",
    "TopicPartition",
    "connection_options",
    "new_admin",
    "new_consumer",
    "new_producer",
]


METADATA_MAX_AGE_MS = 30_000
"""How often every client reads the cluster's metadata again even when nothing asked it to.

aiokafka's default is five minutes, and some changes are noticed only then: a
topic deleted and created again under a running service (its group's members
owned nothing of it until then: every request was refused or timed out) or
grown by an operator. One small Metadata request per client every 30 s."""


def connection_options(settings: KafkaSettings, client_id: str) -> dict[str, Any]:
    """Bootstrap, client id, metadata age and security options shared by every client
    (whose metadata refreshes are paced: ``metadata_pacing``)."""
    metadata_pacing.install()
    opts: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "client_id": client_id,
        "security_protocol": settings.security_protocol,
        "metadata_max_age_ms": METADATA_MAX_AGE_MS,
    }
    if settings.security_protocol in ("SSL", "SASL_SSL"):
        key_password = settings.ssl_key_password
        opts["ssl_context"] = create_ssl_context(
            cafile=str(settings.ssl_cafile) if settings.ssl_cafile else None,
            certfile=str(settings.ssl_certfile) if settings.ssl_certfile else None,
            keyfile=str(settings.ssl_keyfile) if settings.ssl_keyfile else None,
            # Always a password (empty when none is set): without one, OpenSSL
            # would prompt on the terminal for an encrypted key and hang a service.
            password=key_password.get_secret_value() if key_password else "",
        )
    if settings.security_protocol.startswith("SASL"):
        redact_sasl_logging()
        opts["sasl_mechanism"] = settings.sasl_mechanism or "PLAIN"
        opts["sasl_plain_username"] = settings.sasl_username
        opts["sasl_plain_password"] = (
            settings.sasl_password.get_secret_value() if settings.sasl_password else None
        )
    return opts


def new_producer(
    settings: KafkaSettings,
    client_id: str,
    *,
    transactional_id: str | None = None,
    linger_ms: int = 0,
    max_batch_size: int = 65536,
    retry_backoff_ms: int = 100,
    transaction_timeout_ms: int = 60_000,
) -> AIOKafkaProducer:
    """An idempotent producer (transactional when ``transactional_id`` is given) that puts
    a thread's records among the first ``AGUI_PARTITIONS`` partitions of a topic
    (``ThreadPartitioner``), however many the topic has grown to."""
    refused_sequences.install()
    return AIOKafkaProducer(
        **connection_options(settings, client_id),
        partitioner=ThreadPartitioner(settings.partitions),
        acks="all",
        enable_idempotence=True,
        transactional_id=transactional_id,
        linger_ms=linger_ms,
        max_batch_size=max_batch_size,
        max_request_size=max(settings.max_record_bytes * 2, 1_048_576),
        retry_backoff_ms=retry_backoff_ms,
        transaction_timeout_ms=transaction_timeout_ms,
    )


def new_consumer(
    settings: KafkaSettings,
    client_id: str,
    *topics: str,
    group_id: str | None = None,
    read_committed: bool = True,
    auto_offset_reset: str = "earliest",
    max_poll_records: int = 500,
    session_timeout_ms: int = 10_000,
    assignors: tuple[Any, ...] = (RangePartitionAssignor,),
    group_instance_id: str | None = None,
    fetch_min_bytes: int = 1,
    fetch_max_wait_ms: int = 100,
) -> AIOKafkaConsumer:
    """A consumer that commits nothing by itself and sees only committed records
    (``assignors``: the group's partition assignment strategies, range by default;
    ``group_instance_id``: a static member, ``services.kafka.fencing.leave_group``)."""
    lenient_records.install()
    stale_leaders.install()
    offset_fetch_refusals.install()
    retention_losses.install()
    consumer = AIOKafkaConsumer(
        *topics,
        **connection_options(settings, client_id),
        group_id=group_id,
        group_instance_id=group_instance_id,
        enable_auto_commit=False,
        isolation_level="read_committed" if read_committed else "read_uncommitted",
        auto_offset_reset=auto_offset_reset,
        partition_assignment_strategy=assignors,
        max_poll_records=max_poll_records,
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=max(session_timeout_ms // 4, 500),
        max_partition_fetch_bytes=partition_fetch_bytes(settings),
        fetch_min_bytes=fetch_min_bytes,
        fetch_max_wait_ms=fetch_max_wait_ms,
    )
    if group_id is not None:
        retention_losses.watch(consumer, group_id)
    return consumer


def partition_fetch_bytes(settings: KafkaSettings) -> int:
    """The most a fetch takes from one partition: two of the largest records, 1 MiB at least."""
    return max(settings.max_record_bytes * 2, 1_048_576)


def new_admin(settings: KafkaSettings, client_id: str = "agui-relay-admin") -> AIOKafkaAdminClient:
    """An admin client with the shared connection options."""
    offset_fetch_refusals.install()
    return AIOKafkaAdminClient(**connection_options(settings, client_id))
