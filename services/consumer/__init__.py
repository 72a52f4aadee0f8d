"""The consumer service: agui-relay's AG-UI HTTP/SSE face.

Front ends POST a ``RunAgentInput``; the service publishes a RunRequest, waits
for the gatekeeper's Decision and either answers with an
``application/problem+json`` error (no stream byte) or streams the run's
events as Server-Sent Events, exactly as the producer wrote them. Build it
with ``services.consumer.app.create_app``; serve it with
``services.consumer.server.serve``.
"""
