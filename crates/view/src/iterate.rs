//! The Iteration Service over one Disk View: a request is checked before any data flows,
//! then a dedicated RocksDB iterator streams frames in log order within keys, ending with
//! the cut (docs/iteration.md).
//!
//! Consistency needs no snapshot: every stored version carries its index, and versions
//! above the cut (applied while the scan runs) are filtered out, so the frames are exactly
//! the log up to the cut (invariant 6: per item, increasing index, none above the cut).

use rocksdb::{DBRawIteratorWithThreadMode, ReadOptions, DB};
use spindle_core::{Index, ItemKind, Partition};

use crate::disk::DiskView;
use crate::error::{IterError, ViewError};
use crate::frame::{self, EndFrame, FLAG_PROJECTED, FLAG_TOMBSTONE, FLAG_VALUE};
use crate::keys;

/// RocksDB readahead for an iteration's sequential scan.
pub const ITER_READAHEAD_BYTES: usize = 2 << 20;

/// Which kinds of items an iteration yields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kinds {
    pub nodes: bool,
    pub edges: bool,
}

impl Kinds {
    pub const ALL: Kinds = Kinds {
        nodes: true,
        edges: true,
    };
    pub const NODES: Kinds = Kinds {
        nodes: true,
        edges: false,
    };
    pub const EDGES: Kinds = Kinds {
        nodes: false,
        edges: true,
    };

    pub(crate) fn allows(self, kind: ItemKind) -> bool {
        match kind {
            ItemKind::Node => self.nodes,
            ItemKind::Edge => self.edges,
        }
    }
}

/// An iteration request (DESIGN.md §4), as a client sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IterRequest {
    /// Hash range `[range_lo, range_hi)`; the view serves its overlap with its partition.
    pub range_lo: u64,
    pub range_hi: u64,
    pub kinds: Kinds,
    /// Frames without values (the tombstone flag still marks deletions).
    pub keys_only: bool,
    /// Lowest index wanted (0 or 1: from the start).
    pub from: Index,
    /// The cut: highest index wanted. `None`: the view's applied index when the
    /// iteration starts.
    pub to: Option<Index>,
    /// A JSON Pointer (RFC 6901, like `/name` or `/address/city`) to the one property to
    /// send instead of the whole object.
    pub projection: Option<String>,
    /// Only each item's newest version at or below the cut (if it is at or above `from`).
    pub latest_only: bool,
}

impl IterRequest {
    /// Everything in `range`, every version, up to the applied index.
    pub fn range(range: Partition) -> Self {
        IterRequest {
            range_lo: range.lo(),
            range_hi: range.hi(),
            kinds: Kinds::ALL,
            keys_only: false,
            from: Index::ZERO,
            to: None,
            projection: None,
            latest_only: false,
        }
    }

    /// Check the request against a view of `partition` that has applied `applied`.
    /// Pure: every refusal happens here, before any data flows.
    pub fn check(&self, partition: Partition, applied: Index) -> Result<Checked, IterError> {
        let requested =
            Partition::new(self.range_lo, self.range_hi).ok_or(IterError::EmptyRange {
                lo: self.range_lo,
                hi: self.range_hi,
            })?;
        let range = requested
            .intersect(partition)
            .ok_or(IterError::RangeOutsideView {
                lo: self.range_lo,
                hi: self.range_hi,
                view: partition,
            })?;
        if !self.kinds.nodes && !self.kinds.edges {
            return Err(IterError::NoKinds);
        }
        let cut = self.to.unwrap_or(applied);
        if cut > applied {
            return Err(IterError::CutAboveApplied { cut, applied });
        }
        // 0 and 1 both mean "from the start", which is never above a cut (even cut 0).
        let from = self.from.max(Index::FIRST);
        if from > cut && from > Index::FIRST {
            return Err(IterError::FromAboveTo { from, to: cut });
        }
        let projection = match &self.projection {
            None => None,
            Some(_) if self.keys_only => return Err(IterError::ProjectionWithKeysOnly),
            Some(p) => {
                check_pointer(p).map_err(|reason| IterError::BadProjection {
                    projection: p.clone(),
                    reason: reason.to_owned(),
                })?;
                Some(p.clone())
            }
        };
        Ok(Checked {
            range,
            kinds: self.kinds,
            keys_only: self.keys_only,
            from,
            cut,
            projection,
            latest_only: self.latest_only,
        })
    }
}

