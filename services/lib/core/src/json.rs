//! JSON reading and writing beyond serde_json's defaults.
//!
//! **Strict reading** for bodies that more than one parser reads.
//!
//! RFC 8259 leaves an object with a repeated name to the parser: serde's
//! `Value` keeps the last one, serde's derived structs reject it, and an
//! untagged enum then falls through to another variant. When two parsers
//! read one request body (the gateway's own look at an MCP message, then
//! rmcp), a repeated `name` or `method` could make them disagree about which
//! tool is called. [`from_slice`] removes that class of bug at the door: it
//! parses like `serde_json::from_slice::<Value>` in one pass, but refuses
//! an object that repeats a name (RFC 7493, I-JSON, makes this a MUST).
//!
//! **Short numbers.** serde_json's value serializer widens an `f32` to the
//! `f64` nearest it, so an importance of 0.6 reaches clients as
//! 0.6000000238418579, while its text serializer writes the `f32`'s
//! shortest form. [`to_value`] and [`shortest`] give values that print as
//! the `f32` does.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

/// Parses `bytes` as JSON, refusing any object with a repeated name.
pub fn from_slice(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<Strict>(bytes).map(|strict| strict.0)
}

/// `value` as a JSON value whose numbers print as they do in text
/// (`f32` fields in their shortest form).
pub fn to_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, serde_json::Error> {
    serde_json::to_vec(value).and_then(|bytes| serde_json::from_slice(&bytes))
}

/// The `f64` that prints as `value` does, for an `f32` placed in `json!`.
pub fn shortest(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(f64::from(value))
}

struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON without repeated object names")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Value, E> {
        // JSON text has no NaN or infinity; serde_json maps them to null too.
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            if object.contains_key(&name) {
                return Err(de::Error::custom(format_args!(
                    "the name {name:?} appears twice in one object"
                )));
            }
            let Strict(value) = map.next_value()?;
            object.insert(name, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn f32_values_keep_their_short_form() {
        #[derive(Serialize)]
        struct Memory {
            importance: f32,
            weights: Vec<Option<f32>>,
            score: f64,
        }
        let memory = Memory {
            importance: 0.6,
            weights: vec![Some(0.7), None],
            score: 0.925,
        };
        assert_ne!(
            serde_json::to_value(&memory).unwrap()["importance"],
            json!(0.6)
        );
        assert_eq!(
            to_value(&memory).unwrap(),
            json!({"importance": 0.6, "weights": [0.7, null], "score": 0.925})
        );
        assert_eq!(json!(shortest(0.6)), json!(0.6));
        assert_eq!(shortest(f32::MAX), 3.4028235e38);
        assert!(shortest(f32::NAN).is_nan());
    }

    #[test]
    fn reads_what_serde_json_reads() {
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"recall","arguments":{"k":[1,-2,3.5,true,null,"x"]}}}"#,
            "[]",
            "{}",
            "-0.0",
            "18446744073709551615",
            r#""\u00e9\ud83d\ude00""#,
            r#"[{"a":{"a":{"a":1}}},{"a":2}]"#,
        ] {
            let lenient: Value = serde_json::from_str(text).expect("valid JSON");
            assert_eq!(
                from_slice(text.as_bytes()).expect("strict"),
                lenient,
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_a_repeated_name_at_any_depth_and_what_serde_json_refuses() {
        for text in [
            r#"{"method":"tools/call","method":"ping"}"#,
            r#"{"params":{"name":"forget","arguments":{},"name":"recall"}}"#,
            r#"[1,{"a":[{"b":1,"b":2}]}]"#,
            r#"{"a":1,"a":1}"#,
        ] {
            let error = from_slice(text.as_bytes()).unwrap_err();
            assert!(
                error.to_string().contains("appears twice"),
                "{text}: {error}"
            );
        }
        for text in ["", "{", r#"{"a":1,}"#, "nul", "[1] x"] {
            assert!(from_slice(text.as_bytes()).is_err(), "{text}");
        }
        // Escapes that spell the same name are the same name.
        assert!(from_slice(br#"{"a":1,"\u0061":2}"#).is_err());
        assert_eq!(
            from_slice(br#"{"a":1,"A":2}"#).expect("distinct"),
            json!({"a": 1, "A": 2})
        );
    }
}
