//! Outgoing calls as a tower [`Service`]: [`Node::caller`] gives a cheap, cloneable
//! [`Caller`] that sends an [`Outbound`] request and answers its [`Reply`], so tower's
//! middleware (and ours: [`RetrySafe`], [`CircuitBreakerLayer`](crate::CircuitBreakerLayer))
//! stack on the calling side as they do around handlers.
//!
//! ```no_run
//! # async fn example(node: node::Node) -> Result<(), tower::BoxError> {
//! use std::time::Duration;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//! use node::{Outbound, RetrySafe};
//!
//! let mut billing = ServiceBuilder::new()
//!     .retry(RetrySafe::new(3))
//!     .timeout(Duration::from_secs(2))
//!     .concurrency_limit(64)
//!     .service(node.caller());
//! let request = Outbound::encode("billing-1", "invoice:total", &"order-17")?;
//! let reply = billing.ready().await?.call(request).await?;
//! let total: u64 = reply.decode()?;
//! # Ok(()) }
//! ```
//!
//! `poll_ready` is real backpressure: with [`Caller::max_in_flight`] it is ready only while
//! fewer calls than that are in flight.

use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use protocol::{encode_value, Meta};
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::PollSemaphore;
use tower::Service;

use crate::error::{Error, Result};
use crate::mesh::link::Target;
use crate::node::Node;
use crate::serving::handler::Reply;

/// One request for a [`Caller`]: where it goes, the event, the payload (raw, passed
/// through), metadata, and a timeout (the node's default when `None`). Cloneable, so a
/// retry can send it again: a `&'static str` event is not copied (an allocation for the
/// request and one for each retry's clone were about 40 ns of a call).
#[derive(Debug, Clone)]
pub struct Outbound {
    /// Who it goes to.
    pub to: Target,
    /// The event.
    pub event: Cow<'static, str>,
    /// The payload, sent untouched.
    pub payload: Bytes,
    /// The metadata (the user's entries).
    pub meta: Meta,
    /// How long to wait for the reply.
    pub timeout: Option<Duration>,
}

impl Outbound {
    /// A request with a raw payload.
    pub fn new(
        to: impl Into<Target>,
        event: impl Into<Cow<'static, str>>,
        payload: Bytes,
    ) -> Outbound {
        Outbound {
            to: to.into(),
            event: event.into(),
            payload,
            meta: Meta::new(),
            timeout: None,
        }
    }

    /// A request with `data` encoded as MessagePack.
    pub fn encode<T: Serialize + ?Sized>(
        to: impl Into<Target>,
        event: impl Into<Cow<'static, str>>,
        data: &T,
    ) -> Result<Outbound> {
        Ok(Outbound::new(to, event, encode_value(data)?))
    }

