"""Keep Kafka credentials out of the logs: aiokafka's DEBUG trace prints them.

aiokafka logs every request it sends at DEBUG (``aiokafka.conn``), and a SASL
PLAIN ``SaslAuthenticateRequest`` carries ``user\\0user\\0password`` in clear;
SCRAM exchanges carry nonces and proofs. With ``AGUI_LOG_LEVEL=DEBUG`` those
would reach the service logs. Every client built by ``services.kafka.clients``
with SASL installs this filter, which replaces such requests and responses by
their type name before any handler formats the record.
"""

from __future__ import annotations

import logging

SASL_PREFIX = "SaslAuthenticate"
CONN_LOGGER = "aiokafka.conn"


class RedactSaslExchange(logging.Filter):
    """Blank the SASL authenticate requests/responses among a record's arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(_is_sasl(a) for a in args):
            record.args = tuple(
                f"{type(a).__name__}(<redacted>)" if _is_sasl(a) else a for a in args
            )
        return True


def _is_sasl(value: object) -> bool:
    return type(value).__name__.startswith(SASL_PREFIX)


_FILTER = RedactSaslExchange()


def redact_sasl_logging() -> None:
    """Install the filter on aiokafka's connection logger (idempotent)."""
    logger = logging.getLogger(CONN_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
