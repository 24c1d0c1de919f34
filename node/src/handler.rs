//! Handlers and middleware: what runs when a request or tick reaches this node.
//!
//! A request handler is a tower [`Service`] from [`Request`] to [`Response`] whose error is
//! a [`BoxError`]; middleware are tower [`Layer`]s around it, so `tower::timeout`,
//! `ConcurrencyLimit`, `MapResult` or a user's own layer fit in front of any handler. A plain
//! async function works too ([`Node::on_request`](crate::Node::on_request)).
//!
//! Errors become error replies: a [`HandlerError`] keeps its code and message; tower's
//! timeout becomes the code `TIMEOUT`; any other error the code `HANDLER_ERROR` with its
//! message.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use protocol::{decode_value, encode_value, Incoming, RemoteError};
use regex::Regex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Layer, Service, ServiceExt};

use crate::peer::NodeId;

/// A request or tick as a handler sees it.
#[derive(Debug, Clone)]
pub struct Request {
    from: NodeId,
    incoming: Incoming,
}

impl Request {
    pub(crate) fn new(from: NodeId, incoming: Incoming) -> Request {
        Request { from, incoming }
    }

    /// The id of the node that sent it (bound to its connection by the handshake: it cannot
    /// be forged).
    pub fn from(&self) -> &NodeId {
        &self.from
    }

    /// The event name.
    pub fn event(&self) -> &str {
        self.incoming.event()
    }

    /// The CURVE public key of the peer this request came through, on a secured connection
    /// (as libzmq authenticated it): authorize by key in a handler or middleware. For a
    /// request forwarded by a router node it is the router's key; [`from`](Self::from) is
    /// the origin.
    pub fn peer_key(&self) -> Option<&transport::Key> {
        self.incoming.peer_key()
    }

    /// The raw payload, untouched.
    pub fn payload(&self) -> &Bytes {
        self.incoming.payload()
    }

    /// The raw metadata.
    pub fn metadata(&self) -> &Bytes {
        self.incoming.metadata()
    }

    /// For a message that came through router nodes: the node that sent it first and the
    /// routers it went through (`from()` is then the last router). `None` for a direct one.
    pub fn route(&self) -> Option<Route> {
        if self.incoming.metadata().is_empty() {
            return None;
        }
        decode_value(self.incoming.metadata()).ok()
    }

    /// Decodes the payload from MessagePack into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        decode_value(self.incoming.payload())
            .map_err(|e| HandlerError::new(HandlerError::BAD_REQUEST, e.to_string()))
    }
}

/// How a forwarded message travelled.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Route {
    /// The node that sent the message first.
    pub origin: NodeId,
    /// The routers it went through, in order.
    pub via: Vec<NodeId>,
}

/// A request handler's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    payload: Bytes,
}

impl Response {
    /// A response carrying `value` encoded as MessagePack.
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Response, HandlerError> {
        encode_value(value)
            .map(|payload| Response { payload })
            .map_err(|e| HandlerError::new(HandlerError::HANDLER_ERROR, e.to_string()))
    }

    /// A response carrying raw bytes, passed through untouched.
    pub fn raw(payload: Bytes) -> Response {
        Response { payload }
    }

    /// The payload.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }
}

/// An error a handler returns on purpose, with a code the caller can branch on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerError {
    /// A machine-readable code.
    pub code: String,
    /// A human-readable message.
    pub message: String,
}

impl HandlerError {
    /// The code used when a handler fails without a code of its own.
    pub const HANDLER_ERROR: &'static str = "HANDLER_ERROR";
    /// The code used when the request's payload cannot be decoded.
    pub const BAD_REQUEST: &'static str = "BAD_REQUEST";
    /// The code used when a middleware timeout expires.
    pub const TIMEOUT: &'static str = "TIMEOUT";

