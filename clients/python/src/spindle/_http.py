"""HTTP/1.1 transport over the standard library: one keep-alive connection per thread,
the bearer token on every request, and error answers turned into typed exceptions.

A request that may safely be sent twice (reads, chunk writes: content-addressed) is
retried once on a fresh connection when a kept-alive connection turns out to be closed. A
transaction is never resent: if its connection breaks, the outcome is unknown and the
caller hears so.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, Mapping

from ._errors import ApiError, TransportError, http_error


@dataclass(frozen=True)
class Response:
    """A successful answer."""

    status: int
    body: bytes
    content_type: str


class Transport:
    """Sends requests to one node. Safe to share between threads."""

    def __init__(self, url: str, token: str | None, timeout_s: float) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must be http://HOST:PORT or https://HOST:PORT, not {url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self._local = threading.local()

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            cls = (
                http.client.HTTPSConnection
                if self.scheme == "https"
                else http.client.HTTPConnection
            )
            conn = cls(self.host, self.port, timeout=timeout_s)
            self._local.conn = conn
        elif conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        conn.timeout = timeout_s
        return conn

    def _drop(self) -> None:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        self._drop()

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | None] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
        idempotent: bool = True,
        wait_s: float = 0.0,
        ok: tuple[int, ...] = (200,),
    ) -> Response:
        """Send one request; answer it if its status is in `ok`, else raise the typed error.
        `wait_s` is how long the node may legitimately take (a `min_index` wait)."""
        target = self.prefix + path
        if query:
            pairs = [(k, str(v)) for k, v in query.items() if v is not None]
            if pairs:
                target += "?" + urllib.parse.urlencode(pairs, quote_via=urllib.parse.quote)
        headers = {"Accept": "application/json"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        if body is not None:
            headers["Content-Type"] = content_type
        timeout_s = self.timeout_s + wait_s
        for attempt in (1, 2):
            conn = self._connection(timeout_s)
            reused = conn.sock is not None
            try:
                conn.request(method, target, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.HTTPException, OSError) as e:
                self._drop()
                stale = isinstance(
                    e, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
                )
                if reused and stale and idempotent and attempt == 1:
                    continue
                if isinstance(e, socket.timeout):
                    what = f"no answer within {timeout_s:.1f} s"
                else:
                    what = f"{type(e).__name__}: {e}"
                unknown = "" if idempotent else " (the request may or may not have taken effect)"
                raise TransportError(
                    f"{method} {target} to {self.host}:{self.port}: {what}{unknown}"
                ) from e
            if resp.getheader("Connection", "").lower() == "close":
                self._drop()
            if resp.status in ok:
                return Response(resp.status, data, resp.getheader("Content-Type", ""))
            raise self._error(resp.status, resp.reason, data)
        raise AssertionError("unreachable")

    @staticmethod
    def _error(status: int, reason: str, data: bytes) -> ApiError:
        body: Any = None
        if data:
            try:
                body = json.loads(data)
            except ValueError:
                body = None
        return http_error(
            status,
            body if isinstance(body, dict) else None,
            f"HTTP {status} {reason}".strip(),
        )
