"""The producer's exception tree, drawn once.

::

    ProducerError                   anything the producer runtime raises on purpose
    ├── AgentLoadError              an AGUI_AGENTS entry or entry point that does not load
    ├── RunFailedError              an agent ending its run with RUN_ERROR (message, code)
    │   └── RecordTooLargeError     a record the broker would refuse (event, checkpoint)
    ├── AgentProtocolError          an agent emitted something AG-UI 1.0 forbids
    │   └── InterruptConflictError  two different interrupts with one id in a run
    └── EffectUnavailableError      ctx.effect() with no ledger to record it in
    RunAborted (BaseException)      thrown into an agent whose run is already ending

Each ``AgentProtocolError`` carries the ``code`` its run ends with
(``RUN_ERROR.code``), so the runner turns it into a terminal event in one
place. ``RunAborted`` derives from ``BaseException`` on purpose: an agent's
``except Exception`` must not swallow the runtime telling it to stop.
"""

from __future__ import annotations


class ProducerError(Exception):
    """Base of the producer runtime's own errors."""


class AgentLoadError(ProducerError):
    """An agent named in ``AGUI_AGENTS`` or an entry point could not be loaded."""


class RunFailedError(ProducerError):
    """Raised by an agent to end its run with ``RUN_ERROR`` carrying ``message`` and ``code``."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class RecordTooLargeError(RunFailedError):
    """A record the producer was about to write would not fit ``AGUI_MAX_RECORD_BYTES``.

    Raised before anything is sent (``services.producer.sizes``), never retried:
    ``code`` says which record (``event_too_large``, ``checkpoint_too_large``) and
    becomes the run's ``RUN_ERROR.code``; ``size`` is the record's size in bytes.
    """

    def __init__(self, message: str, code: str, size: int) -> None:
        super().__init__(message, code)
        self.size = size


class AgentProtocolError(ProducerError):
    """An agent emitted an event the runtime refuses to publish.

    ``code`` becomes the run's ``RUN_ERROR.code``: ``invalid_event`` for a
    value the ``ag-ui-protocol`` models reject, ``protocol_violation`` for a
    lifecycle error (content for an unopened message, a step finished twice,
    a subagent re-announced, ...).
    """

    def __init__(self, message: str, code: str = "protocol_violation") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class InterruptConflictError(AgentProtocolError):
    """The agent raised an interrupt whose id is taken by a different interrupt."""

    def __init__(self, interrupt_id: str) -> None:
        super().__init__(
            f"interrupt id {interrupt_id!r} raised twice with different content "
            "(interrupt ids must be unique within a run)",
            code="duplicate_interrupt_id",
        )
        self.interrupt_id = interrupt_id


class EffectUnavailableError(ProducerError):
    """``ctx.effect`` was called but the run has no ledger to record effects in."""


class RunAborted(BaseException):
    """Raised inside an agent that emits after its run stopped taking events."""
