"""Shared AG-UI meaning: what the protocol's data means, read the same way by every service.

Some answers are not a service's own: when an interrupt's ``expiresAt`` has
passed, or what messages and state a thread's events add up to. The
gatekeeper decides resumes by them, the producer builds a child run's input
by them, the CLI shows and plans resumes by them; if each kept its own copy
they would drift apart, and a resume the CLI calls valid would be refused.
So they live here, pure (no I/O, no clock reads), imported by all:

- ``jsdate``: ``new Date(s)`` exactly as Node reads it (the V8 parser port,
  over ``jsdate_scan``, the tokenizer, and ``jsdate_compose``, the composers);
- ``expiry``: the reference client's ``isInterruptExpired`` rule;
- ``transcript``: a thread's accumulated messages and state, rebuilt from
  its events as the reference client's default reducer builds them.
"""
