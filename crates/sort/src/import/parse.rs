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
use spindle_core::record::encoded_payload_len;
use spindle_core::{InputError, ItemKey, Value, RECORD_BYTES_MAX};

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
    // The record bound, as the log checks it (`Transaction::validate`).
    let len = encoded_payload_len(&w.item, &value);
    if len > RECORD_BYTES_MAX {
        return Err(InputError::RecordTooLarge {
            item: w.item.to_string(),
            len,
            max: RECORD_BYTES_MAX,
        }
        .to_string());
    }
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

/// Lines read but not parsed yet, for a parser thread.
#[derive(Debug)]
pub struct Chunk {
    pub file: PathBuf,
    pub text: Vec<u8>,
    /// Each line's number and its bytes in `text` (`None`: over `LINE_BYTES_MAX`).
    pub lines: Vec<(u64, Option<std::ops::Range<usize>>)>,
    /// The file's bytes read once this chunk was read.
    pub bytes_end: u64,
}

impl Chunk {
    /// Parse every line, in order.
    pub fn parse(&self) -> Vec<Line> {
        self.lines
            .iter()
            .map(|(line, range)| {
                let parsed = match range {
                    Some(r) => parse_line(&self.text[r.clone()]),
                    None => Err(too_long()),
                };
                match parsed {
                    Ok((key, value)) => Line::Write(key, value),
                    Err(reason) => Line::Bad(ImportError::BadLine {
                        file: self.file.clone(),
                        line: *line,
                        reason,
                    }),
                }
            })
            .collect()
    }
}

fn too_long() -> String {
    format!("longer than {LINE_BYTES_MAX} bytes")
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
        Ok(match self.next_raw()? {
            None => None,
            Some(None) => Some(Line::Bad(self.bad(too_long()))),
            Some(Some(())) => Some(match parse_line(self.buf.trim_ascii()) {
                Ok((key, value)) => Line::Write(key, value),
                Err(reason) => Line::Bad(self.bad(reason)),
            }),
        })
    }

    /// Read the next non-blank line into the buffer without parsing it: `Some(Some(()))`,
    /// `Some(None)` for a line over `LINE_BYTES_MAX` (skipped), `None` at the end.
    fn next_raw(&mut self) -> Result<Option<Option<()>>, ImportError> {
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
                self.skip_rest_of_line()?;
                return Ok(Some(None));
            }
            if !self.buf.trim_ascii().is_empty() {
                return Ok(Some(Some(())));
            }
        }
    }

    fn skip_rest_of_line(&mut self) -> Result<(), ImportError> {
        loop {
            let chunk = self.input.fill_buf().map_err(|source| ImportError::Io {
                path: self.path.clone(),
                source,
            })?;
            if chunk.is_empty() {
                return Ok(());
            }
            match chunk.iter().position(|&b| b == b'\n') {
                Some(at) => {
                    self.input.consume(at + 1);
                    self.bytes += at as u64 + 1;
                    return Ok(());
                }
                None => {
                    let len = chunk.len();
                    self.input.consume(len);
                    self.bytes += len as u64;
                }
            }
        }
    }

    /// Read up to about `bytes_max` of lines into a chunk for a parser thread; `None` at
    /// the end of the file. The chunk's text goes into `text` (emptied first): a buffer
    /// an earlier chunk gave back, so its pages are not faulted in again.
    pub fn next_chunk(
        &mut self,
        bytes_max: usize,
        mut text: Vec<u8>,
    ) -> Result<Option<Chunk>, ImportError> {
        text.clear();
        text.reserve(bytes_max + 4096);
        let mut chunk = Chunk {
            file: self.path.clone(),
            text,
            lines: Vec::new(),
            bytes_end: 0,
        };
        while chunk.text.len() < bytes_max {
            match self.next_raw()? {
                None => break,
                Some(None) => chunk.lines.push((self.line_no, None)),
                Some(Some(())) => {
                    let start = chunk.text.len();
                    chunk.text.extend_from_slice(self.buf.trim_ascii());
                    chunk
                        .lines
                        .push((self.line_no, Some(start..chunk.text.len())));
                }
            }
        }
        chunk.bytes_end = self.bytes;
        Ok((!chunk.lines.is_empty()).then_some(chunk))
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

        let mut r = LineReader::new(Path::new("in.jsonl"), &input[..]);
        let chunk = r.next_chunk(1 << 20, Vec::new()).unwrap().unwrap();
        let lines = chunk.parse();
        assert!(matches!(lines[0], Line::Write(..)));
        assert!(matches!(
            lines[1],
            Line::Bad(ImportError::BadLine { line: 4, .. })
        ));
        assert_eq!((lines.len(), chunk.bytes_end), (2, input.len() as u64));
        assert!(r.next_chunk(1 << 20, Vec::new()).unwrap().is_none());
    }
}
