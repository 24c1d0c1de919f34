//! A circuit breaker for the calling side: after `failures` failed calls in a row, calls
//! fail at once with [`CircuitOpen`] for `open_for` (nothing is sent); then one probe call
//! is let through, and its outcome closes the circuit again or reopens it.
//!
//! The decisions are a pure state machine over plain data ([`CircuitBreaker`], unit-tested
//! with simulated time); the layer around it only asks it and tells it.
//!
//! Which failures count is the layer's `trips` predicate; by default every error but a
//! handler's own ([`Error::Handler`]): a handler that answers with an error is up.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

use crate::error::Error;

/// The error of a call refused because the circuit is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("circuit open: calls refused for {retry_in:?} more")]
pub struct CircuitOpen {
    /// How long until a probe call is let through.
    pub retry_in: Duration,
}

/// Where a circuit stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Calls go through; this many failed in a row.
    Closed { failed: u32 },
    /// Calls are refused until then.
    Open { until: Instant },
    /// One probe call is out; the others are refused until it ends.
    Probing,
}

/// The breaker's decisions (pure: the time is given).
#[derive(Debug, Clone)]
pub struct CircuitBreaker {
    state: State,
    failures: u32,
    open_for: Duration,
}

/// What the breaker says to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Send it.
    Go,
    /// Send it as the probe: its outcome decides.
    Probe,
    /// Refuse it.
    Refuse(CircuitOpen),
}

impl CircuitBreaker {
    /// Opens after `failures` failures in a row (at least 1), for `open_for`.
    pub fn new(failures: u32, open_for: Duration) -> CircuitBreaker {
        CircuitBreaker {
            state: State::Closed { failed: 0 },
            failures: failures.max(1),
            open_for,
        }
    }

    /// Whether a call may go at `now`.
    pub(crate) fn admit(&mut self, now: Instant) -> Admit {
        match self.state {
            State::Closed { .. } => Admit::Go,
            State::Open { until } if now >= until => {
                self.state = State::Probing;
                Admit::Probe
            }
            State::Open { until } => Admit::Refuse(CircuitOpen {
                retry_in: until - now,
            }),
            State::Probing => Admit::Refuse(CircuitOpen {
                retry_in: Duration::ZERO,
            }),
        }
    }

    /// A call admitted as `admitted` ended, failed or not, at `now`.
    pub(crate) fn ended(&mut self, admitted: Admit, failed: bool, now: Instant) {
        self.state = match (self.state, admitted, failed) {
            (_, Admit::Probe, false) => State::Closed { failed: 0 },
            (_, Admit::Probe, true) => State::Open {
                until: now + self.open_for,
            },
            (State::Closed { .. }, Admit::Go, false) => State::Closed { failed: 0 },
            (State::Closed { failed: before }, Admit::Go, true) => {
                if before + 1 >= self.failures {
                    State::Open {
                        until: now + self.open_for,
                    }
                } else {
                    State::Closed { failed: before + 1 }
                }
            }
            // A call let through before the circuit opened, ending after: it changes
            // nothing (the probe decides).
            (state, _, _) => state,
        };
    }

    /// Whether calls are refused now.
    pub fn is_open(&self) -> bool {
        !matches!(self.state, State::Closed { .. })
    }
}

/// Which errors count as failures.
type Trips = Arc<dyn Fn(&BoxError) -> bool + Send + Sync>;

/// The default: every error but a handler's own answer.
fn default_trips(error: &BoxError) -> bool {
    !matches!(error.downcast_ref::<Error>(), Some(Error::Handler { .. }))
}

/// A tower layer putting a [`CircuitBreaker`] in front of a service (a [`Caller`](crate::Caller),
/// or any service whose error converts into a `BoxError`). Clones of the service share one
/// breaker.
#[derive(Clone)]
pub struct CircuitBreakerLayer {
    failures: u32,
    open_for: Duration,
    trips: Trips,
}

impl CircuitBreakerLayer {
    /// Opens after `failures` failed calls in a row, for `open_for`.
    pub fn new(failures: u32, open_for: Duration) -> CircuitBreakerLayer {
        CircuitBreakerLayer {
            failures,
            open_for,
            trips: Arc::new(default_trips),
        }
    }

    /// Counts as failures the errors `trips` says (instead of every error but a handler's).
    pub fn trips(mut self, trips: impl Fn(&BoxError) -> bool + Send + Sync + 'static) -> Self {
        self.trips = Arc::new(trips);
        self
    }
}

impl std::fmt::Debug for CircuitBreakerLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitBreakerLayer")
            .field("failures", &self.failures)
            .field("open_for", &self.open_for)
            .finish()
    }
}

impl<S> Layer<S> for CircuitBreakerLayer {
    type Service = Breaker<S>;

