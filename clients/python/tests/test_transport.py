"""The HTTP transport's retry rule, against a stand-in server that closes every connection
after one answer as if it had timed out an idle keep-alive: reads are resent once on a
fresh connection, a transaction never is (its outcome is unknown, and the error says so)."""

from __future__ import annotations

import socket
import threading
from typing import Iterator

import pytest

import spindle
from spindle import Node


class OneAnswerServer:
    """Answers one request per connection with `body`, then closes the connection."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requests: list[bytes] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    part = conn.recv(65536)
                    if not part:
                        break
                    head += part
                self.requests.append(head.split(b"\r\n", 1)[0])
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(self.body)}\r\n\r\n".encode()
                    + self.body
                )

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server() -> Iterator[OneAnswerServer]:
    s = OneAnswerServer(b'{"index":7}')
    yield s
    s.close()


def test_reads_are_resent_once_on_a_closed_keep_alive(server: OneAnswerServer) -> None:
    c = spindle.Client(f"http://127.0.0.1:{server.port}", read_your_writes=False)
    assert c.status() == {"index": 7}
    assert c.status() == {"index": 7}, "the second read found its connection closed and resent"
    assert server.requests == [b"GET /v1/status HTTP/1.1"] * 2


def test_a_transaction_is_never_resent(server: OneAnswerServer) -> None:
    c = spindle.Client(f"http://127.0.0.1:{server.port}")
    assert c.put(Node("a"), {}) == 7
    with pytest.raises(spindle.TransportError) as caught:
        c.put(Node("a"), {})
    assert "may or may not" in str(caught.value)
    assert server.requests == [b"POST /v1/txn HTTP/1.1"]
