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
use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use protocol::{Meta, MetaValue};

use crate::observation::observe::Outcome;

/// The metadata key of the W3C trace context.
pub const TRACEPARENT: &str = "traceparent";

/// A W3C `traceparent`: the trace a request belongs to and the span that sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// The trace's id (16 bytes, never all zero).
    pub trace_id: [u8; 16],
    /// The id of the span that made the call (8 bytes, never all zero).
    pub parent_id: [u8; 8],
    /// Trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// Parses the version-00 text form `00-<32 hex>-<16 hex>-<2 hex>`. A later version is
    /// read by its first four fields, as the W3C recommendation says; anything malformed,
    /// or with an all-zero id, is `None`.
    pub fn parse(text: &str) -> Option<TraceParent> {
        let mut parts = text.trim().split('-');
        let version = parts.next()?;
        let (trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?);
        if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
            return None;
        }
        u8::from_str_radix(version, 16).ok()?;
        let mut trace_id = [0; 16];
        let mut parent_id = [0; 8];
        hex_into(trace, &mut trace_id)?;
        hex_into(parent, &mut parent_id)?;
        let mut flag = [0; 1];
        hex_into(flags, &mut flag)?;
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            parent_id,
            flags: flag[0],
        })
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The same trace, sent by the span `parent_id`.
    pub fn with_parent(self, parent_id: [u8; 8]) -> TraceParent {
        TraceParent { parent_id, ..self }
    }

    /// A random span id (never all zero).
    pub(crate) fn new_span_id() -> [u8; 8] {
        loop {
            let id: [u8; 8] = rand::random();
            if id != [0; 8] {
                return id;
            }
        }
    }

    /// The trace context of a message's metadata, if it has a valid one.
    pub fn from_meta(meta: &Meta) -> Option<TraceParent> {
        meta.get_str(TRACEPARENT).and_then(TraceParent::parse)
    }

    /// Sets it as the `traceparent` of `meta`.
    pub(crate) fn put(&self, meta: &mut Meta) {
        meta.set(TRACEPARENT, MetaValue::Text(&self.to_string()));
    }
}

impl std::fmt::Display for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.parent_id),
            self.flags
        )
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// Reads exactly `out.len()` bytes of lowercase hex (W3C forbids upper case).
fn hex_into(text: &str, out: &mut [u8]) -> Option<()> {
    let digits = text.as_bytes();
    if digits.len() != out.len() * 2 {
        return None;
    }
    fn value(digit: u8) -> Option<u8> {
        match digit {
            b'0'..=b'9' => Some(digit - b'0'),
            b'a'..=b'f' => Some(digit - b'a' + 10),
            _ => None,
        }
    }
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = value(pair[0])? << 4 | value(pair[1])?;
    }
    Some(())
}

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

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_w3c_example_round_trips() {
        let parsed = TraceParent::parse(SAMPLE).unwrap();
        assert_eq!(parsed.flags, 1);
        assert_eq!(parsed.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(parsed.to_string(), SAMPLE);
        let child = parsed.with_parent([1; 8]);
        assert_eq!(child.trace_id, parsed.trace_id);
        assert_eq!(
            child.to_string(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0101010101010101-01"
        );
    }

    #[test]
    fn malformed_or_zero_contexts_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
        // A later version with more fields is read by its first four.
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
                .is_some()
        );
    }

    #[test]
    fn a_trace_travels_in_metadata() {
        let mut meta = Meta::new();
        assert_eq!(TraceParent::from_meta(&meta), None);
        let trace = TraceParent::parse(SAMPLE).unwrap();
        trace.put(&mut meta);
        assert_eq!(TraceParent::from_meta(&meta), Some(trace));
    }
}
