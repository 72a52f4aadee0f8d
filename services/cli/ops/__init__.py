"""Operator commands: AG-UI-aware tools that follow threads and act on interrupts.

One module per command (``tail``, ``threads``, ``resume``, ``cancel``,
``deadletter``, ``lag``, ``demo``), their pure helpers beside them (``render``
for pretty lines, ``filters``, ``history`` for a thread's accumulated
messages and state, ``resume_plan`` for building resume lists and checking
them with the gatekeeper's own ``decide``, ``threadview`` for thread tables
and run summaries, ``columns`` for tables that print ids whole), and
``app.register``,
which wires them all onto a Typer app: the root CLI and this package's own
``python -m services.cli.ops`` use the same wiring.
"""
