"""The gRPC side of the client: `Iterate` (a Disk View to a consistent cut, through its
carousel or a dedicated iterator) and `Tail` (the log's durable records), with the stubs
generated from the node's `spindle.proto` (`spindle._proto`).

Streams are read lazily; closing an iterator (or leaving a `for` loop early and dropping
it) cancels the call, which frees the node's seat at once.
"""

from __future__ import annotations

import threading
from typing import Generator, Iterator, Literal, NoReturn, Sequence

import grpc

from ._errors import ProtocolError, grpc_error
from ._frames import End, Frame, Record, decode_frames, record_from_proto
from ._proto import spindle_pb2, spindle_pb2_grpc

Kinds = Literal["all", "nodes", "edges"]

_KINDS = {
    "all": spindle_pb2.KINDS_ALL,
    "nodes": spindle_pb2.KINDS_NODES,
    "edges": spindle_pb2.KINDS_EDGES,
}

# The node sends messages of up to 16 MiB (docs/api.md, gRPC); gRPC's default cap is 4 MiB.
RECEIVE_BYTES_MAX = 32 << 20


class Grpc:
    """One channel to the node's gRPC listener, opened on first use."""

    def __init__(self, target: str, token: str | None) -> None:
        self.target = target
        self.metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token is not None else ()
        )
        self._channel: grpc.Channel | None = None
        self._stub: spindle_pb2_grpc.SpindleStub | None = None
        self._lock = threading.Lock()

    def stub(self) -> spindle_pb2_grpc.SpindleStub:
        with self._lock:
            if self._stub is None:
                self._channel = grpc.insecure_channel(
                    self.target, options=[("grpc.max_receive_message_length", RECEIVE_BYTES_MAX)]
                )
                self._stub = spindle_pb2_grpc.SpindleStub(self._channel)
            return self._stub

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = None
            self._stub = None


def _raise_rpc(e: grpc.RpcError) -> NoReturn:
    if isinstance(e, grpc.Call):
        raise grpc_error(e.code().name, e.details() or "") from None
    raise e


def iterate_view(
    g: Grpc,
    view: str,
    *,
    kinds: Kinds,
    keys_only: bool,
    from_index: int,
    to: int | None,
    projection: str | None,
    latest_only: bool,
    dedicated: bool,
    range_lo: int | None,
    range_hi: int | None,
    ends: list[End],
) -> Generator[Frame, None, None]:
    """Stream one Disk View; its end frame is appended to `ends`. A stream that stops
    before its end frame, or whose end frame counts other than the frames received, is a
    `ProtocolError`."""
    if kinds not in _KINDS:
        raise ValueError(f"kinds is one of {sorted(_KINDS)}, not {kinds!r}")
    req = spindle_pb2.IterateRequest(
        view=view,
        range_lo=range_lo,
        range_hi=range_hi,
        kinds=_KINDS[kinds],
        keys_only=keys_only,
        to=to,
        projection=projection,
        latest_only=latest_only,
        dedicated=dedicated,
    )
    setattr(req, "from", from_index)  # `from` is a Python keyword
    call = g.stub().Iterate(req, metadata=g.metadata)
    sent = 0
    try:
        for chunk in call:
            for f in decode_frames(chunk.frames, view):
                if isinstance(f, End):
                    if f.frames != sent:
                        raise ProtocolError(
                            f"{view}: the end frame counts {f.frames} frames, {sent} arrived"
                        )
                    ends.append(f)
                    return
                sent += 1
                yield f
    except grpc.RpcError as e:
        _raise_rpc(e)
    finally:
        call.cancel()
    raise ProtocolError(f"{view}: the stream ended without its end frame")


class Iteration(Iterator[Frame]):
    """The frames of one or more Disk Views, view after view. Once exhausted, `ends` holds
    each view's end frame, and `cut` the index up to which everything was sent (when every
    view shares it: the node-wide consistent cut `Client.iterate` asks for by default).
    Continue with `Client.tail(cut + 1)`."""

    def __init__(self, streams: Sequence[Generator[Frame, None, None]], ends: list[End]) -> None:
        self._streams = list(streams)
        self._current = 0
        self.ends = ends

    def __iter__(self) -> Iteration:
        return self

    def __next__(self) -> Frame:
        while self._current < len(self._streams):
            try:
                return next(self._streams[self._current])
            except StopIteration:
                self._current += 1
        raise StopIteration

    @property
    def cut(self) -> int | None:
        """The common cut of every view streamed, once all have ended (else None)."""
        cuts = {e.cut for e in self.ends}
        if len(self.ends) == len(self._streams) and len(cuts) == 1:
            return cuts.pop()
        return None

    def close(self) -> None:
        """Stop early: cancel the stream in progress."""
        for s in self._streams[self._current :]:
            s.close()
        self._current = len(self._streams)

    def __enter__(self) -> Iteration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def tail(g: Grpc, from_index: int, batch_records_max: int) -> Generator[Record, None, None]:
    """The log's durable records from `from_index` on, waiting for new ones forever."""
    req = spindle_pb2.TailRequest(batch_records_max=batch_records_max)
    setattr(req, "from", from_index)
    call = g.stub().Tail(req, metadata=g.metadata)
    try:
        for batch in call:
            for r in batch.records:
                yield record_from_proto(
                    r.index, r.commit, r.key, r.value if r.HasField("value") else None
                )
    except grpc.RpcError as e:
        _raise_rpc(e)
    finally:
        call.cancel()
