//! Log records and their payload codec.
//!
//! A record is one write to one item. Its payload (what a log frame carries after its own
//! header) is:
//!
//! ```text
//! flags u8        bit 0: commit (last record of its transaction); bit 1: tombstone;
//!                 other bits zero
//! key             ItemKey encoding (see item.rs)
//! value_len u32 LE, value bytes (UTF-8 JSON object)    -- absent for a tombstone
//! ```

use crate::index::Index;
use crate::item::ItemKey;
use crate::value::Value;

/// Flag bits of a record payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordFlags;

impl RecordFlags {
    pub const COMMIT: u8 = 1;
    pub const TOMBSTONE: u8 = 2;
    pub const KNOWN: u8 = Self::COMMIT | Self::TOMBSTONE;
}

/// One decoded log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub index: Index,
    /// True on the last record of a transaction; its index is the commit index.
    pub commit: bool,
    pub key: ItemKey,
    pub value: Value,
}

/// Bytes `encode_payload` writes for this key and value.
pub fn encoded_payload_len(key: &ItemKey, value: &Value) -> usize {
    let value_len = value.as_json().map_or(0, |s| 4 + s.len());
    1 + key.encoded_len() + value_len
}

/// Append a record payload. Returns the byte range of the key encoding within `out`.
pub fn encode_payload(
    commit: bool,
    key: &ItemKey,
    value: &Value,
    out: &mut Vec<u8>,
) -> std::ops::Range<usize> {
    let mut flags = 0;
    if commit {
        flags |= RecordFlags::COMMIT;
    }
    if value.is_tombstone() {
        flags |= RecordFlags::TOMBSTONE;
    }
    out.push(flags);
    let key_start = out.len();
    key.encode(out);
    let key_end = out.len();
    if let Some(s) = value.as_json() {
        let len = u32::try_from(s.len()).expect("validated value fits u32");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    key_start..key_end
}

/// Why a payload did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadError {
    UnknownFlags,
    BadKey,
    BadValue,
    TrailingBytes,
}

/// Decode a payload into a record at `index`.
pub fn decode_payload(index: Index, payload: &[u8]) -> Result<Record, PayloadError> {
    let flags = *payload.first().ok_or(PayloadError::BadKey)?;
    if flags & !RecordFlags::KNOWN != 0 {
        return Err(PayloadError::UnknownFlags);
    }
    let (key, used) = ItemKey::decode(&payload[1..]).ok_or(PayloadError::BadKey)?;
    let rest = &payload[1 + used..];
    let value = if flags & RecordFlags::TOMBSTONE != 0 {
        if !rest.is_empty() {
            return Err(PayloadError::TrailingBytes);
        }
        Value::TOMBSTONE
    } else {
        let len_bytes = rest.get(..4).ok_or(PayloadError::BadValue)?;
        let len = u32::from_le_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
        let body = rest.get(4..4 + len).ok_or(PayloadError::BadValue)?;
        if rest.len() != 4 + len {
            return Err(PayloadError::TrailingBytes);
        }
        let text = std::str::from_utf8(body).map_err(|_| PayloadError::BadValue)?;
        Value::trusted_json(text.to_owned())
    };
    Ok(Record {
        index,
        commit: flags & RecordFlags::COMMIT != 0,
        key,
        value,
    })
}

/// The key-encoding bytes of a payload (for version-table lookups without decoding).
pub fn payload_key(payload: &[u8]) -> Option<&[u8]> {
    let (_, used) = ItemKey::decode(payload.get(1..)?)?;
    Some(&payload[1..1 + used])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_round_trip() {
        let key = ItemKey::edge("a", "knows", "b").unwrap();
        for (commit, value) in [
            (true, Value::json("{\"w\":1}").unwrap()),
            (false, Value::TOMBSTONE),
        ] {
            let mut out = Vec::new();
            let key_range = encode_payload(commit, &key, &value, &mut out);
            assert_eq!(out.len(), encoded_payload_len(&key, &value));
            assert_eq!(&out[key_range], key.to_bytes().as_slice());
            let rec = decode_payload(Index::new(9), &out).unwrap();
            assert_eq!(
                rec,
                Record {
                    index: Index::new(9),
                    commit,
                    key: key.clone(),
                    value
                }
            );
        }
    }

    #[test]
    fn damaged_payloads_do_not_decode() {
        let key = ItemKey::node("n").unwrap();
        let mut out = Vec::new();
        encode_payload(true, &key, &Value::json("{}").unwrap(), &mut out);
        for cut in 0..out.len() {
            assert!(decode_payload(Index::FIRST, &out[..cut]).is_err());
        }
        let mut bad_flags = out.clone();
        bad_flags[0] = 0x80;
        assert_eq!(
            decode_payload(Index::FIRST, &bad_flags),
            Err(PayloadError::UnknownFlags)
        );
        let mut trailing = out;
        trailing.push(0);
        assert_eq!(
            decode_payload(Index::FIRST, &trailing),
            Err(PayloadError::TrailingBytes)
        );
    }
}