    /// An error with a code and a message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> HandlerError {
        HandlerError {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for HandlerError {}

/// Turns whatever a service failed with into the error reply sent back.
pub(crate) fn to_remote(error: BoxError) -> RemoteError {
    if let Some(e) = error.downcast_ref::<HandlerError>() {
        return RemoteError::new(e.code.clone(), e.message.clone());
    }
    if error.is::<tower::timeout::error::Elapsed>() {
        return RemoteError::new(HandlerError::TIMEOUT, "the handler took too long");
    }
    RemoteError::new(HandlerError::HANDLER_ERROR, error.to_string())
}

/// The boxed form every request handler and middleware stack takes.
pub type HandlerService = BoxCloneSyncService<Request, Response, BoxError>;

/// Which events a handler or middleware applies to.
#[derive(Debug, Clone)]
pub enum Pattern {
    /// Exactly this event name.
    Exact(String),
    /// Every event name the regex matches (anchor it with `^...$` for a whole-name match).
    Regex(Regex),
}

impl Pattern {
    /// Whether `event` matches.
    pub fn matches(&self, event: &str) -> bool {
        match self {
            Pattern::Exact(name) => name == event,
            Pattern::Regex(regex) => regex.is_match(event),
        }
    }

    fn same(&self, other: &Pattern) -> bool {
        match (self, other) {
            (Pattern::Exact(a), Pattern::Exact(b)) => a == b,
            (Pattern::Regex(a), Pattern::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl From<&str> for Pattern {
    fn from(name: &str) -> Pattern {
        Pattern::Exact(name.to_owned())
    }
}

impl From<String> for Pattern {
    fn from(name: String) -> Pattern {
        Pattern::Exact(name)
    }
}

impl From<Regex> for Pattern {
    fn from(regex: Regex) -> Pattern {
        Pattern::Regex(regex)
    }
}

impl From<&Regex> for Pattern {
    fn from(regex: &Regex) -> Pattern {
        Pattern::Regex(regex.clone())
    }
}

/// A tick handler.
pub(crate) type TickHandler = Arc<dyn Fn(Request) -> BoxFuture<'static, ()> + Send + Sync>;

/// A middleware, boxed: wraps one service in another.
type BoxLayer = Arc<dyn Fn(HandlerService) -> HandlerService + Send + Sync>;

/// Wraps an async function as a handler service.
pub(crate) fn service_from_fn<F, Fut, R>(f: F) -> HandlerService
where
    F: Fn(Request) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = Result<R, HandlerError>> + Send + 'static,
    R: Serialize + Send + 'static,
{
    BoxCloneSyncService::new(tower::service_fn(move |request: Request| {
        let fut = f(request);
        async move {
            let value = fut.await?;
            Response::encode(&value).map_err(BoxError::from)
        }
    }))
}

/// Wraps any tower service as a handler service.
pub(crate) fn boxed<S>(service: S) -> HandlerService
where
    S: Service<Request, Response = Response, Error = BoxError> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    BoxCloneSyncService::new(service)
}

/// Boxes a tower layer.
pub(crate) fn boxed_layer<L>(layer: L) -> BoxLayer
where
    L: Layer<HandlerService> + Send + Sync + 'static,
    L::Service:
        Service<Request, Response = Response, Error = BoxError> + Clone + Send + Sync + 'static,
    <L::Service as Service<Request>>::Future: Send + 'static,
{
    Arc::new(move |inner| BoxCloneSyncService::new(layer.layer(inner)))
}

/// Every handler and middleware of a node, with the composed stack per event cached (so a
/// stateful layer such as `ConcurrencyLimit` is built once, not per request).
#[derive(Default)]
pub(crate) struct Handlers {
    requests: Vec<(Pattern, HandlerService)>,
    ticks: Vec<(Pattern, TickHandler)>,
    layers: Vec<(Option<Pattern>, BoxLayer)>,
    composed: HashMap<String, Option<HandlerService>>,
}

/// Bound on the cache of composed stacks (event names are few in practice; this only guards
/// against a peer that sends endless distinct names).
const COMPOSED_CACHE: usize = 4096;

impl Handlers {
    pub(crate) fn add_request(&mut self, pattern: Pattern, service: HandlerService) {
        self.requests.push((pattern, service));
        self.composed.clear();
    }

    pub(crate) fn remove_request(&mut self, pattern: &Pattern) -> bool {
        let before = self.requests.len();
        self.requests.retain(|(p, _)| !p.same(pattern));
        self.composed.clear();
        before != self.requests.len()
    }

    pub(crate) fn add_tick(&mut self, pattern: Pattern, handler: TickHandler) {
        self.ticks.push((pattern, handler));
    }

    pub(crate) fn remove_tick(&mut self, pattern: &Pattern) -> bool {
        let before = self.ticks.len();
        self.ticks.retain(|(p, _)| !p.same(pattern));
        before != self.ticks.len()
    }

    pub(crate) fn add_layer(&mut self, pattern: Option<Pattern>, layer: BoxLayer) {
        self.layers.push((pattern, layer));
        self.composed.clear();
    }

    /// The stack that answers `event`: the first matching handler (exact names before
    /// patterns, then in registration order), wrapped in every matching middleware, the
    /// first registered outermost. `None` when no handler matches.
    pub(crate) fn request_stack(&mut self, event: &str) -> Option<HandlerService> {
        if let Some(cached) = self.composed.get(event) {
            return cached.clone();
        }
        let handler = self
            .requests
            .iter()
            .find(|(p, _)| matches!(p, Pattern::Exact(name) if name == event))
            .or_else(|| self.requests.iter().find(|(p, _)| p.matches(event)))
            .map(|(_, s)| s.clone());
        let stack = handler.map(|mut service| {
            for (pattern, layer) in self.layers.iter().rev() {
                if pattern.as_ref().is_none_or(|p| p.matches(event)) {
                    service = layer(service);
                }
            }
            service
        });
        if self.composed.len() >= COMPOSED_CACHE {
            self.composed.clear();
        }
        self.composed.insert(event.to_owned(), stack.clone());
        stack
    }

    /// Every tick handler matching `event`.
    pub(crate) fn tick_handlers(&self, event: &str) -> Vec<TickHandler> {
        self.ticks
            .iter()
            .filter(|(p, _)| p.matches(event))
            .map(|(_, h)| Arc::clone(h))
            .collect()
    }
}

/// Runs a request through its stack and turns the outcome into the reply.
pub(crate) async fn call(stack: HandlerService, request: Request) -> Result<Bytes, RemoteError> {
    match stack.oneshot(request).await {
        Ok(response) => Ok(response.payload),
        Err(error) => Err(to_remote(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tower::layer::layer_fn;

    fn request(event: &str) -> Request {
        let envelope = protocol::Envelope::new(
            protocol::Kind::Request,
            1,
            event,
            Bytes::new(),
            Bytes::new(),
        );
        let frames = envelope.encode();
        let decoded = protocol::Envelope::decode(&frames, usize::MAX).unwrap();
        Request::new(NodeId::from("peer"), incoming_for_test(decoded))
    }

    fn incoming_for_test(envelope: protocol::Envelope) -> Incoming {
        protocol::Incoming::from_envelope(protocol::PeerId::default(), envelope)
    }

    fn answering(text: &'static str) -> HandlerService {
        service_from_fn(move |_req| async move { Ok::<_, HandlerError>(text) })
    }

    async fn answer(handlers: &mut Handlers, event: &str) -> Option<String> {
        let stack = handlers.request_stack(event)?;
        let bytes = call(stack, request(event)).await.ok()?;
        decode_value::<String>(&bytes).ok()
    }

    #[tokio::test]
    async fn exact_names_win_over_patterns_then_registration_order() {
        let mut handlers = Handlers::default();
        handlers.add_request(
            Pattern::from(Regex::new("^user:").unwrap()),
            answering("pattern"),
        );
        handlers.add_request(Pattern::from("user:get"), answering("exact"));
        handlers.add_request(
            Pattern::from(Regex::new("get$").unwrap()),
            answering("late"),
        );
        assert_eq!(
            answer(&mut handlers, "user:get").await.as_deref(),
            Some("exact")
        );
        assert_eq!(
            answer(&mut handlers, "user:put").await.as_deref(),
            Some("pattern")
        );
        assert_eq!(
            answer(&mut handlers, "admin:get").await.as_deref(),
            Some("late")
        );
        assert_eq!(answer(&mut handlers, "nothing").await, None);
        assert!(handlers.remove_request(&Pattern::from("user:get")));
        assert_eq!(
            answer(&mut handlers, "user:get").await.as_deref(),
            Some("pattern")
        );
    }

    #[tokio::test]
    async fn middleware_runs_first_registered_outermost_and_only_where_it_matches() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut handlers = Handlers::default();
        handlers.add_request(Pattern::from(Regex::new(".*").unwrap()), answering("ok"));
        for (name, pattern) in [
            ("a", None),
            ("b", Some(Pattern::from("only-this"))),
            ("c", None),
        ] {
            let order = Arc::clone(&order);
            handlers.add_layer(
                pattern,
                boxed_layer(layer_fn(move |inner: HandlerService| {
                    let order = Arc::clone(&order);
                    BoxCloneSyncService::new(tower::service_fn(move |req: Request| {
                        order.lock().unwrap().push(name);
                        inner.clone().oneshot(req)
                    }))
                })),
            );
        }
        answer(&mut handlers, "only-this").await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["a", "b", "c"]);
        order.lock().unwrap().clear();
        answer(&mut handlers, "other").await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["a", "c"]);
    }

    #[tokio::test]
    async fn errors_become_error_replies_with_codes() {
        let failing =
            service_from_fn(
                |_req| async move { Err::<(), _>(HandlerError::new("E_BUSY", "busy")) },
            );
        let remote = call(failing, request("x")).await.unwrap_err();
        assert_eq!(remote.code, "E_BUSY");
        assert_eq!(remote.message, "busy");

        let other: BoxError = "plain failure".into();
        assert_eq!(to_remote(other).code, HandlerError::HANDLER_ERROR);
    }

    #[test]
    fn patterns() {
        assert!(Pattern::from("a").matches("a"));
        assert!(!Pattern::from("a").matches("ab"));
        assert!(Pattern::from(Regex::new("^job:\\d+$").unwrap()).matches("job:12"));
    }
}
