//! JSON-RPC message parsing: an MCP request body as the gateway receives it.
//!
//! The gateway first reads the body as a `serde_json::Value` with
//! `mneme_core::json::from_slice` (its `peek` middleware,
//! `services/gateway/src/jsonrpc.rs`) and then hands it to rmcp,
//! the parser of record, as a `ClientJsonRpcMessage` (Streamable HTTP and
//! `/sse`, `services/gateway/src/sse.rs`). Upstream MCP servers' answers are
//! parsed as `ServerJsonRpcMessage` by the proxy.
//!
//! Properties: no panic on any bytes; an accepted message serialises, and
//! its serialisation parses back to a message that serialises identically,
//! except for the last bits of floats: without its `float_roundtrip`
//! feature (not enabled in mneme), serde_json parses long decimal mantissas
//! approximately, so `1000…0.0` may come back one ulp away; and except for
//! inputs with a repeated object key. RFC 8259 leaves what such an object
//! means to the parser: serde's typed structs reject it while `Value` keeps
//! the last one, so rmcp's untagged result enum reads
//! `{"content": …, "content": …, "x": 1}` as a custom result keeping `x`,
//! and its (deduplicated) serialisation as a `CallToolResult` without it.
//! The gateway refuses such request bodies before rmcp sees them
//! (`mneme_core::json::from_slice`, also under test here: it must read
//! exactly what serde_json reads, minus repeated names); an upstream's
//! answer is read by rmcp alone, so no second reading can disagree with it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Parses `data` as `M`; when it parses, checks that the value is stable
/// under serialise → parse → serialise.
fn round_trip<M: DeserializeOwned + Serialize>(data: &[u8], what: &str) {
    let Ok(message) = serde_json::from_slice::<M>(data) else {
        return;
    };
    let first = serde_json::to_value(&message).expect("an accepted message serialises");
    let text = serde_json::to_vec(&message).expect("an accepted message serialises");
    let again: M = serde_json::from_slice(&text)
        .unwrap_or_else(|e| panic!("{what} does not re-parse ({e}): {first}"));
    let second = serde_json::to_value(&again).expect("a re-parsed message serialises");
    assert!(
        same(&first, &second),
        "{what} changes on a round trip:\n{first}\n{second}"
    );
}

/// Equal JSON, floats within a relative 1e-12 (see the module docs).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, x)| y.get(key).is_some_and(|y| same(x, y)))
        }
        _ => a == b,
    }
}

fuzz_target!(|data: &[u8]| {
    // The gateway's `peek` (method, id, tool name) reads this value.
    let lenient = serde_json::from_slice::<Value>(data);
    match mneme_core::json::from_slice(data) {
        Ok(strict) => {
            let lenient = lenient.expect("what the strict parser reads is JSON");
            assert!(strict == lenient, "strict {strict} != {lenient}");
        }
        Err(error) => {
            // Valid JSON is refused for a repeated name only. (Invalid JSON
            // may be refused for one too: the repeat can come before the
            // syntax error.)
            assert!(
                lenient.is_err() || error.is_data(),
                "valid JSON refused for something else than a repeated name: {error}"
            );
            // Not JSON, or a repeated name, which the gateway refuses before
            // rmcp sees it: only "no panic" holds (module docs).
            let _ = serde_json::from_slice::<ClientJsonRpcMessage>(data);
            let _ = serde_json::from_slice::<ServerJsonRpcMessage>(data);
            return;
        }
    }
    round_trip::<ClientJsonRpcMessage>(data, "client message");
    round_trip::<ServerJsonRpcMessage>(data, "server message");
});
