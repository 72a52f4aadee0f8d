"""The consumer service's own settings (HTTP, streaming limits, timeouts).

Kafka connection settings are ``services.runtime.settings.KafkaSettings``;
this object holds only what the HTTP face needs. Every limit is bounded so a
misconfiguration fails at startup with a message rather than at load.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.runtime.settings import StateDirectory


class ConsumerSettings(BaseSettings):
    """``AGUI_*`` environment variables of the consumer service."""

    # hide_input_in_errors: a validation error must not echo AGUI_API_KEYS into a log.
    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True,
                                      hide_input_in_errors=True, allow_inf_nan=False)

    http_host: str = Field("127.0.0.1", alias="AGUI_HTTP_HOST",
                           pattern=r"^[A-Za-z0-9.:_\[\]-]+$")
    """An address or host name (``0.0.0.0`` for every interface): empty had listened on
    every interface without saying so."""
    http_port: int = Field(8000, alias="AGUI_HTTP_PORT", ge=0, le=65535)
    advertised_url: str | None = Field(None, alias="AGUI_ADVERTISED_URL", max_length=255,
                                       pattern=r"^http://[^\s/?#@]+/?$")
    """The URL other instances reach this one at (``http://host:port``); unset: the
    listen address (the host name when listening on every interface). Plain HTTP and no
    path (instances speak HTTP/1.1 to each other), at most 255 characters: forwarded heads
    carry it and are allowed only so much past the limit (``protocol.FORWARDED_SLACK``).
    Anything else is refused at start, not found out at the first forward."""

    @field_validator("advertised_url")
    @classmethod
    def _reachable(cls, url: str | None) -> str | None:
        """A port other instances can connect to (1-65535, when given) and an ASCII host:
        the pattern alone let ``:8000x`` or ``:99999`` through, and every forward to the
        instance then failed with a 500."""
        if url is None:
            return url
        where = urlsplit(url)  # ValueError for a broken IPv6 literal
        if where.port == 0 or not (where.hostname or "").isascii():  # .port: ValueError too
            raise ValueError("want http://host:port with an ASCII host and a port 1-65535")
        return url

    allowed_hosts: str | None = Field(None, alias="AGUI_ALLOWED_HOSTS", max_length=4096,
                                      pattern=r"^\s*(\*|[A-Za-z0-9.:_\[\]-]+(\s*,\s*"
                                              r"[A-Za-z0-9.:_\[\]-]+)*)\s*$")
    """``Host`` names answered besides loopback's and the instance's own (``hosts``),
    comma separated, or ``*`` for any; unset: only those when listening on loopback, any
    otherwise."""

    forward_settle_s: float = Field(15.0, alias="AGUI_FORWARD_SETTLE_S", gt=0, le=300)
    """How long a request for another instance's thread waits for ownership to settle (a
    rebalance, a dead owner's partitions handed on) before a ``503 owner_unavailable``."""
    decision_timeout_s: float = Field(10.0, alias="AGUI_DECISION_TIMEOUT_S", gt=0, le=3600)
    queued_timeout_s: float = Field(120.0, alias="AGUI_QUEUED_TIMEOUT_S", gt=0, le=7 * 86_400)
    """How long a request the gatekeeper queued (busy policy ``enqueue``) may
    wait for its final decision before the client gets a 504."""
    keepalive_s: float = Field(15.0, alias="AGUI_KEEPALIVE_S", gt=0, le=3600)
    cancel_on_disconnect: bool = Field(False, alias="AGUI_CANCEL_ON_DISCONNECT")
    max_streams: int = Field(10_000, alias="AGUI_MAX_STREAMS", ge=1)
    """Open SSE streams (live and replay) one instance serves at once."""
    stream_queue: int = Field(2_048, alias="AGUI_STREAM_QUEUE", ge=16)
    """Events buffered per stream; a client that falls further behind continues from the
    log (``log_tail``) and rejoins the live fan-out once it has caught up."""
    stream_queue_bytes: int = Field(4 << 20, alias="AGUI_STREAM_QUEUE_BYTES", ge=65_536,
                                    le=1 << 30)
    """Bytes of events buffered per stream, whatever their count: past it, too, the stream
    continues from the log (events may be up to ``AGUI_MAX_RECORD_BYTES`` each)."""
    stream_log_readers: int = Field(64, alias="AGUI_STREAM_LOG_READERS", ge=1)
    """Streams reading from the log at once (each a Kafka consumer); past it, a stream that
    falls behind waits for a reader, sending keep-alives."""
    stream_idle_s: float = Field(60.0, alias="AGUI_STREAM_IDLE_S", gt=0, le=3600)
    """How long a client may read nothing while a response waits to write to it; then the
    connection is closed (a stream's client continues with ``Last-Event-ID``)."""
    max_open_interrupts: int = Field(10_000, alias="AGUI_MAX_OPEN_INTERRUPTS", ge=0,
                                     le=100_000_000)
    """Open interrupts one tenant's threads may hold before its new runs are refused
    (``429 too_many_open_interrupts``; a resume is never refused so); 0: no limit."""
    max_body_bytes: int = Field(1_048_576, alias="AGUI_MAX_BODY_BYTES", ge=1024)
    max_messages: int = Field(1_000, alias="AGUI_MAX_MESSAGES", ge=1)
    """Messages one RunAgentInput may carry (more: 413)."""
    api_keys: SecretStr | None = Field(None, alias="AGUI_API_KEYS")
    """``token=tenant`` or ``token=tenant#name`` pairs, comma separated (see
    ``services.consumer.keys``)."""
    api_keys_file: Path | None = Field(None, alias="AGUI_API_KEYS_FILE")
    """A file of ``token tenant[#name]`` lines; with AGUI_API_KEYS, both are used."""
    metrics_token: SecretStr | None = Field(None, alias="AGUI_METRICS_TOKEN")
    """When set, ``/metrics`` wants ``Authorization: Bearer <it>``; else it is open."""
    agents: str = Field("", alias="AGUI_AGENTS")
    """``name=module:object`` pairs (comma separated); only the names are used here."""
    agent_refresh_s: float = Field(30.0, alias="AGUI_AGENT_REFRESH_S", gt=0, le=86_400)
    replay_index_size: int = Field(100_000, alias="AGUI_REPLAY_INDEX_SIZE", ge=0)
    """Runs whose first offset the instance remembers, so a replay seeks instead of scanning."""
    replay_full_scans: int = Field(2, alias="AGUI_REPLAY_FULL_SCANS", ge=1, le=1000)
    """Replays reading a partition from its beginning (a run neither indexed nor remembered
    by its thread) at once on one instance; one more: 503 ``replay_busy``."""
    startup_timeout_s: float = Field(30.0, alias="AGUI_STARTUP_TIMEOUT_S", ge=0, le=86_400)
    """How long startup waits for the Kafka readers before serving anyway (not ready)."""
    read_your_writes_s: float = Field(2.0, alias="AGUI_READ_YOUR_WRITES_S", ge=0, le=60)
    """How long ``GET /threads/{id}`` may wait for the state a run's end produced (0: off)."""
    principal: str = Field("anonymous", alias="AGUI_PRINCIPAL")
    """Who requests come from when authentication is off (no API keys configured)."""
    http_max_header_bytes: int = Field(16_384, alias="AGUI_HTTP_MAX_HEADER_BYTES",
                                       ge=1024, le=1_048_576)
    """Bytes of a request head (request line and header lines); more: 431 and close."""
    http_max_headers: int = Field(100, alias="AGUI_HTTP_MAX_HEADERS", ge=8, le=10_000)
    """Header fields one request may have; more: 431 and close."""
    http_header_timeout_s: float = Field(10.0, alias="AGUI_HTTP_HEADER_TIMEOUT_S", gt=0, le=600)
    """Time from a request's first byte to its complete head; later: 408 and close."""
    http_body_timeout_s: float = Field(30.0, alias="AGUI_HTTP_BODY_TIMEOUT_S", gt=0, le=3600)
    """Time from a complete head to the complete body; later: 408 and close."""
    http_keepalive_s: float = Field(5.0, alias="AGUI_HTTP_KEEPALIVE_S", gt=0, le=600)
    """How long an idle connection (no request under way) stays open."""
    state_dir: StateDirectory = Field(None, alias="AGUI_STATE_DIR")
    """Where the thread view keeps its states on disk (``threadstore``, under
    ``consumer-threads/<instance>``); unset: in memory, read in full at every start."""
    state_cache_mb: int = Field(64, alias="AGUI_STATE_CACHE_MB", ge=0)
    """Decoded thread states kept in memory in front of the thread view's stores."""

    def agent_names(self) -> tuple[str, ...]:
        """The agent names listed in ``AGUI_AGENTS``."""
        names = []
        for item in self.agents.split(","):
            name = item.split("=", 1)[0].strip()
            if name:
                names.append(name)
        return tuple(names)
