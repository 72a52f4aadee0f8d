"""A committed-offset lookup the coordinator refused reads as refused, not as "nothing committed".

From OffsetFetch v2 on, a broker that cannot answer for the group as a
whole (it is not the group's coordinator, the coordinator is still loading
the group's offsets after a move, or is not available) says so in the
response's top-level error code and lists no partitions. aiokafka 0.14
reads only the per-partition errors, so such an answer came back as an
empty map: no offset committed anywhere. A producer worker's group member
then reset to the earliest offset and read its dispatch partitions again
from the start; the notifier took its partitions for new to the group and
resumed at their end, skipping every notification not yet sent. A
coordinator moves exactly when brokers restart. (librdkafka, sarama and
the Java client read the top-level code; KAFKA-17279.)

``install`` (called by ``clients``) has aiokafka's group coordinator and
admin client raise the top-level error of an OffsetFetch response. The
group coordinator's own retry loop then finds the coordinator again (it is
marked dead on "not the coordinator" or "not available", as aiokafka does
for the per-partition codes) and asks it; the notifier's lookup, which uses
the admin client, tries again on its next round, as for any broker error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.admin.client import AIOKafkaAdminClient
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.errors import (
    GroupCoordinatorNotAvailableError,
    NotCoordinatorForGroupError,
    for_code,
)
from aiokafka.protocol.commit import OffsetFetchRequest

from services.kafka.wrapping import wrap_once

_COORDINATOR_GONE = (NotCoordinatorForGroupError, GroupCoordinatorNotAvailableError)


def refusal(request: Any, response: Any) -> Exception | None:
    """The error an OffsetFetch ``response`` gives for the whole group, if any."""
    if not isinstance(request, OffsetFetchRequest):
        return None
    code = getattr(response, "error_code", 0)  # absent before v2
    if not code:
        return None
    refused: Exception = for_code(code)(f"committed offsets refused for the group (code {code})")
    return refused


def _checked_group(send_req: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def send(self: GroupCoordinator, request: Any) -> Any:
        response = await send_req(self, request)
        error = refusal(request, response)
        if error is None:
            return response
        if isinstance(error, _COORDINATOR_GONE):
            self.coordinator_dead()
        raise error

    return send


def _checked_admin(send_request: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def send(self: AIOKafkaAdminClient, request: Any, node_id: int | None = None) -> Any:
        response = await send_request(self, request, node_id)
        error = refusal(request, response)
        if error is not None:
            raise error
        return response

    return send


def install() -> None:
    """Have aiokafka's group coordinator and admin client raise a group-wide OffsetFetch error."""
    wrap_once(GroupCoordinator, "_send_req", _checked_group)
    wrap_once(AIOKafkaAdminClient, "_send_request", _checked_admin)
