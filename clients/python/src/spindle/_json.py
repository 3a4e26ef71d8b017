"""Values as exact JSON text: encoding what is written, and reading answers without losing
the text the node stored.

The node stores a value as the exact bytes the client sent and answers them verbatim
(docs/api.md, "Values"). `RawJSON` sends a text as it is; a mapping is encoded compactly
with `json.dumps` (integers of any size survive; NaN and infinities are refused, as JSON
has none). `loads_answer` parses an answer but keeps every `"value"` member's own text
next to its parsed form, so a read gives back the very text that was written.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Union

from ._errors import ProtocolError


@dataclass(frozen=True)
class RawJSON:
    """A JSON object given as its exact text, stored byte for byte (key order, spacing,
    number spelling). Checked here to be one JSON object so mistakes fail before a request."""

    text: str

    def __post_init__(self) -> None:
        try:
            parsed = json.loads(self.text)
        except ValueError as e:
            raise ValueError(f"RawJSON text is not JSON: {e}") from None
        if not isinstance(parsed, dict):
            raise ValueError("a value must be a JSON object")


Value = Union[Mapping[str, Any], RawJSON]
"""What may be written as an item's value: a mapping (encoded with `json.dumps`) or `RawJSON`."""


def encode_value(value: Value) -> str:
    """The JSON text to send for `value`."""
    if isinstance(value, RawJSON):
        return value.text
    if not isinstance(value, Mapping):
        raise TypeError(f"a value is a mapping or RawJSON, not {type(value).__name__}")
    return dumps(value)


def dumps(obj: Any) -> str:
    """Compact JSON, UTF-8 kept as is, no NaN or infinity."""
    try:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as e:
        raise ValueError(f"cannot encode as JSON: {e}") from None


@dataclass(frozen=True)
class RawValue:
    """A `"value"` member of an answer: its exact text and its parsed form."""

    text: str
    parsed: Any


_DECODER = json.JSONDecoder()
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _skip(s: str, i: int) -> int:
    m = _WHITESPACE.match(s, i)
    assert m is not None  # `*` always matches
    return m.end()


def _expect(s: str, i: int, char: str) -> int:
    if s[i : i + 1] != char:
        raise ProtocolError(f"answer is not JSON: expected {char!r} at {i}")
    return i + 1


def _parse(s: str, i: int) -> tuple[Any, int]:
    i = _skip(s, i)
    c = s[i : i + 1]
    if c == "{":
        obj: dict[str, Any] = {}
        i = _skip(s, i + 1)
        if s[i : i + 1] == "}":
            return obj, i + 1
        while True:
            key, i = _DECODER.raw_decode(s, i)
            if not isinstance(key, str):
                raise ProtocolError(f"answer is not JSON: an object key at {i} is not a string")
            i = _skip(s, _expect(s, _skip(s, i), ":"))
            if key == "value":
                start = i
                parsed, i = _DECODER.raw_decode(s, i)
                obj[key] = None if parsed is None else RawValue(s[start:i], parsed)
            else:
                obj[key], i = _parse(s, i)
            i = _skip(s, i)
            if s[i : i + 1] == ",":
                i = _skip(s, i + 1)
                continue
            return obj, _expect(s, i, "}")
    if c == "[":
        arr: list[Any] = []
        i = _skip(s, i + 1)
        if s[i : i + 1] == "]":
            return arr, i + 1
        while True:
            item, i = _parse(s, i)
            arr.append(item)
            i = _skip(s, i)
            if s[i : i + 1] == ",":
                i += 1
                continue
            return arr, _expect(s, i, "]")
    return _DECODER.raw_decode(s, i)


def loads_answer(body: bytes) -> Any:
    """Parse an answer, keeping each `"value"` member as a `RawValue` (or None)."""
    try:
        text = body.decode("utf-8")
        obj, end = _parse(text, 0)
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"answer is not JSON: {e}") from None
    if _skip(text, end) != len(text):
        raise ProtocolError(f"answer is not JSON: extra data at {end}")
    return obj
