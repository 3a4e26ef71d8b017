"""Fixtures: a real `spindle serve` on a temporary data directory with free ports.

The binary is `$SPINDLE_BIN`, or `spindle` in the workspace's release target directory
(`$CARGO_TARGET_DIR`, default `~/.cache/spindle/target`). The node prints one line with
its bound addresses when it listens; the fixture reads the ports from it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

import spindle

TOKEN = "client-test-token-0123456789abcdef"
BOUND = re.compile(r"spindle serve: http=(\S+) grpc=(\S+) data=")


def spindle_bin() -> Path:
    explicit = os.environ.get("SPINDLE_BIN")
    if explicit:
        return Path(explicit)
    target = os.environ.get("CARGO_TARGET_DIR") or str(Path.home() / ".cache/spindle/target")
    return Path(target) / "release" / "spindle"


@dataclass
class RunningNode:
    """A `spindle serve` child and where it listens."""

    process: subprocess.Popen[str]
    http: str
    grpc: str
    token: str | None

    def client(self, **kw: object) -> spindle.Client:
        args: dict[str, object] = {"grpc": self.grpc, "token": self.token}
        args.update(kw)
        return spindle.Client(f"http://{self.http}", **args)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_node(data_dir: Path, token: str | None) -> RunningNode:
    binary = spindle_bin()
    if not binary.exists():
        pytest.fail(f"no spindle binary at {binary}: build it or set SPINDLE_BIN")
    env = {k: v for k, v in os.environ.items() if k != "SPINDLE_TOKEN"}
    if token is not None:
        env["SPINDLE_TOKEN"] = token
    log = open(data_dir / "serve.log", "w")
    process = subprocess.Popen(
        [
            str(binary),
            "serve",
            "--data-dir",
            str(data_dir),
            "--http-listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--index",
            "by_name=/name",
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    m = BOUND.match(line)
    if not m:
        process.kill()
        code = process.wait()
        pytest.fail(
            f"spindle serve did not start (exit {code}): {(data_dir / 'serve.log').read_text()}"
        )
    node = RunningNode(process, m.group(1), m.group(2), token)
    # Memory and Index Views boot on start; multiget and lookups answer `booting` until then.
    node.client().wait_applied(0)
    return node


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    """One node for the whole session, without a token."""
    n = start_node(tmp_path_factory.mktemp("node"), None)
    yield n
    n.stop()


@pytest.fixture(scope="session")
def secured_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningNode]:
    """A node that requires a bearer token."""
    n = start_node(tmp_path_factory.mktemp("secured"), TOKEN)
    yield n
    n.stop()


@pytest.fixture
def client(node: RunningNode) -> Iterator[spindle.Client]:
    c = node.client()
    yield c
    c.close()


_counter = iter(range(1_000_000))


@pytest.fixture
def fresh() -> str:
    """A prefix no other test uses, so tests on the shared node do not meet."""
    return f"t{next(_counter)}-"
