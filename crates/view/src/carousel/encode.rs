//! What the carousel's scanner and its riders share about frames: positions on the circle,
//! filter groups, one item's versions read from RocksDB, the encoding of an item's frames
//! for one filter (docs/iteration.md), per-chunk metadata, and the trim a rider applies
//! when its cut or range is narrower than its group's chunk.
//!
//! A chunk is encoded once per filter group and shared by every rider of the group; the
//! metadata (hash span, highest index, encoding cut) lets a rider decide without decoding
//! whether it can take the chunk whole (zero-copy), must skip it, or must trim a copy.

use std::ops::Range;

use bytes::Bytes;
use rocksdb::{DBRawIteratorWithThreadMode, DB};
use spindle_core::{Index, ItemKey, ItemKind, Partition};

use crate::disk::DiskView;
use crate::error::IterError;
use crate::frame::{self, FrameError, FrameReader, FrameRef, FLAG_PROJECTED, FLAG_TOMBSTONE};
use crate::frame::{FLAG_VALUE, TAG_VERSION};
use crate::iterate::{project, Checked, Kinds};
use crate::keys;

/// A place on the circle: the lap and the item prefix (a Disk View key without its index)
/// of the first item not yet covered. The empty key is the start of the view's key space,
/// so the end of lap `n` is `(n + 1, [])`. Positions order by lap, then key bytes, which is
/// the scan order.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ScanPos {
    pub lap: u64,
    pub key: Vec<u8>,
}

impl ScanPos {
    /// The start of the lap after this position's.
    pub fn lap_end(&self) -> ScanPos {
        ScanPos {
            lap: self.lap + 1,
            key: Vec::new(),
        }
    }

    /// Where in the hash space this position is: the partition hash its key starts with
    /// (`lo`, the range's start, at the start of a lap).
    pub fn hash_or(&self, lo: u64) -> u64 {
        match self.key.first_chunk::<4>() {
            Some(h) => u64::from(u32::from_be_bytes(*h)),
            None => lo,
        }
    }

    /// The same key one lap later: where a rider that boarded here leaves.
    pub fn one_lap_later(&self) -> ScanPos {
        ScanPos {
            lap: self.lap + 1,
            key: self.key.clone(),
        }
    }
}

/// Riders whose filters are equal share chunks. The cut is part of the key only for
/// latest-only requests (which version is the newest depends on it); otherwise a group's
/// chunks hold every version up to the highest cut of its members and a rider with a lower
/// cut trims.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct GroupKey {
    pub nodes: bool,
    pub edges: bool,
    pub keys_only: bool,
    pub from: Index,
    pub projection: Option<String>,
    pub latest_cut: Option<Index>,
}

impl GroupKey {
    pub fn of(c: &Checked) -> GroupKey {
        GroupKey {
            nodes: c.kinds.nodes,
            edges: c.kinds.edges,
            keys_only: c.keys_only,
            from: c.from,
            projection: c.projection.clone(),
            latest_cut: c.latest_only.then_some(c.cut),
        }
    }

    /// The filter that encodes this group's chunks up to `cut`.
    pub fn filter(&self, cut: Index) -> Filter {
        Filter {
            kinds: Kinds {
                nodes: self.nodes,
                edges: self.edges,
            },
            keys_only: self.keys_only,
            from: self.from,
            projection: self.projection.clone(),
            latest_only: self.latest_cut.is_some(),
            cut: self.latest_cut.unwrap_or(cut),
        }
    }
}

/// Everything that decides which frames of an item are sent, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Filter {
    pub kinds: Kinds,
    pub keys_only: bool,
    pub from: Index,
    pub projection: Option<String>,
    pub latest_only: bool,
    pub cut: Index,
}

impl Filter {
    pub fn of(c: &Checked) -> Filter {
        GroupKey::of(c).filter(c.cut)
    }
}

