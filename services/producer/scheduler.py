"""Which dispatched runs may start now, and which offsets may be committed — pure.

Parallel across threads, serial within a thread, bounded everywhere:

* at most ``max_running`` runs at once; a thread never has two;
* a thread's runs start in the order their dispatches arrived;
* a partition's committable position is the offset of its first job not yet
  done (or one past the last job when all are done): an input's offset is
  committed only after its run closed, even when runs of other threads in
  the same partition finish out of order;
* a partition with ``max_buffered`` jobs not yet done is paused, and resumed
  once it drains to half of that.

The worker feeds it consumer records and run completions; it holds no
asyncio, no Kafka, no clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

T = TypeVar("T")
JobState = Literal["queued", "running", "done", "dropped"]


@dataclass(eq=False)
class Job(Generic[T]):
    """One dispatched input, from its record to its run's end."""

    partition: int
    offset: int
    thread_id: str
    payload: T
    state: JobState = "queued"


@dataclass
class _Partition(Generic[T]):
    jobs: deque[Job[T]] = field(default_factory=deque)
    position: int | None = None
    paused: bool = False

    @property
    def outstanding(self) -> int:
        return len(self.jobs)


class Scheduler(Generic[T]):
    """Ordered, bounded run scheduling for one consumer's partitions."""

    def __init__(self, max_running: int, max_buffered: int) -> None:
        if max_running < 1 or max_buffered < 1:
            raise ValueError("max_running and max_buffered must be at least 1")
        self.max_running = max_running
        self.max_buffered = max_buffered
        self._partitions: dict[int, _Partition[T]] = {}
        self._queues: dict[str, deque[Job[T]]] = {}
        self._busy: set[str] = set()
        self._runnable: deque[str] = deque()
        self._orphans: dict[int, set[Job[T]]] = {}
        """Per partition, runs still going when it was forgotten (they outlived the drain)."""
        self.running = 0

    def offer(self, partition: int, offset: int, thread_id: str, payload: T) -> Job[T]:
        """A record arrived; its job waits for its thread and a free slot."""
        part = self._partitions.setdefault(partition, _Partition())
        job = Job(partition, offset, thread_id, payload)
        part.jobs.append(job)
        queue = self._queues.setdefault(thread_id, deque())
        queue.append(job)
        if len(queue) == 1 and thread_id not in self._busy:
            self._runnable.append(thread_id)
        return job

    def ready(self) -> list[Job[T]]:
        """Jobs that start now (marked running), oldest runnable thread first."""
        started: list[Job[T]] = []
        while self.running < self.max_running and self._runnable:
            thread_id = self._runnable.popleft()
            queue = self._queues.get(thread_id)
            if not queue or thread_id in self._busy:
                continue
            job = queue.popleft()
            if not queue:
                del self._queues[thread_id]
            job.state = "running"
            self._busy.add(thread_id)
            self.running += 1
            started.append(job)
        return started

    def finish(self, job: Job[T], *, ran: bool = True) -> None:
        """A job's run closed (or the job needed no run): free its thread and slot.

        ``ran`` False: its run never began, the partition revoked while it was being
        prepared; like a queued job at ``revoke``, the position stays before it (the
        next owner gets the input again)."""
        if job.state == "running":
            self.running -= 1
            self._busy.discard(job.thread_id)
            if self._queues.get(job.thread_id):
                self._runnable.append(job.thread_id)
        if job.state != "dropped":
            job.state = "done" if ran else "dropped"
        orphans = self._orphans.get(job.partition)
        if orphans is not None:
            orphans.discard(job)
            if not orphans:
                del self._orphans[job.partition]
        part = self._partitions.get(job.partition)
        if part is not None:
            self._advance(part)

    @staticmethod
    def _advance(part: _Partition[T]) -> None:
        while part.jobs and part.jobs[0].state == "done":
            part.position = part.jobs.popleft().offset + 1

    def positions(self) -> dict[int, int]:
        """Per partition, the offset to commit: everything before it has closed.

        Never past a run still going from before the partition was forgotten:
        had the partition come back and the commit moved past it, a crash
        would lose that run's input.
        """
        out: dict[int, int] = {}
        for p, part in self._partitions.items():
            if part.position is None:
                continue
            orphans = self._orphans.get(p)
            out[p] = min(part.position, *(j.offset for j in orphans)) if orphans else part.position
        return out

    def buffered(self, partition: int) -> int:
        """Jobs of ``partition`` not done yet (queued or running)."""
        part = self._partitions.get(partition)
        return part.outstanding if part is not None else 0

    def backpressure(self) -> tuple[set[int], set[int]]:
        """(partitions to pause now, partitions to resume now)."""
        pause: set[int] = set()
        resume: set[int] = set()
        for p, part in self._partitions.items():
            if not part.paused and part.outstanding >= self.max_buffered:
                part.paused = True
                pause.add(p)
            elif part.paused and part.outstanding <= self.max_buffered // 2:
                part.paused = False
                resume.add(p)
        return pause, resume

    def skip(self, partition: int, offset: int) -> None:
        """A record that needs no run (unreadable, dead-lettered): done at once, in order."""
        part = self._partitions.setdefault(partition, _Partition())
        part.jobs.append(Job(partition, offset, "", None, "done"))  # type: ignore[arg-type]
        self._advance(part)

    def revoke(self, partitions: set[int]) -> list[Job[T]]:
        """Stop starting jobs of ``partitions``: queued ones are dropped (they will be
        redelivered to the next owner, so the position stops before them); the running
        ones are returned to be drained. ``finish`` still accepts them."""
        running: list[Job[T]] = []
        for p in partitions:
            part = self._partitions.get(p)
            for job in part.jobs if part is not None else ():
                if job.state == "queued":
                    job.state = "dropped"
                    queue = self._queues.get(job.thread_id)
                    if queue is not None:
                        queue.remove(job)
                        if not queue:
                            del self._queues[job.thread_id]
                elif job.state == "running":
                    running.append(job)
        return running

    def forget(self, partitions: set[int]) -> None:
        """Drop all tracking of ``partitions`` (after their last commit).

        Runs still going (they outlived the drain) are remembered until they
        finish, so that a partition coming back never commits past them.
        """
        for p in partitions:
            part = self._partitions.pop(p, None)
            still = {j for j in part.jobs if j.state == "running"} if part is not None else set()
            if still:
                self._orphans.setdefault(p, set()).update(still)

    @property
    def idle(self) -> bool:
        """Nothing running and nothing waiting."""
        return self.running == 0 and not self._queues
