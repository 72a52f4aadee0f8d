"""The commands the operator commands print to paste name, once pasted, the ids they were for.

A thread or interrupt id is whatever a client or an agent chose (any JSON string: a
space, NUL, a leading ``-``, invisible characters). Each printed command is given here
to bash, and the words bash makes of it to ``agui-relay``'s own parser: the ids it ends
up with must be the ones the command was printed for, in any locale; a command no
argument can carry the id of is not offered at all.
"""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import typer
from ag_ui.core import Interrupt
from rich.console import Console

from contracts import OpenInterrupt, ThreadState
from services.cli.ops.app import build
from services.cli.ops.command_line import UNTYPABLE
from services.cli.ops.orphans import Orphan
from services.cli.ops.resume import refused
from services.cli.ops.resume_plan import ResumeOptions, ask_gatekeeper, plan_resume
from services.cli.ops.safe import shell_word
from services.cli.ops.stuck import orphan_json, print_report
from services.gatekeeper.census import Counts

pytestmark = [pytest.mark.unit,
              pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")]

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
LOCALES = ["C.UTF-8", "C"]


def orphan_of(parent_thread: str) -> Orphan:
    child = f"{parent_thread}/review-0123abcd"
    late = Interrupt(id="sign-off", reason="approval")
    state = ThreadState(thread_id=child, status="interrupted", agent="pipeline_child",
                        run_id="r1", parent_run_id="top-r1", updated_at=NOW,
                        open_interrupts=[OpenInterrupt(run_id="r1", interrupt=late)])
    return Orphan(state, None)


def pasted(command: str, locale: str) -> list[str]:
    """The argv bash makes of ``command`` (``agui-relay`` itself left out)."""
    assert command.startswith("agui-relay ")
    script = 'words() { for a in "$@"; do printf "%s\\0" "$a"; done; }; words '
    out = subprocess.run(["bash", "-c", script + command[len("agui-relay "):]],
                         capture_output=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "LC_ALL": locale, "LANG": locale})
    return [a.decode("utf-8", "surrogateescape") for a in out.stdout.split(b"\0")[:-1]]


def parsed(argv: list[str]) -> dict[str, Any]:
    """The parameters ``agui-relay`` reads ``argv`` as (its own parser)."""
    group = typer.main.get_command(build())
    command = group.get_command(None, argv[0])  # type: ignore[attr-defined]
    return dict(command.make_context(argv[0], argv[1:]).params)


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize("parent", ["alpha\u200b", "tag\U000e0041", "-rf", "it's \\x",
                                    "victim run-1", "caf\u00e9\u202e"])
def test_an_orphans_command_pasted_names_the_orphan(parent: str, locale: str) -> None:
    """In the POSIX locale bash left ``$'\\u200b'`` as six characters and dropped
    ``\\U000e0041``; a thread ``-rf`` made the command fail ``No such option``."""
    orphan = orphan_of(parent)
    assert orphan.command is not None
    params = parsed(pasted(orphan.command, locale))
    assert (params["thread_id"], params["cancel_all"]) == (orphan.state.thread_id, True), (
        f"{orphan.command!r} pasted in {locale} names {params['thread_id']!r}")


def test_an_orphan_with_a_nul_in_its_id_is_offered_no_command() -> None:
    """``$'victim\\x00x/…'``: bash ends the word at the NUL, so the command printed
    cancelled every open interrupt of the thread ``victim`` instead."""
    orphan = orphan_of("victim\x00x")
    assert orphan.command is None
    with pytest.raises(ValueError, match="cannot be typed"):
        shell_word(orphan.state.thread_id)
    assert orphan_json(orphan)["command"] is None
    console = Console(width=400, record=True)
    print_report(console, Counts(), [], timedelta(minutes=5), [orphan])
    shown = console.export_text()
    assert UNTYPABLE in shown
    assert "POST /agents/" in shown
    assert "victim\\x00x" in shown  # the id itself shown inert, as every id is


def refusal_shown(state: ThreadState, options: ResumeOptions) -> str:
    """What ``agui-relay resume`` prints of the plan's refusal, rich markup rendered."""
    plan = plan_resume(state, options, NOW)
    assert plan.problems
    console = Console(width=400, record=True)
    console.print(refused(plan.problems).shown)
    return console.export_text()


def between(text: str, start: str) -> str:
    assert start in text, text
    return start + text.split(start, 1)[1].split("`", 1)[0]


@pytest.mark.parametrize("thread", ["victim run-1", "victim\u200b run-1", "-rf"])
def test_resumes_cancel_hint_pastes_as_the_busy_thread_not_another(thread: str) -> None:
    """The hint "or stop it first with `agui-relay cancel <thread>`" printed the id raw:
    pasted, ``victim run-1``'s cancelled run ``run-1`` of thread ``victim``."""
    late = Interrupt(id="a", reason="x")
    state = ThreadState(thread_id=thread, status="running", agent="scripted", run_id="r9",
                        updated_at=NOW, open_interrupts=[OpenInterrupt(run_id="r8",
                                                                       interrupt=late)])
    problems, _, _ = ask_gatekeeper(state, [], NOW)
    assert [p.code for p in problems] == ["thread_busy"]
    command = between(refusal_shown(state, ResumeOptions(cancel_all=True)),
                      "agui-relay cancel ")
    params = parsed(pasted(command, "C"))
    assert (params["thread_id"], params["run_id"]) == (thread, None), (
        f"the hint {command!r} cancels run {params['run_id']!r} of thread "
        f"{params['thread_id']!r}, not the busy thread {thread!r}")


@pytest.mark.parametrize("interrupt_id", ["-x y", "a\u200bb", "q=1"])
def test_the_cancel_flags_a_refusal_names_pasted_cancel_those_interrupts(
        interrupt_id: str) -> None:
    state = ThreadState(thread_id="t1", status="interrupted", agent="scripted",
                        run_id="r1", updated_at=NOW, open_interrupts=[
                            OpenInterrupt(run_id="r1", interrupt=Interrupt(id=i, reason="x"))
                            for i in ("a", interrupt_id)])
    shown = refusal_shown(state, ResumeOptions(resolve=[("a", 1)]))
    flag = shown.split("add --resolve ID=JSON, ", 1)[1].split(", or --cancel-all", 1)[0]
    params = parsed(pasted(f"agui-relay resume {flag} -- t1", "C"))
    assert (params["thread_id"], params["cancel"]) == ("t1", [interrupt_id]), shown


def test_the_parents_resume_a_child_is_pointed_to_pastes_as_the_parent() -> None:
    state = ThreadState(thread_id="-p q/review-0a1b", status="interrupted", agent="child",
                        run_id="r1", parent_run_id="top-r1", updated_at=NOW,
                        open_interrupts=[OpenInterrupt(run_id="r1", interrupt=Interrupt(
                            id="sign-off", reason="x"))])
    shown = refusal_shown(state, ResumeOptions(resolve=[("sign-off", 1)]))
    command = between(shown, "agui-relay resume ")
    assert parsed(pasted(command, "C"))["thread_id"] == "-p q"
