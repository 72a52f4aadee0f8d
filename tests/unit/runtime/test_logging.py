"""Log lines cannot be steered by input: bounded length, one record per line, no forged lines."""

from __future__ import annotations

import io
import logging
import re
import unicodedata
from collections.abc import Iterator

import orjson
import pytest

from services.runtime.logging import (
    CONTROLS,
    EXC_MAX,
    FIELD_MAX,
    JsonFormatter,
    TextFormatter,
    clip,
    escape_controls,
)

pytestmark = pytest.mark.unit

FORGED = "t1\n12:00:00 CRITICAL [gatekeeper] the database is gone"


@pytest.fixture(params=["text", "json"])
def captured(request: pytest.FixtureRequest) -> Iterator[tuple[str, logging.Logger, io.StringIO]]:
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(TextFormatter("svc") if request.param == "text" else JsonFormatter("svc"))
    logger = logging.getLogger(f"test-logging-{request.param}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    yield request.param, logger, buffer
    logger.handlers.clear()


def test_clip_says_how_much_was_cut() -> None:
    assert clip("abc", 3) == "abc"
    assert clip("abcdef", 3) == "abc…(+3 chars)"


def test_escape_controls_keeps_a_record_on_one_line() -> None:
    assert escape_controls("a\nb\x1b[31m\x00") == "a\\nb\\x1b[31m\\x00"
    assert escape_controls("plain") == "plain"
    assert escape_controls("a\x9bb\u202ec\x85") == "a\\x9bb\\u202ec\\x85"


def test_a_huge_id_argument_makes_a_bounded_line(
        captured: tuple[str, logging.Logger, io.StringIO]) -> None:
    _, logger, buffer = captured
    logger.warning("request on thread %r rejected", "x" * 400_000)
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 1
    assert len(lines[0]) < FIELD_MAX * 8 + 500
    assert "(+399800 chars)" in lines[0]


def test_huge_extra_fields_are_clipped(captured: tuple[str, logging.Logger, io.StringIO]) -> None:
    _, logger, buffer = captured
    logger.info("rejected", extra={"threadId": "t" * 100_000, "runId": "r" * 50_000})
    line = buffer.getvalue().splitlines()
    assert len(line) == 1
    assert len(line[0]) < 3 * FIELD_MAX + 500


def test_an_id_holding_a_newline_cannot_forge_a_line(
        captured: tuple[str, logging.Logger, io.StringIO]) -> None:
    form, logger, buffer = captured
    logger.info("thread %s rejected", FORGED, extra={"threadId": FORGED})
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 1
    assert not any(line.startswith("12:00:00 CRITICAL") for line in lines)
    if form == "json":
        doc = orjson.loads(lines[0])
        assert doc["msg"] == f"thread {FORGED} rejected"  # the text is kept, escaped by JSON
        assert doc["threadId"] == FORGED


def test_a_traceback_is_bounded_and_cannot_forge_a_line(
        captured: tuple[str, logging.Logger, io.StringIO]) -> None:
    form, logger, buffer = captured
    try:
        raise ValueError(FORGED + "z" * 100_000)
    except ValueError:
        logger.exception("failed")
    out = buffer.getvalue()
    assert len(out) < EXC_MAX + 2_000
    lines = out.splitlines()
    if form == "json":
        assert len(lines) == 1
    else:  # the record's first line carries the time; every other line is indented
        assert all(line.startswith("    ") for line in lines[1:])
    assert not any(line.startswith("12:00:00 CRITICAL") for line in lines)


def test_mapping_arguments_are_clipped(captured: tuple[str, logging.Logger, io.StringIO]) -> None:
    _, logger, buffer = captured
    logger.info("%(a)s and %(b)s", {"a": "q" * 1_000, "b": 2})
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 1
    assert "(+800 chars) and 2" in lines[0]


def test_every_control_format_separator_and_invisible_character_is_escaped() -> None:
    """``CONTROLS`` is written out; this checks it against the running Python's Unicode
    data: every C0/C1 control, format character (Cf: bidi, zero-width, tags), line and
    paragraph separator, space but U+0020 and lone surrogate, and the characters drawn as
    nothing that Unicode files under letters or marks (U+3164, variation selectors)."""
    unsafe = re.compile(f"[{CONTROLS}]")
    missed = [f"U+{code:04X} {unicodedata.category(chr(code))}" for code in range(0x110000)
              if unicodedata.category(chr(code)) in ("Cc", "Cf", "Zl", "Zp", "Zs", "Cs")
              and code != 0x20 and unsafe.fullmatch(chr(code)) is None]
    assert not missed, missed
    for char in "\u034f\u115f\u1160\u17b4\u180b\u2800\u3164\ufe0f\uffa0\U000e0100":
        assert unsafe.fullmatch(char), f"U+{ord(char):04X}"
    for char in " aé✓漢\u0301":  # ordinary text, a combining accent included
        assert unsafe.fullmatch(char) is None, f"U+{ord(char):04X}"


def test_escape_controls_shows_invisible_characters_python_calls_printable() -> None:
    assert escape_controls("a\u200bb\ufeff\u2028") == "a\\u200bb\\ufeff\\u2028"
    assert escape_controls("x\u3164y\U000e0041") == "x\\u3164y\\U000e0041"
