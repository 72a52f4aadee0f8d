"""The collector set for serving: what startup made is frozen, young collections are rare,
and ``AGUI_GC_THRESHOLD`` sets how rare (700, CPython's default, undoes it)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from services.runtime.collector import DEFAULT_THRESHOLD, CollectorSettings, settle_for_serving

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_startup_objects_are_frozen_and_young_collections_spaced_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGUI_GC_THRESHOLD", raising=False)
    gc.unfreeze()
    built_at_startup = [[] for _ in range(1000)]
    settle_for_serving(CollectorSettings())
    assert gc.get_freeze_count() >= len(built_at_startup)
    assert all(not any(o is x for x in gc.get_objects()) for o in built_at_startup[:3])
    assert gc.get_threshold()[0] == DEFAULT_THRESHOLD


def test_the_threshold_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGUI_GC_THRESHOLD", "700")
    settle_for_serving(CollectorSettings())
    assert gc.get_threshold()[0] == 700
    monkeypatch.setenv("AGUI_GC_THRESHOLD", "0")
    with pytest.raises(ValidationError, match="AGUI_GC_THRESHOLD"):
        CollectorSettings()
