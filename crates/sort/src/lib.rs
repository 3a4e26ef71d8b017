//! External sort for Spindle: two reads and two writes per record (TritonSort).
//!
//! Input that fits in the memory budget is sorted in memory and never touches disk. Larger
//! input is read once and written once into temporary bucket files by key range (splitters
//! from a sample, so skewed keys still give buckets that fit), then each bucket is read once,
//! sorted in memory and streamed out. A bucket that does not fit is split again; nothing is
//! ever sorted with unbounded memory. Temporary files live in a private directory that is
//! removed on drop and on error.
//!
//! - [`cleanup`]: temporary files removed when a signal stops the process.
//! - [`entries`]: variable-length `(key, value)` entries, for bulk loads.
//! - [`import`]: `spindle import`, the offline bulk load of a new data directory.
//! - [`records`]: the Sort Benchmark's 100-byte records (`spindle sort`), its checker
//!   and generator.
//!
//! See `docs/sort.md` for the bucket file format, the passes and the memory budget.

#![forbid(unsafe_code)]

pub mod cleanup;
pub mod entries;
mod error;
pub mod import;

pub use error::SortError;
pub mod records;

/// Parses a byte count: a number with an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, K, M, G).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("not a byte count: {text:?}"))?;
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use KiB, MiB, GiB)"
            ))
        }
    };
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("256MiB"), Ok(256 << 20));
        assert_eq!(parse_bytes("4GiB"), Ok(4 << 30));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("2gb"), Ok(2_000_000_000));
        assert!(parse_bytes("12 parsecs").is_err());
        assert!(parse_bytes("MiB").is_err());
    }
}