/// RFC 6901 syntax for one property: `/` then reference tokens, `~` only as `~0` or `~1`.
pub(crate) fn check_pointer(p: &str) -> Result<(), &'static str> {
    if p.is_empty() {
        return Err("the empty pointer names the whole object, not one property");
    }
    if !p.starts_with('/') {
        return Err("it must start with '/'");
    }
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err("'~' must be followed by '0' or '1'");
        }
    }
    Ok(())
}

/// A request that passed `IterRequest::check`, with its cut fixed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checked {
    /// The part of the requested range this view serves.
    pub range: Partition,
    pub kinds: Kinds,
    pub keys_only: bool,
    pub from: Index,
    pub cut: Index,
    pub projection: Option<String>,
    pub latest_only: bool,
}

impl Checked {
    /// Whether this request covers the item whose prefix (a Disk View key without its
    /// index) is `prefix`: its kind and its partition hash.
    pub(crate) fn wants_item(&self, prefix: &[u8]) -> bool {
        keys::prefix_hash_kind(prefix)
            .is_some_and(|(hash, kind)| self.kinds.allows(kind) && self.range.contains(hash))
    }
}

/// Counters of one iteration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IterStats {
    /// Stored versions the scan passed over.
    pub versions_scanned: u64,
    /// Version frames sent.
    pub frames: u64,
    /// Frame bytes sent, the end frame included.
    pub bytes: u64,
}

/// A running iteration over one Disk View (a dedicated iterator).
pub struct Iteration<'v> {
    view: &'v DiskView,
    it: DBRawIteratorWithThreadMode<'v, DB>,
    req: Checked,
    /// Item prefix of the item under the cursor (reused buffer).
    item: Vec<u8>,
    /// latest-only: the newest wanted version of `item` seen so far.
    pending: Option<(Index, Vec<u8>)>,
    key: ItemKeyState,
    /// A value buffer kept for the next `pending` (latest-only), so it is not reallocated.
    spare: Vec<u8>,
    stats: IterStats,
    done: bool,
    /// One item only, and no end frame: the carousel's riders read an item too large to
    /// share this way (`DiskView::iterate_item`; the iterator's bounds hold the item).
    one_item: bool,
}

impl std::fmt::Debug for Iteration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iteration")
            .field("req", &self.req)
            .field("stats", &self.stats)
            .field("done", &self.done)
            .finish()
    }
}

pub(crate) fn scan_options(range: Partition) -> ReadOptions {
    let mut opts = ReadOptions::default();
    opts.set_iterate_lower_bound(keys::hash_floor(range.lo()));
    if let Some(hi) = keys::hash_ceiling(range.hi()) {
        opts.set_iterate_upper_bound(hi);
    }
    // A one-pass scan must not evict the blocks that serve point reads.
    opts.fill_cache(false);
    opts.set_readahead_size(ITER_READAHEAD_BYTES);
    opts
}

impl DiskView {
    /// Walk every stored entry of `range` with the iteration's read options, touching
    /// each key and value but decoding nothing: the baseline an iteration is measured
    /// against. Returns (entries, key and value bytes).
    pub fn raw_scan(&self, range: Partition) -> Result<(u64, u64), ViewError> {
        let mut it = self.db().raw_iterator_opt(scan_options(range));
        it.seek(keys::hash_floor(range.lo()));
        let (mut entries, mut bytes) = (0u64, 0u64);
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            entries += 1;
            bytes += (k.len() + v.len()) as u64;
            it.next();
        }
        it.status().map_err(crate::disk::db_err(self.dir()))?;
        Ok((entries, bytes))
    }

    /// Start an iteration. Bad requests are refused here, before any frame.
    pub fn iterate(&self, req: &IterRequest) -> Result<Iteration<'_>, IterError> {
        let checked = req.check(self.partition(), self.applied_index())?;
        let mut it = self.db().raw_iterator_opt(scan_options(checked.range));
        it.seek(keys::hash_floor(checked.range.lo()));
        Ok(Iteration::new(self, it, checked, false))
    }

    /// Iterate the one item whose Disk View key prefix is `prefix`, with the filters and
    /// the cut of `checked`, and end after its last version without an end frame (the
    /// iterator's bounds hold just the item). An item the request does not cover (its
    /// range, its kinds) sends nothing.
    pub(crate) fn iterate_item(&self, checked: &Checked, prefix: &[u8]) -> Iteration<'_> {
        let mut opts = scan_options(checked.range);
        // The item's keys are its prefix and an 8-byte index: this bound is above them all
        // and, prefixes being prefix-free, below every later item.
        let mut upper = Vec::with_capacity(prefix.len() + keys::INDEX_BYTES + 1);
        upper.extend_from_slice(prefix);
        upper.extend_from_slice(&[0xFF; keys::INDEX_BYTES + 1]);
        opts.set_iterate_lower_bound(prefix.to_vec());
        opts.set_iterate_upper_bound(upper);
        let mut it = self.db().raw_iterator_opt(opts);
        it.seek(prefix);
        let mut iteration = Iteration::new(self, it, checked.clone(), true);
        iteration.done = !checked.wants_item(prefix);
        iteration
    }
}