    fn layer(&self, inner: S) -> Breaker<S> {
        Breaker {
            inner,
            state: Arc::new(Mutex::new(CircuitBreaker::new(
                self.failures,
                self.open_for,
            ))),
            trips: Arc::clone(&self.trips),
        }
    }
}

/// The service [`CircuitBreakerLayer`] makes.
#[derive(Clone)]
pub struct Breaker<S> {
    inner: S,
    state: Arc<Mutex<CircuitBreaker>>,
    trips: Trips,
}

impl<S> Breaker<S> {
    /// Whether the circuit is open (or probing) now.
    pub fn is_open(&self) -> bool {
        self.state.lock().is_open()
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for Breaker<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Breaker")
            .field("inner", &self.inner)
            .field("state", &*self.state.lock())
            .finish()
    }
}

impl<S, R> Service<R> for Breaker<S>
where
    S: Service<R>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BreakerFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let admitted = self.state.lock().admit(Instant::now());
        let (inner, refused) = match admitted {
            Admit::Refuse(open) => (None, Some(open)),
            Admit::Go | Admit::Probe => (Some(self.inner.call(request)), None),
        };
        BreakerFuture {
            inner,
            refused,
            admitted,
            state: Arc::clone(&self.state),
            trips: Arc::clone(&self.trips),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of one call through a [`Breaker`]: the inner call's, told to the breaker
    /// when it ends.
    pub struct BreakerFuture<F> {
        #[pin]
        inner: Option<F>,
        refused: Option<CircuitOpen>,
        admitted: Admit,
        state: Arc<Mutex<CircuitBreaker>>,
        trips: Trips,
    }
}

impl<F, T, E> Future for BreakerFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            let open = this.refused.unwrap_or(CircuitOpen {
                retry_in: Duration::ZERO,
            });
            return Poll::Ready(Err(Box::new(open)));
        };
        let result = match inner.poll(cx) {
            Poll::Ready(result) => result.map_err(Into::into),
            Poll::Pending => return Poll::Pending,
        };
        let failed = result.as_ref().err().is_some_and(|e| (this.trips)(e));
        this.state
            .lock()
            .ended(*this.admitted, failed, Instant::now());
        Poll::Ready(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: Duration = Duration::from_secs(5);

    #[test]
    fn it_opens_after_failures_in_a_row_and_a_success_resets_the_count() {
        let now = Instant::now();
        let mut breaker = CircuitBreaker::new(3, OPEN);
        for _ in 0..2 {
            assert_eq!(breaker.admit(now), Admit::Go);
            breaker.ended(Admit::Go, true, now);
        }
        breaker.ended(Admit::Go, false, now);
        for _ in 0..2 {
            breaker.ended(Admit::Go, true, now);
        }
        assert!(!breaker.is_open(), "two in a row since the success");
        breaker.ended(Admit::Go, true, now);
        assert!(breaker.is_open());
        assert_eq!(
            breaker.admit(now + Duration::from_secs(1)),
            Admit::Refuse(CircuitOpen {
                retry_in: Duration::from_secs(4)
            })
        );
    }

    #[test]
    fn after_the_wait_one_probe_decides() {
        let now = Instant::now();
        let mut breaker = CircuitBreaker::new(1, OPEN);
        breaker.ended(Admit::Go, true, now);
        let later = now + OPEN;
        assert_eq!(breaker.admit(later), Admit::Probe);
        assert!(
            matches!(breaker.admit(later), Admit::Refuse(_)),
            "one probe at a time"
        );
        // The probe fails: open again, for a full period from then.
        breaker.ended(Admit::Probe, true, later);
        assert!(matches!(
            breaker.admit(later + OPEN - Duration::from_millis(1)),
            Admit::Refuse(_)
        ));
        let again = later + OPEN;
        assert_eq!(breaker.admit(again), Admit::Probe);
        breaker.ended(Admit::Probe, false, again);
        assert!(!breaker.is_open());
        assert_eq!(breaker.admit(again), Admit::Go);
    }

    #[test]
    fn a_call_that_started_before_it_opened_changes_nothing() {
        let now = Instant::now();
        let mut breaker = CircuitBreaker::new(1, OPEN);
        breaker.ended(Admit::Go, true, now);
        breaker.ended(Admit::Go, false, now);
        assert!(breaker.is_open(), "a late success does not close it");
    }

    #[test]
    fn a_handlers_error_does_not_trip_it_by_default() {
        let handler: BoxError = Box::new(Error::Handler {
            code: "X".into(),
            message: String::new(),
        });
        assert!(!default_trips(&handler));
        let gone: BoxError = Box::new(Error::NotConnected);
        assert!(default_trips(&gone));
    }
}
