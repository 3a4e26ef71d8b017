"""A transaction being built: writes (puts and deletes) and conditions on item versions,
appended atomically by `commit` (POST /v1/txn).

A condition holds when the item's current version is the one expected, or when 0 is
expected and the item is absent (never written, or deleted). If any fails, nothing is
written and `commit` raises `spindle.Conflict` naming each failed condition with the
item's actual version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._json import Value, dumps, encode_value
from ._keys import Edge, Key, Node, pick_key

if TYPE_CHECKING:
    from ._client import Client


class Txn:
    """Collects writes and conditions; `commit()` appends them as one transaction and
    answers its commit index. Used as a context manager it commits when the block ends
    without an exception (and sends nothing otherwise)."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._writes: list[str] = []
        self._written: list[Key] = []
        self._conditions: dict[Key, int] = {}
        self.index: int | None = None
        """The commit index, once committed."""

    def __len__(self) -> int:
        return len(self._writes)

    def _check_open(self) -> None:
        if self.index is not None:
            raise RuntimeError(f"this transaction was already committed at index {self.index}")

    def expect(self, key: Key, version: int) -> Txn:
        """Require `key`'s current version to be `version` (0: the item must be absent)."""
        self._check_open()
        if not isinstance(version, int) or version < 0:
            raise ValueError(f"a version is an integer >= 0, not {version!r}")
        pick_key(key, None, None)
        if self._conditions.get(key, version) != version:
            raise ValueError(f"{key} is already expected at version {self._conditions[key]}")
        self._conditions[key] = version
        return self

    def _write(self, key: Key, member: str, expect_version: int | None) -> Txn:
        self._check_open()
        if expect_version is not None:
            self.expect(key, expect_version)
        self._writes.append(f'{{"item":{dumps(key.to_json())},{member}}}')
        self._written.append(key)
        return self

    def put(self, key: Key, value: Value, *, expect_version: int | None = None) -> Txn:
        """Write `value` (a mapping, or `RawJSON` kept byte for byte) to `key`."""
        return self._write(
            pick_key(key, None, None), f'"value":{encode_value(value)}', expect_version
        )

    def put_node(self, id: str, value: Value, *, expect_version: int | None = None) -> Txn:
        """Write node `id`'s value."""
        return self.put(Node(id), value, expect_version=expect_version)

    def put_edge(
        self,
        from_: str,
        label: str,
        to: str,
        value: Value | None = None,
        *,
        expect_version: int | None = None,
    ) -> Txn:
        """Write the edge `from_ -[label]-> to` (value `{}` when none is given)."""
        return self.put(
            Edge(from_, label, to),
            value if value is not None else {},
            expect_version=expect_version,
        )

    def delete(
        self,
        key: Key | None = None,
        *,
        node: str | None = None,
        edge: tuple[str, str, str] | None = None,
        expect_version: int | None = None,
    ) -> Txn:
        """Delete an item (a tombstone version): a `Key`, `node=ID` or `edge=(FROM, LABEL, TO)`."""
        return self._write(pick_key(key, node, edge), '"delete":true', expect_version)

    def body(self) -> bytes:
        """The request body this transaction sends."""
        conditions = ",".join(
            f'{{"item":{dumps(k.to_json())},"version":{v}}}' for k, v in self._conditions.items()
        )
        return f'{{"writes":[{",".join(self._writes)}],"conditions":[{conditions}]}}'.encode()

    def commit(self) -> int:
        """Append atomically; answer the commit index (each write's version is its own
        record's index: the last write's is the commit index, earlier ones count down)."""
        self._check_open()
        self.index = self._client._append(self.body())
        return self.index

    @property
    def versions(self) -> dict[Key, int]:
        """Once committed, the version each written item now has (its last write's index)."""
        if self.index is None:
            raise RuntimeError("the transaction is not committed yet")
        first = self.index - len(self._written) + 1
        return {key: first + i for i, key in enumerate(self._written)}

    def __enter__(self) -> Txn:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self.index is None:
            self.commit()
