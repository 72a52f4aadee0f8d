"""An upstream agent's settings, read from the environment — pure.

Every setting but ``HEADERS`` has a process-wide default
(``AGUI_UPSTREAM_<SETTING>``) and a per-agent override
(``AGUI_UPSTREAM_<NAME>_<SETTING>``, ``<NAME>`` the agent name upper-cased
with ``-`` as ``_``):

* ``HEADERS`` (per agent only, so one upstream's token never reaches
  another): extra request headers, as a JSON object or ``Name: value;
  Name: value`` (a bearer token for the upstream goes here; header values
  are never logged nor shown in a repr);
* ``CONNECT_TIMEOUT_S`` (5): to connect and send the request;
* ``IDLE_TIMEOUT_S`` (60): the longest wait for the response head or the next
  line of its stream (a ``: keep-alive`` comment counts, a partial line does
  not); ``RUN_TIMEOUT_S`` (3600): the longest a whole run may stream
  (either one ends the run ``upstream_timeout``);
* ``VERIFY`` (true): verify the upstream's TLS certificate; ``CA_FILE``: the
  CA bundle to verify it with;
* ``CONCURRENCY`` (64): requests in flight to this upstream, per worker;
* ``RETRIES`` (2): attempts after the first when the upstream is unreachable
  or answers 429/502/503/504 — only before its first event, never after, and
  not sooner than its ``Retry-After`` asks (``retry``);
* ``MAX_EVENT_BYTES`` (4194304): the largest SSE event read from it (a longer
  one ends the run ``upstream_protocol`` before it is buffered whole).

A bad value is an ``AgentLoadError`` naming the variable, raised when the
worker loads its agents: a worker never starts half configured.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.producer.errors import AgentLoadError

PREFIX = "AGUI_UPSTREAM_"
SCHEMES = ("http://", "https://")


def is_upstream_url(target: str) -> bool:
    """True when an ``AGUI_AGENTS`` value names an upstream endpoint (not ``module:object``)."""
    return target.lower().startswith(SCHEMES)


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    """How the worker reaches one upstream AG-UI endpoint."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Extra request headers (secrets: never in a repr, never logged)."""
    connect_timeout_s: float = 5.0
    idle_timeout_s: float = 60.0
    run_timeout_s: float = 3600.0
    verify: bool = True
    ca_file: str | None = None
    concurrency: int = 64
    retries: int = 2
    max_event_bytes: int = 4 * 1024 * 1024


def env_name(agent: str, setting: str) -> str:
    """The per-agent variable for ``setting`` (``AGUI_UPSTREAM_BILLING_HEADERS``)."""
    return f"{PREFIX}{agent.upper().replace('-', '_')}_{setting}"


def parse_headers(raw: str, variable: str) -> dict[str, str]:
    """``{"Name": "value"}`` or ``Name: value; Name: value`` → headers (values unquoted)."""
    text = raw.strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise AgentLoadError(f"{variable} is not a JSON object: {exc.msg}") from None
        if not isinstance(parsed, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()):
            raise AgentLoadError(f"{variable} must map header names to string values")
        out = dict(parsed)
    else:
        out = {}
        for part in text.split(";"):
            if not part.strip():
                continue
            name, sep, value = part.partition(":")
            if not sep or not name.strip():
                raise AgentLoadError(f"{variable}: expected 'Name: value; ...' "
                                     f"(an entry has no ':' or no name)")
            out[name.strip()] = value.strip()
    for name, value in out.items():
        if not name.isascii() or any(c in name for c in " \t\r\n:") or any(
                c in value for c in "\r\n"):
            raise AgentLoadError(f"{variable}: header {name!r} is not a valid header")
    return out


def _setting(env: Mapping[str, str], agent: str, setting: str,
             *, shared: bool = True) -> tuple[str, str] | None:
    variables = (env_name(agent, setting), f"{PREFIX}{setting}")
    for variable in variables if shared else variables[:1]:
        value = env.get(variable)
        if value is not None and value.strip():
            return variable, value.strip()
    return None


def _number(env: Mapping[str, str], agent: str, setting: str, default: float, *,
            integer: bool = False, least: float = 0.0) -> float:
    found = _setting(env, agent, setting)
    if found is None:
        return default
    variable, raw = found
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise AgentLoadError(f"{variable}={raw!r} is not a number") from None
    if not value >= least or value != value:
        raise AgentLoadError(f"{variable}={raw!r}: must be at least {least:g}")
    return value


def _flag(env: Mapping[str, str], agent: str, setting: str, default: bool) -> bool:
    found = _setting(env, agent, setting)
    if found is None:
        return default
    variable, raw = found
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise AgentLoadError(f"{variable}={raw!r}: expected true or false")


def upstream_config(name: str, url: str, env: Mapping[str, str]) -> UpstreamConfig:
    """The settings of upstream agent ``name`` at ``url``, from ``env``."""
    if not is_upstream_url(url) or len(url.split("://", 1)[1].strip("/")) == 0:
        raise AgentLoadError(f"agent {name!r}: {url!r} is not an http(s) URL")
    headers = _setting(env, name, "HEADERS", shared=False)
    ca_file = _setting(env, name, "CA_FILE")
    return UpstreamConfig(
        name=name, url=url,
        headers=parse_headers(headers[1], headers[0]) if headers else {},
        connect_timeout_s=_number(env, name, "CONNECT_TIMEOUT_S", 5.0, least=0.001),
        idle_timeout_s=_number(env, name, "IDLE_TIMEOUT_S", 60.0, least=0.001),
        run_timeout_s=_number(env, name, "RUN_TIMEOUT_S", 3600.0, least=0.001),
        verify=_flag(env, name, "VERIFY", True),
        ca_file=ca_file[1] if ca_file else None,
        concurrency=int(_number(env, name, "CONCURRENCY", 64, integer=True, least=1)),
        retries=int(_number(env, name, "RETRIES", 2, integer=True, least=0)),
        max_event_bytes=int(_number(env, name, "MAX_EVENT_BYTES", 4 * 1024 * 1024,
                                    integer=True, least=1024)),
    )
