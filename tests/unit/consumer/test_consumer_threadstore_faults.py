"""The thread view's store under faults while the consumer runs: a store whose directory
vanished is not recreated empty (``GET /threads/{id}`` answered 404 for existing threads),
and a store that cannot be read is never "unknown thread": 503, and not ready."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import NamedTuple

import pytest
from ag_ui.core import Interrupt

from contracts import OpenInterrupt, ThreadState, encode
from services.consumer.problems import RetryLater
from services.consumer.threads import ThreadView
from services.consumer.threadstore import ThreadStore
from services.runtime.settings import KafkaSettings
from services.state.disk import StoreError, peek

pytestmark = pytest.mark.unit

BIG = b'{"filler":"' + b"x" * 300_000 + b'"}'
"""A few of these need a new write-ahead log file: where a vanished directory shows."""


class Record(NamedTuple):
    key: bytes | None
    value: bytes | None
    offset: int


def interrupted(thread_id: str) -> bytes:
    return encode(ThreadState(
        thread_id=thread_id, status="interrupted", run_id="r1", interrupted_run_id="r1",
        recent_run_ids=["r1"],
        open_interrupts=[OpenInterrupt(run_id="r1", interrupt=Interrupt(id="i1", reason="ok"))]))


def idle(thread_id: str) -> bytes:
    """An idle thread (not marked), with run ids that do not compress."""
    return encode(ThreadState(thread_id=thread_id, status="idle",
                              recent_run_ids=[os.urandom(100).hex() for _ in range(4)]))


def one_partition(tmp_path: Path) -> ThreadStore:
    view = ThreadStore(tmp_path / "state", "agui.threads", "127.0.0.1_8000", cache_mb=0)
    view.dir.start()
    view.stores[0], _ = view.dir.open(0)
    return view


def test_a_vanished_store_is_not_recreated_empty_and_keeps_failing(tmp_path: Path) -> None:
    view = one_partition(tmp_path)
    view.write(0, [Record(b"old", interrupted("old"), 0)])
    path = view.stores[0].path
    shutil.rmtree(tmp_path / "state")
    offset = 1
    while not view.failing() and offset < 100:
        view.write(0, [Record(f"big-{offset}".encode(), BIG, offset)])
        offset += 1
    assert view.failing(), "the store never failed"
    for n in range(3):  # later batches: no reopen creates a store at the path
        view.write(0, [Record(f"new-{n}".encode(), interrupted(f"new-{n}"), offset + n)])
    assert view.failing(), "a store created in place of the vanished one was taken as current"
    assert "restart" in view.failing()["thread-store-0"]
    assert view.get("old") is not None, "GET /threads/old would answer 404"
    assert view.get("new-2") is not None
    assert {t for t, _ in view.marked()} >= {"old", "new-0", "new-2"}, "the inbox index lost some"
    assert "damaged" in (peek(path, 0).error or ""), "agui-relay state lists it as up to date"
    view.close()


def test_a_store_that_cannot_be_read_answers_503_not_unknown(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    view = one_partition(tmp_path)
    ids = [f"thread-{n:05d}" for n in range(12_000)]
    for n, t in enumerate(ids):  # ~10 MB that hardly compresses: table files on disk
        view.write(0, [Record(t.encode(), idle(t), n)])
    path = view.stores[0].path
    assert any(f.suffix == ".sst" for f in path.iterdir())
    for f in path.iterdir():  # damaged under the running instance
        if f.suffix == ".sst":
            with f.open("r+b") as h:
                h.truncate(f.stat().st_size // 2)
    unknown, errors = [], []
    with caplog.at_level(logging.WARNING, logger="services.consumer.threadstore"):
        for t in ids[::10]:
            try:
                if view.get(t) is None:
                    unknown.append(t)
            except StoreError:
                errors.append(t)
    assert not unknown, f"{len(unknown)} existing threads read as unknown (404)"
    assert errors, "no lookup met the damage"
    assert "cannot be read" in view.failing().get("thread-store-0", ""), "/readyz passes"
    assert len(caplog.records) == 1, "logged once, not per lookup"
    view.write(0, [Record(b"later", idle("later"), len(ids))])
    assert "thread-store-0" in view.failing(), "a write does not make it readable again"
    thread_view = ThreadView(KafkaSettings(), view)
    with pytest.raises(RetryLater) as answered:
        thread_view.get(errors[0])
    response = answered.value.response()
    assert response.status_code == 503
    assert response.headers["Retry-After"]
    view.close()
