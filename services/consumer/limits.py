"""Request limits of the service's edge: how big, how deep and how long an input may be.

Three bounds on size, each answered with a ``413 payload_too_large``
problem whose detail names the limit and its variable:

- the body's bytes (``AGUI_MAX_BODY_BYTES``): a declared ``Content-Length``
  over the limit is refused before a byte is read, and a body without one
  (chunked) is refused as soon as the bytes read pass the limit
  (``runs.read_body``);
- the number of ``messages`` (``AGUI_MAX_MESSAGES``) and of ``resume``
  entries (``AGUI_MAX_RESUME_ENTRIES``): counted on the parsed JSON, before
  the much dearer validation as a ``RunAgentInput``, so an input of a
  million tiny messages costs a list length, not a million models;
- the RunRequest record it becomes (``AGUI_MAX_RECORD_BYTES``, key, value
  and headers counted as the broker counts them, ``EdgeLimits.record``):
  checked before publishing, so the requests topic never holds a record the
  gatekeeper could not answer within the broker's limit.

And two on shape (``contracts.limits``, the numbers every service shares),
answered with a ``400`` naming the ``field`` and the ``limit``: an id or a
name longer than ``AGUI_MAX_ID_LENGTH`` (``id_too_long``: in the body, and
the ids and agent name in the path, ``check_ids``) and JSON nested deeper
than ``AGUI_MAX_JSON_DEPTH`` (``json_too_deep``: orjson parses up to 1,024
levels and serialises only 255, so a deep body used to fail with a 500 when
the request was encoded).

Pure: the checks look at parsed JSON or strings and raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contracts.limits import InputLimits, LimitExceeded, check_id
from services.consumer.problems import InvalidInput, PayloadTooLarge, limit_problem
from services.kafka.sizing import RecordLimit

ORJSON_MAX_DEPTH = 1024
"""Levels orjson parses; deeper is its "depth limit exceeded"."""


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """The limits the service enforces, built once from the settings."""

    input: InputLimits
    record: RecordLimit


def check_ids(limits: InputLimits, ids: Mapping[str, str]) -> None:
    """Raise the 400 ``id_too_long`` for the first of ``ids`` (field → value) too long."""
    for field, value in ids.items():
        broken = check_id(field, value, limits)
        if broken is not None:
            raise limit_problem(broken)


def too_deep_to_parse(limits: InputLimits) -> InvalidInput:
    """The 400 of a body deeper than the parser goes (no path known)."""
    return limit_problem(LimitExceeded("json_too_deep", "/", ORJSON_MAX_DEPTH + 1,
                                       limits.max_json_depth))


def check_counts(raw: dict[str, Any], *, max_messages: int, max_resume: int) -> None:
    """Raise the 413 when ``raw`` (a RunAgentInput's JSON) carries too many items."""
    for member, limit, variable in (("messages", max_messages, "AGUI_MAX_MESSAGES"),
                                    ("resume", max_resume, "AGUI_MAX_RESUME_ENTRIES")):
        items = raw.get(member)
        if isinstance(items, list) and len(items) > limit:
            raise PayloadTooLarge(
                "payload_too_large",
                f"{member} has {len(items)} items; this service takes at most {limit} "
                f"({variable})")
