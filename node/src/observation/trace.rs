//! Distributed tracing: a `tracing` span per request on both sides, and the W3C trace
//! context (`traceparent`) carried in the metadata so that one trace spans the caller, the
//! routers and the node that handles it.
//!
//! The spans (target `zeronode`, level INFO unless
//! [`NodeBuilder::span_level`](crate::NodeBuilder::span_level) says otherwise, so
//! `RUST_LOG=zeronode=info` shows them):
//! - `zeronode.call` on the caller, from the call's start to its end, with `event`, `to`
//!   and, if it failed, `outcome`; with the `otel` feature it is current while the call's
//!   trace context is taken, and it is never entered at each poll of the wait (entering
//!   costs the subscriber work per poll, and nothing of ours logs inside the wait);
//! - `zeronode.handle` on the receiver, entered around each poll of the handler (its
//!   middleware included, so the handler's own logs are inside it), with `event`, `from`,
//!   `trace_id` (of an incoming trace) and, if it did not succeed, `outcome`.
//!
//! A span without an `outcome` succeeded: as OpenTelemetry leaves a successful span's
//! status unset, only a failure is recorded (`outcome`, and `otel.status_code = "ERROR"`,
//! which `tracing-opentelemetry` makes the span's status). A call or handler dropped
//! before it ended (a `select!` around the call, a node aborted) records `cancelled`.
//! A handler dropped that way is dropped outside its span. Recording a field costs a
//! formatting subscriber a second pass over the span (measured with
//! `tracing_subscriber::fmt` and `EnvFilter`: about 95 ns of the 470 a handler's span cost
//! when every request recorded `ok`).
//!
//! Their durations are the spans' own (every subscriber times a span from creation to
//! close).
//!
//! The trace context: a request that arrives with a `traceparent` entry is handled in that
//! trace, and every call its handler makes carries the trace on, with the handler's span
//! as the parent. With the `otel` cargo feature, the spans join OpenTelemetry traces
//! through `tracing-opentelemetry`: the receiver's span takes the caller's as its remote
//! parent, and a call carries the current span's context (so a trace started by any
//! OpenTelemetry-instrumented code continues across nodes). Without it, the trace is
//! carried as it came (whoever set the first `traceparent`), and the spans record its id.

use std::borrow::Borrow;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use protocol::Meta;

use crate::context::{TraceParent, TRACEPARENT};
use crate::observation::observe::Outcome;

/// The trace context a call sends: with `otel`, the current span's when it has one; else
/// the trace of the request being handled on this task (`handling`), with its handler's
/// span as the parent. `None`: the call's metadata is left as the user set it.
pub(crate) fn for_call(handling: Option<TraceParent>) -> Option<TraceParent> {
    #[cfg(feature = "otel")]
    if let Some(current) = crate::observation::otel::current() {
        return Some(current);
    }
    handling
}

/// Puts the trace context a call should carry into its metadata (see [`for_call`]),
/// over any `traceparent` it has: for a router's hop, which carries the trace on under its
/// own span.
pub(crate) fn inject(meta: &mut Meta) {
    inject_from(meta, crate::context::current().and_then(|c| c.trace));
}

/// [`inject`] for a user's call, given the trace of the request being handled on this
/// task (`handling`, which the call read with its deadline): a `traceparent` the user set
/// is kept.
pub(crate) fn inject_unless_set(meta: &mut Meta, handling: Option<TraceParent>) {
    // The user's metadata is looked at only when there is a trace to carry (a walk of the
    // section, about 20 ns of a caller's request with two entries, `perf`).
    if let Some(trace) = for_call(handling) {
        if meta.get(TRACEPARENT).is_none() {
            trace.put(meta);
        }
    }
}

fn inject_from(meta: &mut Meta, handling: Option<TraceParent>) {
    if let Some(trace) = for_call(handling) {
        trace.put(meta);
    }
}

