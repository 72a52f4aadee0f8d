"""Which topic a name stands for now: its id, from a metadata request of version 12.

A topic deleted and created again under the same name is another topic: its
offsets start over, so a store that reflected offset N of the old one must not
be read as reflecting offset N of the new one, however far the new one has
grown. Kafka tells the two apart by a topic id (KIP-516, metadata v10 on);
aiokafka speaks metadata up to v5, so this module adds the one version it
needs, on aiokafka's protocol types, as ``fencing`` does for its requests.
"""

from __future__ import annotations

from collections.abc import Iterable
from io import BytesIO
from typing import Any, ClassVar

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    AbstractType,
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from services.kafka.clients import KafkaError

NO_ID = bytes(16)
"""The null topic id: a topic asked for by name."""


class Uuid(AbstractType[bytes]):  # type: ignore[misc]
    """Kafka's ``uuid``: 16 bytes as they are."""

    @classmethod
    def encode(cls, value: bytes) -> bytes:
        return value

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        value = data.read(16)
        if len(value) != 16:
            raise ValueError("Buffer underrun decoding a uuid")
        return value


class MetadataResponse_v12(Response):  # type: ignore[misc]  # noqa: N801
    API_KEY = 3
    API_VERSION = 12
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("brokers", CompactArray(("node_id", Int32), ("host", CompactString("utf-8")),
                                 ("port", Int32), ("rack", CompactString("utf-8")),
                                 ("tags", TaggedFields))),
        ("cluster_id", CompactString("utf-8")),
        ("controller_id", Int32),
        ("topics", CompactArray(
            ("error_code", Int16),
            ("name", CompactString("utf-8")),
            ("topic_id", Uuid),
            ("is_internal", Boolean),
            ("partitions", CompactArray(
                ("error_code", Int16), ("partition_index", Int32), ("leader_id", Int32),
                ("leader_epoch", Int32), ("replica_nodes", CompactArray(Int32)),
                ("isr_nodes", CompactArray(Int32)), ("offline_replicas", CompactArray(Int32)),
                ("tags", TaggedFields))),
            ("topic_authorized_operations", Int32),
            ("tags", TaggedFields))),
        ("tags", TaggedFields),
    )


class MetadataRequest_v12(RequestStruct):  # type: ignore[misc]  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 3
    API_VERSION = 12
    RESPONSE_TYPE = MetadataResponse_v12
    SCHEMA = Schema(
        ("topics", CompactArray(("topic_id", Uuid), ("name", CompactString("utf-8")),
                                ("tags", TaggedFields))),
        ("allow_auto_topic_creation", Boolean),
        ("include_topic_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class TopicIdsRequest(Request[MetadataRequest_v12]):  # type: ignore[misc]
    """Metadata for ``names`` only, creating none of them (as ``lookup`` asks)."""

    API_KEY: ClassVar[int] = 3

    def __init__(self, names: list[str]) -> None:
        self._names = names

    def build(self, request_struct_class: type[MetadataRequest_v12]) -> MetadataRequest_v12:
        return request_struct_class([(NO_ID, n, {}) for n in self._names], False, False, {})


async def topic_ids(client: AIOKafkaClient, names: Iterable[str]) -> dict[str, str]:
    """The ids (hex) of the topics among ``names`` that exist now."""
    node = client.get_random_node()
    if node is None:
        raise KafkaError("no broker is known to ask for topic ids")
    response: Any = await client.send(node, TopicIdsRequest(sorted(set(names))))
    return {t["name"]: t["topic_id"].hex() for t in response.to_object()["topics"]
            if t["error_code"] == 0 and t["topic_id"] != NO_ID}