    /// Adds a text metadata entry (a bad key fails here: see [`Meta::insert`]).
    pub fn meta(mut self, key: &str, value: &str) -> Result<Outbound> {
        self.meta.insert(key, value)?;
        Ok(self)
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Outbound {
        self.timeout = Some(timeout);
        self
    }
}

/// Sends [`Outbound`] requests through a node: a tower [`Service`]. Cheap to clone (clones
/// share the node and the in-flight limit). Holds the node: drop the callers before
/// counting on the last `Node` handle to close it.
#[derive(Debug)]
pub struct Caller {
    node: Node,
    /// The in-flight limit, when there is one, and the permit `poll_ready` took.
    limit: Option<PollSemaphore>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Clone for Caller {
    fn clone(&self) -> Caller {
        // A clone has not been made ready: it takes its own permit.
        Caller {
            node: self.node.clone(),
            limit: self.limit.clone(),
            permit: None,
        }
    }
}

impl Node {
    /// A tower [`Service`] that sends requests through this node (see [`Caller`]).
    pub fn caller(&self) -> Caller {
        Caller {
            node: self.clone(),
            limit: None,
            permit: None,
        }
    }
}

impl Caller {
    /// At most `calls` requests of this caller (and its clones) in flight at once:
    /// `poll_ready` waits for one to end (a `LoadShed` in front refuses instead).
    pub fn max_in_flight(mut self, calls: usize) -> Caller {
        self.limit = Some(PollSemaphore::new(Arc::new(Semaphore::new(calls.max(1)))));
        self.permit = None;
        self
    }
}

impl Service<Outbound> for Caller {
    type Response = Reply;
    type Error = Error;
    type Future = CallFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if self.node.inner.life().is_closing() {
            return Poll::Ready(Err(Error::Closed));
        }
        let Some(limit) = &mut self.limit else {
            return Poll::Ready(Ok(()));
        };
        if self.permit.is_none() {
            match limit.poll_acquire(cx) {
                Poll::Ready(Some(permit)) => self.permit = Some(permit),
                // The semaphore is never closed while we hold it.
                Poll::Ready(None) => return Poll::Ready(Err(Error::Closed)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Outbound) -> CallFuture {
        let permit = self.permit.take();
        if self.limit.is_some() && permit.is_none() {
            // Called without `poll_ready` (a contract breach): refused, not over the limit.
            return CallFuture(Box::pin(async {
                Err(Error::Busy {
                    message: "Caller::call without poll_ready".into(),
                    bound: None,
                })
            }));
        }
        let node = self.node.clone();
        CallFuture(Box::pin(async move {
            let call = node
                .call(request.to, &request.event)
                .with_meta(&request.meta);
            let call = match request.timeout {
                Some(timeout) => call.timeout(timeout),
                None => call,
            };
            let reply = call.raw().send(request.payload).await;
            drop(permit);
            reply
        }))
    }
}

/// The future of one [`Caller`] call.
pub struct CallFuture(Pin<Box<dyn Future<Output = Result<Reply>> + Send>>);

impl Future for CallFuture {
    type Output = Result<Reply>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for CallFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallFuture")
    }
}

/// A `tower::retry` policy that retries only what is safe to retry: calls that provably
/// reached no handler ([`Error::is_retry_safe`]: not found, no match, not connected,
/// busy, shutting down), up to `attempts` more times, waiting 10 ms, then twice as long each
/// time (at most 1 s). A handler's error, a timeout or a peer that left mid-call is never
/// retried: the handler may have run.
#[derive(Debug, Clone)]
pub struct RetrySafe {
    left: usize,
    wait: Duration,
}

impl RetrySafe {
    /// Up to `attempts` retries.
    pub fn new(attempts: usize) -> RetrySafe {
        RetrySafe {
            left: attempts,
            wait: Duration::from_millis(10),
        }
    }
}

impl RetrySafe {
    /// The wait before the next try, if `error` (a node error, when it is one) may be
    /// retried and tries are left.
    fn next(&mut self, error: Option<&Error>) -> Option<tokio::time::Sleep> {
        if !error.is_some_and(Error::is_retry_safe) || self.left == 0 {
            return None;
        }
        self.left -= 1;
        let wait = self.wait;
        self.wait = (self.wait * 2).min(Duration::from_secs(1));
        Some(tokio::time::sleep(wait))
    }
}

/// Directly around a [`Caller`].
impl tower::retry::Policy<Outbound, Reply, Error> for RetrySafe {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _request: &mut Outbound,
        result: &mut Result<Reply>,
    ) -> Option<Self::Future> {
        self.next(result.as_ref().err())
    }

    fn clone_request(&mut self, request: &Outbound) -> Option<Outbound> {
        Some(request.clone())
    }
}

/// Around layers whose error is a `BoxError` (a timeout, a circuit breaker): a node error
/// inside is retried by the same rule; the layers' own errors (elapsed, open) are not.
impl tower::retry::Policy<Outbound, Reply, tower::BoxError> for RetrySafe {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _request: &mut Outbound,
        result: &mut Result<Reply, tower::BoxError>,
    ) -> Option<Self::Future> {
        let error = result
            .as_ref()
            .err()
            .and_then(|e| e.downcast_ref::<Error>());
        self.next(error)
    }

    fn clone_request(&mut self, request: &Outbound) -> Option<Outbound> {
        Some(request.clone())
    }
}
