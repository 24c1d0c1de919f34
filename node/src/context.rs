//! A request's context: the deadline it arrived with, and what calls made while handling it
//! inherit from it.
//!
//! The deadline rule (gRPC's and tarpc's): every request carries its sender's remaining
//! time as a budget (`protocol::BUDGET`), not an absolute time, so clocks that disagree
//! between hosts do not matter. The receiver's deadline is the request's arrival plus that
//! budget. A request whose deadline passes before its handler starts is not run; a handler
//! still running at its deadline is stopped (its caller has given up: the answer would go
//! nowhere). Either way the caller's answer is the typed `DEADLINE_EXCEEDED` (its own timer
//! usually fires first) and the node counts it
//! ([`NodeStats::handlers_expired`](crate::NodeStats::handlers_expired)).
//!
//! A call made while a request handler runs (on the handler's task, the middleware's
//! included) inherits the handler's deadline: its timeout is the smaller of its own and
//! the time left, so a chain of nodes gives up together. The context lives in a task-local:
//! work spawned onto other tasks starts without it, unless given it
//! ([`Call::parent`](crate::Call::parent)).
//!
//! The trace a request belongs to travels the same way: [`TraceParent`], the W3C trace
//! context (`traceparent`) carried in the metadata; the spans that use it are
//! observation's (`trace.rs`).

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use protocol::{Meta, MetaValue};
use tokio::time::{Instant, Sleep};

/// What calls made while handling a request inherit from it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Context {
    /// When the request's caller stops waiting.
    pub(crate) deadline: Option<Instant>,
    /// The trace the request belongs to, with its handler's span as the parent of the
    /// calls it makes.
    pub(crate) trace: Option<TraceParent>,
}

/// What a call is sent with, once its settings are resolved.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    /// The user's metadata (checked against the limits).
    pub(crate) meta: Meta,
    /// The timeout: the call's own, cut to any deadline it has or inherits.
    pub(crate) timeout: Duration,
}

tokio::task_local! {
    static CURRENT: Context;
}

/// The context of the request whose handler is running on this task, if any.
pub(crate) fn current() -> Option<Context> {
    CURRENT.try_with(Context::clone).ok()
}

/// Runs `work` with `context` as the current one.
pub(crate) fn scope<F: Future>(context: Context, work: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(context, work)
}

/// The deadline of a request that arrived at `arrived` with `budget`: `None` when it gave
/// none, or one too far away to represent (no deadline, rather than a panic on overflow).
pub(crate) fn deadline_of(arrived: Instant, budget: Option<Duration>) -> Option<Instant> {
    budget.and_then(|budget| arrived.checked_add(budget))
}

/// The timeout a call is sent with: its own, cut to what is left of `deadline` (an explicit
/// one, or the one inherited), as of `now`. `None`: the deadline has passed, the call is
/// not sent.
pub(crate) fn call_timeout(
    own: Duration,
    deadline: Option<Instant>,
    now: Instant,
) -> Option<Duration> {
    match deadline {
        None => Some(own),
        Some(deadline) if deadline <= now => None,
        Some(deadline) => Some(own.min(deadline - now)),
    }
}

/// Resolves at a deadline; never without one. The timer is made at its first poll only, so
/// work that ends at its first poll (most handlers) costs no timer at all.
pub(crate) struct Expiry {
    at: Option<Instant>,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Expiry {
    pub(crate) fn new(at: Option<Instant>) -> Expiry {
        Expiry { at, sleep: None }
    }
}

impl Future for Expiry {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        let Some(at) = self.at else {
            return Poll::Pending;
        };
        self.sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)))
            .as_mut()
            .poll(cx)
    }
}

/// A duration in whole milliseconds, saturating (as deadlines and intervals travel).
pub(crate) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

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

    #[test]
    fn a_call_gets_the_smaller_of_its_timeout_and_the_time_left() {
        let now = Instant::now();
        let second = Duration::from_secs(1);
        assert_eq!(call_timeout(second, None, now), Some(second));
        assert_eq!(
            call_timeout(second, Some(now + Duration::from_millis(300)), now),
            Some(Duration::from_millis(300))
        );
        assert_eq!(
            call_timeout(second, Some(now + Duration::from_secs(5)), now),
            Some(second)
        );
        assert_eq!(
            call_timeout(second, Some(now), now),
            None,
            "passed: not sent"
        );
    }

    #[test]
    fn a_budget_too_far_away_means_no_deadline() {
        let now = Instant::now();
        assert_eq!(deadline_of(now, None), None);
        assert_eq!(
            deadline_of(now, Some(Duration::from_millis(5))),
            Some(now + Duration::from_millis(5))
        );
        assert_eq!(deadline_of(now, Some(Duration::MAX)), None);
    }

    #[tokio::test(start_paused = true)]
    async fn the_context_is_seen_inside_its_scope_only() {
        assert!(current().is_none());
        let deadline = Instant::now() + Duration::from_secs(2);
        let seen = scope(
            Context {
                deadline: Some(deadline),
                trace: None,
            },
            async { current().and_then(|c| c.deadline) },
        )
        .await;
        assert_eq!(seen, Some(deadline));
        assert!(current().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn expiry_fires_at_its_deadline_and_never_without_one() {
        let start = Instant::now();
        Expiry::new(Some(start + Duration::from_millis(250))).await;
        assert_eq!(Instant::now() - start, Duration::from_millis(250));
        let never = tokio::time::timeout(Duration::from_secs(3600), Expiry::new(None)).await;
        assert!(never.is_err());
    }
}
