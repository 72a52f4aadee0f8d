"""A topic's configs changed as ``kafka-configs --alter`` would, once the broker applies them.

The controller answers AlterConfigs once the change is in the metadata log,
before the broker has applied it: a record sent right after was still judged
by the old ``max.message.bytes`` (a test failed so when the machine was
busy). ``alter_topic`` returns once the broker describes every new value.
"""

from __future__ import annotations

import asyncio

from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from services.kafka.clients import AIOKafkaAdminClient, new_admin
from services.runtime.settings import KafkaSettings

APPLIED_WITHIN_S = 30.0


async def alter_topic(settings: KafkaSettings, topic: str, configs: dict[str, str]) -> None:
    """Set ``configs`` (``{"max.message.bytes": "4000"}``) on ``topic``; wait until applied."""
    admin = new_admin(settings, "test-topic-configs")
    await admin.start()
    try:
        answer = await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, dict(configs))])
        assert all(r[0] == 0 for r in answer[0].resources), answer
        async with asyncio.timeout(APPLIED_WITHIN_S):
            while await described(admin, topic, list(configs)) != configs:
                await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def described(admin: AIOKafkaAdminClient, topic: str, names: list[str]
                    ) -> dict[str, str | None]:
    """What the broker describes of ``names`` on ``topic``."""
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, dict.fromkeys(names))])
    found: dict[str, str | None] = {}
    for response in responses:
        for _code, _message, _type, _name, entries, *_ in response.resources:
            for name, value, *_ in entries:
                if name in names:
                    found[name] = value
    return found
