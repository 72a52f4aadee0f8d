"""No service imports the CLI: shared meaning lives in ``services.agui``, not in a command.

The CLI wires services together and shows their data; a service reaching
into ``services.cli`` for a piece of logic (as the producer once did for the
transcript reducer) ties a worker to the operator tool's dependencies and
hides shared meaning where the next service will not look. Every import in
the service packages is read from the source (``ast``, so a lazy import
inside a function counts too). ``__main__`` modules are exempt: ``python -m
services.<svc>`` is the CLI's own front door, and all they do is call it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
SERVICES = sorted(p.name for p in (ROOT / "services").iterdir()
                  if p.is_dir() and p.name != "cli" and (p / "__init__.py").exists())
"""Every service package (gatekeeper, producer, consumer, runtime, kafka, agui, ...)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(path: Path) -> list[str]:
    module = _module_name(path).split(".")
    return module if path.name == "__init__.py" else module[:-1]


def _imports(source: str, package: list[str]) -> list[tuple[int, str]]:
    """Every module ``source`` (in ``package``) imports, relative imports resolved, by line."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def _service_files() -> list[Path]:
    assert {"gatekeeper", "producer", "consumer", "runtime", "kafka", "agui"} <= set(SERVICES)
    files = [p for name in SERVICES for p in sorted((ROOT / "services" / name).rglob("*.py"))]
    assert len(files) > 50, "the service packages were not found"
    return [p for p in files if p.name != "__main__.py"]


def _cli_imports(source: str, package: list[str]) -> list[tuple[int, str]]:
    return [(line, module) for line, module in _imports(source, package)
            if module == "services.cli" or module.startswith("services.cli.")]


def test_no_service_module_imports_the_cli() -> None:
    offending = [f"{path.relative_to(ROOT)}:{line}: {module}"
                 for path in _service_files()
                 for line, module in _cli_imports(path.read_text("utf-8"), _package(path))]
    assert offending == []


def test_the_check_sees_absolute_relative_and_lazy_imports() -> None:
    """The walk is not blind: each form of importing the CLI is caught."""
    sample = (
        "import services.cli.ops\n"
        "from .. import cli\n"
        "from . import sizes\n"
        "def f() -> None:\n"
        "    from services.cli.ops.render import duration\n"
    )
    hits = _cli_imports(sample, ["services", "producer"])
    assert [module for _, module in hits] == [
        "services.cli.ops", "services.cli", "services.cli.ops.render",
        "services.cli.ops.render.duration",
    ]
