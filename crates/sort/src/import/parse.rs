//! Reading import input: JSON lines, each one write in the shape of a transaction's `writes`
//! in the HTTP API (docs/api.md): `{"item": {...}, "value": {...}}` or
//! `{"item": {...}, "delete": true}`. The checks are the API's: an item key that validates, a
//! value that is a JSON object (kept as the exact text of the line, never re-serialised), not
//! both a value and `delete`, no other field, and a record within the size bound. Blank lines
//! are skipped, as `spindle load` skips them.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::value::RawValue;
use spindle_core::{ItemKey, Transaction, Value};

use super::ImportError;

/// Longest input line read, in bytes: the largest record plus room for JSON escapes and the
/// item. A longer line is a bad line, not a reason to buffer without bound.
pub const LINE_BYTES_MAX: usize = 4 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteLine<'a> {
    item: ItemKey,
    #[serde(default, borrow)]
    value: Option<&'a RawValue>,
    #[serde(default)]
    delete: bool,
}

/// One write parsed from a line, or why the line is not one.
pub fn parse_line(line: &[u8]) -> Result<(ItemKey, Value), String> {
    let text = std::str::from_utf8(line)
        .map_err(|e| format!("not UTF-8 (at byte {})", e.valid_up_to()))?;
    let w: WriteLine<'_> = serde_json::from_str(text).map_err(|e| format!("not a write: {e}"))?;
    w.item.validate().map_err(|e| e.to_string())?;
    let value = match (w.value, w.delete) {
        (Some(_), true) => return Err("has both a value and delete: true".to_owned()),
        (None, false) => return Err("needs a value (a JSON object) or delete: true".to_owned()),
        (None, true) => Value::TOMBSTONE,
        (Some(v), false) => {
            if !v.get().starts_with('{') {
                return Err("value must be a JSON object".to_owned());
            }
            Value::json(v.get()).map_err(|e| e.to_string())?
        }
    };
    // The record bound, exactly as the log checks it.
    Transaction::single(w.item.clone(), value.clone())
        .validate()
        .map_err(|e| e.to_string())?;
    Ok((w.item, value))
}

/// Reads the writes of one input file in order, naming the file and line of a bad one.
#[derive(Debug)]
pub struct LineReader<R> {
    path: PathBuf,
    input: R,
    line_no: u64,
    buf: Vec<u8>,
    /// Bytes read so far (for progress).
    pub bytes: u64,
}

/// What the next line held.
#[derive(Debug)]
pub enum Line {
    Write(ItemKey, Value),
    /// A bad line (only when the caller skips bad lines; otherwise it is an error).
    Bad(ImportError),
}

impl<R: BufRead> LineReader<R> {
    pub fn new(path: &Path, input: R) -> Self {
        LineReader {
            path: path.to_path_buf(),
            input,
            line_no: 0,
            buf: Vec::new(),
            bytes: 0,
        }
    }

    /// The next write, `Line::Bad` for a bad line, `None` at the end of the file. An I/O
    /// error is an error.
    pub fn next_line(&mut self) -> Result<Option<Line>, ImportError> {
        loop {
            self.buf.clear();
            let n = <&mut R as std::io::Read>::take(&mut self.input, LINE_BYTES_MAX as u64 + 1)
                .read_until(b'\n', &mut self.buf)
                .map_err(|source| ImportError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            if n == 0 {
                return Ok(None);
            }
            self.bytes += n as u64;
            self.line_no += 1;
            if self.buf.len() > LINE_BYTES_MAX && self.buf.last() != Some(&b'\n') {
                // Skip the rest of the over-long line.
                let mut rest = 0u64;
                loop {
                    let chunk = self.input.fill_buf().map_err(|source| ImportError::Io {
                        path: self.path.clone(),
                        source,
                    })?;
                    if chunk.is_empty() {
                        break;
                    }
                    match chunk.iter().position(|&b| b == b'\n') {
                        Some(at) => {
                            self.input.consume(at + 1);
                            rest += at as u64 + 1;
                            break;
                        }
                        None => {
                            let len = chunk.len();
                            self.input.consume(len);
                            rest += len as u64;
                        }
                    }
                }
                self.bytes += rest;
                return Ok(Some(Line::Bad(
                    self.bad(format!("longer than {LINE_BYTES_MAX} bytes")),
                )));
            }
            let line = self.buf.trim_ascii();
            if line.is_empty() {
                continue;
            }
            return Ok(Some(match parse_line(line) {
                Ok((key, value)) => Line::Write(key, value),
                Err(reason) => Line::Bad(self.bad(reason)),
            }));
        }
    }

    fn bad(&self, reason: String) -> ImportError {
        ImportError::BadLine {
            file: self.path.clone(),
            line: self.line_no,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_deletes_parse_and_bad_lines_say_why() {
        let (k, v) = parse_line(br#"{"item":{"kind":"node","id":"a"},"value":{"x": 1}}"#).unwrap();
        assert_eq!(k, ItemKey::node("a").unwrap());
        assert_eq!(v.as_json(), Some(r#"{"x": 1}"#), "the value's text is kept");
        let (_, v) = parse_line(
            br#"{"item":{"kind":"edge","from":"a","label":"l","to":"b"},"delete":true}"#,
        )
        .unwrap();
        assert!(v.is_tombstone());
        for (line, why) in [
            (
                &br#"{"item":{"kind":"node","id":"a"}}"#[..],
                "needs a value",
            ),
            (
                br#"{"item":{"kind":"node","id":"a"},"value":[1]}"#,
                "JSON object",
            ),
            (br#"{"item":{"kind":"node","id":""},"value":{}}"#, "empty"),
            (
                br#"{"item":{"kind":"node","id":"a"},"value":{},"x":1}"#,
                "unknown field",
            ),
            (
                br#"{"item":{"kind":"node","id":"a"},"value":{},"delete":true}"#,
                "both",
            ),
            (b"{not json", "not a write"),
            (b"\xff", "UTF-8"),
        ] {
            let err = parse_line(line).unwrap_err();
            assert!(err.contains(why), "{err} lacks {why}");
        }
    }

    #[test]
    fn the_reader_names_the_line_and_skips_blank_ones() {
        let input = b"\n{\"item\":{\"kind\":\"node\",\"id\":\"a\"},\"delete\":true}\n\nnope\n";
        let mut r = LineReader::new(Path::new("in.jsonl"), &input[..]);
        assert!(matches!(r.next_line().unwrap(), Some(Line::Write(..))));
        match r.next_line().unwrap() {
            Some(Line::Bad(ImportError::BadLine { file, line, .. })) => {
                assert_eq!((file.as_path(), line), (Path::new("in.jsonl"), 4));
            }
            other => panic!("{other:?}"),
        }
        assert!(r.next_line().unwrap().is_none());
        assert_eq!(r.bytes, input.len() as u64);
    }
}
