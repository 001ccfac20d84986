//! Distributed tracing: OpenTelemetry spans exported over OTLP, and W3C
//! trace context (`traceparent`) taken from incoming requests and passed
//! on to the services a request reaches.
//!
//! The OpenTelemetry layer is installed whether or not an exporter is
//! configured, so every request has a trace id for its logs and error
//! answers and a caller's `traceparent` flows through mneme to the
//! backends even when mneme itself records nothing.

use std::time::Duration;

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use mneme_config::TracingConfig;

/// How long an export may take before its spans are dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The tracer provider of this process and whether it exports.
pub(crate) struct Tracing {
    pub(crate) provider: SdkTracerProvider,
    pub(crate) tracer: SdkTracer,
    pub(crate) exporting: bool,
}

/// Builds the provider: an OTLP/gRPC batch exporter when an endpoint is
/// configured (parent-based sampling: a sampled caller is always
/// recorded, new traces at `sample_ratio`), otherwise none and nothing
/// sampled, which keeps ids and propagation but records no span.
pub(crate) fn provider(config: &TracingConfig, role: &str) -> Tracing {
    let service_name = config
        .service_name
        .clone()
        .unwrap_or_else(|| role.to_owned());
    let resource = Resource::builder().with_service_name(service_name).build();
    let builder = SdkTracerProvider::builder().with_resource(resource);
    let exporter = config.otlp_endpoint.as_ref().and_then(|endpoint| {
        opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|error| {
                eprintln!("cannot export traces to {endpoint} ({error}); tracing is off");
            })
            .ok()
    });
    let exporting = exporter.is_some();
    let provider = match exporter {
        Some(exporter) => builder
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                config.sample_ratio,
            ))))
            .with_batch_exporter(exporter)
            .build(),
        None => builder.with_sampler(Sampler::AlwaysOff).build(),
    };
    let tracer = provider.tracer("mneme");
    Tracing {
        provider,
        tracer,
        exporting,
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct HeaderInjector<'a>(&'a mut http::HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(key.as_bytes()),
            http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Makes `span` a child of the trace context in `headers`
/// (`traceparent`/`tracestate`), if they carry one.
pub fn continue_trace_from(span: &tracing::Span, headers: &http::HeaderMap) {
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if parent.span().span_context().is_valid() {
        // Fails only without the OpenTelemetry layer, when there is no
        // trace to continue.
        let _ = span.set_parent(parent);
    }
}

/// Writes the current span's trace context into `headers`, so the service
/// that receives them continues this trace.
pub fn inject_current(headers: &mut http::HeaderMap) {
    let context = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
}

/// The trace id of `span` in W3C form (32 lowercase hex digits), if it has
/// one.
pub fn trace_id_of(span: &tracing::Span) -> Option<String> {
    trace_id_in(&span.context())
}

/// The trace id of the current span.
pub fn current_trace_id() -> Option<String> {
    trace_id_of(&tracing::Span::current())
}

fn trace_id_in(context: &Context) -> Option<String> {
    let span = context.span();
    let span_context = span.span_context();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}
