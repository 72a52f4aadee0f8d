"""Fixtures of the deployment tests: the files under deploy/, loaded once."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.unit.deploy.support import (
    COMPOSE_SCHEMA,
    DEPLOY,
    K8S,
    NPM_HINT,
    load_yaml_documents,
    require_file,
)


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    """``deploy/compose.yaml`` as Compose reads it (YAML merge keys resolved)."""
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


@pytest.fixture(scope="session")
def compose_schema() -> dict[str, Any]:
    """The Compose Specification JSON schema as dclint ships it."""
    schema: dict[str, Any] = json.loads(require_file(COMPOSE_SCHEMA, NPM_HINT).read_text())
    return schema


@pytest.fixture(scope="session")
def kustomization() -> dict[str, Any]:
    """``deploy/k8s/kustomization.yaml``."""
    loaded: dict[str, Any] = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return loaded


@pytest.fixture(scope="session")
def k8s_resources(kustomization: dict[str, Any]) -> list[dict[str, Any]]:
    """Every resource the kustomization lists, in order."""
    return [doc for name in kustomization["resources"] for doc in load_yaml_documents(K8S / name)]
