"""A variable's name is compared as pydantic-settings reads it: in any case.

The settings classes keep pydantic-settings' ``case_sensitive=False``, so
``AGUI_Stream_Queue=99`` sets the stream queue, yet every service and command said
it "is not a setting agui-relay reads: ignored" (found by probing); and a misspelling
in lower case was never warned about. The names read by ``os.environ`` are still
compared as written, since that is how they are read.
"""

from __future__ import annotations

import pytest
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.cli.environment import environment_warnings, known_names, unknown_variables
from services.consumer.settings import ConsumerSettings

pytestmark = pytest.mark.unit


def test_a_setting_written_in_another_case_is_read_and_not_called_ignored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGUI_Stream_Queue", "99")
    assert ConsumerSettings().stream_queue == 99  # read, as pydantic-settings reads names
    warned = environment_warnings({"AGUI_Stream_Queue": "99", "agui_state_dir": "/s"})
    assert not any("ignored" in line for line in warned), warned


def test_a_misspelling_in_lower_case_is_warned_about_naming_the_known_one() -> None:
    assert environment_warnings({"agui_stat_dir": "/x"}) == [
        "agui_stat_dir is not a setting agui-relay reads: ignored "
        "(did you mean AGUI_STATE_DIR?)"]


def test_a_name_read_from_os_environ_counts_only_as_written() -> None:
    env = {"AGUI_API_KEY": "t", "agui_api_key": "t", "AGUI_UPSTREAM_BILLING_HEADERS": "{}",
           "agui_upstream_billing_headers": "{}"}
    assert unknown_variables(env, known_names()) == [
        ("agui_api_key", "AGUI_API_KEY"),
        ("agui_upstream_billing_headers", "AGUI_UPSTREAM_BILLING_HEADERS")]


class _Exact(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="", case_sensitive=True)

    value: int = Field(0, alias="AGUI_EXACT_VALUE")


def test_a_case_sensitive_class_is_compared_as_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGUI_Exact_Value", "5")
    assert _Exact().value == 0  # not read
    known = known_names([_Exact, ConsumerSettings])
    assert "AGUI_EXACT_VALUE" in known
    assert "AGUI_Exact_Value" not in known
    assert "AGUI_Stream_Queue" in known
