"""The gatekeeper: no run is dispatched from an incomplete or expired resume.

Pure decision logic, tested without a broker:

- ``thread``: the thread state machine (run boundaries from ``events``);
- ``rules``: ``decide(state, request, now, policy)`` and the policies
  (``expiresAt`` read by the shared rule, ``services.agui.expiry``);
- ``intake``: raw ``requests`` records → request, stateless refusal or dead letter;
- ``batch``: one partition's records decided in memory;
- ``wire``: fast, contract-identical encoders for the hot path.

Around it, the Kafka loop: ``processor`` (consume, decide, one transaction
per partition batch), ``partition`` (what an instance holds per owned
partition), ``store`` (restore thread states from ``threads``), ``agents``
(agents = dispatch topics), ``settings``. Run with ``agui-relay gatekeeper``
or ``python -m services.gatekeeper``.
"""
