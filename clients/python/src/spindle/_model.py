"""What reads answer: an item version, a multiget, an index lookup."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence, overload

from ._errors import ProtocolError
from ._json import RawValue
from ._keys import Key, key_from_json


@dataclass(frozen=True)
class Item:
    """One version of one item. `version` is the log index of the record that wrote it;
    `value` is the parsed JSON object (None for a delete) and `raw` its exact stored text."""

    key: Key
    version: int
    deleted: bool
    value: dict[str, Any] | None
    raw: str | None = field(default=None, repr=False)


def _int(obj: Mapping[str, Any], name: str) -> int:
    v = obj.get(name)
    if not isinstance(v, int) or isinstance(v, bool):
        raise ProtocolError(f"answer field {name!r} is not an integer: {v!r}")
    return v


def value_parts(v: Any) -> tuple[dict[str, Any] | None, str | None]:
    """The parsed object and text of an answer's `value` member."""
    if v is None:
        return None, None
    if isinstance(v, RawValue) and isinstance(v.parsed, dict):
        return v.parsed, v.text
    raise ProtocolError(f"a value in the answer is not a JSON object: {v!r}")


def item_from_json(obj: Any, key: Key | None = None) -> Item:
    """An `Item` from an answer's version object (`{"item", "version", "deleted", "value"}`)."""
    if not isinstance(obj, Mapping):
        raise ProtocolError(f"not an item version: {obj!r}")
    value, raw = value_parts(obj.get("value"))
    return Item(
        key=key if key is not None else key_from_json(obj.get("item")),
        version=_int(obj, "version"),
        deleted=bool(obj.get("deleted", value is None)),
        value=value,
        raw=raw,
    )


class Multiget(Sequence["Item | None"]):
    """A multiget's answer: one entry per asked key, in order (None: absent or deleted),
    all read from the Memory View at `applied_index`."""

    def __init__(self, applied_index: int, items: list[Item | None]) -> None:
        self.applied_index = applied_index
        self.items = items

    @overload
    def __getitem__(self, i: int) -> Item | None: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Item | None]: ...
    def __getitem__(self, i: int | slice) -> Item | None | Sequence[Item | None]:
        return self.items[i]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Item | None]:
        return iter(self.items)

    def __repr__(self) -> str:
        return f"Multiget(applied_index={self.applied_index}, items={self.items!r})"


@dataclass(frozen=True)
class Lookup:
    """An Index View lookup: the live nodes whose property equals the value asked for."""

    index: str
    applied_index: int
    nodes: list[str]


def answer_int(obj: Any, name: str) -> int:
    """An integer member of an answer object."""
    if not isinstance(obj, Mapping):
        raise ProtocolError(f"answer is not an object: {obj!r}")
    return _int(obj, name)
