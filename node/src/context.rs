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

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use protocol::Meta;
use tokio::time::{Instant, Sleep};

/// What calls made while handling a request inherit from it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Context {
    /// When the request's caller stops waiting.
    pub(crate) deadline: Option<Instant>,
    /// The trace the request belongs to, with its handler's span as the parent of the
    /// calls it makes.
    pub(crate) trace: Option<crate::observation::trace::TraceParent>,
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

#[cfg(test)]
mod tests {
    use super::*;

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
