//! On a real file system that runs out of space (an 8 MiB tmpfs), the chunk store refuses
//! puts with `WriterFailed { disk_full: true }`, whose message says to free space; it keeps
//! serving every acknowledged chunk, also after a restart while the disk is still full; once
//! space is freed and the store reopened it takes puts again and has lost nothing
//! acknowledged. Mounting needs root: without it the test prints why and passes vacuously.

mod common;
#[path = "common/tmpfs.rs"]
mod tmpfs;

use spindle_chunk::{ChunkError, ChunkId, ChunkStore, Options};

fn opts() -> Options {
    Options {
        volume_bytes_max: 1 << 20,
        chunk_bytes_max: 256 << 10,
        write_buffer_bytes_max: 1 << 20,
        compact_in_background: false,
        ..Options::default()
    }
}

fn assert_readable(store: &ChunkStore, acked: &[(ChunkId, Vec<u8>)]) {
    for (id, data) in acked {
        let got = store.get(id).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert!(got.as_deref() == Some(&data[..]), "acknowledged {id}");
    }
    assert_eq!(store.len(), acked.len());
}

#[test]
fn a_full_disk_refuses_puts_and_keeps_acknowledged_chunks() {
    let fs = match tmpfs::Tmpfs::mount(8 << 20) {
        Ok(fs) => fs,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let dir = fs.path().join("chunks");
    // What an operator deletes to make room.
    let ballast = fs.path().join("ballast");
    std::fs::write(&ballast, vec![0u8; 1 << 20]).unwrap();

    let store = ChunkStore::open(&dir, opts()).unwrap();
    let mut acked = Vec::new();
    let err = loop {
        let data = common::chunk(acked.len() as u64, 200 << 10);
        match store.put(&data) {
            Ok(id) => acked.push((id, data)),
            Err(e) => break e,
        }
        assert!(acked.len() < 100, "an 8 MiB file system never filled");
    };
    println!("full after {} acknowledged puts: {err}", acked.len());
    assert!(err.is_disk_full(), "{err}");
    assert!(err.to_string().contains("free disk space"), "{err}");
    let refused = common::chunk(10_000, 1000);
    assert!(matches!(
        store.put(&refused),
        Err(ChunkError::WriterFailed {
            disk_full: true,
            ..
        })
    ));
    assert_readable(&store, &acked);
    assert!(store.close().is_err(), "close reports the failure");

    // A restart while the disk is still full: the store opens and serves reads.
    let store = ChunkStore::open(&dir, opts()).unwrap_or_else(|e| panic!("reopen full: {e}"));
    println!("reopened on a full disk: {:?}", store.open_report());
    assert_readable(&store, &acked);
    drop(store);

    std::fs::remove_file(&ballast).unwrap();
    let store = ChunkStore::open(&dir, opts()).unwrap();
    assert_readable(&store, &acked);
    let id = store.put(&refused).unwrap();
    store.close().unwrap();
    let store = ChunkStore::open(&dir, opts()).unwrap();
    assert_eq!(store.get(&id).unwrap(), Some(refused));
    assert_eq!(store.len(), acked.len() + 1);
    drop(store);
    drop(fs);
}
