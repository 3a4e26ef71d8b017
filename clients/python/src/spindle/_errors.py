"""The exceptions the client raises: one per kind of answer a caller acts on.

Every refusal the node sends (`{"error": CODE, "message": TEXT, ...}` over HTTP, a status
over gRPC) becomes an `ApiError` subclass carrying the code, the message and the whole
answer; failures to reach the node are `TransportError`; answers that break the
documented format are `ProtocolError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from ._keys import Key


class SpindleError(Exception):
    """Base of every error this package raises."""


class TransportError(SpindleError):
    """The node could not be reached, or the connection broke before an answer."""


class ProtocolError(SpindleError):
    """The node's answer does not follow the documented format."""


class ApiError(SpindleError):
    """The node refused a request. `status` is the HTTP status (None over gRPC), `code`
    the stable error code (`"bad_request"`, `"conflict"`, ...; over gRPC the status name in
    lower case), `message` the node's explanation and `body` the whole JSON answer."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.message = message
        self.code = code
        self.status = status
        self.body: Mapping[str, Any] = body if body is not None else {}


class BadRequest(ApiError):
    """400 `bad_request` or gRPC INVALID_ARGUMENT: the request was malformed; nothing changed."""


class Unauthorized(ApiError):
    """401 `unauthorized` or gRPC UNAUTHENTICATED: a missing or wrong bearer token."""


class NotFound(ApiError):
    """404: no such endpoint, chunk or index view (gRPC NOT_FOUND: no such Disk View)."""


@dataclass(frozen=True)
class FailedCondition:
    """One condition of a transaction that did not hold: the item's version was `actual`
    (0: absent) where the transaction expected `expected`."""

    item: Key
    expected: int
    actual: int


class Conflict(ApiError):
    """409 `conflict`: a condition failed and nothing was written. `failed` names each
    failed condition with the item's current version."""

    def __init__(self, message: str, *, failed: list[FailedCondition], **kw: Any) -> None:
        super().__init__(message, **kw)
        self.failed = failed


class TooLarge(ApiError):
    """413/414/431: a body, chunk, URL or header over the node's limits."""


class NotYetApplied(ApiError):
    """504 `not_yet_applied`: the view had not applied `min_index` within the wait asked."""


class Unavailable(ApiError):
    """503 (`booting`, `views_stalled`, `view_paused`, `log_unavailable`,
    `chunk_store_failed`) or gRPC UNAVAILABLE (the node is shutting down): retry later."""


class StorageFull(ApiError):
    """507 `store_full` or `disk_full`: the chunk store refuses writes."""


class ResourceExhausted(ApiError):
    """gRPC RESOURCE_EXHAUSTED: too many streams or carousel filter groups at once."""


class Truncated(ApiError):
    """gRPC OUT_OF_RANGE: a tail asked for records below the log's first retained index."""


_BY_CODE: dict[str, type[ApiError]] = {
    "bad_request": BadRequest,
    "unauthorized": Unauthorized,
    "not_found": NotFound,
    "unknown_index": NotFound,
    "conflict": Conflict,
    "body_too_large": TooLarge,
    "too_large": TooLarge,
    "uri_too_long": TooLarge,
    "headers_too_large": TooLarge,
    "not_yet_applied": NotYetApplied,
    "booting": Unavailable,
    "views_stalled": Unavailable,
    "view_paused": Unavailable,
    "log_unavailable": Unavailable,
    "chunk_store_failed": Unavailable,
    "store_full": StorageFull,
    "disk_full": StorageFull,
}

_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: TooLarge,
    414: TooLarge,
    431: TooLarge,
    503: Unavailable,
    504: NotYetApplied,
    507: StorageFull,
}

_BY_GRPC: dict[str, type[ApiError]] = {
    "invalid_argument": BadRequest,
    "unauthenticated": Unauthorized,
    "not_found": NotFound,
    "resource_exhausted": ResourceExhausted,
    "unavailable": Unavailable,
    "out_of_range": Truncated,
}


def http_error(status: int, body: Mapping[str, Any] | None, fallback: str) -> ApiError:
    """The exception for an HTTP error answer (`body` is its JSON, if it had one)."""
    from ._keys import key_from_json

    body = body or {}
    code = body.get("error")
    code = code if isinstance(code, str) else f"http_{status}"
    message = body.get("message")
    message = message if isinstance(message, str) else fallback
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or ApiError
    if cls is Conflict:
        failed_json = body.get("failed")
        failed = [
            FailedCondition(key_from_json(f["item"]), int(f["expected"]), int(f["actual"]))
            for f in (failed_json if isinstance(failed_json, list) else [])
        ]
        return Conflict(message, failed=failed, code=code, status=status, body=body)
    return cls(message, code=code, status=status, body=body)


def grpc_error(code_name: str, details: str) -> ApiError:
    """The exception for a gRPC status (`code_name` as `grpc.StatusCode.X.name`)."""
    code = code_name.lower()
    cls = _BY_GRPC.get(code, ApiError)
    return cls(details, code=code)