impl<'v> Iteration<'v> {
    fn new(
        view: &'v DiskView,
        it: DBRawIteratorWithThreadMode<'v, DB>,
        req: Checked,
        one_item: bool,
    ) -> Self {
        Iteration {
            view,
            it,
            req,
            item: Vec::new(),
            pending: None,
            key: ItemKeyState::default(),
            spare: Vec::new(),
            stats: IterStats::default(),
            done: false,
            one_item,
        }
    }

    /// The cut: the consumer continues by tailing the log from `cut + 1`.
    pub fn cut(&self) -> Index {
        self.req.cut
    }

    /// The checked request (the served range, the fixed cut, the filters).
    pub fn request(&self) -> &Checked {
        &self.req
    }

    pub fn stats(&self) -> IterStats {
        self.stats
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Append whole frames to `out`: about `bytes_max` bytes (the last frame may pass it),
    /// fewer only when the scan ends, in which case the end frame is appended too. Returns
    /// `true` once the end frame is in.
    pub fn fill(&mut self, out: &mut Vec<u8>, bytes_max: usize) -> Result<bool, IterError> {
        self.fill_with::<false>(out, bytes_max, u64::MAX)
    }

    /// `fill`, but return as well once `scan_bytes_max` stored bytes were read in this call,
    /// even with little or nothing appended (a filter that keeps few versions could
    /// otherwise read a whole view, or a whole long history, in one call): a worker thread
    /// that fills for a consumer then notices within that much reading that the consumer
    /// went away.
    pub fn fill_scanning(
        &mut self,
        out: &mut Vec<u8>,
        bytes_max: usize,
        scan_bytes_max: u64,
    ) -> Result<bool, IterError> {
        self.fill_with::<true>(out, bytes_max, scan_bytes_max)
    }

    /// `fill` (without `COUNT`, where the scan bound is never reached: the iteration's hot
    /// loop counts nothing) and `fill_scanning` (with it).
    fn fill_with<const COUNT: bool>(
        &mut self,
        out: &mut Vec<u8>,
        bytes_max: usize,
        scan_bytes_max: u64,
    ) -> Result<bool, IterError> {
        let start_len = out.len();
        let limit = start_len.saturating_add(bytes_max.max(1));
        let mut scanned = 0u64;
        // Each batch is decoded on its own: its first frame carries its key.
        self.key.sent = false;
        while !self.done && out.len() < limit && scanned < scan_bytes_max {
            scanned += self.step::<COUNT>(out)? as u64;
        }
        self.stats.bytes += (out.len() - start_len) as u64;
        Ok(self.done)
    }

    /// Advance by one stored version (or one skip), appending at most two frames. With
    /// `COUNT` (`fill_scanning`), returns the stored bytes it read; without (`fill`, whose
    /// loop is the iteration's hot path), 0, and counts nothing.
    fn step<const COUNT: bool>(&mut self, out: &mut Vec<u8>) -> Result<usize, IterError> {
        let view = self.view;
        let Some(key) = self.it.key() else {
            self.it.status().map_err(crate::disk::db_err(view.dir()))?;
            self.flush_pending(out)?;
            self.finish(out);
            return Ok(0);
        };
        let mut read = if COUNT { key.len() } else { 0 };
        let parts = keys::split_key(key).ok_or_else(|| view.corrupt(format!("bad key {key:?}")))?;
        if !self.req.kinds.allows(parts.kind) {
            let (hash, kind) = (parts.hash, parts.kind);
            self.skip_kind(hash, kind, out)?;
            return Ok(read);
        }
        self.stats.versions_scanned += 1;
        if parts.prefix != self.item.as_slice() {
            if let Some((index, value)) = self.pending.take() {
                let mut frame = FrameOut::new(view, &self.req, &mut self.key, out);
                frame.emit(&self.item, index, &value, &mut self.stats)?;
                self.spare = value;
            }
            self.item.clear();
            self.item.extend_from_slice(parts.prefix);
            self.key.ready = false;
            self.key.sent = false;
        }
        if parts.index >= self.req.from && parts.index <= self.req.cut {
            let value = self.it.value().expect("a valid iterator has a value");
            if COUNT {
                read += value.len();
            }
            if self.req.latest_only {
                let mut buf = match self.pending.take() {
                    Some((_, buf)) => buf,
                    None => std::mem::take(&mut self.spare),
                };
                buf.clear();
                buf.extend_from_slice(value);
                self.pending = Some((parts.index, buf));
            } else {
                let mut frame = FrameOut::new(view, &self.req, &mut self.key, out);
                frame.emit(&self.item, parts.index, value, &mut self.stats)?;
            }
        } else if COUNT {
            // Passed over, but read from storage all the same.
            read += self.it.value().map_or(0, <[u8]>::len);
        }
        self.it.next();
        Ok(read)
    }

    /// Jump past every key of `kind` at `hash` (the kinds filter costs one seek, not a scan).
    fn skip_kind(&mut self, hash: u32, kind: ItemKind, out: &mut Vec<u8>) -> Result<(), IterError> {
        let mut target = hash.to_be_bytes().to_vec();
        if kind == ItemKind::Node {
            target.push(ItemKind::Edge as u8);
        } else if let Some(next) = hash.checked_add(1) {
            target = next.to_be_bytes().to_vec();
        } else {
            self.flush_pending(out)?;
            self.finish(out);
            return Ok(());
        }
        self.it.seek(target);
        Ok(())
    }

    fn flush_pending(&mut self, out: &mut Vec<u8>) -> Result<(), IterError> {
        if let Some((index, value)) = self.pending.take() {
            let mut frame = FrameOut::new(self.view, &self.req, &mut self.key, out);
            frame.emit(&self.item, index, &value, &mut self.stats)?;
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.done = true;
        if self.one_item {
            return;
        }
        frame::encode_end(
            out,
            &EndFrame {
                cut: self.req.cut,
                range: self.req.range,
                frames: self.stats.frames,
            },
        );
    }
}

/// The item under the cursor's key, as frames carry it.
#[derive(Debug, Default)]
struct ItemKeyState {
    /// The core encoding of the item (made once per item, when first sent).
    buf: Vec<u8>,
    /// `buf` holds the current item's key.
    ready: bool,
    /// The last version frame in the buffer being filled is of the current item, so the
    /// next one is a same-item frame (no key).
    sent: bool,
}

/// Encodes version frames for one iteration's filters.
struct FrameOut<'a> {
    view: &'a DiskView,
    req: &'a Checked,
    key: &'a mut ItemKeyState,
    out: &'a mut Vec<u8>,
}

impl<'a> FrameOut<'a> {
    fn new(
        view: &'a DiskView,
        req: &'a Checked,
        key: &'a mut ItemKeyState,
        out: &'a mut Vec<u8>,
    ) -> Self {
        FrameOut {
            view,
            req,
            key,
            out,
        }
    }

