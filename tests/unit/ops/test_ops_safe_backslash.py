"""A printed id names exactly one id: the backslash an escape starts with is escaped too.

``safe``/``safe_id`` showed spaces and invisible characters as escapes but left a
backslash as it was, so a thread a client named ``victim\\x20x`` (backslash, x, 2, 0)
printed exactly as the thread ``victim x``, and the text ``alpha\\u200b`` as ``alpha``
followed by U+200B: the confusion the escapes were added to prevent (found by probing).
The command ``stuck`` prints to cancel an orphan is a shell's to read, so its id is
quoted for a shell, exactly, rather than escaped for a reader.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from ag_ui.core import Interrupt
from rich.console import Console

from contracts import OpenInterrupt, ThreadState
from services.cli.ops.orphans import Orphan
from services.cli.ops.safe import safe, safe_id, shell_word
from services.cli.ops.stuck import print_report
from services.gatekeeper.census import Counts

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
IDS = ["victim x", "victim\\x20x", "alpha\u200b", "alpha\\u200b", "t\x1b[2J", "t\\x1b[2J",
       "a\\", "a\\\\", "back\\slash", "it's\u202e", "c\u00a0\u0085\U000e0041", "plain"]
ESCAPE = re.compile(r"\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")


def read_back(shown: str) -> str:
    """What a reader (or Python) takes a printed form for."""
    return ESCAPE.sub(lambda m: "\\" if m[1] == "\\" else chr(int(m[1][1:], 16)), shown)


@pytest.mark.parametrize(("one", "other"), [("victim x", "victim\\x20x"),
                                            ("alpha\u200b", "alpha\\u200b"),
                                            ("t\x1b[2J", "t\\x1b[2J")])
def test_two_different_ids_never_print_the_same(one: str, other: str) -> None:
    assert one != other
    assert safe_id(one) != safe_id(other), (
        f"{one!r} and {other!r} both print as {safe_id(one)}")
    assert safe(one) != safe(other) or " " in one, f"{one!r} and {other!r}: {safe(one)}"


@pytest.mark.parametrize("value", IDS)
def test_a_printed_form_reads_back_as_the_one_id_it_came_from(value: str) -> None:
    assert read_back(safe_id(value)) == value
    assert read_back(safe(value)) == value
    assert " " not in safe_id(value)
    assert safe("plain text, no escape") == "plain text, no escape"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("value", IDS)
def test_a_shell_word_gives_a_shell_the_id_exactly_and_shows_nothing_raw(value: str) -> None:
    word = shell_word(value)
    assert not re.search("[\x00-\x1f\x7f-\xa0\u200b\u202e\U000e0041]", word), word
    said = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True,
                          check=True, env={"LC_ALL": "C.UTF-8"}).stdout
    assert said.decode("utf-8", "surrogateescape") == value


def test_the_command_that_cancels_an_orphan_pastes_as_its_id() -> None:
    """``safe`` of the command doubled a backslash in a quoted id: pasted, the command
    named another thread."""
    late = Interrupt(id="sign-off", reason="approval")
    child = ThreadState(thread_id="t\\top/review-1", status="interrupted",
                        agent="pipeline_child", run_id="r1", parent_run_id="top-r1",
                        updated_at=NOW, open_interrupts=[OpenInterrupt(run_id="r1",
                                                                       interrupt=late)])
    orphan = Orphan(child, None)
    assert orphan.command == "agui-relay resume --cancel-all -- 't\\top/review-1'"
    console = Console(width=250, record=True)
    print_report(console, Counts(), [], timedelta(minutes=5), [orphan])
    assert orphan.command in console.export_text()
