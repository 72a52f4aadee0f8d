"""``state`` and ``up`` read a setting named in any case, as the services do.

``services.cli.environment`` calls ``agui_state_dir`` read (pydantic-settings folds
case), so it says nothing of it; ``state`` and ``up`` read ``AGUI_STATE_DIR``,
``AGUI_WEBHOOK_URL``, ``KAFKA_BOOTSTRAP_SERVERS``... with ``os.environ.get`` as
written, so ``agui_state_dir=/x agui-relay state`` read ``.run/state`` without a word,
and ``up`` handed its children both ``AGUI_STATE_DIR=.run/state`` and the user's
``agui_state_dir=/x``, the environment's order deciding which one they took.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer

from services.cli import up
from services.cli.environment import environment_warnings
from services.cli.ops import state as state_command
from services.cli.settings_read import with_settings

pytestmark = pytest.mark.unit

GIVEN = {"agui_state_dir": "/srv/agui-state", "Agui_Log_Format": "json",
         "agui_gatekeeper_instance_id": "gk-7", "agui_webhook_url": "http://127.0.0.1:9/hook",
         "agui_agents": "mine=services.producer.agents.scripted:agent",
         "kafka_bootstrap_servers": "127.0.0.1:20999"}


@pytest.fixture
def lower_case(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Each of ``GIVEN`` set in the environment as written, no other case of it."""
    names = {name.lower() for name in GIVEN}
    for name in list(os.environ):
        if name.lower() in names:
            monkeypatch.delenv(name)
    for name, value in GIVEN.items():
        monkeypatch.setenv(name, value)
    return GIVEN


def test_state_reads_a_lower_case_state_dir(lower_case: dict[str, str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Path] = []

    async def fake_state(settings: object, root: Path, as_json: bool) -> int:
        seen.append(root)
        return 0

    monkeypatch.setattr(state_command, "_state", fake_state)
    with pytest.raises(typer.Exit):
        state_command.state(directory=None, as_json=False)
    assert not [line for line in environment_warnings(os.environ) if "agui_state_dir" in line]
    assert seen == [Path("/srv/agui-state")], (
        f"agui-relay state read {seen}: agui_state_dir is called read (pydantic-settings "
        "folds case) but this command read AGUI_STATE_DIR as written")


def test_up_hands_its_children_the_users_settings_once_each(
        lower_case: dict[str, str]) -> None:
    agents = up.chosen_agents(None)
    assert agents == GIVEN["agui_agents"]
    env = with_settings(os.environ, up.children_settings("127.0.0.1:20999", agents))
    for name, value in (("AGUI_STATE_DIR", "/srv/agui-state"), ("AGUI_LOG_FORMAT", "json"),
                        ("AGUI_GATEKEEPER_INSTANCE_ID", "gk-7"), ("AGUI_AGENTS", agents),
                        ("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:20999")):
        spelt = {k: v for k, v in env.items() if k.lower() == name.lower()}
        assert spelt == {name: value}, f"the children get {spelt} for {name}"
    assert env["agui_webhook_url"] == GIVEN["agui_webhook_url"]  # not set by up: as given


def test_up_runs_the_notifier_and_uses_the_broker_named_in_lower_case(
        lower_case: dict[str, str]) -> None:
    assert ("notifier", "services.notifier") in up.services()
    assert up.ensure_broker() == ("127.0.0.1:20999", None)


def test_up_keeps_its_own_defaults_when_nothing_is_given(
        lower_case: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in GIVEN:
        monkeypatch.delenv(name)
    assert up.chosen_agents(None) == up.SAMPLE_AGENTS
    assert "notifier" not in dict(up.services())
    given = up.children_settings("b:1", "a=m:o")
    assert (given["AGUI_STATE_DIR"], given["AGUI_LOG_FORMAT"],
            given["AGUI_GATEKEEPER_INSTANCE_ID"]) == (up.DEFAULT_STATE_DIR, "text",
                                                      "gatekeeper-0")
