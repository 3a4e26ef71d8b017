//! `Index`: a position in the log. Record indexes start at 1 and are dense; 0 means
//! "nothing" (an empty log's last index, or an item that does not exist).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A log index (Lsn-style newtype). Also an item's version: the index of the record that
/// wrote it. `Index::ZERO` is "absent / before the first record".
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct Index(u64);

impl Index {
    pub const ZERO: Index = Index(0);
    pub const FIRST: Index = Index(1);
    pub const MAX: Index = Index(u64::MAX);

    #[inline]
    pub const fn new(raw: u64) -> Self {
        Index(raw)
    }

    #[inline]
    pub const fn get(self) -> u64 {
        self.0
    }

    #[inline]
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// The index after this one. Panics on overflow: 2^64 records is a broken invariant.
    #[inline]
    pub fn next(self) -> Self {
        Index(self.0.checked_add(1).expect("log index overflow"))
    }

    /// The index `n` records later.
    #[inline]
    pub fn plus(self, n: u64) -> Self {
        Index(self.0.checked_add(n).expect("log index overflow"))
    }

    /// The index before this one, saturating at zero.
    #[inline]
    pub fn prev(self) -> Self {
        Index(self.0.saturating_sub(1))
    }
}

impl fmt::Display for Index {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<Index> for u64 {
    #[inline]
    fn from(i: Index) -> u64 {
        i.0
    }
}
