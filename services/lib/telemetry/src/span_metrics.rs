//! Prometheus metrics derived from spans that libraries already emit, so
//! their call sites need no timing code of their own.
//!
//! Today: the Redis client's `fred.command` span (one per command, with
//! the command name recorded once it is known and the response size once
//! a response arrived) becomes `mneme_redis_command_seconds{command,
//! outcome}`. Command names are Redis's own, a bounded set.

use std::sync::LazyLock;
use std::time::Instant;

use prometheus::HistogramVec;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::registry::LookupSpan;

use crate::metrics::latency_histogram;

const REDIS_COMMAND_SPAN: &str = "fred.command";

static REDIS_COMMANDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    latency_histogram(
        "mneme_redis_command_seconds",
        "Redis commands by name and outcome (ok: a reply arrived; error: timeout or connection failure), from send to reply.",
        &["command", "outcome"],
    )
});

/// What the layer keeps in a span's extensions.
struct RedisCommand {
    started: Instant,
    command: Option<String>,
    answered: bool,
}

/// Picks `cmd.name` and notices `cmd.res`.
#[derive(Default)]
struct CommandFields {
    command: Option<String>,
    answered: bool,
}

impl Visit for CommandFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "cmd.name" {
            self.command = Some(value.to_owned());
        }
    }

    fn record_u64(&mut self, field: &Field, _: u64) {
        if field.name() == "cmd.res" {
            self.answered = true;
        }
    }

    fn record_i64(&mut self, field: &Field, _: i64) {
        if field.name() == "cmd.res" {
            self.answered = true;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "cmd.name" => self.command = Some(format!("{value:?}").trim_matches('"').to_owned()),
            "cmd.res" => self.answered = true,
            _ => {}
        }
    }
}

/// The layer; install it with [`SpanMetrics::filter`] so it sees only the
/// spans it measures, whatever the log filter says.
#[derive(Debug, Default, Clone, Copy)]
pub struct SpanMetrics;

impl SpanMetrics {
    /// Enables exactly the measured spans for this layer.
    pub fn filter() -> MeasuredSpans {
        MeasuredSpans
    }
}

/// See [`SpanMetrics::filter`].
#[derive(Debug, Clone, Copy)]
pub struct MeasuredSpans;

impl<S> Filter<S> for MeasuredSpans {
    fn enabled(&self, metadata: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        metadata.is_span() && metadata.name() == REDIS_COMMAND_SPAN
    }
}

impl<S> Layer<S> for SpanMetrics
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attributes.metadata().name() != REDIS_COMMAND_SPAN {
            return;
        }
        let mut fields = CommandFields::default();
        attributes.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(RedisCommand {
                started: Instant::now(),
                command: fields.command,
                answered: fields.answered,
            });
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        let Some(command) = extensions.get_mut::<RedisCommand>() else {
            return;
        };
        let mut fields = CommandFields::default();
        values.record(&mut fields);
        if fields.command.is_some() {
            command.command = fields.command;
        }
        command.answered |= fields.answered;
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let extensions = span.extensions();
        let Some(command) = extensions.get::<RedisCommand>() else {
            return;
        };
        let name = command.command.as_deref().unwrap_or("unknown");
        let outcome = if command.answered { "ok" } else { "error" };
        REDIS_COMMANDS
            .with_label_values(&[name, outcome])
            .observe(command.started.elapsed().as_secs_f64());
    }
}