/// Every stored version of one item, read from RocksDB (buffers reused item to item).
#[derive(Debug, Default)]
pub(crate) struct ItemBuf {
    pub prefix: Vec<u8>,
    /// The core item-key encoding, as frames carry it.
    core_key: Vec<u8>,
    pub hash: u32,
    pub kind: Option<ItemKind>,
    versions: Vec<(Index, Range<usize>)>,
    values: Vec<u8>,
    /// Stored key and value bytes read for this item.
    pub raw_bytes: usize,
}

impl ItemBuf {
    /// Begin the item whose first stored key splits into `first`.
    pub fn start(&mut self, first: &keys::KeyParts<'_>, view: &DiskView) -> Result<(), IterError> {
        self.prefix.clear();
        self.prefix.extend_from_slice(first.prefix);
        self.hash = first.hash;
        self.kind = Some(first.kind);
        self.core_key.clear();
        keys::transcode_item(first.prefix, &mut self.core_key)
            .ok_or_else(|| view.corrupt(format!("bad key {:?}", first.prefix)))?;
        self.versions.clear();
        self.values.clear();
        self.raw_bytes = 0;
        Ok(())
    }

    /// Read every stored version of the item begun by `start` (the iterator on its first
    /// version), append the frames each builder wants, and leave the iterator on the next
    /// item. One builder that takes every version in range (not latest-only) gets its frames
    /// straight from the iterator; otherwise the versions are buffered once and encoded per
    /// builder.
    ///
    /// `false`: the item's stored bytes, or the frame bytes it added to a builder since
    /// the builder's `mark` (a projection can make frames larger than the values they come
    /// from), passed `shared_bytes_max` (a large item is not shared, see
    /// `CarouselConfig::item_shared_bytes_max`); the iterator may stand inside the item and
    /// the builders may hold part of its frames, so the caller rolls them back to their
    /// `mark`.
    pub fn read_into(
        &mut self,
        it: &mut DBRawIteratorWithThreadMode<'_, DB>,
        view: &DiskView,
        builders: &mut [ChunkBuilder],
        shared_bytes_max: usize,
    ) -> Result<bool, IterError> {
        let kind = self.kind.expect("read_into follows start");
        let mut stream = match builders {
            [one] if !one.filter.latest_only => Some(one),
            _ => None,
        };
        let streamed = stream.is_some();
        while let Some(k) = it.key() {
            let parts = keys::split_key(k).ok_or_else(|| view.corrupt(format!("bad key {k:?}")))?;
            if parts.prefix != self.prefix.as_slice() {
                break;
            }
            let v = it.value().expect("a valid iterator has a value");
            self.raw_bytes += k.len() + v.len();
            if self.raw_bytes > shared_bytes_max {
                return Ok(false);
            }
            match stream.as_deref_mut() {
                Some(b) if b.wants(kind, parts.index) => {
                    b.emit(&self.core_key, self.hash, parts.index, v, view)?;
                    if b.item_bytes() > shared_bytes_max {
                        return Ok(false);
                    }
                }
                Some(_) => {}
                None => {
                    let start = self.values.len();
                    self.values.extend_from_slice(v);
                    self.versions.push((parts.index, start..self.values.len()));
                }
            }
            it.next();
        }
        if !streamed {
            for b in builders.iter_mut() {
                if !b.add(self, view, shared_bytes_max)? {
                    return Ok(false);
                }
            }
        }
        if it.valid() {
            return Ok(true);
        }
        // The iterator ran out: the end of its range, or an error.
        it.status().map_err(crate::disk::db_err(view.dir()))?;
        Ok(true)
    }
}

/// Move the iterator past every version of the item whose prefix is `prefix`, onto the
/// next item's first key (or the end of its range). `Some`: that next item's prefix.
pub(crate) fn skip_item(
    it: &mut DBRawIteratorWithThreadMode<'_, DB>,
    view: &DiskView,
    prefix: &[u8],
) -> Result<Option<Vec<u8>>, IterError> {
    // Every version key of the item is the prefix and an 8-byte index, so the largest
    // possible one bounds them all.
    let mut target = Vec::with_capacity(prefix.len() + keys::INDEX_BYTES);
    target.extend_from_slice(prefix);
    target.extend_from_slice(&[0xFF; keys::INDEX_BYTES]);
    it.seek(&target);
    while let Some(k) = it.key() {
        let parts = keys::split_key(k).ok_or_else(|| view.corrupt(format!("bad key {k:?}")))?;
        if parts.prefix != prefix {
            return Ok(Some(parts.prefix.to_vec()));
        }
        it.next();
    }
    it.status().map_err(crate::disk::db_err(view.dir()))?;
    Ok(None)
}

