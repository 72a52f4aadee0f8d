"""A ``threads`` partition the broker left in a transaction does not wedge a gatekeeper's takeover.

Kafka can skip a transaction's markers on some of its partitions (seen on a
broker restart: the coordinator completes a pending transaction before the
partitions have a leader endpoint). Such a partition stays open: its last
stable offset never reaches its end, and a gatekeeper restoring from it
waited forever, since only its own producer id writing there again closes
it. The local broker verifies no transaction partition (KIP-890 part 1 is
off, see ``deploy/kafka``), so the same state is made here the way a buggy
client would: a record written in a transaction of the gatekeeper's own
transactional id to a partition the coordinator was never told of.

The gatekeeper closes it the way its coordinator ended that transaction:
committed, the record hidden behind it (the thread's tombstone) counts and
the thread is new again; aborted, it never counts and the thread's open
interrupt still has to be answered. Either way with the on-disk store and
without, and with the transaction's offset commit hidden the same way (the
group's offsets stay unstable, which the takeover reads first).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from ag_ui.core import Interrupt
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata
from gatekeeper_harness import GatekeeperProcess, Topics, group_offsets, run_request

from services.gatekeeper.partition import transactional_id
from services.kafka.clients import TopicPartition, new_consumer, new_producer
from services.kafka.partitioning import partition_for
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.integration

THREAD = "hung"


async def hang_a_tombstone(kafka: KafkaSettings, thread_id: str, *, commit: bool,
                           offsets: bool) -> int:
    """The thread's tombstone on ``threads``, in a transaction of the gatekeeper's id whose
    coordinator never learns of that partition; returns the partition. With ``offsets`` the
    transaction also commits the group's offsets as they are, its group never added either."""
    partition = partition_for(thread_id, kafka.partitions)
    hung = TopicPartition(kafka.topics.threads, partition)
    known = TopicPartition(kafka.topics.threads, (partition + 1) % kafka.partitions)
    producer = new_producer(
        kafka, "test-hanging",
        transactional_id=transactional_id(kafka.topic_prefix, range(kafka.partitions)))
    await producer.start()
    try:
        await producer.begin_transaction()
        producer._txn_manager._txn_partitions.add(hung)  # never AddPartitionsToTxn
        try:
            await producer.send_and_wait(hung.topic, None, key=thread_id.encode(),
                                         partition=partition)
        except KafkaError as exc:
            pytest.skip(f"this broker verifies transaction partitions (KIP-890): {exc}")
        await producer.send_and_wait(known.topic, None, key=b"unrelated", partition=known.partition)
        if offsets:
            group = f"{kafka.topic_prefix}.gatekeeper"
            producer._txn_manager.consumer_group_added(group)  # never AddOffsetsToTxn
            await producer.send_offsets_to_transaction(
                {tp: OffsetAndMetadata(o, "") for tp, o in (await group_offsets(kafka)).items()},
                group)
        if commit:
            await producer.commit_transaction()
        else:
            await producer.abort_transaction()
    finally:
        await producer.stop()
    assert await is_open(kafka, hung), "the partition should be left in the transaction"
    return partition


async def is_open(kafka: KafkaSettings, tp: TopicPartition) -> bool:
    stable_reader = new_consumer(kafka, "test-stable", group_id=None)
    any_reader = new_consumer(kafka, "test-end", group_id=None, read_committed=False)
    await stable_reader.start()
    await any_reader.start()
    try:
        stable = (await stable_reader.end_offsets([tp]))[tp]
        end = (await any_reader.end_offsets([tp]))[tp]
    finally:
        await stable_reader.stop()
        await any_reader.stop()
    return bool(stable < end)


@pytest.mark.parametrize(("commit", "store", "offsets"), [
    (True, True, False), (False, False, False), (True, False, True), (False, True, True),
], ids=["committed-store", "aborted-memory", "committed-memory-offsets",
        "aborted-store-offsets"])
async def test_a_hanging_transaction_of_its_own_id_is_closed_as_its_coordinator_ended_it(
    kafka: KafkaSettings, topics: Topics, processes: Callable[..., GatekeeperProcess],
    tmp_path: Path, commit: bool, store: bool, offsets: bool,
) -> None:
    env = {"AGUI_STATE_DIR": str(tmp_path / "state")} if store else {}
    gatekeeper = processes(kafka, **env)
    gatekeeper.start()
    await gatekeeper.ready()
    first = await topics.decide(run_request("h-r1", THREAD, "r1"))
    assert first.verdict == "admitted", first.message
    await topics.started(THREAD, "r1")
    await topics.finished(THREAD, "r1", Interrupt(id="a", reason="approve"))
    await topics.until(lambda: topics.threads.get(THREAD) is not None
                       and topics.threads[THREAD].status == "interrupted", what="interrupted")
    assert gatekeeper.terminate() == 0

    partition = await hang_a_tombstone(kafka, THREAD, commit=commit, offsets=offsets)

    gatekeeper.start()
    await gatekeeper.ready(within=30.0)  # waited for ever before
    assert not await is_open(kafka, TopicPartition(kafka.topics.threads, partition))
    closing = [line for line in gatekeeper.log_lines()
               if str(line.get("msg", "")).startswith("closing partitions")]
    assert len(closing) == 1, gatekeeper.tail()
    assert ("CompleteCommit" if commit else "CompleteAbort") in closing[0]["msg"]
    if offsets:  # read first: every partition taken over
        assert "[0, 1, 2, 3]" in closing[0]["msg"]
        assert "the group's offsets stay unstable" in closing[0]["msg"]
    else:
        assert f"[{partition}]" in closing[0]["msg"]

    again = await topics.decide(run_request("h-r2", THREAD, "r2"))
    if commit:  # the tombstone counts: a new thread, nothing to answer
        assert again.verdict == "admitted", again.message
    else:  # it never happened: interrupt "a" is still open
        assert (again.verdict, again.code, again.interrupt_ids) == (
            "rejected", "uncovered_interrupts", ["a"]), again.message
    assert gatekeeper.terminate() == 0
