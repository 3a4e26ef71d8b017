//! `StdFs`'s uncached reads (`O_DIRECT` into an aligned buffer, then moved) return exactly
//! what a normal read returns: heads and bodies at every alignment around 4 KiB boundaries,
//! spans that end at, inside and past the end of the file (of an aligned and of an unaligned
//! size), empty heads and bodies, on a cold and on a warm cache, and the direct path is the
//! one that ran where the file system takes `O_DIRECT`.

use spindle_fs::{
    direct_alignment_of, direct_reads, Fs, StdFs, DIRECT_ALIGN_BYTES_MIN as DIRECT_ALIGN,
};

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
    let a = DIRECT_ALIGN;
    for size in [5 * a + 123, 5 * a] {
        let path = dir.path().join(format!("f{size}"));
        let bytes = data(size);
        let fs = StdFs;
        let f = fs.create(&path).unwrap();
        f.write_all_at(&bytes, 0).unwrap();
        f.sync_all().unwrap();
        drop(f);
        let direct = direct_alignment_of(&path);
        let before = direct_reads();
        let f = fs.open_read(&path).unwrap();
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
                            "head: size {size} offset {offset} head {head_len} len {len} cold {cold}"
                        );
                        assert!(
                            body == want_body,
                            "body: size {size} offset {offset} head {head_len} len {len} cold {cold}: {} bytes, want {}",
                            body.len(),
                            want_body.len()
                        );
                    }
                }
            }
        }
        // Every read of the aligned file is a direct one (none ends short of an aligned
        // span); of the other, all but those the end of the file cuts short. (The counter is
        // the process's: the other test of this file does no uncached read.)
        let reads = (2 * offsets.len() * 2 * lens.len()) as u64;
        if let Some(align) = direct {
            let done = direct_reads() - before;
            if size % align == 0 {
                assert_eq!(done, reads, "size {size}: direct reads");
            } else {
                assert!(
                    done >= reads / 2,
                    "size {size}: {done} of {reads} reads direct"
                );
            }
        } else {
            eprintln!(
                "{}: no O_DIRECT here, only the fallback ran",
                dir.path().display()
            );
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
    if let Ok(Some(n)) = f.read_at_if_cached(&mut buf, 10) {
        assert_eq!(&buf[..n], &bytes[10..10 + n]);
    }
    // After a normal read the page is cached: the kernel answers from it.
    let mut warm = vec![0u8; 100];
    f.read_at(&mut warm, 10).unwrap();
    match f.read_at_if_cached(&mut buf, 10) {
        Ok(got) => {
            assert_eq!(got, Some(100), "a page just read is cached");
            assert_eq!(&buf[..], &bytes[10..110]);
        }
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}"),
    }
    // Past the end: zero bytes.
    if let Ok(got) = f.read_at_if_cached(&mut buf, bytes.len() as u64) {
        assert!(matches!(got, Some(0) | None), "{got:?}");
    }
}
