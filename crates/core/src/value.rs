//! Item values: a JSON object of properties, or a tombstone (the item was deleted).
//!
//! The JSON text is kept exactly as the client sent it (validated, never re-serialised), so
//! the bytes a reader gets back are the bytes that were written. Validation accepts exactly
//! the objects `serde_json::Value` parses, so every reader that parses a stored value (index
//! views, projections) succeeds.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::InputError;

/// One version's value: a JSON object, or a tombstone (the item was deleted at this
/// version). Opaque, so that every object value went through validation.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Value(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// A JSON object, as UTF-8 text.
    Object(String),
    Tombstone,
}

impl Value {
    /// The deletion marker.
    pub const TOMBSTONE: Value = Value(Repr::Tombstone);

    /// A value decoded from a checksummed record: validated when it was written.
    pub(crate) fn trusted_json(text: String) -> Self {
        Value(Repr::Object(text))
    }

    /// A JSON object value. Anything that is not one JSON object (an array, a number, bad
    /// syntax, trailing garbage) is refused.
    pub fn json(text: impl Into<String>) -> Result<Self, InputError> {
        let text = text.into();
        check_json_object(&text)?;
        Ok(Value(Repr::Object(text)))
    }

    /// A JSON object value from bytes, which must be UTF-8.
    pub fn json_bytes(bytes: &[u8]) -> Result<Self, InputError> {
        let text = std::str::from_utf8(bytes).map_err(|e| InputError::NotUtf8 {
            field: "value",
            offset: e.valid_up_to(),
        })?;
        Value::json(text)
    }

    /// The JSON text, or `None` for a tombstone.
    pub fn as_json(&self) -> Option<&str> {
        match &self.0 {
            Repr::Object(s) => Some(s),
            Repr::Tombstone => None,
        }
    }

    pub fn is_tombstone(&self) -> bool {
        matches!(self.0, Repr::Tombstone)
    }

    /// Bytes of the encoded value body (0 for a tombstone).
    pub fn encoded_len(&self) -> usize {
        self.as_json().map_or(0, str::len)
    }
}

fn check_json_object(text: &str) -> Result<(), InputError> {
    let first = text.trim_start().as_bytes().first().copied();
    if first != Some(b'{') {
        return Err(InputError::NotJsonObject {
            reason: "it does not start with '{'".to_owned(),
        });
    }
    // A well-formed JSON document that starts with '{' is exactly one object.
    serde_json::from_str::<Checked>(text)
        .map(|_| ())
        .map_err(|e| InputError::NotJsonObject {
            reason: e.to_string(),
        })
}

/// Any JSON value, checked as `serde_json::Value` would parse it but without building it:
/// numbers are parsed (a float out of range such as `1e400` is refused) and strings decoded
/// (a lone surrogate escape such as `"\ud800"` is refused). Integers beyond 64 bits parse
/// (as floats) and are accepted; the text keeps their digits.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_entry::<Checked, Checked>()?.is_some() {}
        Ok(Checked)
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Object(s) => write!(f, "Object({s})"),
            Repr::Tombstone => write!(f, "Tombstone"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_accepted_as_given() {
        let v = Value::json(r#" {"Type":"ItemCreated","ItemId":"1324"}"#).unwrap();
        assert_eq!(
            v.as_json(),
            Some(r#" {"Type":"ItemCreated","ItemId":"1324"}"#)
        );
        assert!(Value::json("{}").is_ok());
    }

    /// Everything `serde_json::Value` parses is accepted, text unchanged.
    #[test]
    fn what_serde_json_parses_is_accepted_verbatim() {
        for good in [
            r#"{"big":123456789012345678901234567890,"neg":-123456789012345678901234567890}"#,
            r#"{"e":1E+2,"f":-0.0,"s":"\ud83d\ude00\u00e9","dup":1,"dup":2}"#,
            r#"{ "nested" : [ { } , [ ] , null , true ] }"#,
        ] {
            assert!(serde_json::from_str::<serde_json::Value>(good).is_ok());
            assert_eq!(Value::json(good).unwrap().as_json(), Some(good));
        }
    }

    #[test]
    fn non_objects_are_refused() {
        for bad in [
            "",
            "[]",
            "1",
            "\"s\"",
            "null",
            "{",
            "{\"a\":}",
            "{} {}",
            "{}x",
            r#"{"f":1e400}"#,
            r#"{"s":"\ud800"}"#,
            r#"{"s":"\ud800\u0041"}"#,
        ] {
            assert!(
                matches!(Value::json(bad), Err(InputError::NotJsonObject { .. })),
                "{bad:?} was accepted"
            );
        }
        assert!(matches!(
            Value::json_bytes(b"{\"a\":\"\xff\"}"),
            Err(InputError::NotUtf8 { .. })
        ));
    }
}
