"""Route templates matched on the raw path: a ``%2F`` stays inside its segment."""

from __future__ import annotations

import pytest

from services.consumer.paths import PathTemplate, segments

pytestmark = pytest.mark.unit

REPLAY = PathTemplate.parse("/threads/{thread_id}/runs/{run_id}/events")
THREAD = PathTemplate.parse("/threads/{thread_id}")


def match(template: PathTemplate, raw: bytes) -> dict[str, str] | None:
    parts = segments(raw)
    assert parts is not None
    return template.match(parts)


def test_an_encoded_slash_is_part_of_the_id() -> None:
    assert match(THREAD, b"/threads/p%2Fchild-1") == {"thread_id": "p/child-1"}
    assert match(REPLAY, b"/threads/p%2Fc/runs/r%201/events") == {"thread_id": "p/c",
                                                                   "run_id": "r 1"}
    assert match(THREAD, b"/threads/p/child-1") is None  # a literal slash separates
    assert match(REPLAY, b"/threads/a%2Fruns%2Fr%2Fevents") is None


def test_segments_cut_the_query_and_decode_like_the_server() -> None:
    assert segments(b"/threads/t?x=1") == ["threads", "t"]
    assert segments(b"/threads/%E2%9C%93%ff") == ["threads", "\u2713\ufffd"]
    assert segments(b"threads/t") is None
    with pytest.raises(UnicodeDecodeError):
        segments(b"/threads/%E2%9C%93%ff", errors="strict")


def test_literals_must_match_and_parameters_be_non_empty() -> None:
    assert match(THREAD, b"/threads/") is None
    assert match(THREAD, b"/thread/t") is None
    assert match(THREAD, b"/threads/t/") is None
    assert match(REPLAY, b"/threads/t/runs/r/cancel") is None


def test_a_template_takes_whole_segment_parameters_only() -> None:
    assert PathTemplate.parse("/agents/{agent}").names == ("agent",)
    with pytest.raises(ValueError, match="whole segment"):
        PathTemplate.parse("/agents/x{agent}")
    with pytest.raises(ValueError, match="starts with"):
        PathTemplate.parse("agents/{agent}")
