"""``agui-relay up``'s relay of child output: any line length, never stops reading."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from services.cli import childlog
from services.cli.childlog import Lines
from services.cli.up import Child, stop_children

pytestmark = pytest.mark.unit


def test_lines_split_across_chunks_and_keep_a_bounded_part() -> None:
    lines = Lines(shown=4)
    assert lines.feed(b"ab") == []
    assert lines.feed(b"c\ndefghij\nk") == [(b"abc", 0), (b"defg", 3)]
    assert lines.feed(b"lmnop\r\n") == [(b"klmn", 3)]  # "op\\r" not shown
    assert lines.close() == []
    assert lines.feed(b"tail") == []
    assert lines.close() == [(b"tail", 0)]


def test_display_names_what_was_cut(tmp_path: Path) -> None:
    assert childlog.display(b"ok", 0, tmp_path / "x.log") == "ok"
    assert childlog.display(b"\xffab", 10, tmp_path / "x.log") == (
        f"\ufffdab …[10 more bytes in {tmp_path / 'x.log'}]")


async def _child(code: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)


async def test_a_line_of_a_megabyte_neither_stops_the_relay_nor_blocks_the_child(
        tmp_path: Path) -> None:
    # Before: asyncio's line reader raised on a line over 64 KiB and the pipe was never
    # read again, so the child blocked in its next write.
    code = ("import sys\n"
            "sys.stdout.write('x' * 1_000_000 + '\\n')\n"
            "for i in range(2000): sys.stdout.write(f'line {i} ' + 'y' * 100 + '\\n')\n"
            "sys.stdout.write('[red]not markup[/] done\\n')\n")
    process = await _child(code)
    assert process.stdout is not None
    shown: list[str] = []
    log = tmp_path / "logs" / "svc.log"
    await asyncio.wait_for(childlog.relay(process.stdout, log, shown.append), 60)
    assert await asyncio.wait_for(process.wait(), 60) == 0
    assert len(shown) == 2002
    assert shown[0].startswith("x" * childlog.SHOWN)
    assert f"{1_000_000 - childlog.SHOWN} more bytes" in shown[0]
    assert shown[-1] == "[red]not markup[/] done"
    written = 1_000_001 + sum(len(f"line {i} ") + 101 for i in range(2000))
    assert log.stat().st_size == written + len("[red]not markup[/] done\n")


async def test_a_failing_terminal_does_not_stop_the_reading(tmp_path: Path) -> None:
    process = await _child("for i in range(5000): print('z' * 200)")
    assert process.stdout is not None

    def broken(_: str) -> None:
        raise BrokenPipeError

    await asyncio.wait_for(childlog.relay(process.stdout, tmp_path / "a.log", broken), 60)
    assert await asyncio.wait_for(process.wait(), 60) == 0
    assert (tmp_path / "a.log").stat().st_size == 5000 * 201


async def test_stop_children_kills_a_child_that_ignores_sigterm_within_the_grace(
        tmp_path: Path) -> None:
    stubborn = await _child("import signal, time\n"
                            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                            "print('ready', flush=True)\n"
                            "time.sleep(600)\n")
    polite = await _child("import time\nprint('ready', flush=True)\ntime.sleep(600)\n")
    for process in (stubborn, polite):
        assert process.stdout is not None
        assert await asyncio.wait_for(process.stdout.readline(), 30) == b"ready\n"
    children = [Child("a", stubborn, tmp_path / "a.log"), Child("b", polite, tmp_path / "b.log")]
    # The stubborn child sleeps 600 s through SIGTERM: only the kill after the grace ends it.
    await asyncio.wait_for(stop_children(children, grace_s=1.0), 30)
    assert stubborn.returncode is not None
    assert polite.returncode is not None


async def test_a_second_signal_kills_at_once(tmp_path: Path) -> None:
    stubborn = await _child("import signal, time\n"
                            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                            "print('ready', flush=True)\n"
                            "time.sleep(600)\n")
    assert stubborn.stdout is not None
    assert await asyncio.wait_for(stubborn.stdout.readline(), 30) == b"ready\n"
    hurry = asyncio.Event()
    hurry.set()
    await asyncio.wait_for(stop_children([Child("a", stubborn, tmp_path / "a.log")], hurry,
                                         grace_s=600), 30)
    assert stubborn.returncode is not None


async def test_a_log_file_on_a_full_disk_is_said_on_the_terminal() -> None:
    """``/dev/full`` answers every write ``ENOSPC``, as a full disk does: the file was
    dropped without a word (found by probing)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "for i in range(50): print('line', i)",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert process.stdout is not None
    shown: list[str] = []
    await asyncio.wait_for(childlog.relay(process.stdout, Path("/dev/full"), shown.append), 60)
    assert await asyncio.wait_for(process.wait(), 60) == 0
    assert sum(1 for s in shown if s.startswith("line ")) == 50
    (note,) = [s for s in shown if not s.startswith("line ")]
    assert "stopped taking writes" in note
    assert "No space left on device" in note


def test_a_log_file_that_fails_is_tried_again_and_says_so_when_it_takes_writes(
        tmp_path: Path) -> None:
    blocker = tmp_path / "logs"
    blocker.write_text("a file where the log directory should be")
    now = [0.0]
    shown: list[str] = []
    log = childlog.LogFile(blocker / "producer.log", shown.append, clock=lambda: now[0])
    log.write(b"lost\n")
    assert len(shown) == 1
    assert "stopped taking writes" in shown[0]
    blocker.unlink()
    log.write(b"before the retry\n")  # not tried again yet
    now[0] = childlog.RETRY_S
    log.write(b"kept\n")
    log.close()
    assert (blocker / "producer.log").read_bytes() == b"kept\n"
    assert "takes writes again" in shown[-1]
    assert len(shown) == 2
