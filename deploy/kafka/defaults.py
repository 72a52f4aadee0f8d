"""Where the launcher looks and listens unless told otherwise.

One place for the loopback host, the repository paths, the development
broker's ports and run directory, and the log line that means "started", so
the launcher's modules, the CLI and the test fixture agree on them.
"""

from __future__ import annotations

from pathlib import Path

HOST = "127.0.0.1"
KAFKA_DIR = Path(__file__).resolve().parent
REPO_ROOT = KAFKA_DIR.parent.parent
DEFAULT_RUN_DIR = REPO_ROOT / ".run" / "kafka"
DEFAULT_PORT = 9092
DEFAULT_CONTROLLER_PORT = 9093
STARTED_MARKER = "Kafka Server started"
