//! W3C trace context (`traceparent`, `tracestate`) in gRPC metadata, so a
//! backend's spans join the trace of the request that called it.

use tonic::metadata::{MetadataKey, MetadataValue};

/// Adds the current span's trace context to `request`'s metadata.
pub fn inject_current<T>(request: &mut tonic::Request<T>) {
    let mut headers = http::HeaderMap::new();
    mneme_telemetry::trace::inject_current(&mut headers);
    let metadata = request.metadata_mut();
    for (name, value) in &headers {
        if let (Ok(key), Ok(value)) = (
            MetadataKey::from_bytes(name.as_str().as_bytes()),
            MetadataValue::try_from(value.as_bytes()),
        ) {
            metadata.insert(key, value);
        }
    }
}