/// What a rider learns about a chunk without decoding it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkMeta {
    /// Version frames in the chunk.
    pub frames: u64,
    /// Highest index of any frame (0 when there are none).
    pub index_max: Index,
    /// Lowest and highest partition hash of the chunk's items (meaningless without frames).
    pub hash_first: u32,
    pub hash_last: u32,
    /// The cut the chunk was encoded with: no frame is above it.
    pub cut: Index,
}

/// Frames of one chunk for one filter, with their metadata.
#[derive(Debug)]
pub(crate) struct ChunkBuilder {
    pub filter: Filter,
    pub buf: Vec<u8>,
    pub meta: ChunkMeta,
    /// Where in `buf` the key of the last version frame is: a frame of the same item after
    /// it is a same-item frame (no key).
    last_key: Option<Range<usize>>,
    /// Where the item being added began (the last `mark`).
    item_start: usize,
    /// The capacity `buf` was made with, which a rollback returns it to.
    capacity_bytes: usize,
}

impl ChunkBuilder {
    pub fn new(filter: Filter, capacity_bytes: usize) -> Self {
        let cut = filter.cut;
        ChunkBuilder {
            filter,
            buf: Vec::with_capacity(capacity_bytes),
            meta: ChunkMeta {
                frames: 0,
                index_max: Index::ZERO,
                hash_first: 0,
                hash_last: 0,
                cut,
            },
            last_key: None,
            item_start: 0,
            capacity_bytes,
        }
    }

    /// Whether this filter wants the version at `index` of an item of `kind` (latest-only
    /// aside: that needs the item's other versions).
    fn wants(&self, kind: ItemKind, index: Index) -> bool {
        let f = &self.filter;
        f.kinds.allows(kind) && index >= f.from && index <= f.cut
    }

