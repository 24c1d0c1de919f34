//! A timeout for calls through a [`Caller`](crate::Caller), as a tower layer that sets the
//! call's own deadline instead of racing it against a timer of its own.
//!
//! `tower::timeout` works around a caller too (and is tested with it), but it starts a
//! tokio timer for every call and the node already has one deadline per request, kept in
//! its ordered table under a single timer. [`CallTimeoutLayer`] gives the request that
//! deadline: no timer per call, the error is the node's [`Error::Timeout`](crate::Error),
//! and the callee sees the deadline (`Request::deadline`) and stops its handler when it
//! passes. Measured (`benches --layers node-native,node-native-caller`, window 100,
//! 100 B): tower's timeout costs the client about 90 ns a call (a timer entry registered,
//! polled and cleared, and a clock read), a third of the whole caller stack's cost.
//!
//! ```no_run
//! # async fn example(node: node::Node) -> Result<(), tower::BoxError> {
//! use std::time::Duration;
//! use tower::{ServiceBuilder, ServiceExt};
//! use node::{CallTimeoutLayer, Outbound, RetrySafe};
//!
//! let billing = ServiceBuilder::new()
//!     .retry(RetrySafe::new(3))
//!     .layer(CallTimeoutLayer::new(Duration::from_secs(2)))
//!     .service(node.caller());
//! let reply = billing
//!     .oneshot(Outbound::encode("billing-1", "invoice:total", &"order-17")?)
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! The timeout is relative: under a retry, as above, each attempt has the whole of it (and
//! the waits between attempts are not counted), as with `tower::timeout` in the same place.
//! A request with a timeout of its own keeps the smaller of the two; one without gets the
//! layer's in place of the node's default
//! ([`request_timeout`](crate::Config::request_timeout)), which may be longer.

use std::task::{Context, Poll};
use std::time::Duration;

use tower::{Layer, Service};

use crate::calling::caller::Outbound;

/// Gives every [`Outbound`] request `timeout`, or its own if that is smaller; a request
/// without one gets this in place of the node's default
/// ([`request_timeout`](crate::Config::request_timeout)). One deadline per request, kept by
/// the node's own table: no timer per call, and the callee sees it (`Request::deadline`).
#[derive(Debug, Clone, Copy)]
pub struct CallTimeoutLayer {
    timeout: Duration,
}

impl CallTimeoutLayer {
    /// Calls get at most `timeout`.
    pub fn new(timeout: Duration) -> CallTimeoutLayer {
        CallTimeoutLayer { timeout }
    }
}

impl<S> Layer<S> for CallTimeoutLayer {
    type Service = CallTimeout<S>;

    fn layer(&self, inner: S) -> CallTimeout<S> {
        CallTimeout {
            inner,
            timeout: self.timeout,
        }
    }
}

/// The service of [`CallTimeoutLayer`]: `inner` with each request's timeout cut to
/// `timeout`. Its future is `inner`'s: nothing is added per call but the cut.
#[derive(Debug, Clone)]
pub struct CallTimeout<S> {
    inner: S,
    timeout: Duration,
}

impl<S: Service<Outbound>> Service<Outbound> for CallTimeout<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Outbound) -> S::Future {
        request.timeout = Some(cut(request.timeout, self.timeout));
        self.inner.call(request)
    }
}

/// A request's timeout under a layer's: the smaller.
fn cut(own: Option<Duration>, layer: Duration) -> Duration {
    own.map_or(layer, |own| own.min(layer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smaller_timeout_wins() {
        let (short, long) = (Duration::from_millis(10), Duration::from_secs(1));
        assert_eq!(cut(None, long), long);
        assert_eq!(cut(Some(short), long), short);
        assert_eq!(cut(Some(long), short), short);
    }
}
