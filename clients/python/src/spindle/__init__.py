"""Spindle's Python client: the node's HTTP/JSON API as typed calls, and iteration and the
log tail over gRPC.

    import spindle
    c = spindle.Client("http://127.0.0.1:7070")
    t = c.txn(); t.put_node("ada", {"name": "Ada"}, expect_version=0); index = t.commit()
    c.get(node="ada")            # Item(key=Node(id='ada'), version=1, deleted=False, value={...})
    for frame in c.iterate(): ...
"""

from ._client import DEFAULT_GRPC_PORT, DEFAULT_URL, Chunks, Client
from ._errors import (
    ApiError,
    BadRequest,
    Conflict,
    FailedCondition,
    NotFound,
    NotYetApplied,
    ProtocolError,
    ResourceExhausted,
    SpindleError,
    StorageFull,
    TooLarge,
    TransportError,
    Truncated,
    Unauthorized,
    Unavailable,
)
from ._frames import End, Frame, Record
from ._grpc import Iteration
from ._json import RawJSON
from ._keys import Edge, Key, Node
from ._model import Item, Lookup, Multiget
from ._txn import Txn

__all__ = [
    "DEFAULT_GRPC_PORT",
    "DEFAULT_URL",
    "ApiError",
    "BadRequest",
    "Chunks",
    "Client",
    "Conflict",
    "Edge",
    "End",
    "FailedCondition",
    "Frame",
    "Item",
    "Iteration",
    "Key",
    "Lookup",
    "Multiget",
    "Node",
    "NotFound",
    "NotYetApplied",
    "ProtocolError",
    "RawJSON",
    "Record",
    "ResourceExhausted",
    "SpindleError",
    "StorageFull",
    "TooLarge",
    "TransportError",
    "Truncated",
    "Txn",
    "Unauthorized",
    "Unavailable",
]
