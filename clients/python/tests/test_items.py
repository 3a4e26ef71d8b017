"""Writes and reads of items against a real node: round trips that keep the exact JSON,
multi-item transactions, and conditions that fail with a typed `Conflict`."""

from __future__ import annotations

import json

import pytest

import spindle
from spindle import Edge, Node, RawJSON


def test_put_get_round_trip_keeps_values_exactly(client: spindle.Client, fresh: str) -> None:
    big = 123456789012345678901234567890
    value = {
        "name": "Ada",
        "big": big,
        "neg": -(2**70),
        "pi": 3.25,
        "é": "ü€😀",
        "nested": {"a": [1, None, True]},
    }
    index = client.put(Node(fresh + "ada"), value)
    item = client.get(node=fresh + "ada")
    assert item is not None
    assert item.key == Node(fresh + "ada")
    assert item.version == index
    assert not item.deleted
    assert item.value == value
    assert (
        item.value is not None and item.value["big"] == big and isinstance(item.value["big"], int)
    )
    assert item.raw is not None and "123456789012345678901234567890" in item.raw

    text = '{ "z": 1,  "a": 10000000000000000000000000000000000001, "f": 1.50, "s": "\\u00e9", "d": 1, "d": 2 }'
    client.put(Node(fresh + "raw"), RawJSON(text))
    raw_item = client.get(Node(fresh + "raw"))
    assert raw_item is not None
    assert raw_item.raw == text, "the node answers the stored text byte for byte"
    assert raw_item.value == json.loads(text)


def test_missing_and_deleted_items(client: spindle.Client, fresh: str) -> None:
    assert client.get(node=fresh + "nobody") is None
    client.put(Node(fresh + "gone"), {"x": 1})
    deleted_at = client.delete(node=fresh + "gone")
    assert client.get(node=fresh + "gone") is None
    tombstone = client.get(node=fresh + "gone", include_deleted=True)
    assert tombstone is not None and tombstone.deleted and tombstone.version == deleted_at
    before = client.get(node=fresh + "gone", as_of=deleted_at - 1)
    assert before is not None and before.value == {"x": 1}
    at_delete = client.get(node=fresh + "gone", as_of=deleted_at)
    assert at_delete is not None and at_delete.deleted and at_delete.value is None
    # "Still deleted as I saw it" holds with the delete's index, and so does "absent" (0).
    with pytest.raises(spindle.Conflict):
        client.put(Node(fresh + "gone"), {"x": 2}, expect_version=deleted_at - 1)
    again = client.put(Node(fresh + "gone"), {"x": 2}, expect_version=tombstone.version)
    client.delete(node=fresh + "gone", expect_version=again)
    client.put(Node(fresh + "gone"), {"x": 3}, expect_version=0)


def test_multi_item_transaction(client: spindle.Client, fresh: str) -> None:
    a, b = fresh + "a", fresh + "b"
    t = client.txn()
    t.put_node(a, {"name": "A"}, expect_version=0)
    t.put_node(b, {"name": "B"}, expect_version=0)
    t.put_edge(a, "knows", b, {"since": 1833})
    index = t.commit()
    assert t.versions == {Node(a): index - 2, Node(b): index - 1, Edge(a, "knows", b): index}
    got_a, got_b = client.get(node=a), client.get(node=b)
    edge = client.get(edge=(a, "knows", b))
    assert got_a is not None and got_a.version == index - 2 and got_a.value == {"name": "A"}
    assert got_b is not None and got_b.version == index - 1
    assert edge is not None and edge.version == index and edge.value == {"since": 1833}

    with client.txn() as t2:
        t2.put_node(a, {"name": "A2"}, expect_version=index - 2)
        t2.delete(edge=(a, "knows", b), expect_version=index)
    assert t2.index is not None
    got_a = client.get(node=a)
    assert got_a is not None and got_a.value == {"name": "A2"}
    assert client.get(Edge(a, "knows", b)) is None


def test_conflict_names_the_true_version_and_writes_nothing(
    client: spindle.Client, fresh: str
) -> None:
    k = Node(fresh + "c")
    v1 = client.put(k, {"n": 1})
    t = client.txn().put(k, {"n": 2}, expect_version=0).put_node(fresh + "other", {"n": 3})
    with pytest.raises(spindle.Conflict) as caught:
        t.commit()
    e = caught.value
    assert e.status == 409 and e.code == "conflict"
    assert e.failed == [spindle.FailedCondition(k, expected=0, actual=v1)]
    assert str(v1) in e.message
    got = client.get(k)
    assert got is not None and got.value == {"n": 1}
    assert client.get(node=fresh + "other") is None

    # A condition alone (no write to that item) is checked the same way.
    with pytest.raises(spindle.Conflict):
        client.txn().expect(k, v1 + 1000).put_node(fresh + "other", {}).commit()
    client.txn().expect(k, v1).put_node(fresh + "other", {}).commit()


def test_a_committed_transaction_cannot_be_sent_again(client: spindle.Client, fresh: str) -> None:
    t = client.txn().put_node(fresh + "once", {})
    t.commit()
    with pytest.raises(RuntimeError):
        t.commit()


def test_ids_and_labels_with_url_characters(client: spindle.Client, fresh: str) -> None:
    odd = fresh + "a b+c/d?e&f=g%20é#😀"
    label = "rel ation+/?&é"
    t = client.txn().put_node(odd, {"odd": True})
    for to in ("x&y", "x+y", "x y", "x/y", "é"):
        t.put_edge(odd, label, to, {"to": to})
    t.commit()
    item = client.get(node=odd)
    assert item is not None and item.key == Node(odd) and item.value == {"odd": True}
    edge = client.get(edge=(odd, label, "x+y"))
    assert edge is not None and edge.value == {"to": "x+y"}
    listed = [
        e.key.to for e in client.out_edges(odd, label=label, page_size=1) if isinstance(e.key, Edge)
    ]
    assert listed == sorted(["x&y", "x+y", "x y", "x/y", "é"], key=lambda s: s.encode())
    assert len(list(client.history(node=odd, page_size=1))) == 1


def test_a_shared_client_counts_exactly_with_conditions(client: spindle.Client, fresh: str) -> None:
    """Threads share one client and increment one counter with compare-and-set: every
    increment lands exactly once, and the losers of each race see `Conflict`."""
    import concurrent.futures

    k = Node(fresh + "counter")
    client.put(k, {"n": 0}, expect_version=0)

    def increment() -> None:
        while True:
            item = client.get(k)
            assert item is not None and item.value is not None
            try:
                client.put(k, {"n": item.value["n"] + 1}, expect_version=item.version)
                return
            except spindle.Conflict as e:
                assert e.failed[0].item == k and e.failed[0].actual > item.version

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        for f in [pool.submit(increment) for _ in range(40)]:
            f.result()
    final = client.get(k)
    assert final is not None and final.value == {"n": 40}
    assert len(list(client.history(k))) == 41, "no increment wrote twice"
