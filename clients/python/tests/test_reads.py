"""Reads that wait for an applied index, paged reads across pages, multiget and index
lookups, against a real node."""

from __future__ import annotations

import threading

import pytest

import spindle
from spindle import Edge, Node

from conftest import RunningNode


def test_min_index_waits_for_the_write(node: RunningNode, fresh: str) -> None:
    writer = node.client()
    reader = node.client(read_your_writes=False)
    k = Node(fresh + "later")
    first = writer.put(Node(fresh + "first"), {})
    # The next commit index is at least first + 1; a read asking for it waits until the
    # view has applied it (or answers at once if it already has).
    got: list[spindle.Item | None] = []
    t = threading.Thread(
        target=lambda: got.append(reader.get(k, min_index=first + 1, timeout_ms=30_000))
    )
    t.start()
    index = writer.put(k, {"v": 1})
    t.join()
    assert index == first + 1, "no other writer shares this node while the test runs"
    assert got[0] is not None and got[0].version == index, "the read waited for the write"
    # Read-your-writes: a client's reads wait for its own last commit by default.
    item = writer.get(k)
    assert item is not None and item.version == index


def test_min_index_beyond_the_log_times_out_with_a_typed_error(
    client: spindle.Client, fresh: str
) -> None:
    far = client.status()["log"]["durable_index"] + 1_000_000
    with pytest.raises(spindle.NotYetApplied) as caught:
        client.get(node=fresh + "x", min_index=far, timeout_ms=50)
    assert caught.value.status == 504 and caught.value.code == "not_yet_applied"
    with pytest.raises(spindle.NotYetApplied):
        client.multiget([Node(fresh + "x")], min_index=far, timeout_ms=50)


def test_history_pages_across_pages(client: spindle.Client, fresh: str) -> None:
    k = Node(fresh + "h")
    written = [client.put(k, {"n": i}) for i in range(7)]
    deleted = client.delete(k)
    versions = list(client.history(k, page_size=3))
    assert [v.version for v in versions] == written + [deleted]
    assert [v.value for v in versions[:-1]] == [{"n": i} for i in range(7)]
    assert versions[-1].deleted and versions[-1].value is None
    assert [v.version for v in client.history(k, page_size=2, after=written[4])] == written[5:] + [
        deleted
    ]


def test_out_edges_pages_across_pages(client: spindle.Client, fresh: str) -> None:
    src = fresh + "src"
    t = client.txn()
    targets = [f"n{i:02}" for i in range(8)]
    for to in targets:
        t.put_edge(src, "knows", to, {"to": to})
    t.put_edge(src, "likes", "zed")
    first = t.commit() - 8
    deleted = client.delete(edge=(src, "knows", "n03"))
    edges = list(client.out_edges(src, page_size=3))
    live = [to for to in targets if to != "n03"]
    assert [e.key for e in edges] == [Edge(src, "knows", to) for to in live] + [
        Edge(src, "likes", "zed")
    ]
    assert edges[0].value == {"to": "n00"} and edges[0].version == first
    knows = list(client.out_edges(src, label="knows", page_size=2, as_of=deleted))
    assert [e.key for e in knows] == [Edge(src, "knows", to) for to in live]
    all_knows = list(client.out_edges(src, label="knows", page_size=2, as_of=deleted - 1))
    assert [e.key for e in all_knows] == [Edge(src, "knows", to) for to in targets]
    assert list(client.out_edges(src, as_of=first - 1, page_size=2)) == []


def test_multiget_and_lookup(client: spindle.Client, fresh: str) -> None:
    a, b = Node(fresh + "ma"), Node(fresh + "mb")
    ia = client.put(a, {"name": fresh + "Ada"})
    client.put(b, {"name": "B"})
    client.delete(b)
    got = client.multiget([a, b, Node(fresh + "none")])
    assert got.applied_index >= ia
    assert len(got) == 3
    assert got[0] is not None and got[0].key == a and got[0].version == ia
    assert got[0].value == {"name": fresh + "Ada"}
    assert got[1] is None and got[2] is None
    found = client.lookup("by_name", fresh + "Ada")
    assert found.nodes == [a.id]
    client.wait_applied()
    assert client.lookup("by_name", "nothing-" + fresh).nodes == []
    many = sorted(fresh + f"many{i}" for i in range(5))
    for id_ in many:
        client.put(Node(id_), {"name": fresh + "Many"})
    client.wait_applied()
    assert client.lookup("by_name", fresh + "Many", page_size=2).nodes == many
    assert client.lookup("by_name", fresh + "Many").nodes == many
