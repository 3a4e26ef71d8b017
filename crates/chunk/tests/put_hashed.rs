//! `put_hashed` stores a chunk hashed by the caller (`HashedChunk::new`) under the same id
//! `put` gives it, without hashing it again, and like `put` writes nothing for a chunk
//! already stored.

mod common;

use spindle_chunk::{Bytes, ChunkId, ChunkStore, HashedChunk};

#[test]
fn a_hashed_chunk_is_stored_under_its_id_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    let data = common::chunk(7, 5000);
    let chunk = HashedChunk::new(Bytes::from(data.clone()));
    assert_eq!(chunk.id(), ChunkId::of(&data));
    assert_eq!(chunk.bytes().as_ref(), &data[..]);
    let id = store.put_hashed(chunk.clone()).unwrap();
    assert_eq!(id, ChunkId::of(&data));
    assert_eq!(store.get(&id).unwrap().as_deref(), Some(&data[..]));
    let used = store.used_bytes();
    assert_eq!(store.put_hashed(chunk).unwrap(), id);
    assert_eq!(store.put(&data).unwrap(), id);
    assert_eq!(
        store.used_bytes(),
        used,
        "a second put of the chunk writes nothing"
    );
    store.close().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    assert_eq!(store.get(&id).unwrap(), Some(data));
}
