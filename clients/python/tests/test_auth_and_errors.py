"""A node with a bearer token refuses clients without it (HTTP and gRPC) and serves those
with it; bad requests come back as typed errors carrying the node's code and message."""

from __future__ import annotations

import pytest

import spindle
from spindle import Node, RawJSON

from conftest import TOKEN, RunningNode


def test_token_required_and_accepted(
    secured_node: RunningNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPINDLE_TOKEN", raising=False)
    anonymous = secured_node.client(token=None)
    with pytest.raises(spindle.Unauthorized) as caught:
        anonymous.get(node="ada")
    assert caught.value.status == 401 and caught.value.code == "unauthorized"
    assert "Bearer" in caught.value.message
    with pytest.raises(spindle.Unauthorized):
        anonymous.put(Node("ada"), {})
    with pytest.raises(spindle.Unauthorized) as grpc_caught:
        list(anonymous.iterate("disk-0", to=1))  # straight to gRPC, no status read first
    assert grpc_caught.value.code == "unauthenticated" and grpc_caught.value.status is None
    with pytest.raises(spindle.Unauthorized):
        next(anonymous.tail(1))
    wrong = secured_node.client(token=TOKEN + "x")
    with pytest.raises(spindle.Unauthorized):
        wrong.status()

    c = secured_node.client()
    index = c.put(Node("ada"), {"name": "Ada"})
    item = c.get(node="ada")
    assert item is not None and item.version == index
    assert [f.key for f in c.iterate() if f.key == Node("ada")] == [Node("ada")]


def test_token_from_the_environment(
    secured_node: RunningNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPINDLE_TOKEN", TOKEN)
    c = spindle.Client(f"http://{secured_node.http}", grpc=secured_node.grpc)
    assert c.status()["log"]["durable_index"] >= 0


def test_bad_requests_are_typed(client: spindle.Client) -> None:
    with pytest.raises(spindle.BadRequest) as caught:
        list(client.history(node="x", page_size=0))
    e = caught.value
    assert (e.status, e.code) == (400, "bad_request")
    assert "limit" in e.message and e.body["error"] == "bad_request"

    with pytest.raises(spindle.BadRequest):
        client.get(node="")  # ids are 1..=1024 bytes
    with pytest.raises(spindle.BadRequest) as big:
        client.put(Node("n"), RawJSON('{"x": 1e400}'))  # beyond a 64-bit float
    assert "1e400" in big.value.message or "number" in big.value.message
    with pytest.raises(spindle.BadRequest):
        client.txn().commit()  # a transaction writes something
    with pytest.raises(spindle.NotFound) as missing:
        client.lookup("no_such_index", "x")
    assert missing.value.code == "unknown_index"


def test_values_are_checked_before_sending(client: spindle.Client) -> None:
    with pytest.raises(ValueError):
        client.put(Node("n"), RawJSON("[1, 2]"))
    with pytest.raises(ValueError):
        client.put(Node("n"), {"x": float("nan")})
    with pytest.raises(TypeError):
        client.put(Node("n"), [1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.get()  # no item named


def test_an_unreachable_node_is_a_transport_error() -> None:
    # Port 9 (discard) on loopback: nothing listens there in a test environment.
    c = spindle.Client("http://127.0.0.1:9", timeout_s=5)
    with pytest.raises(spindle.TransportError):
        c.status()
