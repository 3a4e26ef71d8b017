//! A volume holding a live chunk whose bytes rotted cannot be compacted (compaction verifies
//! what it copies and will not spread damage), but it does not stop compaction of the
//! others: a later candidate is still rewritten and its space reclaimed, the run reports the
//! damage, and every other live chunk still reads back.

mod common;

use spindle_chunk::{ChunkError, ChunkId, ChunkStore, RECORD_HEADER_LEN, VOLUME_HEADER_LEN};

const LEN: usize = 2000;

#[test]
fn a_rotten_volume_does_not_stop_compaction_of_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    // (id, volume it landed in, position in that volume): a put that started a volume is the
    // first record of the new one.
    let mut chunks: Vec<(ChunkId, usize, u64)> = Vec::new();
    let mut position = 0;
    for seed in 0..40 {
        let before = common::volumes(dir.path()).len();
        let id = store.put(&common::chunk(seed, LEN)).unwrap();
        let volumes = common::volumes(dir.path()).len();
        if volumes != before && !chunks.is_empty() {
            position = 0;
        }
        chunks.push((id, volumes, position));
        position += 1;
    }
    let in_volume = |v: usize| -> Vec<(ChunkId, u64)> {
        chunks
            .iter()
            .filter(|c| c.1 == v)
            .map(|c| (c.0, c.2))
            .collect()
    };
    let (first, second) = (in_volume(1), in_volume(2));
    assert!(first.len() >= 4 && second.len() >= 4, "{chunks:?}");
    // Volume 1 keeps one live chunk (the one that will rot) and is the most garbage, so it
    // is compacted first; volume 2 loses half of its chunks.
    let (rotten, rotten_at) = first[1];
    for (i, (id, _)) in first.iter().enumerate() {
        if i != 1 {
            assert!(store.delete(id).unwrap());
        }
    }
    for (id, _) in second.iter().step_by(2) {
        assert!(store.delete(id).unwrap());
    }
    store.close().unwrap();
    let record = RECORD_HEADER_LEN + LEN as u64;
    let volume_one = common::volumes(dir.path()).remove(0);
    common::flip_byte(
        &volume_one,
        VOLUME_HEADER_LEN + rotten_at * record + RECORD_HEADER_LEN + 100,
        0x40,
    );

    let store = ChunkStore::open(dir.path(), common::small_opts()).unwrap();
    let err = store.compact().unwrap_err();
    assert!(matches!(err, ChunkError::Corrupt { .. }), "{err}");
    let volume_two = spindle_chunk::format::volume_path(dir.path(), 2);
    assert!(
        !volume_two.exists(),
        "the volume after the rotten one was not compacted"
    );
    assert!(
        volume_one.exists(),
        "a volume with a rotten live chunk was removed"
    );
    assert!(matches!(
        store.get(&rotten),
        Err(ChunkError::Corrupt { .. })
    ));
    for (seed, (id, _, _)) in chunks.iter().enumerate() {
        let deleted = first.iter().enumerate().any(|(i, c)| i != 1 && c.0 == *id)
            || second.iter().step_by(2).any(|c| c.0 == *id);
        if *id == rotten {
            continue;
        }
        let got = store.get(id).unwrap();
        if deleted {
            assert_eq!(got, None, "chunk {seed} was deleted");
        } else {
            assert_eq!(got.as_deref(), Some(&common::chunk(seed as u64, LEN)[..]));
        }
    }
}
