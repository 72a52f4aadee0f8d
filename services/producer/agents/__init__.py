"""Sample agents: ``approval``, ``scripted`` and ``planner`` (used by the demo and tests)."""
