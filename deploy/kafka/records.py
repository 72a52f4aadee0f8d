"""What a running broker leaves in its directory: ``broker.json`` and ``broker.pid``.

A broker outlives the command that started it, so ``up``, ``status`` and
``down`` (and a test fixture in another process) find it through these two
files. ``Broker`` is the record: where it listens, its pid and its files.
``broker.json`` is replaced atomically, so a reader never sees half of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.kafka import processes

BROKER_JSON = "broker.json"
BROKER_PID = "broker.pid"


@dataclass
class Broker:
    """A running broker started by ``start`` (or found by ``status``)."""

    bootstrap: str
    pid: int
    data_dir: Path
    log_path: Path
    sasl_bootstrap: str | None = None
    version: str = ""
    started_in: float = 0.0
    ports: dict[str, int] = field(default_factory=dict)
    ssl_bootstrap: str | None = None
    sasl_ssl_bootstrap: str | None = None

    def alive(self) -> bool:
        """True while the broker process exists."""
        return processes.alive(self.pid)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM the broker (SIGKILL after ``timeout`` s), wait, forget its records."""
        if processes.alive(self.pid) and processes.is_broker_of(self.pid, self.data_dir):
            processes.terminate(self.pid, timeout)
        processes.CHILDREN.pop(self.pid, None)
        forget(self.data_dir)

    def to_json(self) -> dict[str, Any]:
        return {
            "bootstrap": self.bootstrap,
            "sasl_bootstrap": self.sasl_bootstrap,
            "pid": self.pid,
            "data_dir": str(self.data_dir),
            "log_path": str(self.log_path),
            "version": self.version,
            "started_in": round(self.started_in, 2),
            "ports": self.ports,
            "ssl_bootstrap": self.ssl_bootstrap,
            "sasl_ssl_bootstrap": self.sasl_ssl_bootstrap,
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Broker:
        return cls(
            bootstrap=str(raw["bootstrap"]),
            pid=int(raw["pid"]),
            data_dir=Path(raw["data_dir"]),
            log_path=Path(raw["log_path"]),
            sasl_bootstrap=raw.get("sasl_bootstrap"),
            version=str(raw.get("version", "")),
            started_in=float(raw.get("started_in", 0.0)),
            ports={str(k): int(v) for k, v in dict(raw.get("ports", {})).items()},
            ssl_bootstrap=raw.get("ssl_bootstrap"),
            sasl_ssl_bootstrap=raw.get("sasl_ssl_bootstrap"),
        )


def record(broker: Broker) -> None:
    """Write ``broker.pid`` and (atomically) ``broker.json`` into the broker's directory."""
    (broker.data_dir / BROKER_PID).write_text(f"{broker.pid}\n")
    tmp = broker.data_dir / f"{BROKER_JSON}.tmp"
    tmp.write_text(json.dumps(broker.to_json(), indent=2) + "\n")
    tmp.replace(broker.data_dir / BROKER_JSON)


def recorded(data_dir: Path) -> Broker | None:
    """The broker recorded in ``data_dir`` (alive or not), or None."""
    try:
        raw = json.loads((data_dir.resolve() / BROKER_JSON).read_text())
        return Broker.from_json(raw)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def forget(data_dir: Path) -> None:
    """Remove the broker's records (its data stays)."""
    for name in (BROKER_JSON, BROKER_PID):
        (data_dir / name).unlink(missing_ok=True)