    /// Append the frames this filter wants of `item`; `false` as soon as they pass
    /// `bytes_max` since the last `mark` (the item is then not shared).
    pub fn add(
        &mut self,
        item: &ItemBuf,
        view: &DiskView,
        bytes_max: usize,
    ) -> Result<bool, IterError> {
        let kind = item.kind.expect("a loaded item has a kind");
        if self.filter.latest_only {
            let cut = self.filter.cut;
            let newest = item.versions.iter().rev().find(|(i, _)| *i <= cut);
            if let Some((index, range)) = newest.filter(|(i, _)| self.wants(kind, *i)) {
                let stored = &item.values[range.clone()];
                self.emit(&item.core_key, item.hash, *index, stored, view)?;
            }
        } else {
            for (index, range) in &item.versions {
                if self.wants(kind, *index) {
                    let stored = &item.values[range.clone()];
                    self.emit(&item.core_key, item.hash, *index, stored, view)?;
                    if self.item_bytes() > bytes_max {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(self.item_bytes() <= bytes_max)
    }

    /// Append the version frame at `index` of the item whose core key is `core_key` and
    /// partition hash `hash`, from its stored value bytes.
    fn emit(
        &mut self,
        core_key: &[u8],
        hash: u32,
        index: Index,
        stored: &[u8],
        view: &DiskView,
    ) -> Result<(), IterError> {
        let value = keys::split_value(stored)
            .ok_or_else(|| view.corrupt(format!("bad value tag at {index}")))?;
        let projected;
        let (flags, body): (u8, Option<&[u8]>) = match value {
            None => (FLAG_TOMBSTONE, None),
            Some(_) if self.filter.keys_only => (0, None),
            Some(json) => match &self.filter.projection {
                None => (FLAG_VALUE, Some(json)),
                Some(pointer) => {
                    projected = project(json, pointer)
                        .map_err(|e| view.corrupt(format!("value at {index}: {e}")))?;
                    match &projected {
                        Some(p) => (FLAG_PROJECTED | FLAG_VALUE, Some(p.as_bytes())),
                        None => (FLAG_PROJECTED, None),
                    }
                }
            },
        };
        push_version(
            &mut self.buf,
            &mut self.last_key,
            flags,
            index,
            core_key,
            body,
        );
        let meta = &mut self.meta;
        if meta.frames == 0 {
            meta.hash_first = hash;
        }
        meta.hash_last = hash;
        meta.index_max = meta.index_max.max(index);
        meta.frames += 1;
        Ok(())
    }

    /// Frame bytes added since the last `mark`.
    fn item_bytes(&self) -> usize {
        self.buf.len() - self.item_start
    }

    /// Where the chunk stands now, to `rollback` to (an item begins here).
    pub fn mark(&mut self) -> BuilderMark {
        self.item_start = self.buf.len();
        BuilderMark {
            len: self.buf.len(),
            meta: self.meta,
            last_key: self.last_key.clone(),
        }
    }

    /// Drop every frame added since `mark`, and the memory the dropped item made `buf`
    /// grow by (a shared chunk keeps its allocation for as long as riders hold it).
    pub fn rollback(&mut self, mark: BuilderMark) {
        self.buf.truncate(mark.len);
        self.buf.shrink_to(self.capacity_bytes);
        self.meta = mark.meta;
        self.last_key = mark.last_key;
    }

    pub fn finish(self) -> (Bytes, ChunkMeta) {
        (Bytes::from(self.buf), self.meta)
    }
}

/// A `ChunkBuilder`'s state before an item, to drop that item's frames again.
#[derive(Debug)]
pub(crate) struct BuilderMark {
    len: usize,
    meta: ChunkMeta,
    last_key: Option<Range<usize>>,
}

/// How a rider uses one chunk of its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChunkUse {
    /// Nothing in it for this rider.
    Skip,
    /// Every frame is wanted: hand on the shared bytes.
    Whole,
    /// Some frames are above the rider's cut or outside its range: copy the rest.
    Trim,
}

/// Pure: decide from the metadata alone.
pub(crate) fn chunk_use(meta: &ChunkMeta, range: Partition, cut: Index) -> ChunkUse {
    if meta.frames == 0 {
        return ChunkUse::Skip;
    }
    let (first, last) = (u64::from(meta.hash_first), u64::from(meta.hash_last));
    if last < range.lo() || first >= range.hi() {
        return ChunkUse::Skip;
    }
    if range.lo() <= first && last < range.hi() && meta.index_max <= cut {
        ChunkUse::Whole
    } else {
        ChunkUse::Trim
    }
}

/// The frames of `chunk` whose item is in `range` and whose index is at most `cut`, and
/// how many there are.
pub(crate) fn trim(
    chunk: &[u8],
    range: Partition,
    cut: Index,
) -> Result<(Vec<u8>, u64), FrameError> {
    let mut out = Vec::with_capacity(chunk.len());
    let mut frames = 0;
    let mut reader = FrameReader::new(chunk);
    let mut start = 0;
    let mut last_key = None;
    while let Some(frame) = reader.next_ref() {
        let end = reader.offset();
        let FrameRef::Version {
            flags,
            index,
            key,
            value,
        } = frame?
        else {
            unreachable!("shared chunks hold version frames only")
        };
        let hash = ItemKey::hash_of_encoded(key).ok_or(FrameError {
            offset: start,
            reason: "bad item key",
        })?;
        if index <= cut && range.contains(hash) {
            debug_assert_eq!(chunk[start], TAG_VERSION);
            // Encoded again rather than copied: a same-item frame whose item's first frame
            // was left out must carry the key.
            push_version(&mut out, &mut last_key, flags, index, key, value);
            frames += 1;
        }
        start = end;
    }
    Ok((out, frames))
}

/// Append a version frame to `out`, without its key when `last_key` (where the key of the
/// last version frame in `out` is) holds the same key; `last_key` then points at this
/// frame's key.
fn push_version(
    out: &mut Vec<u8>,
    last_key: &mut Option<Range<usize>>,
    flags: u8,
    index: Index,
    key: &[u8],
    value: Option<&[u8]>,
) {
    if last_key.as_ref().is_some_and(|r| &out[r.clone()] == key) {
        frame::encode_same_item_version(out, flags, index, value);
    } else {
        // The key starts after the tag, the flags, the index and the key length.
        let at = out.len() + 12;
        frame::encode_version(out, flags, index, key, value);
        *last_key = Some(at..at + key.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spindle_core::ItemKey;

    fn meta(frames: u64, first: u32, last: u32, index_max: u64) -> ChunkMeta {
        ChunkMeta {
            frames,
            index_max: Index::new(index_max),
            hash_first: first,
            hash_last: last,
            cut: Index::new(100),
        }
    }

    #[test]
    fn a_chunk_is_whole_only_inside_the_range_and_the_cut() {
        let r = Partition::new(10, 20).unwrap();
        let cut = Index::new(50);
        assert_eq!(chunk_use(&meta(0, 10, 19, 1), r, cut), ChunkUse::Skip);
        assert_eq!(chunk_use(&meta(3, 10, 19, 50), r, cut), ChunkUse::Whole);
        assert_eq!(chunk_use(&meta(3, 10, 19, 51), r, cut), ChunkUse::Trim);
        assert_eq!(chunk_use(&meta(3, 5, 12, 1), r, cut), ChunkUse::Trim);
        assert_eq!(chunk_use(&meta(3, 15, 20, 1), r, cut), ChunkUse::Trim);
        assert_eq!(chunk_use(&meta(3, 0, 9, 1), r, cut), ChunkUse::Skip);
        assert_eq!(chunk_use(&meta(3, 20, 30, 1), r, cut), ChunkUse::Skip);
        assert_eq!(chunk_use(&meta(3, 9, 20, 1), r, cut), ChunkUse::Trim);
    }

    #[test]
    fn trim_keeps_the_frames_in_range_and_at_or_below_the_cut() {
        let keys: Vec<ItemKey> = (0..20)
            .map(|i| ItemKey::edge(format!("n{i}"), "l", "m").unwrap())
            .collect();
        let mut chunk = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            frame::encode_version(&mut chunk, 0, Index::new(i as u64 + 1), &k.to_bytes(), None);
        }
        let mid = keys[7].hash();
        let range = Partition::new(0, u64::from(mid) + 1).unwrap();
        let (out, frames) = trim(&chunk, range, Index::new(15)).unwrap();
        let kept: Vec<(ItemKey, Index)> = FrameReader::new(&out)
            .map(|f| match f.unwrap() {
                frame::Frame::Version(v) => (v.key, v.index),
                frame::Frame::End(_) => panic!("no end frame in a chunk"),
            })
            .collect();
        let want: Vec<(ItemKey, Index)> = keys
            .iter()
            .enumerate()
            .filter(|(i, k)| *i < 15 && range.contains(k.hash()))
            .map(|(i, k)| (k.clone(), Index::new(i as u64 + 1)))
            .collect();
        assert_eq!(kept, want);
        assert_eq!(frames, want.len() as u64);
        assert!(
            !want.is_empty() && want.len() < 15,
            "the test must trim by range"
        );
    }

    #[test]
    fn positions_order_by_lap_then_key() {
        let p = |lap, key: &[u8]| ScanPos {
            lap,
            key: key.to_vec(),
        };
        assert!(p(0, b"zz") < p(1, b""));
        assert!(p(1, b"") < p(1, b"\x00"));
        assert_eq!(p(3, b"k").one_lap_later(), p(4, b"k"));
        assert_eq!(p(3, b"k").lap_end(), p(4, b""));
    }
}
