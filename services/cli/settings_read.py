"""One setting's value as its settings class reads it from the environment, unvalidated.

pydantic-settings reads a class's names in any case unless its ``case_sensitive``
says otherwise (``agui_state_dir=/x`` sets ``AGUI_STATE_DIR``), and
``services.cli.environment`` calls such a name read, so says nothing of it. A
command that needs the value itself (``state``'s directory, what ``up`` runs and
hands its children) reads it here, by the class's own source, and takes the value
the services take: ``os.environ.get`` read the name as written only, and
``agui_state_dir=/x agui-relay state`` read ``.run/state`` without a word.
Unvalidated: a command that only reads a directory must not refuse one its process
cannot write, and the classes validate when the services start.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic_settings import BaseSettings, EnvSettingsSource


def setting(cls: type[BaseSettings], alias: str) -> str | None:
    """The value ``cls`` reads for its field named ``alias``, as set in the environment
    (None: not set, or not text)."""
    value = EnvSettingsSource(cls)().get(alias)
    return value if isinstance(value, str) else None


def with_settings(environ: Mapping[str, str], given: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``given`` set, each under its name as written and under no other
    case of it: a child reading names in any case finds the one value given, not one of
    two picked by the environment's order (``agui_state_dir`` beside ``AGUI_STATE_DIR``)."""
    names = {name.lower() for name in given}
    return {**{k: v for k, v in environ.items() if k.lower() not in names}, **given}
