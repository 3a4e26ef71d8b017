"""`spindle.Client`: the node's HTTP/JSON API (docs/api.md) as typed Python calls, and its
gRPC iteration and log tail.

Reads are read-your-writes by default: after this client committed index N, a read that
names no `min_index` asks the node to wait until the view it reads has applied N (at most
`timeout_ms`, default 5000), so a `get` right after a `commit` sees the write.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.parse
from typing import Any, Generator, Iterable, Iterator, Mapping

from ._errors import NotFound, NotYetApplied, ProtocolError
from ._frames import End, Frame, Record
from ._grpc import Grpc, Iteration, Kinds, iterate_view, tail
from ._http import Transport
from ._json import Value, dumps, loads_answer
from ._keys import Edge, Key, Node, pick_key
from ._model import Item, Lookup, Multiget, answer_int, item_from_json
from ._txn import Txn

DEFAULT_URL = "http://127.0.0.1:7070"
"""Where `spindle serve` listens for HTTP by default."""
DEFAULT_GRPC_PORT = 7071
"""The port `spindle serve` listens on for gRPC by default."""
READ_WAIT_MS_DEFAULT = 5000
"""The node's wait for `min_index` when a read gives no `timeout_ms`."""
PAGE_ITEMS_DEFAULT = 1000
"""Entries per page of `history` and `out_edges` (the node allows 1..=10,000)."""


