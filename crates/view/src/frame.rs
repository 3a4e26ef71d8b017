//! Iteration frames: the bytes an iteration streams to its consumer (docs/iteration.md).
//!
//! ```text
//! version frame:  tag 0x01 | flags u8 | index u64 LE | [key_len u16 LE | item key]
//!                 | [value_len u32 LE | value]        -- only when flags bit 1 is set
//!   flags: bit 0 tombstone, bit 1 value present, bit 2 value is a projection,
//!          bit 3 same item as the version frame before it in the buffer (no key)
//! end frame:      tag 0x02 | cut u64 LE | range lo u64 LE | range hi u64 LE | frames u64 LE
//! ```
//!
//! The item key is the core binary encoding (`ItemKey::encode`). Integers are little-endian
//! like every other wire integer; only Disk View keys are big-endian (they must sort).

use spindle_core::{Index, ItemKey, Partition};

pub const TAG_VERSION: u8 = 0x01;
pub const TAG_END: u8 = 0x02;
pub const FLAG_TOMBSTONE: u8 = 1 << 0;
pub const FLAG_VALUE: u8 = 1 << 1;
pub const FLAG_PROJECTED: u8 = 1 << 2;
/// The frame is another version of the item of the version frame before it in the same
/// buffer, and carries no key: most items have several versions, and their keys were most
/// of a frame's bytes besides the value.
pub const FLAG_SAME_ITEM: u8 = 1 << 3;
const FLAGS_KNOWN: u8 = FLAG_TOMBSTONE | FLAG_VALUE | FLAG_PROJECTED | FLAG_SAME_ITEM;
/// Bytes of an end frame.
pub const END_FRAME_BYTES: usize = 1 + 8 * 4;

/// One decoded version frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionFrame {
    pub key: ItemKey,
    pub index: Index,
    pub tombstone: bool,
    /// The value is one projected property (any JSON), not the item's object.
    pub projected: bool,
    /// The JSON text: the object, the projected property, or `None` (keys-only, a
    /// tombstone, or a projection whose property the object lacks).
    pub value: Option<String>,
}

/// The final frame: the consumer holds every matching version up to `cut` in `range`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndFrame {
    pub cut: Index,
    pub range: Partition,
    /// Version frames sent before this one.
    pub frames: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Version(VersionFrame),
    End(EndFrame),
}

/// A frame borrowed from the buffer it was decoded from (no allocation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameRef<'a> {
    Version {
        /// The value flags (`FLAG_SAME_ITEM` is resolved into `key` and left out).
        flags: u8,
        index: Index,
        /// The core item-key encoding (not validated here; `to_owned_frame` does).
        key: &'a [u8],
        value: Option<&'a [u8]>,
    },
    End(EndFrame),
}

impl FrameRef<'_> {
    /// The owned frame.
    pub fn to_owned_frame(&self) -> Result<Frame, &'static str> {
        Ok(match *self {
            FrameRef::Version {
                flags,
                index,
                key,
                value,
            } => Frame::Version(VersionFrame {
                key: match ItemKey::decode(key) {
                    Some((k, used)) if used == key.len() => k,
                    _ => return Err("bad item key"),
                },
                index,
                tombstone: flags & FLAG_TOMBSTONE != 0,
                projected: flags & FLAG_PROJECTED != 0,
                value: value
                    .map(|v| std::str::from_utf8(v).map(str::to_owned))
                    .transpose()
                    .map_err(|_| "value is not UTF-8")?,
            }),
            FrameRef::End(end) => Frame::End(end),
        })
    }
}

/// Append a version frame. `key` is the core item-key encoding.
#[inline]
pub fn encode_version(
    out: &mut Vec<u8>,
    flags: u8,
    index: Index,
    key: &[u8],
    value: Option<&[u8]>,
) {
    debug_assert_eq!(flags & FLAG_VALUE != 0, value.is_some());
    let key_len = u16::try_from(key.len()).expect("item keys are below 64 KiB");
    let mut head = [0u8; 12];
    head[0] = TAG_VERSION;
    head[1] = flags;
    head[2..10].copy_from_slice(&index.get().to_le_bytes());
    head[10..12].copy_from_slice(&key_len.to_le_bytes());
    out.reserve(head.len() + key.len() + value.map_or(0, |v| 4 + v.len()));
    out.extend_from_slice(&head);
    out.extend_from_slice(key);
    encode_value(out, value);
}

