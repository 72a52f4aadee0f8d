"""The notifier's Prometheus counters, in the process's default registry.

``agui_webhook_delivered_total`` counts notifications the receiver took (a
2xx), ``agui_webhook_retried_total`` attempts that failed and were tried
again, ``agui_webhook_dead_lettered_total`` notifications given up after the
last attempt and dead-lettered (their letters counted in the shared
``agui_dead_letters_total`` {service="notifier", reason="webhook_failed"}; one whose
letter the broker refused even minimal is on no topic, so it is counted only in
``agui_dead_letters_lost_total``, not here); each by ``kind``
(interrupted, answered, expired), so cardinality stays fixed. Created on
first use, like ``services.runtime.metrics``; ``/metrics`` on the health
side door renders them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from prometheus_client import REGISTRY, Counter, Gauge

__all__ = ["NotifierInstruments", "dead_lettered", "delivered", "instruments", "retried"]


@dataclass(frozen=True)
class NotifierInstruments:
    delivered: Counter
    retried: Counter
    dead_lettered: Counter
    open_interrupts: Gauge


@functools.cache
def instruments() -> NotifierInstruments:
    """The notifier's instruments, registered on first call."""
    r = REGISTRY
    return NotifierInstruments(
        delivered=Counter("agui_webhook_delivered", "Webhook notifications delivered (2xx)",
                          ["kind"], registry=r),
        retried=Counter("agui_webhook_retried",
                        "Webhook attempts that failed and were retried", ["kind"], registry=r),
        dead_lettered=Counter("agui_webhook_dead_lettered",
                              "Webhook notifications dead-lettered after the last attempt",
                              ["kind"], registry=r),
        open_interrupts=Gauge("agui_notifier_open_interrupts",
                              "Open interrupts the notifier watches on its partitions",
                              registry=r),
    )


def delivered(kind: str) -> None:
    instruments().delivered.labels(kind).inc()


def retried(kind: str) -> None:
    instruments().retried.labels(kind).inc()


def dead_lettered(kind: str) -> None:
    instruments().dead_lettered.labels(kind).inc()
