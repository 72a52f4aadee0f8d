"""The test tree itself: every test module has a unique file name.

The test directories are not packages, so pytest imports each test module by
its base name; two modules of one name in different folders stop the whole
collection ("import file mismatch") before a single test runs.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_name_is_unique() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "node_modules" not in p.parts)
    assert [name for name, n in names.items() if n > 1] == []
