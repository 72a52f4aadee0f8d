"""The notifier: webhooks for the interrupt lifecycle (a thread interrupted, answered, expired).

A service of its own (``agui-relay notifier``), its own consumer group on
the compacted ``threads`` topic. ``changes`` decides what a thread's change
means, ``book`` keeps each owned partition's memory and expiry heap,
``signing`` signs bodies, ``delivery`` POSTs with retries, ``service`` runs
the loop, ``metrics`` counts. The payload is ``contracts.webhooks``.
"""
