"""Item keys: a node by id, or an edge by (from, label, to), and their encodings.

The JSON form is the one the HTTP API takes and answers (`{"kind": "node", "id": ...}`);
the binary form is Spindle's core item-key encoding used in gRPC frames and records
(docs/log-format.md): `0x00 | len u16 | id` or
`0x01 | len u16 | from | len u16 | label | len u16 | to`, lengths little-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Mapping, Union

from ._errors import ProtocolError


@dataclass(frozen=True, order=True)
class Node:
    """A node, by its id (1..=1024 bytes of UTF-8)."""

    id: str

    def to_json(self) -> dict[str, str]:
        return {"kind": "node", "id": self.id}

    def query(self) -> dict[str, str]:
        return {"node": self.id}

    def __str__(self) -> str:
        return f"node {self.id!r}"


@dataclass(frozen=True, order=True)
class Edge:
    """An edge `from_ -[label]-> to`; it lives with its `from_` node."""

    from_: str
    label: str
    to: str

    def to_json(self) -> dict[str, str]:
        return {"kind": "edge", "from": self.from_, "label": self.label, "to": self.to}

    def query(self) -> dict[str, str]:
        return {"from": self.from_, "label": self.label, "to": self.to}

    def __str__(self) -> str:
        return f"edge {self.from_!r} -[{self.label!r}]-> {self.to!r}"


Key = Union[Node, Edge]
"""An item key: a `Node` or an `Edge`."""


def pick_key(key: Key | None, node: str | None, edge: tuple[str, str, str] | None) -> Key:
    """The one key named by a positional `Key`, `node=` or `edge=(from, label, to)`."""
    given = [k for k in (key, node, edge) if k is not None]
    if len(given) != 1:
        raise TypeError("name exactly one item: a Node/Edge, node=ID or edge=(FROM, LABEL, TO)")
    if key is not None:
        if not isinstance(key, (Node, Edge)):
            raise TypeError(f"a key is a spindle.Node or spindle.Edge, not {type(key).__name__}")
        return key
    if node is not None:
        return Node(node)
    assert edge is not None
    from_, label, to = edge
    return Edge(from_, label, to)


def key_from_json(obj: Any) -> Key:
    """The key of an answer's `item` object."""
    if isinstance(obj, Mapping):
        kind = obj.get("kind")
        if kind == "node" and isinstance(obj.get("id"), str):
            return Node(obj["id"])
        if kind == "edge" and all(isinstance(obj.get(f), str) for f in ("from", "label", "to")):
            return Edge(obj["from"], obj["label"], obj["to"])
    raise ProtocolError(f"not an item key: {obj!r}")


def decode_key(data: bytes | memoryview, at: int = 0) -> tuple[Key, int]:
    """Decode one binary item key at `at`; answer it and the offset after it."""
    buf = memoryview(data)

    def text(pos: int) -> tuple[str, int]:
        if pos + 2 > len(buf):
            raise ProtocolError(f"item key cut short at byte {pos}")
        (n,) = struct.unpack_from("<H", buf, pos)
        end = pos + 2 + n
        if end > len(buf):
            raise ProtocolError(f"item key cut short at byte {pos}")
        try:
            return bytes(buf[pos + 2 : end]).decode("utf-8"), end
        except UnicodeDecodeError as e:
            raise ProtocolError(f"item key at byte {pos} is not UTF-8: {e}") from None

    if at >= len(buf):
        raise ProtocolError(f"item key missing at byte {at}")
    kind = buf[at]
    if kind == 0:
        id_, end = text(at + 1)
        return Node(id_), end
    if kind == 1:
        from_, pos = text(at + 1)
        label, pos = text(pos)
        to, end = text(pos)
        return Edge(from_, label, to), end
    raise ProtocolError(f"unknown item key kind {kind} at byte {at}")


def encode_key(key: Key) -> bytes:
    """The binary encoding of `key` (the inverse of `decode_key`)."""

    def text(s: str) -> bytes:
        b = s.encode("utf-8")
        return struct.pack("<H", len(b)) + b

    if isinstance(key, Node):
        return b"\x00" + text(key.id)
    return b"\x01" + text(key.from_) + text(key.label) + text(key.to)
