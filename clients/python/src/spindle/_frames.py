"""Decoding what the gRPC surface streams: iteration frames (docs/iteration.md, "Frames")
and log records.

A version frame is `0x01 | flags u8 | index u64 | [key_len u16 | key] | [value_len u32 |
value]`, the end frame `0x02 | cut u64 | range lo u64 | range hi u64 | frames u64`, all
integers little-endian. A version frame with flag bit 3 (same item) carries no key: it is
another version of the item of the version frame before it in the same chunk. Unknown tags
or flags, short frames and a same-item frame with no version frame before it are refused
with the byte offset, as the node's own decoder does.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any, Iterator, Union

from ._errors import ProtocolError
from ._keys import Key, decode_key

FLAG_TOMBSTONE = 0b001
FLAG_VALUE = 0b010
FLAG_PROJECTION = 0b100
FLAG_SAME_ITEM = 0b1000
TAG_VERSION = 0x01
TAG_END = 0x02

_VERSION_HEAD = struct.Struct("<BBQ")
_U16 = struct.Struct("<H")
_END = struct.Struct("<BQQQQ")
_U32 = struct.Struct("<I")


@dataclass(frozen=True)
class Frame:
    """One version of one item from an iteration.

    `value` is the parsed JSON object, or with a projection the property's JSON value;
    `raw` is its exact text. Both are None for a delete, a keys-only frame, or a projection
    of an object without the property (`projected` tells projections apart)."""

    key: Key
    version: int
    deleted: bool
    value: Any
    raw: str | None = field(default=None, repr=False)
    projected: bool = False


@dataclass(frozen=True)
class End:
    """The end of one Disk View's stream: it sent every matching version up to `cut`, for
    the hash range `[range_lo, range_hi)`, in `frames` version frames."""

    view: str
    cut: int
    range_lo: int
    range_hi: int
    frames: int


def _json_text(data: memoryview, at: int, n: int) -> tuple[Any, str]:
    try:
        text = bytes(data[at : at + n]).decode("utf-8")
        return json.loads(text), text
    except ValueError as e:
        raise ProtocolError(f"frame value at byte {at} is not UTF-8 JSON: {e}") from None


def decode_frames(chunk: bytes, view: str) -> Iterator[Union[Frame, End]]:
    """The frames of one `FrameChunk` (whole frames only)."""
    data = memoryview(chunk)
    at = 0
    last_key: Key | None = None
    while at < len(data):
        tag = data[at]
        if tag == TAG_END:
            if at + _END.size > len(data):
                raise ProtocolError(f"end frame cut short at byte {at}")
            _, cut, lo, hi, frames = _END.unpack_from(data, at)
            yield End(view, cut, lo, hi, frames)
            at += _END.size
            last_key = None
            continue
        if tag != TAG_VERSION:
            raise ProtocolError(f"unknown frame tag {tag:#x} at byte {at}")
        if at + _VERSION_HEAD.size > len(data):
            raise ProtocolError(f"version frame cut short at byte {at}")
        _, flags, index = _VERSION_HEAD.unpack_from(data, at)
        value_flags = flags & ~FLAG_SAME_ITEM
        if flags & ~0b1111 or (value_flags & FLAG_TOMBSTONE and value_flags & ~FLAG_TOMBSTONE):
            raise ProtocolError(f"bad frame flags {flags:#b} at byte {at}")
        end = at + _VERSION_HEAD.size
        if flags & FLAG_SAME_ITEM:
            if last_key is None:
                raise ProtocolError(
                    f"same-item frame with no version frame before it at byte {at}"
                )
            key = last_key
        else:
            if end + _U16.size > len(data):
                raise ProtocolError(f"version frame cut short at byte {at}")
            (key_len,) = _U16.unpack_from(data, end)
            key_at = end + _U16.size
            if key_at + key_len > len(data):
                raise ProtocolError(f"version frame cut short at byte {at}")
            key, end = decode_key(data[: key_at + key_len], key_at)
            if end != key_at + key_len:
                raise ProtocolError(f"item key length mismatch in the frame at byte {at}")
            last_key = key
        value: Any = None
        raw: str | None = None
        if flags & FLAG_VALUE:
            if end + 4 > len(data):
                raise ProtocolError(f"version frame cut short at byte {at}")
            (n,) = _U32.unpack_from(data, end)
            if end + 4 + n > len(data):
                raise ProtocolError(f"frame value cut short at byte {at}")
            value, raw = _json_text(data, end + 4, n)
            end += 4 + n
        yield Frame(
            key=key,
            version=index,
            deleted=bool(flags & FLAG_TOMBSTONE),
            value=value,
            raw=raw,
            projected=bool(flags & FLAG_PROJECTION),
        )
        at = end


@dataclass(frozen=True)
class Record:
    """One log record from `Client.tail`: a write of `key` at log index `index` (a delete
    when `deleted`); `commit` marks the last record of its transaction."""

    index: int
    commit: bool
    key: Key
    deleted: bool
    value: dict[str, Any] | None
    raw: str | None = field(default=None, repr=False)


def record_from_proto(index: int, commit: bool, key: bytes, raw: str | None) -> Record:
    """A `Record` from the fields of a `spindle.v1.Record` message."""
    decoded, end = decode_key(key)
    if end != len(key):
        raise ProtocolError(f"record {index}: trailing bytes after the item key")
    value: dict[str, Any] | None = None
    if raw is not None:
        try:
            parsed = json.loads(raw)
        except ValueError as e:
            raise ProtocolError(f"record {index}: value is not JSON: {e}") from None
        if not isinstance(parsed, dict):
            raise ProtocolError(f"record {index}: value is not a JSON object")
        value = parsed
    return Record(index, commit, decoded, raw is None, value, raw)
