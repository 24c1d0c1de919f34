//! The `otel` feature: request spans in OpenTelemetry traces, through
//! `tracing-opentelemetry` (whose layer the application installs with its exporter). The
//! trace context travels as W3C `traceparent` metadata (see `trace.rs`); here it is read
//! from and written into OpenTelemetry's span contexts.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::context::TraceParent;

/// The trace context of the current `tracing` span, if OpenTelemetry knows it (its layer is
/// installed and the span is sampled or recorded).
pub(crate) fn current() -> Option<TraceParent> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    if !span_context.is_valid() {
        return None;
    }
    Some(TraceParent {
        trace_id: span_context.trace_id().to_bytes(),
        parent_id: span_context.span_id().to_bytes(),
        flags: span_context.trace_flags().to_u8(),
    })
}

/// Makes the caller's span (`trace`, from another process) the parent of `span`.
pub(crate) fn set_remote_parent(span: &tracing::Span, trace: &TraceParent) {
    let remote = SpanContext::new(
        TraceId::from_bytes(trace.trace_id),
        SpanId::from_bytes(trace.parent_id),
        TraceFlags::new(trace.flags),
        true,
        TraceState::default(),
    );
    let parent = opentelemetry::Context::new().with_remote_span_context(remote);
    let _ = span.set_parent(parent);
}
