"""Iteration and the log tail over gRPC, with the generated stubs, against a real node."""

from __future__ import annotations

import pytest

import spindle
from spindle import Edge, Node


def test_iterate_returns_every_version_written(client: spindle.Client, fresh: str) -> None:
    expected: dict[tuple[spindle.Key, int], object] = {}
    for i in range(40):
        t = client.txn()
        t.put_node(f"{fresh}n{i}", {"i": i, "big": 10**30 + i})
        t.put_edge(f"{fresh}n{i}", "next", f"{fresh}n{i + 1}", {"w": i})
        index = t.commit()
        expected[(Node(f"{fresh}n{i}"), index - 1)] = {"i": i, "big": 10**30 + i}
        expected[(Edge(f"{fresh}n{i}", "next", f"{fresh}n{i + 1}"), index)] = {"w": i}
    deleted = client.delete(node=f"{fresh}n0")
    expected[(Node(f"{fresh}n0"), deleted)] = None

    it = client.iterate()
    got: dict[tuple[spindle.Key, int], object] = {}
    for frame in it:
        if (
            isinstance(frame.key, Node)
            and frame.key.id.startswith(fresh)
            or (isinstance(frame.key, Edge) and frame.key.from_.startswith(fresh))
        ):
            assert (frame.key, frame.version) not in got, "no version is sent twice"
            got[(frame.key, frame.version)] = frame.value
            assert frame.deleted == (frame.value is None)
    assert got == expected
    assert it.cut is not None and it.cut >= deleted
    assert len(it.ends) == len([v for v in client.status()["views"] if v["kind"] == "disk"])
    assert sum(e.range_hi - e.range_lo for e in it.ends) == 2**32, "the views tile the hash space"

    # Tailing from the cut + 1 continues where the iteration ended.
    later = client.put(Node(fresh + "after"), {"after": True})
    tail = client.tail(it.cut + 1)
    for record in tail:
        if record.index == later:
            assert record.key == Node(fresh + "after") and record.value == {"after": True}
            assert record.commit
            break
    tail.close()


def test_iterate_filters(client: spindle.Client, fresh: str) -> None:
    a = Node(fresh + "a")
    v1 = client.put(a, {"name": "one", "n": 1})
    v2 = client.put(a, {"name": "two", "n": 2})

    def mine(**kw: object) -> list[spindle.Frame]:
        return [f for f in client.iterate(**kw) if f.key == a]  # type: ignore[arg-type]

    assert [(f.version, f.value) for f in mine()] == [
        (v1, {"name": "one", "n": 1}),
        (v2, {"name": "two", "n": 2}),
    ]
    assert [(f.version, f.value) for f in mine(latest_only=True)] == [(v2, {"name": "two", "n": 2})]
    keys_only = mine(keys_only=True, dedicated=True)
    assert [(f.version, f.value, f.raw) for f in keys_only] == [(v1, None, None), (v2, None, None)]
    projected = mine(projection="/name")
    assert [(f.value, f.raw, f.projected) for f in projected] == [
        ("one", '"one"', True),
        ("two", '"two"', True),
    ]
    assert mine(kinds="edges") == []
    assert [f.version for f in mine(to=v1)] == [v1]


def test_iterate_a_hash_range(client: spindle.Client, fresh: str) -> None:
    for i in range(20):
        client.put(Node(f"{fresh}{i}"), {"i": i})
    whole = {f.key for f in client.iterate(kinds="nodes")}
    half = client.iterate(kinds="nodes", hash_range=(0, 1 << 31))
    lower = {f.key for f in half}
    upper = {f.key for f in client.iterate(kinds="nodes", hash_range=(1 << 31, 1 << 32))}
    assert lower | upper == whole and not lower & upper
    assert {(e.range_lo, e.range_hi) for e in half.ends} == {(0, 1 << 30), (1 << 30, 1 << 31)}


def test_iterate_refusals_are_typed(client: spindle.Client) -> None:
    with pytest.raises(spindle.BadRequest) as caught:
        list(client.iterate(keys_only=True, projection="/name"))
    assert caught.value.code == "invalid_argument" and caught.value.status is None
    with pytest.raises(spindle.NotFound):
        list(client.iterate("disk-99"))
    with pytest.raises(ValueError):
        client.iterate(kinds="vertices")  # type: ignore[arg-type]
