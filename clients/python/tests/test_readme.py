"""The README's notebook example runs as written against a fresh node, so it cannot drift
from the client."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from conftest import start_node

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPINDLE_TOKEN", raising=False)
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README has a python example"
    node = start_node(tmp_path, None)
    try:
        code = blocks[0].replace(
            'spindle.Client("http://127.0.0.1:7070")',
            f'spindle.Client("http://{node.http}", grpc="{node.grpc}")',
        )
        assert code != blocks[0], "the example builds its client as the test expects"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(README), "exec"), {})
    finally:
        node.stop()
    printed = out.getvalue()
    assert "FailedCondition(item=Node(id='ada'), expected=0, actual=1)" in printed
    assert "bob {'since': 1833}" in printed
    assert "node 'cy' {'name': 'Cy'}" in printed, "the tail reached the last write"
