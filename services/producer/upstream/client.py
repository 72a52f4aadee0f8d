"""The upstream agent: one POST per run, its SSE stream read back as the run's events.

``UpstreamAgent`` is an ordinary agent (an async generator the runner
drives), so an upstream run gets every guarantee a hosted one has: the
runner validates each event again, keeps the bookkeeping, closes what is
left open and writes the one terminal event. What this module adds:

* the request: the ``RunAgentInput`` wire JSON with ``protocolVersion``
  "1.0", ``Accept: text/event-stream``, the run's ``traceparent`` (its next
  hop), the agent's extra headers (never logged), over one
  ``httpx.AsyncClient`` per upstream whose connections and in-flight
  requests are bounded by ``CONCURRENCY``;
* the stream: parsed by ``sse``; each ``data`` JSON-decoded and
  validated as an AG-UI event; the requested run picked out of it
  (``runs.RunSelector``: replayed runs ahead of it skipped, boundaries
  naming another thread or run refused, ``upstream_protocol``). Its
  ``RUN_STARTED`` is dropped (the runtime opened the run already) and its
  ``RUN_FINISHED`` or ``RUN_ERROR`` is handed to the runner as the agent's
  own ending, so its interrupt outcome is recorded in the checkpoint as the
  runtime's own; a late ``RUN_ERROR`` (read for ``LATE_ERROR_GRACE_S`` after
  ``RUN_FINISHED``, until the upstream closes the stream) ends the run
  failed instead;
* failures, each one ``RUN_ERROR`` (a ``RunFailedError`` the runner turns
  into the terminal event): ``upstream_unreachable`` (no connection),
  ``upstream_status`` (a non-2xx answer, its body quoted, bounded),
  ``upstream_protocol`` (not an event stream, invalid JSON, an invalid
  event), ``upstream_dropped`` (the stream broke or ended before its
  terminal event), ``upstream_timeout`` (no line of the stream, a
  keep-alive comment included, within ``IDLE_TIMEOUT_S``, or the run past
  ``RUN_TIMEOUT_S``);
* retries: only before the first byte of an answer — an unreachable
  upstream or a 429/502/503/504, not sooner than its ``Retry-After`` asks
  (``retry``) — never once the upstream has started a run;
* bounds: the answer is asked for uncompressed (``Accept-Encoding:
  identity``; a compressed one is refused) and read through ``BoundedStream``,
  so no event longer than ``MAX_EVENT_BYTES`` is ever buffered; ``sse`` (httpx-sse's
  events, its parser's rules) holds an unfinished event as its bytes, not as a
  string per line.

A cancelled run cancels this generator at its next await: leaving the
``async with`` closes the response, which aborts the upstream request.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import orjson
from ag_ui.core import PROTOCOL_VERSION, RunAgentInput
from httpx_sse import ServerSentEvent
from pydantic import ValidationError

from contracts.codec import EVENT_DECODER, to_wire, validation_detail
from contracts.exact_json import IntegerOutOfRange, loads_exact
from services.producer.agent import AgentDefinition, AgentItem
from services.producer.errors import RunFailedError
from services.producer.upstream.config import UpstreamConfig
from services.producer.upstream.credentials import redacted_head, request_secrets
from services.producer.upstream.retry import RETRIED_STATUS, backoff, retry_after
from services.producer.upstream.runs import (
    LATE_ERROR_GRACE_S,
    RunRuleError,
    RunSelector,
    relayed_error,
)
from services.producer.upstream.sse import EventSource
from services.runtime import tracing

if TYPE_CHECKING:
    from services.producer.context import RunContext

log = logging.getLogger(__name__)
for _chatty in ("httpx", "httpcore"):  # their request lines name the full URL (its query too)
    logging.getLogger(_chatty).setLevel(logging.WARNING)

DEADLINE_SLACK_S = 0.001
"""A wait that ran out this close to the run's deadline ran out at it (a loop timer may
fire within its clock's resolution before its time)."""
BODY_QUOTE_BYTES = 2048
"""At most this much of an error answer is read; at most ``BODY_QUOTE_CHARS`` quoted."""
BODY_QUOTE_CHARS = 500