class Client:
    """A connection to one Spindle node.

    `url` is the HTTP listener; `grpc` the gRPC listener as `HOST:PORT` (default: the URL's
    host, port 7071). `token` is the bearer token (default: `$SPINDLE_TOKEN`, if set; `""`
    for none).
    `timeout_s` bounds each request beyond any wait it asks for. Safe to share between
    threads."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        grpc: str | None = None,
        timeout_s: float = 30.0,
        read_your_writes: bool = True,
    ) -> None:
        if token is None:
            token = os.environ.get("SPINDLE_TOKEN")
        token = token or None
        self._http = Transport(url, token, timeout_s)
        host = self._http.host
        if grpc is None:
            grpc = f"[{host}]:{DEFAULT_GRPC_PORT}" if ":" in host else f"{host}:{DEFAULT_GRPC_PORT}"
        self._grpc = Grpc(grpc, token)
        self.read_your_writes = read_your_writes
        self._last_index = 0
        self._lock = threading.Lock()
        self.chunks = Chunks(self._http)
        """The chunk store: `put`, `get`, `has`, `delete`."""

    def __repr__(self) -> str:
        h = self._http
        return f"spindle.Client('{h.scheme}://{h.host}:{h.port}', grpc='{self._grpc.target}')"

    def close(self) -> None:
        """Close the connections (the client reopens them if used again)."""
        self._http.close()
        self._grpc.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def last_index(self) -> int:
        """The highest commit index this client was answered (0: none yet)."""
        return self._last_index

    def _seen(self, index: int) -> None:
        with self._lock:
            self._last_index = max(self._last_index, index)

    def _min_index(self, given: int | None) -> int | None:
        if given is not None:
            return given
        if self.read_your_writes and self._last_index > 0:
            return self._last_index
        return None

    @staticmethod
    def _wait_s(waits: bool, timeout_ms: int | None) -> float:
        if not waits:
            return 0.0
        return (timeout_ms if timeout_ms is not None else READ_WAIT_MS_DEFAULT) / 1000

    # Writes

    def txn(self) -> Txn:
        """A new transaction: `.put_node(...)`, `.put_edge(...)`, `.delete(...)`,
        `.expect(key, version)`, then `.commit()`."""
        return Txn(self)

    def _append(self, body: bytes) -> int:
        resp = self._http.request("POST", "/v1/txn", body=body, idempotent=False)
        index = answer_int(loads_answer(resp.body), "index")
        self._seen(index)
        return index

    def put(self, key: Key, value: Value, *, expect_version: int | None = None) -> int:
        """Write one item; answer the commit index (the item's new version)."""
        return self.txn().put(key, value, expect_version=expect_version).commit()

    def delete(
        self,
        key: Key | None = None,
        *,
        node: str | None = None,
        edge: tuple[str, str, str] | None = None,
        expect_version: int | None = None,
    ) -> int:
        """Delete one item; answer the commit index."""
        return self.txn().delete(key, node=node, edge=edge, expect_version=expect_version).commit()

    # Reads

    def get(
        self,
        key: Key | None = None,
        *,
        node: str | None = None,
        edge: tuple[str, str, str] | None = None,
        as_of: int | None = None,
        min_index: int | None = None,
        timeout_ms: int | None = None,
        include_deleted: bool = False,
    ) -> Item | None:
        """An item's latest version (or its version as of log index `as_of`), or None if it
        was never written or is deleted. With `include_deleted`, a deleted item answers an
        `Item` with `deleted=True` and the delete's index as `version`."""
        k = pick_key(key, node, edge)
        wait = self._min_index(min_index)
        query: dict[str, str | int | None] = {
            **k.query(),
            "as_of": as_of,
            "min_index": wait,
            "timeout_ms": timeout_ms,
        }
        try:
            resp = self._http.request(
                "GET",
                "/v1/item",
                query=query,
                wait_s=self._wait_s(wait is not None or as_of is not None, timeout_ms),
            )
        except NotFound as e:
            if e.code == "deleted" and include_deleted:
                return Item(k, answer_int(e.body, "version"), True, None, None)
            if e.code in ("deleted", "not_found"):
                return None
            raise
        return item_from_json(loads_answer(resp.body), k)

    def history(
        self,
        key: Key | None = None,
        *,
        node: str | None = None,
        edge: tuple[str, str, str] | None = None,
        min_index: int | None = None,
        timeout_ms: int | None = None,
        page_size: int = PAGE_ITEMS_DEFAULT,
        after: int | None = None,
    ) -> Iterator[Item]:
        """Every version of an item, oldest first (deletes included, `deleted=True`), read
        a page of `page_size` at a time as the iterator advances. `after`: only versions
        above this index."""
        k = pick_key(key, node, edge)
        wait = self._min_index(min_index)
        base: dict[str, str | int | None] = {
            **k.query(),
            "min_index": wait,
            "timeout_ms": timeout_ms,
            "limit": page_size,
        }

        def pages() -> Iterator[Item]:
            cursor: int | None = after
            while True:
                resp = self._http.request(
                    "GET",
                    "/v1/history",
                    query={**base, "after": cursor},
                    wait_s=self._wait_s(wait is not None, timeout_ms),
                )
                page = loads_answer(resp.body)
                versions = page.get("versions") if isinstance(page, dict) else None
                if not isinstance(versions, list):
                    raise ProtocolError(f"history answer without versions: {page!r}")
                for v in versions:
                    yield item_from_json(v, k)
                if page.get("next") is None:
                    return
                cursor = answer_int(page, "next")

        return pages()

    def out_edges(
        self,
        node: str,
        *,
        label: str | None = None,
        as_of: int | None = None,
        min_index: int | None = None,
        timeout_ms: int | None = None,
        page_size: int = PAGE_ITEMS_DEFAULT,
    ) -> Iterator[Item]:
        """A node's live out-edges (as of log index `as_of`; default: the view's latest),
        ordered by label, then target, read a page at a time. Pass `as_of` for one
        consistent listing across pages: without it each page reads the view as it is then."""
        wait = self._min_index(min_index)
        base: dict[str, str | int | None] = {
            "node": node,
            "label": label,
            "as_of": as_of,
            "min_index": wait,
            "timeout_ms": timeout_ms,
            "limit": page_size,
        }

        def pages() -> Iterator[Item]:
            cursor: str | None = None
            while True:
                resp = self._http.request(
                    "GET",
                    "/v1/out_edges",
                    query={**base, "after": cursor},
                    wait_s=self._wait_s(wait is not None or as_of is not None, timeout_ms),
                )
                page = loads_answer(resp.body)
                edges = page.get("edges") if isinstance(page, dict) else None
                if not isinstance(edges, list):
                    raise ProtocolError(f"out_edges answer without edges: {page!r}")
                for e in edges:
                    yield item_from_json(e)
                nxt = page.get("next")
                if nxt is None:
                    return
                if not isinstance(nxt, str):
                    raise ProtocolError(f"out_edges cursor is not a string: {nxt!r}")
                cursor = nxt

        return pages()

    def multiget(
        self,
        keys: Iterable[Key],
        *,
        min_index: int | None = None,
        timeout_ms: int | None = None,
    ) -> Multiget:
        """The latest live value of each key from the Memory View (None: absent or deleted),
        in the order asked; at most 10,000 keys."""
        keys = [pick_key(k, None, None) for k in keys]
        wait = self._min_index(min_index)
        body: dict[str, Any] = {"items": [k.to_json() for k in keys]}
        if wait is not None:
            body["min_index"] = wait
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        resp = self._http.request(
            "POST",
            "/v1/multiget",
            body=dumps(body).encode(),
            wait_s=self._wait_s(wait is not None, timeout_ms),
        )
        answer = loads_answer(resp.body)
        values = answer.get("values") if isinstance(answer, dict) else None
        if not isinstance(values, list) or len(values) != len(keys):
            raise ProtocolError(f"multiget answer does not match the {len(keys)} keys asked")
        items: list[Item | None] = []
        for k, v in zip(keys, values):
            items.append(None if v is None else item_from_json({**v, "deleted": False}, k))
        return Multiget(answer_int(answer, "applied_index"), items)

    def lookup(self, index: str, value: Any, *, page_size: int = PAGE_ITEMS_DEFAULT) -> Lookup:
        """The live nodes whose indexed property equals `value` in Index View `index`,
        sorted, read a page of `page_size` at a time. Each page reads the view as it is
        then; `applied_index` is the first page's."""
        path = "/v1/index/" + urllib.parse.quote(index, safe="")
        nodes: list[str] = []
        applied: int | None = None
        cursor: str | None = None
        while True:
            resp = self._http.request(
                "GET",
                path,
                query={
                    "value": dumps(value),
                    # Sent only when not the default, as a server before paging refuses it.
                    "limit": None if page_size == PAGE_ITEMS_DEFAULT else page_size,
                    "after": cursor,
                },
            )
            answer = json.loads(resp.body)
            page = answer.get("nodes") if isinstance(answer, dict) else None
            if not isinstance(page, list) or not all(isinstance(n, str) for n in page):
                raise ProtocolError(f"index answer without nodes: {answer!r}")
            if applied is None:
                applied = answer_int(answer, "applied_index")
            nodes.extend(page)
            nxt = answer.get("next")
            if nxt is None:
                return Lookup(index, applied, nodes)
            if not isinstance(nxt, str) or not page:
                raise ProtocolError(f"index answer with a bad next: {answer!r}")
            cursor = nxt

    def status(self) -> dict[str, Any]:
        """The node's status report (`GET /v1/status`) as JSON."""
        answer = json.loads(self._http.request("GET", "/v1/status").body)
        if not isinstance(answer, dict):
            raise ProtocolError("status answer is not an object")
        return answer

    def metrics(self) -> str:
        """The node's Prometheus metrics text (`GET /metrics`)."""
        return self._http.request("GET", "/metrics").body.decode("utf-8")

    def wait_applied(
        self,
        index: int | None = None,
        *,
        timeout_s: float = 30.0,
        kinds: tuple[str, ...] = ("disk", "memory", "index"),
    ) -> dict[str, Any]:
        """Poll the status until every view of `kinds` is ready and has applied `index`
        (default: the highest commit this client has seen); answer that status. Raises
        `NotYetApplied` after `timeout_s`."""
        want = self._last_index if index is None else index
        deadline = time.monotonic() + timeout_s
        pause_s = 0.001
        while True:
            status = self.status()
            views = [v for v in status.get("views", []) if v.get("kind") in kinds]
            behind = [v for v in views if not v.get("ready") or v.get("applied_index", 0) < want]
            if not behind:
                return status
            if time.monotonic() >= deadline:
                names = ", ".join(f"{v.get('id')} at {v.get('applied_index')}" for v in behind)
                raise NotYetApplied(
                    f"views not at index {want} after {timeout_s} s: {names}",
                    code="not_yet_applied",
                )
            time.sleep(pause_s)
            pause_s = min(pause_s * 2, 0.05)

    # gRPC

    def iterate(
        self,
        view: str | None = None,
        *,
        kinds: Kinds = "all",
        keys_only: bool = False,
        from_index: int = 0,
        to: int | None = None,
        projection: str | None = None,
        latest_only: bool = False,
        dedicated: bool = False,
        hash_range: tuple[int, int] | None = None,
    ) -> Iteration:
        """Stream item versions over gRPC `Iterate`: each item's versions in index order,
        none above the cut. With no `view`, every Disk View of the node, one after another,
        all to one cut: `to`, or by default the lowest applied index among them (after
        waiting for them to apply this client's last commit) — so the frames are exactly the
        graph's versions in the log `1..=cut`, and `Iteration.cut` says which cut.

        `kinds`: "all", "nodes" or "edges"; `keys_only`: no values; `projection`: a JSON
        Pointer (`/name`) to send one property instead of the object; `latest_only`: each
        item's newest version only; `dedicated`: an iterator of its own instead of a seat on
        the view's carousel; `hash_range`: `[lo, hi)` of the 32-bit partition hash (XXH32 of
        the node id, or of an edge's `from`), served by the views it overlaps."""
        if kinds not in ("all", "nodes", "edges"):
            raise ValueError(f"kinds is 'all', 'nodes' or 'edges', not {kinds!r}")
        if view is None or to is None:
            status = self.wait_applied(kinds=("disk",)) if self.read_your_writes else self.status()
            disks = [v for v in status.get("views", []) if v.get("kind") == "disk"]
            if view is not None:
                disks = [v for v in disks if v.get("id") == view] or [{"id": view}]
            elif hash_range is not None:
                # Only the views whose partition overlaps the range (others would refuse it).
                disks = [
                    v
                    for v in disks
                    if v["range"][0] < hash_range[1] and hash_range[0] < v["range"][1]
                ]
            if to is None and all("applied_index" in v for v in disks):
                to = min(int(v["applied_index"]) for v in disks)
            views = [str(v["id"]) for v in disks]
        else:
            views = [view]
        lo, hi = hash_range if hash_range is not None else (None, None)
        ends: list[End] = []
        streams = [
            iterate_view(
                self._grpc,
                v,
                kinds=kinds,
                keys_only=keys_only,
                from_index=from_index,
                to=to,
                projection=projection,
                latest_only=latest_only,
                dedicated=dedicated,
                range_lo=lo,
                range_hi=hi,
                ends=ends,
            )
            for v in views
        ]
        return Iteration(streams, ends)

    def tail(
        self, from_index: int = 1, *, batch_records_max: int = 0
    ) -> Generator[Record, None, None]:
        """The log's durable records from `from_index` on, over gRPC `Tail`; it waits for new
        records forever, so stop with `break` (or `.close()`), which ends the stream. Below
        the first retained index it raises `spindle.Truncated`; from past the head's next
        index it waits up to the node's `read_wait_ms_max` for the log to get there, then
        raises `spindle.ApiError` with code `failed_precondition`."""
        return tail(self._grpc, from_index, batch_records_max)


class Chunks:
    """The content-addressed chunk store: a chunk's id is the BLAKE3 hash of its bytes
    (64 lowercase hex digits)."""

    def __init__(self, http: Transport) -> None:
        self._http = http

    @staticmethod
    def _path(id: str) -> str:
        if len(id) != 64 or any(c not in "0123456789abcdefABCDEF" for c in id):
            raise ValueError(f"a chunk id is 64 hex digits, not {id!r}")
        return f"/v1/chunks/{id}"

    def put(self, data: bytes, *, id: str | None = None) -> str:
        """Store `data` durably; answer its id. With `id`, the node refuses (`BadRequest`,
        nothing stored) a body whose hash is not that id."""
        data = bytes(data)
        if id is None:
            resp = self._http.request(
                "POST",
                "/v1/chunks",
                body=data,
                content_type="application/octet-stream",
                ok=(200, 201),
            )
        else:
            resp = self._http.request(
                "PUT",
                self._path(id),
                body=data,
                content_type="application/octet-stream",
                ok=(200, 201),
            )
        answer = json.loads(resp.body)
        got = answer.get("id") if isinstance(answer, dict) else None
        if not isinstance(got, str):
            raise ProtocolError(f"chunk answer without an id: {answer!r}")
        return got

    def get(self, id: str) -> bytes | None:
        """The chunk's bytes (the node verified their hash), or None if it holds no such chunk."""
        try:
            return self._http.request("GET", self._path(id)).body
        except NotFound:
            return None

    def has(self, id: str) -> bool:
        """Whether the node holds the chunk."""
        resp = self._http.request("HEAD", self._path(id), ok=(200, 404))
        return resp.status == 200

    def delete(self, id: str) -> bool:
        """Delete the chunk; answer whether it existed."""
        try:
            self._http.request("DELETE", self._path(id), ok=(204,))
        except NotFound:
            return False
        return True