/// Append a version frame of the same item as the version frame before it in `out`: the
/// key is left out (`FLAG_SAME_ITEM`), and a decoder takes it from that frame.
#[inline]
pub fn encode_same_item_version(out: &mut Vec<u8>, flags: u8, index: Index, value: Option<&[u8]>) {
    debug_assert_eq!(flags & FLAG_VALUE != 0, value.is_some());
    let mut head = [0u8; 10];
    head[0] = TAG_VERSION;
    head[1] = flags | FLAG_SAME_ITEM;
    head[2..10].copy_from_slice(&index.get().to_le_bytes());
    out.reserve(head.len() + value.map_or(0, |v| 4 + v.len()));
    out.extend_from_slice(&head);
    encode_value(out, value);
}

/// Append a value's length and bytes (room for them already reserved by the callers).
#[inline]
fn encode_value(out: &mut Vec<u8>, value: Option<&[u8]>) {
    if let Some(v) = value {
        let len = u32::try_from(v.len()).expect("values are below 4 GiB");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(v);
    }
}

/// Append the end frame.
pub fn encode_end(out: &mut Vec<u8>, end: &EndFrame) {
    out.push(TAG_END);
    out.extend_from_slice(&end.cut.get().to_le_bytes());
    out.extend_from_slice(&end.range.lo().to_le_bytes());
    out.extend_from_slice(&end.range.hi().to_le_bytes());
    out.extend_from_slice(&end.frames.to_le_bytes());
}

/// Why a frame did not decode; `offset` is where the bad frame starts in the buffer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad iteration frame at offset {offset}: {reason}")]
pub struct FrameError {
    pub offset: usize,
    pub reason: &'static str,
}

/// Decodes frames from a buffer of whole frames.
#[derive(Debug)]
pub struct FrameReader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// The key of the last version frame since the start or the last end frame, for the
    /// same-item frames after it.
    last_key: Option<&'a [u8]>,
}

impl<'a> FrameReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        FrameReader {
            buf,
            pos: 0,
            last_key: None,
        }
    }

    /// Offset of the next frame in the buffer (its length once every frame was read).
    pub fn offset(&self) -> usize {
        self.pos
    }

    fn take(
        &mut self,
        n: usize,
        reason: &'static str,
        start: usize,
    ) -> Result<&'a [u8], FrameError> {
        let bytes = self.buf.get(self.pos..self.pos + n).ok_or(FrameError {
            offset: start,
            reason,
        })?;
        self.pos += n;
        Ok(bytes)
    }

    fn u64(&mut self, start: usize) -> Result<u64, FrameError> {
        let b = self.take(8, "short u64", start)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// The next frame, borrowed from the buffer; `None` at the end of the buffer. After an
    /// error the reader is at its end.
    pub fn next_ref(&mut self) -> Option<Result<FrameRef<'a>, FrameError>> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let item = self.decode_ref();
        if item.is_err() {
            self.pos = self.buf.len();
        }
        Some(item)
    }

    fn decode_ref(&mut self) -> Result<FrameRef<'a>, FrameError> {
        let start = self.pos;
        let bad = |reason| FrameError {
            offset: start,
            reason,
        };
        match self.take(1, "missing tag", start)?[0] {
            TAG_VERSION => {
                let flags = self.take(1, "short flags", start)?[0];
                if flags & !FLAGS_KNOWN != 0 {
                    return Err(bad("unknown flags"));
                }
                if flags & FLAG_TOMBSTONE != 0 && flags & (FLAG_VALUE | FLAG_PROJECTED) != 0 {
                    return Err(bad("a tombstone with a value"));
                }
                let index = Index::new(self.u64(start)?);
                let key = if flags & FLAG_SAME_ITEM != 0 {
                    self.last_key
                        .ok_or(bad("same-item frame with no version frame before it"))?
                } else {
                    let key_len = self.take(2, "short key length", start)?;
                    let key_len = u16::from_le_bytes([key_len[0], key_len[1]]) as usize;
                    let key = self.take(key_len, "short key", start)?;
                    self.last_key = Some(key);
                    key
                };
                let flags = flags & !FLAG_SAME_ITEM;
                let value = if flags & FLAG_VALUE != 0 {
                    let len = self.take(4, "short value length", start)?;
                    let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
                    Some(self.take(len, "short value", start)?)
                } else {
                    None
                };
                Ok(FrameRef::Version {
                    flags,
                    index,
                    key,
                    value,
                })
            }
            TAG_END => {
                // A stream ends here: a same-item frame after it has no item before it.
                self.last_key = None;
                let cut = Index::new(self.u64(start)?);
                let lo = self.u64(start)?;
                let hi = self.u64(start)?;
                let frames = self.u64(start)?;
                let range = Partition::new(lo, hi).ok_or(bad("bad range"))?;
                Ok(FrameRef::End(EndFrame { cut, range, frames }))
            }
            _ => Err(bad("unknown tag")),
        }
    }
}

