"""The chunk store through the client: ids are the BLAKE3 of the bytes, gets return them."""

from __future__ import annotations

import os

import blake3
import pytest

import spindle


def test_chunk_put_get_has_delete(client: spindle.Client) -> None:
    data = os.urandom(300_000)
    id = client.chunks.put(data)
    assert id == blake3.blake3(data).hexdigest()
    assert client.chunks.get(id) == data
    assert client.chunks.has(id)
    assert client.chunks.put(data) == id, "a second put of the same bytes is the same chunk"
    assert client.chunks.put(data, id=id) == id
    assert client.chunks.delete(id)
    assert not client.chunks.has(id)
    assert client.chunks.get(id) is None
    assert not client.chunks.delete(id)


def test_a_put_under_the_wrong_id_is_refused(client: spindle.Client) -> None:
    wrong = blake3.blake3(b"other bytes").hexdigest()
    with pytest.raises(spindle.BadRequest) as caught:
        client.chunks.put(b"these bytes", id=wrong)
    assert caught.value.status == 400 and "nothing was stored" in caught.value.message
    assert not client.chunks.has(wrong)
    assert not client.chunks.has(blake3.blake3(b"these bytes").hexdigest())
