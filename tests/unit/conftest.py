"""What unit tests share: a small disk that really fills up."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: a disk that really fills up (needs root, as CI and make test run)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill_disk(disk: Path) -> Path:
    """Fill ``disk`` to its last byte with one file; its path (delete it to make room)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for size in (65536, 4096, 1):
            try:
                while True:
                    os.write(fd, b"f" * size)
            except OSError:
                continue
    finally:
        os.close(fd)
    return filler


@pytest.fixture
def fill() -> Callable[[Path], Path]:
    """``fill_disk``, for tests on ``small_disk``."""
    return fill_disk