/// A span at a level chosen at run time ([`Config::span_level`](crate::Config)): a call site
/// per level, as `tracing` fixes a call site's level when it is compiled.
macro_rules! span_at {
    ($level:expr, $($span:tt)*) => {{
        let level = $level;
        if level == tracing::Level::INFO {
            tracing::info_span!($($span)*)
        } else if level == tracing::Level::DEBUG {
            tracing::debug_span!($($span)*)
        } else if level == tracing::Level::TRACE {
            tracing::trace_span!($($span)*)
        } else if level == tracing::Level::WARN {
            tracing::warn_span!($($span)*)
        } else {
            tracing::error_span!($($span)*)
        }
    }};
}

/// The span of a request being handled, at `level`, and the trace its handler's calls
/// carry on.
pub(crate) fn handle_span(
    level: tracing::Level,
    event: &str,
    from: &crate::mesh::peer::NodeId,
    meta: &Meta,
) -> (tracing::Span, Option<TraceParent>) {
    let incoming = TraceParent::from_meta(meta);
    let span = span_at!(
        level,
        target: "zeronode",
        "zeronode.handle",
        event = %event,
        from = %from,
        trace_id = tracing::field::Empty,
        outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if span.is_disabled() {
        // Nobody records spans: the trace is still carried on, with a span id of our own.
        return (
            span,
            incoming.map(|t| t.with_parent(TraceParent::new_span_id())),
        );
    }
    if let Some(trace) = &incoming {
        span.record("trace_id", trace.trace_id_hex());
    }
    #[cfg(feature = "otel")]
    if let Some(trace) = &incoming {
        crate::observation::otel::set_remote_parent(&span, trace);
    }
    let handling = incoming.map(|t| t.with_parent(TraceParent::new_span_id()));
    (span, handling)
}

/// The span of a call this node makes, at `level`.
pub(crate) fn call_span(
    level: tracing::Level,
    event: &str,
    to: &crate::mesh::link::Target,
) -> tracing::Span {
    span_at!(
        level,
        target: "zeronode",
        "zeronode.call",
        event = %event,
        to = %to,
        outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Records how a span's request ended, if it did not succeed (see the module's doc). Its
/// duration is the span's own: every subscriber times spans, from creation to close.
pub(crate) fn finish(span: &tracing::Span, outcome: Outcome) {
    if outcome != Outcome::Ok && !span.is_disabled() {
        span.record("outcome", outcome.as_str());
        span.record("otel.status_code", "ERROR");
    }
}

/// A request's span (owned, or borrowed: `S`) that records `cancelled` if it is dropped
/// before the request [`ended`](Self::ended) (a call's future dropped by a `select!` or
/// `tower::timeout`, a handler's job by an abort): otherwise the span would read as a
/// success.
pub(crate) struct Unended<S: Borrow<tracing::Span>> {
    span: S,
    ended: bool,
}

impl<S: Borrow<tracing::Span>> Unended<S> {
    pub(crate) fn new(span: S) -> Unended<S> {
        Unended { span, ended: false }
    }

    /// The request ended with `outcome`: recorded once (see [`finish`]).
    pub(crate) fn ended(&mut self, outcome: Outcome) {
        if !std::mem::replace(&mut self.ended, true) {
            finish(self.span.borrow(), outcome);
        }
    }
}

impl<S: Borrow<tracing::Span>> Drop for Unended<S> {
    fn drop(&mut self) {
        self.ended(Outcome::Cancelled);
    }
}

/// Whether a call's span is entered while the call's trace context is taken: only the
/// `otel` feature reads the current span there.
pub(crate) const ENTER_CALL_SPAN: bool = cfg!(feature = "otel");

pin_project_lite::pin_project! {
    /// A handler's future with its span entered at each poll: `tracing::Instrumented`
    /// without the span's clone (the span outlives this future, in its request's job) and
    /// without entering it again to drop the future. Each enter and exit costs a
    /// recording subscriber a look-up (about 30 ns with `tracing_subscriber`'s registry);
    /// the clone and the extra enter were about 85 ns of a handler's 470.
    pub(crate) struct InSpan<'a, F> {
        span: &'a tracing::Span,
        #[pin]
        inner: F,
    }
}

impl<'a, F> InSpan<'a, F> {
    /// `inner`, entered in `span` while it is polled.
    pub(crate) fn new(span: &'a tracing::Span, inner: F) -> InSpan<'a, F> {
        InSpan { span, inner }
    }
}

impl<F: Future> Future for InSpan<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        this.inner.poll(cx)
    }
}
