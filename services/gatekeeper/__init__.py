"""The gatekeeper: no run is dispatched from an incomplete or expired resume.

Pure decision logic, tested without a broker:

- ``thread``: the thread state machine (run boundaries, read on ``runs``);
- ``rules``: ``decide(state, request, now, policy)`` and the policies
  (``expiresAt`` read by the shared rule, ``services.agui.expiry``);
- ``children``: a delegation's child thread is answered at its parent;
- ``intake``: raw ``requests`` records → request, stateless refusal or dead letter;
- ``batch``: one partition's records decided in memory (the clock and the
  trace-id entropy passed in);
- ``wire``: fast, contract-identical encoders for the hot path;
- ``census``, ``stall``, ``refusals``: stuck threads, stalled partitions,
  inputs whose outputs the broker refused.

Around it, the Kafka loop. An instance owns partition p of ``requests`` and
``runs`` together (each run's start and end, written there by the workers
as well as to ``events``, which the gatekeeper never reads; and restores p
of ``threads``), and ONE transactional
producer per instance commits the batches of ALL its owned partitions
together, one transaction at a time: decisions, dispatches, dead letters,
thread states and every partition's input offsets. Zombies are fenced by
the group generation the offsets commit with (KIP-447: a member the group
has moved past cannot commit) and by the transactional id, which names the
owned partitions (a restart onto the same assignment fences its dead
predecessor at once). The modules: ``processor`` (consume and route, the
``Processor`` facade), ``commit`` (the numbered commit procedure and the
settling of a failed transaction, ``settle``), ``takeover`` (partitions
taken over and handed back on a rebalance), ``state`` (the one ``Instance``
the three share), ``partition`` (what an instance holds per owned
partition), ``store`` (restore thread states from ``threads``), ``agents``
(agents = dispatch topics), ``settings``. Run with ``agui-relay gatekeeper``
or ``python -m services.gatekeeper``.
"""
