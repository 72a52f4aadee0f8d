"""A setting the environment gets wrong: exit 2 and the variable named, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import BaseModel, ValidationError

from services.cli.settings_errors import USAGE_ERROR, reporting_settings

pytestmark = pytest.mark.unit

SECRET = "s3cr3t-do-not-print"


@pytest.mark.parametrize(("module", "env", "named"), [
    ("services.consumer", {"AGUI_ADVERTISED_URL": f"https://{SECRET}:1"}, "AGUI_ADVERTISED_URL"),
    ("services.consumer", {"AGUI_HTTP_PORT": SECRET}, "AGUI_HTTP_PORT"),
    ("services.gatekeeper", {"AGUI_BUSY_POLICY": SECRET}, "AGUI_BUSY_POLICY"),
    ("services.gatekeeper", {"AGUI_GATEKEEPER_BATCH_MS": "1001"}, "AGUI_GATEKEEPER_BATCH_MS"),
    ("services.notifier", {"AGUI_WEBHOOK_URL": f"ftp://{SECRET}/hook",
                           "AGUI_WEBHOOK_SECRET": SECRET}, "URL scheme should be 'http'"),
    ("services.notifier", {"AGUI_WEBHOOK_URL": "http://127.0.0.1:9/", "AGUI_WEBHOOK_SECRET":
                           SECRET, "AGUI_WEBHOOK_RETRIES": "1000"}, "AGUI_WEBHOOK_RETRIES"),
    ("services.notifier", {"AGUI_WEBHOOK_URL": "http://127.0.0.1:9/"}, "AGUI_WEBHOOK_SECRET"),
    ("services.producer", {"AGUI_MAX_RECORD_BYTES": "1e23"}, "AGUI_MAX_RECORD_BYTES"),
    # a traceback before; an infinite duration was taken as one
    ("services.gatekeeper", {"AGUI_LOG_LEVEL": "bogus"}, "AGUI_LOG_LEVEL"),
    ("services.gatekeeper", {"AGUI_TOPIC_PREFIX": ""}, "AGUI_TOPIC_PREFIX"),
    ("services.gatekeeper", {"AGUI_GATEKEEPER_SESSION_TIMEOUT_MS": "3600000"},
     "AGUI_GATEKEEPER_SESSION_TIMEOUT_MS"),
    ("services.consumer", {"AGUI_TOPIC_PREFIX": "a b"}, "AGUI_TOPIC_PREFIX"),
    ("services.consumer", {"AGUI_HTTP_HOST": ""}, "AGUI_HTTP_HOST"),
    ("services.consumer", {"AGUI_ALLOWED_HOSTS": "a b"}, "AGUI_ALLOWED_HOSTS"),
    ("services.consumer", {"AGUI_ALLOWED_HOSTS": "x.example,*"}, "AGUI_ALLOWED_HOSTS"),
    ("services.consumer", {"AGUI_GC_THRESHOLD": "1" + "0" * 23}, "AGUI_GC_THRESHOLD"),
    ("services.consumer", {"AGUI_LOG_FIELD_MAX": "abc"}, "AGUI_LOG_FIELD_MAX"),
    ("services.notifier", {"AGUI_LOG_FORMAT": "xml"}, "AGUI_LOG_FORMAT"),
    ("services.consumer", {"AGUI_KEEPALIVE_S": "inf"}, "AGUI_KEEPALIVE_S: Input should be a"),
    ("services.gatekeeper", {"AGUI_GATEKEEPER_STALL_S": "nan"}, "AGUI_GATEKEEPER_STALL_S"),
    ("services.gatekeeper", {"AGUI_MAX_RECORD_BYTES": "104857601"}, "AGUI_MAX_RECORD_BYTES"),
    ("services.gatekeeper", {"AGUI_STATE_DIR": ""}, "AGUI_STATE_DIR: Value error, is empty"),
    ("services.consumer", {"AGUI_STATE_DIR": " "}, "AGUI_STATE_DIR: Value error, is empty"),
    # a file where the directory should be, or above it: refused before joining any group
    ("services.gatekeeper", {"AGUI_STATE_DIR": __file__}, "is not a directory"),
    ("services.consumer", {"AGUI_STATE_DIR": f"{__file__}/stores"}, "is not a directory"),
])
def test_a_service_refusing_its_environment_says_which_variable_and_exits_2(
        module: str, env: dict[str, str], named: str) -> None:
    done = subprocess.run([sys.executable, "-m", module], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == USAGE_ERROR, done.stderr
    assert "invalid configuration" in done.stderr
    assert named in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert SECRET not in done.stderr + done.stdout  # a value may be a key: never echoed


def test_the_root_command_reports_the_same_way() -> None:
    done = subprocess.run([sys.executable, "-m", "services.cli.main", "consumer"],
                          env={**os.environ, "AGUI_ADVERTISED_URL": "consumer-1:8000"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == USAGE_ERROR, done.stderr
    assert "AGUI_ADVERTISED_URL" in done.stderr


class _Record(BaseModel):
    count: int


def test_a_validation_error_that_is_not_configuration_is_left_whole() -> None:
    def defect() -> None:
        _Record.model_validate({"count": "many"})

    with pytest.raises(ValidationError):
        reporting_settings(defect)


def test_a_command_that_succeeds_returns() -> None:
    ran: list[bool] = []
    reporting_settings(lambda: ran.append(True))
    assert ran == [True]


@pytest.mark.parametrize(("variable", "value"), [
    ("AGUI_GATEKEEPER_BATCH_MS", "-1"),
    ("AGUI_UP_HEALTH_PORT_BASE", "abc"),  # had been ignored: no service had health ports
    ("AGUI_UP_HEALTH_PORT_BASE", "65534"),
    ("AGUI_LOG_LEVEL", "loud"),
])
def test_up_refuses_a_childs_setting_before_it_starts_anything(variable: str,
                                                                value: str) -> None:
    done = subprocess.run([sys.executable, "-m", "services.cli.main", "up"],
                          env={**os.environ, variable: value,
                               "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == USAGE_ERROR, done.stderr
    assert variable in done.stderr
    assert "Kafka" not in done.stderr  # no broker asked for, no topic created
