"""The checked-in gRPC stubs are exactly what the pinned generator makes from the node's
spindle.proto today, so the proto cannot change without the client following."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

pytest.importorskip(
    "grpc_tools", reason="the drift check needs grpcio-tools (requirements-test.txt)"
)

import generate_proto  # noqa: E402


def test_checked_in_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    fresh = generate_proto.generate(tmp_path)
    checked_in = ROOT / "src" / "spindle" / "_proto"
    for path in fresh:
        mine = (checked_in / path.name).read_text()
        assert path.read_text() == mine, (
            f"{path.name} differs from a fresh generation from spindle.proto: "
            "run `python tools/generate_proto.py` and commit the result"
        )
