"""Every duration a service reads from its environment has a finite upper bound.

``inf`` and ``nan`` are refused by every settings class already; a finite but
absurd value (``1e300`` seconds) passed, and then ended as a wait nobody
meant (a stop waiting for a webhook attempt for ever, a timeout turned into a
Kafka millisecond setting that does not fit an int32). Each class is found
by walking the services package, so a class added later is held to the same
rule without being named here.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from pydantic import ValidationError
from pydantic_settings import BaseSettings

import services


def _settings_classes() -> list[type[BaseSettings]]:
    found: dict[str, type[BaseSettings]] = {}
    for info in pkgutil.walk_packages(services.__path__, "services."):
        if not info.name.endswith(("settings", "collector", "health", "logging", "inbox_feed")):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, BaseSettings)
                    and value is not BaseSettings and value.__module__ == module.__name__):
                found[f"{module.__name__}.{value.__name__}"] = value
    return [found[name] for name in sorted(found)]


def _float_fields() -> list[tuple[type[BaseSettings], str, str]]:
    fields = []
    for cls in _settings_classes():
        for name, info in cls.model_fields.items():
            if info.annotation is float:
                fields.append((cls, name, str(info.alias or name)))
    return fields


def test_the_walk_finds_every_services_settings() -> None:
    names = {cls.__name__ for cls in _settings_classes()}
    assert {"ConsumerSettings", "ProducerSettings", "GatekeeperSettings",
            "NotifierSettings", "KafkaSettings", "LimitSettings"} <= names
    assert len(_float_fields()) >= 25


@pytest.mark.parametrize(("cls", "name", "alias"), _float_fields(),
                         ids=lambda v: v if isinstance(v, str) else getattr(v, "__name__", "?"))
def test_an_absurd_duration_is_refused_at_start(cls: type[BaseSettings], name: str, alias: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    for required, value in {"AGUI_WEBHOOK_URL": "http://127.0.0.1:9/hook",
                            "AGUI_WEBHOOK_SECRET": "s"}.items():
        monkeypatch.setenv(required, value)
    monkeypatch.setenv(alias, "1e300")
    with pytest.raises(ValidationError) as refused:
        cls()
    assert alias in str(refused.value) or name in str(refused.value)
