//! Item values: a JSON object of properties, or a tombstone (the item was deleted).
//!
//! The JSON text is kept exactly as the client sent it (validated, never re-serialised), so
//! the bytes a reader gets back are the bytes that were written.

use std::fmt;

use serde::de::IgnoredAny;

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
    serde_json::from_str::<IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| InputError::NotJsonObject {
            reason: e.to_string(),
        })
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

    #[test]
    fn non_objects_are_refused() {
        for bad in [
            "", "[]", "1", "\"s\"", "null", "{", "{\"a\":}", "{} {}", "{}x",
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
