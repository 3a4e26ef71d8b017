//! Chunk ids: the BLAKE3 hash of a chunk's bytes, shown as 64 lowercase hex digits.

use std::fmt;
use std::str::FromStr;

/// The id of a chunk: BLAKE3 of its bytes. Two chunks with the same bytes have the same id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId([u8; 32]);

impl ChunkId {
    /// Length of an id in bytes.
    pub const LEN: usize = 32;

    /// The id of `data`.
    pub fn of(data: &[u8]) -> Self {
        Self(*blake3::hash(data).as_bytes())
    }

    /// An id from its raw bytes (for example, read back from a file).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The raw bytes of the id.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        s
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Display for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ChunkId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChunkId({})", self.to_hex())
    }
}

/// A string that is not 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a chunk id is 64 hex digits, got {got:?}")]
pub struct ParseChunkIdError {
    got: String,
}

impl FromStr for ChunkId {
    type Err = ParseChunkIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseChunkIdError {
            got: s.chars().take(80).collect(),
        };
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return Err(err());
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            let hi = hex_digit(pair[0]).ok_or_else(err)?;
            let lo = hex_digit(pair[1]).ok_or_else(err)?;
            out[i] = (hi << 4) | lo;
        }
        Ok(Self(out))
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_blake3_of_bytes() {
        let id = ChunkId::of(b"");
        assert_eq!(
            id.to_hex(),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
    }

    #[test]
    fn hex_round_trips() {
        let id = ChunkId::of(b"spindle");
        assert_eq!(id.to_hex().parse::<ChunkId>().unwrap(), id);
        assert_eq!(id.to_hex().to_uppercase().parse::<ChunkId>().unwrap(), id);
    }

    #[test]
    fn bad_hex_is_rejected() {
        assert!("abc".parse::<ChunkId>().is_err());
        assert!("g".repeat(64).parse::<ChunkId>().is_err());
    }
}
