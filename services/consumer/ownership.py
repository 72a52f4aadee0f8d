"""Who owns which partition: the consumer group's assignment, told to every instance.

Consumer-service instances form one consumer group over ``decisions`` and
``events`` (co-partitioned: partition p of both goes to one instance), and
each instance reads only what it owns. Any instance takes any request, so
every instance must know, for each partition, the address of its owner. Two
ways were open: a small compacted membership topic (each instance writes
``partition -> url`` for what it was given) or the group protocol itself.
This is the second, the way Kafka Streams serves interactive queries
(``StreamsPartitionAssignor`` and its ``partitionsByHost``):

- each member's join metadata carries its advertised URL
  (``AGUI_ADVERTISED_URL``) in ``user_data``;
- the group leader runs ``plan`` and hands *every* member, in its
  assignment's ``user_data``, the whole map ``partition -> url``
  (``encode_owners``); ``on_assignment`` gives it to the instance.

Why not the topic: the map then changes exactly when the assignment does,
in the same generation, with no second source of truth to lag behind it (a
membership record written after the rebalance, read later still by others,
or left behind by a killed instance until someone deletes it); no topic to
create, size or clean up; and an instance learns the map at the moment it
learns its own partitions. What it costs: the map is as fresh as the last
rebalance, so a killed instance stays in it until the group notices
(the session timeout), which is the window ``forward`` covers by retrying
once ownership settles.

The assignor is ``services.kafka.assignor`` (``plan`` is its pure part).
Here: ``route``, the one decision a request needs: here, there, or nobody yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Route:
    """Where a request for a thread goes."""

    local: bool
    url: str | None = None
    """The owner to forward to (``local`` False); None: nobody can take it now."""


def route(partition: int, mine: frozenset[int], owners: Sequence[str], *,
          forwarded: bool) -> Route:
    """Serve here when this instance owns the partition; else forward to its owner,
    unless the request was forwarded already (the loop guard: never twice) or the map
    names nobody reachable."""
    if partition in mine:
        return Route(True)
    if forwarded or partition >= len(owners) or not owners[partition]:
        return Route(False)
    return Route(False, owners[partition])


class Ownership:
    """This instance's partitions and the owners' map, as of the last rebalance.

    ``settled`` is clear while a rebalance is under way (from the revocation
    to the new assignment being positioned): a request waits for it rather
    than route by a map that is being replaced.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.mine: frozenset[int] = frozenset()
        self.owners: tuple[str, ...] = ()
        self.generation = 0
        self.settled = asyncio.Event()
        self._changed = asyncio.Event()

    def unsettle(self) -> None:
        self.settled.clear()

    def update(self, mine: Iterable[int], owners: Sequence[str]) -> None:
        """A new assignment, positioned: route by it from now on."""
        self.mine = frozenset(mine)
        self.owners = tuple(owners)
        self.generation += 1
        self.settled.set()
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def route(self, partition: int, *, forwarded: bool) -> Route:
        return route(partition, self.mine, self.owners, forwarded=forwarded)

    async def wait_settled(self, within_s: float) -> bool:
        """True once settled; False when ``within_s`` passes first."""
        if self.settled.is_set():
            return True
        try:
            async with asyncio.timeout(within_s):
                await self.settled.wait()
        except TimeoutError:
            return False
        return True

    async def moved_on(self, generation: int, within_s: float) -> bool:
        """Wait for a settled assignment newer than ``generation``; False at the bound."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while self.generation <= generation or not self.settled.is_set():
            left = deadline - loop.time()
            if left <= 0:
                return False
            changed = self._changed
            try:
                async with asyncio.timeout(left):
                    await changed.wait()
            except TimeoutError:
                return False
        return True
