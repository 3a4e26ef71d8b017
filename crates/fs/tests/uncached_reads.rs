//! `StdFs`'s uncached reads (`O_DIRECT` into an aligned buffer, then moved) return exactly
//! what a normal read returns: heads and bodies at every alignment around 4 KiB boundaries,
//! spans that end at, inside and past the end of the file, empty heads and bodies, on a cold
//! and on a warm cache; and `read_at_if_cached` never returns bytes a normal read would not.

use spindle_fs::{Fs, StdFs, DIRECT_ALIGN};

fn data(len: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// What a normal read gives for (head, body).
fn expected(bytes: &[u8], head: usize, len: usize, offset: usize) -> (Vec<u8>, Vec<u8>) {
    let end = |n: usize| (offset + n).min(bytes.len());
    let h = &bytes[offset.min(bytes.len())..end(head)];
    let body = if h.len() == head {
        bytes[end(head)..end(head + len)].to_vec()
    } else {
        Vec::new()
    };
    (h.to_vec(), body)
}

#[test]
fn uncached_reads_equal_normal_reads() {
    // Put the file on the disk the tests build on (a tmpfs may refuse O_DIRECT, and then only
    // the fallback would be tested).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("f");
    let size = 5 * DIRECT_ALIGN + 123;
    let bytes = data(size);
    let fs = StdFs;
    let f = fs.create(&path).unwrap();
    f.write_all_at(&bytes, 0).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let f = fs.open_read(&path).unwrap();
    let a = DIRECT_ALIGN;
    let offsets = [
        0,
        1,
        52,
        a - 1,
        a,
        a + 1,
        2 * a - 52,
        3 * a + 7,
        size - 60,
        size - 1,
        size,
        size + 5,
    ];
    let lens = [0, 1, 100, a - 53, a, a + 1, 2 * a + 300, 10 * a];
    for cold in [true, false] {
        for &offset in &offsets {
            for head_len in [0, 52] {
                for &len in &lens {
                    if cold {
                        f.drop_cache().unwrap();
                    }
                    let mut head = vec![0xeeu8; head_len];
                    let body = f.read_uncached_at(&mut head, len, offset as u64).unwrap();
                    let (want_head, want_body) = expected(&bytes, head_len, len, offset);
                    assert_eq!(
                        &head[..want_head.len()],
                        &want_head[..],
                        "head: offset {offset} head {head_len} len {len} cold {cold}"
                    );
                    assert!(
                        body == want_body,
                        "body: offset {offset} head {head_len} len {len} cold {cold}: {} bytes, want {}",
                        body.len(),
                        want_body.len()
                    );
                }
            }
        }
    }
}

#[test]
fn reads_if_cached_return_the_bytes_or_nothing() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("f");
    let bytes = data(3 * DIRECT_ALIGN);
    let fs = StdFs;
    let f = fs.create(&path).unwrap();
    f.write_all_at(&bytes, 0).unwrap();
    f.sync_all().unwrap();
    f.drop_cache().unwrap();
    let mut buf = vec![0u8; 100];
    // Cold: nothing, or (a file system that kept the page) the right bytes.
    if let Some(n) = f.read_at_if_cached(&mut buf, 10).unwrap() {
        assert_eq!(&buf[..n], &bytes[10..10 + n]);
    }
    // After a normal read the page is cached: the kernel answers from it.
    let mut warm = vec![0u8; 100];
    f.read_at(&mut warm, 10).unwrap();
    let got = f.read_at_if_cached(&mut buf, 10).unwrap();
    if let Some(n) = got {
        assert_eq!(n, 100);
        assert_eq!(&buf[..], &bytes[10..110]);
    }
    // Past the end: zero bytes.
    assert!(matches!(
        f.read_at_if_cached(&mut buf, bytes.len() as u64).unwrap(),
        Some(0) | None
    ));
}
