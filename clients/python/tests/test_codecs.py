"""The client's own decoders, without a node: raw value text kept from answers, iteration
frames and item keys in the core encoding (docs/iteration.md, docs/log-format.md)."""

from __future__ import annotations

import struct

import pytest

import spindle
from spindle import Edge, Node
from spindle._frames import End, Frame, decode_frames
from spindle._json import RawValue, loads_answer
from spindle._keys import decode_key, encode_key


def test_answers_keep_each_value_text() -> None:
    body = b'{"item":{"kind":"node","id":"a"},"versions":[{"version":1,"value":{ "value": {"x":1.50}, "n": 1e2 }},{"version":2,"value":null}],"next":2}'
    parsed = loads_answer(body)
    first = parsed["versions"][0]["value"]
    assert isinstance(first, RawValue)
    assert first.text == '{ "value": {"x":1.50}, "n": 1e2 }'
    assert first.parsed == {"value": {"x": 1.5}, "n": 100.0}
    assert parsed["versions"][1]["value"] is None
    assert parsed["next"] == 2
    for bad in (b'{"a":1', b'{"a":1} x', b"\xff", b'{"a" 1}'):
        with pytest.raises(spindle.ProtocolError):
            loads_answer(bad)


def test_keys_round_trip_the_core_encoding() -> None:
    for key in (Node("ada"), Node("é" * 300), Edge("a", "knows", "b"), Edge("", "", "")):
        data = encode_key(key)
        assert decode_key(data) == (key, len(data))
    assert encode_key(Node("ab")) == b"\x00\x02\x00ab"
    for bad in (b"", b"\x02", b"\x00\x05\x00ab", b"\x00\x01\x00\xff"):
        with pytest.raises(spindle.ProtocolError):
            decode_key(bad)


def version_frame(flags: int, index: int, key: spindle.Key, value: bytes | None) -> bytes:
    k = encode_key(key)
    out = struct.pack("<BBQH", 1, flags, index, len(k)) + k
    if value is not None:
        out += struct.pack("<I", len(value)) + value
    return out


def same_item_frame(flags: int, index: int, value: bytes | None) -> bytes:
    out = struct.pack("<BBQ", 1, flags | 0b1000, index)
    if value is not None:
        out += struct.pack("<I", len(value)) + value
    return out


def test_same_item_frames_take_the_key_of_the_frame_before() -> None:
    chunk = (
        version_frame(0b010, 1, Edge("a", "l", "b"), b"{}")
        + same_item_frame(0b001, 2, None)
        + same_item_frame(0b010, 3, b'{"n":1}')
        + version_frame(0b000, 4, Node("c"), None)
        + same_item_frame(0b000, 5, None)
    )
    frames = list(decode_frames(chunk, "disk-0"))
    assert frames == [
        Frame(Edge("a", "l", "b"), 1, False, {}, "{}"),
        Frame(Edge("a", "l", "b"), 2, True, None, None),
        Frame(Edge("a", "l", "b"), 3, False, {"n": 1}, '{"n":1}'),
        Frame(Node("c"), 4, False, None, None),
        Frame(Node("c"), 5, False, None, None),
    ]
    end = struct.pack("<BQQQQ", 2, 9, 0, 1, 1)
    for bad in (
        same_item_frame(0b000, 1, None),
        version_frame(0b000, 1, Node("a"), None) + end + same_item_frame(0b000, 2, None),
        version_frame(0b000, 1, Node("a"), None) + same_item_frame(0b011, 2, b"{}"),
        version_frame(0b000, 1, Node("a"), None) + same_item_frame(0b010, 2, b"{}")[:-1],
    ):
        with pytest.raises(spindle.ProtocolError):
            list(decode_frames(bad, "disk-0"))


def test_frames_decode_as_documented() -> None:
    chunk = (
        version_frame(0b010, 7, Node("a"), b'{"n":12345678901234567890}')
        + version_frame(0b001, 9, Node("a"), None)
        + version_frame(0b110, 3, Edge("a", "l", "b"), b'"x"')
        + version_frame(0b100, 4, Node("b"), None)
        + version_frame(0b000, 5, Node("c"), None)
        + struct.pack("<BQQQQ", 2, 9, 0, 1 << 31, 5)
    )
    frames = list(decode_frames(chunk, "disk-0"))
    assert frames == [
        Frame(Node("a"), 7, False, {"n": 12345678901234567890}, '{"n":12345678901234567890}'),
        Frame(Node("a"), 9, True, None, None),
        Frame(Edge("a", "l", "b"), 3, False, "x", '"x"', projected=True),
        Frame(Node("b"), 4, False, None, None, projected=True),
        Frame(Node("c"), 5, False, None, None),
        End("disk-0", 9, 0, 1 << 31, 5),
    ]
    for bad in (
        b"\x03",
        version_frame(0b011, 1, Node("a"), b"{}"),
        version_frame(0b1000, 1, Node("a"), None),
        version_frame(0b010, 1, Node("a"), b"{}")[:-1],
        struct.pack("<BQQQ", 2, 9, 0, 1),
    ):
        with pytest.raises(spindle.ProtocolError):
            list(decode_frames(bad, "disk-0"))