    /// Append the version frame of `item` (an item prefix) at `index` whose stored value
    /// bytes are `stored`.
    fn emit(
        &mut self,
        item: &[u8],
        index: Index,
        stored: &[u8],
        stats: &mut IterStats,
    ) -> Result<(), IterError> {
        let value = keys::split_value(stored)
            .ok_or_else(|| self.view.corrupt(format!("bad value tag at {index}")))?;
        let key = &mut *self.key;
        if !key.ready {
            key.buf.clear();
            keys::transcode_item(item, &mut key.buf)
                .ok_or_else(|| self.view.corrupt(format!("bad key {item:?}")))?;
            key.ready = true;
        }
        let projected;
        let (flags, body): (u8, Option<&[u8]>) = match value {
            None => (FLAG_TOMBSTONE, None),
            Some(_) if self.req.keys_only => (0, None),
            Some(json) => match &self.req.projection {
                None => (FLAG_VALUE, Some(json)),
                Some(pointer) => {
                    projected = project(json, pointer)
                        .map_err(|e| self.view.corrupt(format!("value at {index}: {e}")))?;
                    match &projected {
                        Some(p) => (FLAG_PROJECTED | FLAG_VALUE, Some(p.as_bytes())),
                        None => (FLAG_PROJECTED, None),
                    }
                }
            },
        };
        if key.sent {
            frame::encode_same_item_version(self.out, flags, index, body);
        } else {
            frame::encode_version(self.out, flags, index, &key.buf, body);
            key.sent = true;
        }
        stats.frames += 1;
        Ok(())
    }
}

/// The JSON text of the property at `pointer`, or `None` if the object lacks it.
pub(crate) fn project(json: &[u8], pointer: &str) -> Result<Option<String>, serde_json::Error> {
    let value: serde_json::Value = serde_json::from_slice(json)?;
    value
        .pointer(pointer)
        .map(serde_json::to_string)
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> IterRequest {
        IterRequest::range(Partition::ALL)
    }

    #[test]
    fn defaults_cut_at_applied_and_serve_the_overlap() {
        let view = Partition::nth(1, 4);
        let checked = req().check(view, Index::new(40)).unwrap();
        assert_eq!(checked.cut, Index::new(40));
        assert_eq!(checked.range, view);
        assert_eq!(checked.from, Index::FIRST);
        let six = Partition::nth(2, 6);
        let r = IterRequest::range(six).check(view, Index::new(40)).unwrap();
        assert_eq!(r.range, six.intersect(view).unwrap());
    }

    #[test]
    fn an_empty_view_serves_an_empty_iteration() {
        assert_eq!(
            req().check(Partition::ALL, Index::ZERO).unwrap().cut,
            Index::ZERO
        );
    }

    #[test]
    fn bad_requests_are_refused_with_what_is_wrong() {
        let view = Partition::nth(0, 2);
        let applied = Index::new(10);
        let refuse = |r: IterRequest| r.check(view, applied).unwrap_err();
        let mut r = req();
        r.range_lo = 5;
        r.range_hi = 5;
        assert!(matches!(refuse(r), IterError::EmptyRange { lo: 5, hi: 5 }));
        let r = IterRequest::range(Partition::nth(3, 4));
        assert!(matches!(refuse(r), IterError::RangeOutsideView { .. }));
        let mut r = req();
        r.kinds = Kinds {
            nodes: false,
            edges: false,
        };
        assert!(matches!(refuse(r), IterError::NoKinds));
        let mut r = req();
        r.from = Index::new(8);
        r.to = Some(Index::new(7));
        assert!(matches!(refuse(r), IterError::FromAboveTo { .. }));
        let mut r = req();
        r.to = Some(Index::new(11));
        let e = refuse(r);
        assert!(matches!(e, IterError::CutAboveApplied { .. }));
        assert!(e.to_string().contains("applied index 10"), "{e}");
        for bad in ["", "name", "/a~2", "/a~"] {
            let mut r = req();
            r.projection = Some(bad.into());
            assert!(
                matches!(refuse(r), IterError::BadProjection { .. }),
                "{bad:?} accepted"
            );
        }
        let mut r = req();
        r.projection = Some("/name".into());
        r.keys_only = true;
        assert!(matches!(refuse(r), IterError::ProjectionWithKeysOnly));
    }

    #[test]
    fn pointers_follow_rfc_6901() {
        for good in ["/a", "/a/b", "/a~0b", "/a~1b", "/", "/0"] {
            assert!(check_pointer(good).is_ok(), "{good:?}");
        }
        assert_eq!(
            project(br#"{"a":{"b":[1,2]},"c":"x"}"#, "/a/b").unwrap(),
            Some("[1,2]".into())
        );
        assert_eq!(
            project(br#"{"c":"x"}"#, "/c").unwrap(),
            Some("\"x\"".into())
        );
        assert_eq!(project(br#"{"c":"x"}"#, "/d").unwrap(), None);
    }
}
