"""The OpenAPI document describes the responses the service sends (found by probing: a
FastAPI ``422 application/json HTTPValidationError`` on five routes, which never comes,
every error being a problem+json document; and ``/metrics`` as ``application/json``, which
answers Prometheus text, ``text/plain; version=...``)."""

from __future__ import annotations

from typing import Any

import pytest

from services.consumer.app import create_app
from services.consumer.settings import ConsumerSettings
from services.runtime.settings import KafkaSettings

pytestmark = pytest.mark.unit


def _doc() -> dict[str, Any]:
    return create_app(ConsumerSettings(), KafkaSettings(bootstrap_servers="127.0.0.1:9")).openapi()


def test_every_documented_error_response_is_a_problem_document() -> None:
    wrong = [(method.upper(), path, status, sorted(answer.get("content", {})))
             for path, operations in _doc()["paths"].items()
             for method, operation in operations.items()
             for status, answer in operation.get("responses", {}).items()
             if int(status) >= 400
             and set(answer.get("content", {})) != {"application/problem+json"}]
    assert wrong == []


def test_metrics_is_documented_as_prometheus_text() -> None:
    content = _doc()["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert "application/json" not in content
    assert any(kind.startswith("text/plain") for kind in content)