/// Owned frames; item keys and values are validated (a borrowed frame's key is not).
impl Iterator for FrameReader<'_> {
    type Item = Result<Frame, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        let start = self.pos;
        let frame = self.next_ref()?;
        Some(frame.and_then(|f| {
            f.to_owned_frame().map_err(|reason| {
                self.pos = self.buf.len();
                FrameError {
                    offset: start,
                    reason,
                }
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let key = ItemKey::edge("a", "knows", "b").unwrap();
        let mut buf = Vec::new();
        encode_version(
            &mut buf,
            FLAG_VALUE,
            Index::new(7),
            &key.to_bytes(),
            Some(b"{\"w\":1}"),
        );
        encode_version(
            &mut buf,
            FLAG_TOMBSTONE,
            Index::new(9),
            &key.to_bytes(),
            None,
        );
        let end = EndFrame {
            cut: Index::new(9),
            range: Partition::nth(1, 4),
            frames: 2,
        };
        encode_end(&mut buf, &end);
        let frames: Vec<_> = FrameReader::new(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            frames,
            vec![
                Frame::Version(VersionFrame {
                    key: key.clone(),
                    index: Index::new(7),
                    tombstone: false,
                    projected: false,
                    value: Some("{\"w\":1}".into()),
                }),
                Frame::Version(VersionFrame {
                    key,
                    index: Index::new(9),
                    tombstone: true,
                    projected: false,
                    value: None,
                }),
                Frame::End(end),
            ]
        );
    }

    #[test]
    fn same_item_frames_take_the_key_of_the_frame_before() {
        let a = ItemKey::node("a").unwrap().to_bytes();
        let b = ItemKey::edge("a", "knows", "b").unwrap().to_bytes();
        let mut buf = Vec::new();
        encode_version(&mut buf, FLAG_VALUE, Index::new(1), &a, Some(b"{}"));
        encode_same_item_version(&mut buf, FLAG_TOMBSTONE, Index::new(2), None);
        encode_version(&mut buf, 0, Index::new(3), &b, None);
        encode_same_item_version(&mut buf, FLAG_VALUE, Index::new(4), Some(b"[]"));
        let got: Vec<_> = FrameReader::new(&buf)
            .map(|f| f.unwrap())
            .collect::<Vec<_>>();
        let keys: Vec<_> = got
            .iter()
            .map(|f| match f {
                Frame::Version(v) => (v.key.to_bytes(), v.index.get(), v.tombstone),
                Frame::End(_) => unreachable!(),
            })
            .collect();
        assert_eq!(
            keys,
            vec![
                (a.clone(), 1, false),
                (a, 2, true),
                (b.clone(), 3, false),
                (b, 4, false)
            ]
        );
        // Borrowed frames carry the value flags only.
        let mut reader = FrameReader::new(&buf);
        reader.next_ref();
        let Some(Ok(FrameRef::Version { flags, .. })) = reader.next_ref() else {
            panic!("a version frame")
        };
        assert_eq!(flags, FLAG_TOMBSTONE);
        // Without a frame before it, a same-item frame has no key: refused.
        let mut alone = Vec::new();
        encode_same_item_version(&mut alone, 0, Index::new(5), None);
        assert_eq!(
            FrameReader::new(&alone).next().unwrap().unwrap_err(),
            FrameError {
                offset: 0,
                reason: "same-item frame with no version frame before it"
            }
        );
    }

    #[test]
    fn damaged_frames_are_refused_with_their_offset() {
        let key = ItemKey::node("n").unwrap().to_bytes();
        let mut buf = Vec::new();
        encode_version(&mut buf, FLAG_VALUE, Index::FIRST, &key, Some(b"{}"));
        let first_len = buf.len();
        encode_version(&mut buf, 0, Index::new(2), &key, None);
        for cut in first_len + 1..buf.len() {
            let got: Vec<_> = FrameReader::new(&buf[..cut]).collect();
            assert_eq!(got.len(), 2);
            assert_eq!(got[1].as_ref().unwrap_err().offset, first_len);
        }
        let mut bad_tag = buf.clone();
        bad_tag[0] = 9;
        assert_eq!(
            FrameReader::new(&bad_tag)
                .next()
                .unwrap()
                .unwrap_err()
                .reason,
            "unknown tag"
        );
        // A tombstone carries no value, projected or not.
        for (flags, value) in [
            (FLAG_TOMBSTONE | FLAG_VALUE, Some(&b"{}"[..])),
            (FLAG_TOMBSTONE | FLAG_PROJECTED, None),
            (
                FLAG_TOMBSTONE | FLAG_PROJECTED | FLAG_VALUE,
                Some(&b"1"[..]),
            ),
        ] {
            let mut both = Vec::new();
            encode_version(&mut both, flags, Index::FIRST, &key, value);
            let err = FrameReader::new(&both).next_ref().unwrap().unwrap_err();
            assert_eq!(err.reason, "a tombstone with a value", "{flags:#x}");
        }
    }
}
