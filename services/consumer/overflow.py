"""What a run's stream does when its client falls behind: pure, no I/O, no clock.

A stream's buffer (``AGUI_STREAM_QUEUE`` deliveries) is filled by the fan-out
and drained at the client's pace. When it is full the stream is not cut: it
*falls behind*. The fan-out stops buffering for it and only notes the offset of
each record of the run it routes; once the client has drained the buffer, the
stream reads the run's records from the events topic itself (``log_tail``),
from the first offset it did not buffer, as fast as the client reads. It
*rejoins* the fan-out as soon as that reader's position is past every record
of the run the fan-out has routed; from then on the fan-out buffers for it
again, and the reader stops.

Why nothing is lost or doubled across both switches: the fan-out routes a
batch without yielding to the event loop, and a switch (``fall_behind``,
``read_to``) is one synchronous step, so each record of the run is either
before the switch or after it. Falling behind, the records before it are in
the buffer and the log reader starts at the first one after it. Rejoining,
every record the fan-out routed before it sits below the reader's position
(read from the log already) and every later one is buffered. A record both
read from the log and buffered at the seam carries a sequence number the
stream's ``Sequencer`` has delivered already, and is dropped there.

``StreamLag`` is that state machine, one per stream; ``stalled`` is the
verdict on a connection whose writes have been paused for the idle limit
(``write_idle``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class StreamLag:
    """Where one stream stands: fed by the fan-out, or behind it and reading the log."""

    behind: bool = False
    resume_at: int = 0
    """While behind: the next offset of the run's partition the log reader reads."""
    routed: int = -1
    """While behind: the newest offset of a record of the run the fan-out routed."""
    switches: int = 0
    """How many times the stream fell behind."""

    def fall_behind(self, offset: int) -> None:
        """The buffer was full for the record at ``offset``: the log takes over from it."""
        if self.behind:
            raise ValueError("the stream is behind already")
        self.behind = True
        self.resume_at = offset
        self.routed = offset
        self.switches += 1

    def note(self, offset: int) -> None:
        """While behind, the fan-out routed a record of the run at ``offset`` (not buffered)."""
        if not self.behind:
            raise ValueError("a stream the fan-out feeds buffers its records")
        self.routed = max(self.routed, offset)

    def read_to(self, position: int) -> bool:
        """The log reader's position is now ``position`` (the next offset it would read).

        True when it has read past every record the fan-out routed: the stream
        rejoins the fan-out at this step, and the reader is done.
        """
        if not self.behind:
            raise ValueError("only a stream that is behind reads the log")
        self.resume_at = max(self.resume_at, position)
        if self.resume_at > self.routed:
            self.behind = False
            return True
        return False


def stalled(buffered_when_paused: int, buffered_now: int) -> bool:
    """Whether a connection whose writes stayed paused for the idle limit made no progress:
    its unsent bytes did not go down (the client read nothing the kernel could pass on)."""
    return buffered_now >= buffered_when_paused
