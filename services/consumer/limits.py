"""Request limits of ``POST /agents/{agent}``: how big and how long an input may be.

Three bounds, each answered with a ``413 payload_too_large`` problem whose
detail names the limit and its variable:

- the body's bytes (``AGUI_MAX_BODY_BYTES``): a declared ``Content-Length``
  over the limit is refused before a byte is read, and a body without one
  (chunked) is refused as soon as the bytes read pass the limit
  (``runs.read_body``);
- the number of ``messages`` (``AGUI_MAX_MESSAGES``) and of ``resume``
  entries (``AGUI_MAX_RESUME_ENTRIES``): counted on the parsed JSON, before
  the much dearer validation as a ``RunAgentInput``, so an input of a
  million tiny messages costs a list length, not a million models.

Pure: ``check_counts`` looks at the parsed JSON object and raises.
"""

from __future__ import annotations

from typing import Any

from services.consumer.problems import PayloadTooLarge


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
