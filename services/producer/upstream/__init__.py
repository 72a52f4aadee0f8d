"""HTTP upstream agents: an existing AG-UI service hosted behind Kafka by one line.

In ``AGUI_AGENTS`` a value that is an ``http://`` or ``https://`` URL names
an upstream AG-UI endpoint (``billing=http://billing-agent:8080/agui``).
For each dispatched input the worker POSTs the run's ``RunAgentInput``
(wire JSON, ``protocolVersion`` "1.0", ``Accept: text/event-stream``) and
streams the answer back through the same runner as a hosted agent, so the
same guarantees hold: every event validated, the upstream's own
``RUN_STARTED`` and terminal event mapped onto the run the runtime opens and
closes, its interrupt outcome recorded in the checkpoint like any other,
whatever it left open closed. ``config`` reads the per-agent settings
(headers, timeouts, TLS, concurrency) from the environment — pure;
``client`` is the agent that talks HTTP and turns every failure into one
``RUN_ERROR`` with an ``upstream_*`` code; ``sse`` decodes its stream,
``retry`` decides when a refused request is sent again, ``credentials`` what
an error page's quote must not repeat; ``runs`` picks the requested run
out of a stream that may carry several (pure), and namespaces the codes of
the upstream's own ``RUN_ERROR`` (``upstream.<code>``).
"""

from __future__ import annotations

from services.producer.upstream.config import UpstreamConfig, is_upstream_url, upstream_config

__all__ = ["UpstreamConfig", "is_upstream_url", "upstream_config"]