def safe_url(url: str) -> str:
    """``url`` without credentials or query (what log lines and messages name)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def quoted(body: bytes) -> str:
    """An error answer's body as a bounded, one-line quote."""
    text = " ".join(body.decode("utf-8", "replace").split())
    return text if len(text) <= BODY_QUOTE_CHARS else text[:BODY_QUOTE_CHARS] + "…"


class EventTooLongError(Exception):
    """An upstream's SSE event grew past ``MAX_EVENT_BYTES``."""


class BoundedStream(httpx.AsyncByteStream):
    """A response body that refuses to run on past ``limit`` bytes without an event end.

    Counts the bytes since the last blank line (an SSE event boundary; looked for
    across chunk edges), so the bytes buffered stay bounded whatever the upstream
    sends. Reads with no line end in them are joined, up to ``HOLD`` bytes, before
    they are passed on: no line completes inside them, so no event waits for it, and
    the SSE parser is not called once per byte or two of a line sent that way.
    """

    BOUNDARIES = (b"\n\n", b"\r\r", b"\n\r")
    r"""Two line ends in a row, each a CR, an LF or a CRLF: an LF followed by a CR is
    always one (it covers ``\r\n\r\n``, ``\n\r\n`` and ``\r\n\r``)."""
    HOLD = 65_536

    def __init__(self, inner: httpx.AsyncByteStream, limit: int) -> None:
        self.inner = inner
        self.limit = limit
        self.on_line: Callable[[], None] | None = None
        """Called when a read brings a line end: the upstream is alive (``_next``), also
        when the line is a ``: keep-alive`` comment the SSE parser drops."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = 0
        tail = b""
        held = bytearray()
        async for chunk in self.inner:
            ended = b"\n" in chunk or b"\r" in chunk
            if ended and self.on_line is not None:
                self.on_line()
            window = tail + chunk
            ends = [i + len(b) for b in self.BOUNDARIES if (i := window.rfind(b)) >= 0]
            pending = len(window) - max(ends) if ends else pending + len(chunk)
            if pending > self.limit:
                raise EventTooLongError(f"an event over {self.limit} bytes")
            tail = window[-3:]
            if not ended and len(held) + len(chunk) < self.HOLD:
                held += chunk
                continue
            if held:
                held += chunk
                chunk = bytes(held)
                held.clear()
            yield chunk
        if held:
            yield bytes(held)

    async def aclose(self) -> None:
        await self.inner.aclose()


class UpstreamAgent:
    """An AG-UI endpoint served elsewhere, run as this worker's agent."""

    def __init__(self, config: UpstreamConfig) -> None:
        self.config = config
        self.where = safe_url(config.url)
        self._secrets = request_secrets(config.url, config.headers)
        self._client: httpx.AsyncClient | None = None
        self._slots = asyncio.Semaphore(config.concurrency)

    def definition(self) -> AgentDefinition:
        return AgentDefinition(self, description=f"AG-UI upstream at {self.where}")

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            cfg = self.config
            verify: ssl.SSLContext | bool = (ssl.create_default_context(cafile=cfg.ca_file)
                                             if cfg.verify and cfg.ca_file else cfg.verify)
            self._client = httpx.AsyncClient(
                verify=verify, follow_redirects=False,
                timeout=httpx.Timeout(connect=cfg.connect_timeout_s, read=None,
                                      write=cfg.connect_timeout_s, pool=None),
                limits=httpx.Limits(max_connections=cfg.concurrency,
                                    max_keepalive_connections=min(cfg.concurrency, 16)))
        return self._client

    async def __call__(self, run_input: RunAgentInput,
                       ctx: RunContext) -> AsyncIterator[AgentItem]:
        wire = to_wire(run_input)
        wire["protocolVersion"] = PROTOCOL_VERSION
        body = orjson.dumps(wire)
        deadline = asyncio.get_running_loop().time() + self.config.run_timeout_s
        try:
            async with asyncio.timeout(self.config.run_timeout_s):
                await self._slots.acquire()
        except TimeoutError:
            raise RunFailedError(f"no free request slot for upstream {self.where} within the "
                                 f"run's {self.config.run_timeout_s:g}s "
                                 "(AGUI_UPSTREAM_CONCURRENCY, AGUI_UPSTREAM_RUN_TIMEOUT_S)",
                                 "upstream_timeout") from None
        try:
            response = await self._open(body, deadline)
            try:
                async for item in self._events(response, deadline, run_input):
                    yield item
            finally:
                await response.aclose()
        finally:
            self._slots.release()

    # ---- the request ---------------------------------------------------

    async def _open(self, body: bytes, deadline: float) -> httpx.Response:
        """The upstream's event-stream answer (retried while nothing was started). The
        request continues the run's trace: the upstream is one more hop of it."""
        cfg = self.config
        headers = httpx.Headers(cfg.headers)
        headers.update({"Content-Type": "application/json", "Accept": "text/event-stream",
                        "Accept-Encoding": "identity"})
        if (run := tracing.current()) is not None:
            headers["traceparent"] = run.child().header()
        attempt = 0
        while True:
            asked: float | None = None
            request = self._http().build_request("POST", cfg.url, content=body, headers=headers)
            wait, limit = self._wait(deadline)
            try:
                async with asyncio.timeout(wait):
                    response = await self._http().send(request, stream=True)
            except TimeoutError:
                raise RunFailedError(f"upstream {self.where} sent no answer within {limit}",
                                     "upstream_timeout") from None
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                failure = RunFailedError(f"upstream {self.where} is unreachable: "
                                         f"{type(exc).__name__}: {exc}", "upstream_unreachable")
            except httpx.TransportError as exc:
                raise RunFailedError(f"upstream {self.where} dropped the request: "
                                     f"{type(exc).__name__}: {exc}", "upstream_dropped") from exc
            else:
                if 200 <= response.status_code < 300:
                    return await self._checked_stream(response)
                failure = await self._status_failure(response)
                if response.status_code not in RETRIED_STATUS:
                    raise failure
                asked = retry_after(response.headers.get("retry-after"), time.time())
            if attempt >= cfg.retries:
                raise failure
            attempt += 1
            await self._pause(failure, attempt, asked, deadline)

    async def _pause(self, failure: RunFailedError, attempt: int, asked: float | None,
                     deadline: float) -> None:
        """Wait before attempt ``attempt``: the backoff, or longer when the upstream asked
        to be left alone (``retry``); asked for past the run's deadline, the run ends now,
        saying so (waiting would only end it ``upstream_timeout``, blaming no one)."""
        left = max(deadline - asyncio.get_running_loop().time(), 0.0)
        if asked is not None and asked > left:
            raise RunFailedError(f"{failure.message}; it asked to be tried again in "
                                 f"{asked:g}s, past the end of the run's "
                                 f"{self.config.run_timeout_s:g}s "
                                 "(AGUI_UPSTREAM_RUN_TIMEOUT_S)", failure.code)
        wait = min(max(backoff(attempt), asked or 0.0), left)
        log.warning("upstream %s attempt %d failed (%s); retrying in %.3gs", self.where,
                    attempt, failure.code, wait)
        await asyncio.sleep(wait)

    async def _checked_stream(self, response: httpx.Response) -> httpx.Response:
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if kind != "text/event-stream" or encoding not in ("", "identity"):
            await response.aclose()
            said = (f"{kind or 'no content type'}, not text/event-stream"
                    if kind != "text/event-stream" else f"a {encoding} body, not identity")
            raise RunFailedError(f"upstream {self.where} answered {said}", "upstream_protocol")
        if isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = BoundedStream(response.stream, self.config.max_event_bytes)
        return response

    async def _status_failure(self, response: httpx.Response) -> RunFailedError:
        """A non-2xx answer, quoting the head of its body: only an uncompressed one is
        read (a 32 KiB zstd body inflates to 1 GiB in one call), and the request's
        credentials are taken out of the quote (``credentials``: an error page may echo
        the request, and the quote reaches every client of the run), one the head's cut
        runs through too."""
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        try:
            said = (quoted(redacted_head(await self._head(response), self._secrets))
                    if encoding in ("", "identity") else f"(a {encoding} body, not read)")
        finally:
            await response.aclose()
        return RunFailedError(f"upstream {self.where} answered {response.status_code}"
                              + (f": {said}" if said else ""), "upstream_status")

    async def _head(self, response: httpx.Response) -> bytes:
        """Up to ``BODY_QUOTE_BYTES`` of the body as sent (never decompressed)."""
        body = b""
        try:
            async with asyncio.timeout(self.config.connect_timeout_s):
                async for chunk in response.aiter_raw():
                    body += chunk
                    if len(body) >= BODY_QUOTE_BYTES:
                        break
        except (TimeoutError, httpx.HTTPError):
            pass
        return body[:BODY_QUOTE_BYTES]

    # ---- the stream ----------------------------------------------------

    async def _events(self, response: httpx.Response, deadline: float,
                      run_input: RunAgentInput) -> AsyncIterator[dict[str, Any]]:
        """The requested run's events, validated, up to its terminal event (``RunSelector``
        takes them out of the stream: replayed runs skipped, other runs' boundaries
        refused). Its ``RUN_FINISHED`` waits for the stream's end, at most
        ``LATE_ERROR_GRACE_S``: a late ``RUN_ERROR`` ends the run failed instead."""
        stream = EventSource(response).aiter_sse()
        body = response.stream if isinstance(response.stream, BoundedStream) else None
        runs = RunSelector(run_input.thread_id, run_input.run_id)
        try:
            while True:
                sse = await self._next(stream, deadline, body)
                if sse is None:
                    raise RunFailedError(f"upstream {self.where} ended its stream "
                                         f"{runs.unended()}", "upstream_dropped")
                if not sse.data:
                    continue
                try:
                    taken = runs.take(self._event(sse))
                except RunRuleError as exc:
                    raise RunFailedError(f"upstream {self.where} {exc}",
                                         "upstream_protocol") from None
                if runs.phase == "finished":
                    late = await self._late_error(stream, deadline, body, runs)
                    yield late if late is not None else taken[-1]
                    return
                for wire in taken:
                    yield wire
                if runs.phase == "ended":
                    return
        finally:
            if runs.skipped:
                log.info("upstream %s replayed %s ahead of run %s: skipped", self.where,
                         runs.replays(), run_input.run_id)
            await stream.aclose()

    async def _late_error(self, stream: AsyncIterator[ServerSentEvent], deadline: float,
                          body: BoundedStream | None,
                          runs: RunSelector) -> dict[str, Any] | None:
        """A ``RUN_ERROR`` sent after the run's ``RUN_FINISHED`` (AG-UI 1.0 rule 36: the run
        failed after all), read until the upstream closes the stream (most do at once) or
        ``LATE_ERROR_GRACE_S`` passed; None when none came."""
        grace = min(LATE_ERROR_GRACE_S, max(deadline - asyncio.get_running_loop().time(), 0.0))
        try:
            async with asyncio.timeout(grace):
                while (sse := await self._next(stream, deadline, body)) is not None:
                    if sse.data:
                        wire = self._event(sse)
                        if runs.after(wire) == "next_run":
                            return None
                        late = relayed_error(wire)
                        return {**late, "message": "after its RUN_FINISHED: "
                                + str(late.get("message", ""))}
        except TimeoutError:
            pass
        except RunRuleError as exc:
            raise RunFailedError(f"upstream {self.where} {exc}", "upstream_protocol") from None
        except RunFailedError as exc:
            if exc.code not in ("upstream_dropped", "upstream_timeout"):
                raise  # a broken event; a stream dropped after the end ended it
        return None

    async def _next(self, stream: AsyncIterator[ServerSentEvent], deadline: float,
                    body: BoundedStream | None) -> ServerSentEvent | None:
        """The next event; each complete line read meanwhile (a keep-alive comment too:
        an upstream thinking for minutes sends them) restarts the idle clock."""
        loop = asyncio.get_running_loop()
        idle_s = self.config.idle_timeout_s
        try:
            async with asyncio.timeout(self._wait(deadline)[0]) as timer:
                if body is not None:
                    body.on_line = lambda: timer.reschedule(min(loop.time() + idle_s, deadline))
                try:
                    return await anext(stream)
                finally:
                    if body is not None:
                        body.on_line = None
        except StopAsyncIteration:
            return None
        except TimeoutError:
            raise self._timed_out(deadline) from None
        except httpx.TransportError as exc:
            raise RunFailedError(f"upstream {self.where} dropped the stream: "
                                 f"{type(exc).__name__}: {exc}", "upstream_dropped") from exc
        except EventTooLongError as exc:
            raise RunFailedError(f"upstream {self.where} sent {exc} "
                                 "(AGUI_UPSTREAM_MAX_EVENT_BYTES)", "upstream_protocol") from None

    def _event(self, sse: ServerSentEvent) -> dict[str, Any]:
        try:
            wire = loads_exact(sse.data)
        except IntegerOutOfRange as exc:
            raise RunFailedError(f"upstream {self.where} sent an event with an {exc}",
                                 "upstream_protocol") from None
        except orjson.JSONDecodeError as exc:
            raise RunFailedError(f"upstream {self.where} sent an event that is not JSON: {exc}",
                                 "upstream_protocol") from None
        if not isinstance(wire, dict):
            raise RunFailedError(f"upstream {self.where} sent {type(wire).__name__} JSON, "
                                 "not an event object", "upstream_protocol")
        try:
            EVENT_DECODER.validate_python(wire)
        except ValidationError as exc:
            raise RunFailedError(f"upstream {self.where} sent an invalid event: "
                                 f"{validation_detail(exc)}", "upstream_protocol") from None
        return wire

    # ---- time ------------------------------------------------------------

    def _timed_out(self, deadline: float) -> RunFailedError:
        """The stream's wait ran out: the run's deadline (however much the upstream was
        still sending), or the idle limit (it sent nothing for that long)."""
        cfg = self.config
        if asyncio.get_running_loop().time() >= deadline - DEADLINE_SLACK_S:
            return RunFailedError(f"upstream {self.where} had not ended the run within the "
                                  f"run's {cfg.run_timeout_s:g}s (AGUI_UPSTREAM_RUN_TIMEOUT_S)",
                                  "upstream_timeout")
        return RunFailedError(f"upstream {self.where} sent nothing within "
                              f"{cfg.idle_timeout_s:g}s (AGUI_UPSTREAM_IDLE_TIMEOUT_S)",
                              "upstream_timeout")

    def _wait(self, deadline: float) -> tuple[float, str]:
        """How long the next wait may take — the idle timeout, cut by the run's
        deadline — and the limit that names (for the timeout's message)."""
        left = deadline - asyncio.get_running_loop().time()
        if left <= self.config.idle_timeout_s:
            return (max(left, 0.0),
                    f"the run's {self.config.run_timeout_s:g}s (AGUI_UPSTREAM_RUN_TIMEOUT_S)")
        return (self.config.idle_timeout_s,
                f"{self.config.idle_timeout_s:g}s (AGUI_UPSTREAM_IDLE_TIMEOUT_S)")
