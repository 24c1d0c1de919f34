//! Handlers and middleware: what runs when a request or tick reaches this node.
//!
//! A request handler is a tower [`Service`] from [`Request`] to [`Response`] whose error is
//! a [`BoxError`]; middleware are tower [`Layer`]s around it, so `tower::timeout`,
//! `ConcurrencyLimit`, `MapResult` or a user's own layer fit in front of any handler. A plain
//! async function works too ([`Node::on_request`](crate::Node::on_request)).
//!
//! Errors become error replies: a [`HandlerError`] keeps its [`Code`] and message; tower's
//! timeout becomes [`Code::DeadlineExceeded`]; any other error [`Code::Unknown`] with its
//! message.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use protocol::{decode_value, encode_value, Incoming, Meta, RemoteError};
use regex::Regex;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Layer, Service};

use crate::codes::Code;
use crate::mesh::peer::NodeId;

/// A request or tick as a handler (and every middleware in front of it) sees it.
#[derive(Debug, Clone)]
pub struct Request {
    from: NodeId,
    incoming: Incoming,
    tick: bool,
    meta: Meta,
    deadline: Option<Instant>,
    extensions: http::Extensions,
    /// What runs at the end of the middleware, found once when the request arrived
    /// (`Handlers::first`), so the end of the chain need not look again.
    resolved: Option<Resolved>,
}

/// The handler(s) a request or tick was found to have on arrival.
#[derive(Clone)]
pub(crate) enum Resolved {
    /// The request's handler.
    Handler(HandlerService),
    /// The tick's handlers.
    Ticks(Vec<TickHandler>),
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Resolved::Handler(_) => "Handler",
            Resolved::Ticks(_) => "Ticks",
        })
    }
}

impl Request {
    /// A request from `from` with its checked metadata and the deadline it arrived with.
    pub(crate) fn new(
        from: NodeId,
        incoming: Incoming,
        meta: Meta,
        deadline: Option<Instant>,
    ) -> Request {
        Request {
            from,
            incoming,
            tick: false,
            meta,
            deadline,
            extensions: http::Extensions::new(),
            resolved: None,
        }
    }

    /// The request with what runs at the end of its middleware, found on arrival.
    pub(crate) fn resolved(mut self, resolved: Resolved) -> Request {
        self.resolved = Some(resolved);
        self
    }

    /// Takes what was found to run at the end of the middleware, if anything was.
    pub(crate) fn take_resolved(&mut self) -> Option<Resolved> {
        self.resolved.take()
    }

    /// A tick (no answer expected): what tick handlers and middleware see.
    pub(crate) fn new_tick(from: NodeId, incoming: Incoming, meta: Meta) -> Request {
        Request {
            tick: true,
            ..Request::new(from, incoming, meta, None)
        }
    }

    /// Whether this is a tick (fire and forget: whatever the stack answers is dropped) rather
    /// than a request. Middleware sees both ([`Node::layer`](crate::Node::layer)).
    pub fn is_tick(&self) -> bool {
        self.tick
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

    /// The metadata its caller set ([`Call::meta`](crate::Call::meta)), as it came through
    /// any routers. [`Meta::iter`] lists the caller's entries; the framework's own (`:`
    /// keys) are readable with [`Meta::get`].
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// When the caller stops waiting: the request's arrival plus the time its caller gave
    /// it (the deadline rule: ARCHITECTURE.md, "Request context"). `None` for a tick.
    pub fn deadline(&self) -> Option<std::time::Instant> {
        self.deadline.map(Instant::into_std)
    }

    /// The time left before [`deadline`](Self::deadline) (zero once it passed).
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }

    /// The deadline as the runtime's clock sees it (for calls that inherit it).
    pub(crate) fn tokio_deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Typed values middleware attached for the handler (an authenticated user, a parsed
    /// token, a start time); empty when it arrives.
    pub fn extensions(&self) -> &http::Extensions {
        &self.extensions
    }

    /// Typed values for the layers behind this one: `req.extensions_mut().insert(user)`.
    pub fn extensions_mut(&mut self) -> &mut http::Extensions {
        &mut self.extensions
    }

    /// For a message that came through router nodes: the node that sent it first and the
    /// routers it went through (`from()` is then the last router). `None` for a direct one.
    pub fn route(&self) -> Option<Route> {
        let route = self.meta.get(ROUTE)?;
        decode_value(route.as_bytes()).ok()
    }

    /// The request as the protocol layer gave it (a streamed request's sink and body
    /// travel with it).
    pub(crate) fn incoming(&self) -> &Incoming {
        &self.incoming
    }

    /// Decodes the payload from MessagePack into `T`.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, HandlerError> {
        decode_value(self.incoming.payload())
            .map_err(|e| HandlerError::new(HandlerError::BAD_REQUEST, e.to_string()))
    }
}

/// Gives a handler shared state once: `with_state(db, |db, req| async move { .. })` is a
/// handler for [`Node::on_request`](crate::Node::on_request) or
/// [`Node::on_tick`](crate::Node::on_tick) that gets its own clone of `state` with each
/// request, so the handler clones nothing by hand. Make the state cheap to clone (an `Arc`,
/// a pool handle, a [`Node`](crate::Node)); every clone shares what it points to.
///
/// Why an adapter rather than state stored in the node and looked up on the request (an
/// `Extension`-like `req.state::<T>()`): the state's type is checked when the handler is
/// registered, not when a request arrives; handlers of one node can have different states;
/// and a request whose handler takes no state carries none. Middleware gets state the same
/// way: [`from_fn_with_state`](crate::serving::middleware::from_fn_with_state).
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
/// use node::{with_state, HandlerError, Node, Request};
///
/// type Store = Arc<Mutex<HashMap<String, String>>>;
///
/// fn serve(node: &Node, store: Store) {
///     node.on_request("get", with_state(store.clone(), |store: Store, req: Request| async move {
///         let key: String = req.decode()?;
///         Ok::<_, HandlerError>(store.lock().unwrap().get(&key).cloned())
///     }));
///     node.on_tick("clear", with_state(store, |store: Store, _req: Request| async move {
///         store.lock().unwrap().clear();
///     }));
/// }
/// ```
pub fn with_state<S, F, Fut>(
    state: S,
    handler: F,
) -> impl Fn(Request) -> Fut + Clone + Send + Sync + 'static
where
    S: Clone + Send + Sync + 'static,
    F: Fn(S, Request) -> Fut + Clone + Send + Sync + 'static,
{
    move |request| handler(state.clone(), request)
}

/// The metadata key of a forwarded message's [`Route`] (the framework's).
pub(crate) const ROUTE: &str = ":route";

/// How a forwarded message travelled.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Route {
    /// The node that sent the message first.
    pub origin: NodeId,
    /// The routers it went through, in order.
    pub via: Vec<NodeId>,
}

/// A request handler's answer: a payload, and metadata for the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    payload: Bytes,
    meta: Meta,
}

impl Response {
    /// A response carrying `value` encoded as MessagePack.
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Response, HandlerError> {
        encode_value(value)
            .map(|payload| Response {
                payload,
                meta: Meta::new(),
            })
            .map_err(|e| HandlerError::new(HandlerError::HANDLER_ERROR, e.to_string()))
    }

    /// A response carrying raw bytes, passed through untouched.
    pub fn raw(payload: Bytes) -> Response {
        Response {
            payload,
            meta: Meta::new(),
        }
    }

    /// Adds the text metadata entry `key` = `value` for the caller
    /// ([`Reply::meta`](crate::Reply::meta)); a key that is empty, too long or reserved is
    /// a `HANDLER_ERROR`.
    pub fn with_meta(mut self, key: &str, value: &str) -> Result<Response, HandlerError> {
        self.meta
            .insert(key, value)
            .map_err(|e| HandlerError::new(HandlerError::HANDLER_ERROR, e.to_string()))?;
        Ok(self)
    }

    /// Answers with these entries (the user's of `meta`: a request's, echoed back).
    pub fn with_all_meta(mut self, meta: &Meta) -> Response {
        self.meta = meta.user_only();
        self
    }

    /// The metadata it answers with.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The payload.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }
}

/// An error a handler returns on purpose, with a code the caller can branch on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerError {
    /// A machine-readable code: a well-known one or the handler's own.
    pub code: Code,
    /// A human-readable message.
    pub message: String,
}

impl HandlerError {
    /// The code used when a handler fails without a code of its own
    /// ([`Code::Unknown`], `"HANDLER_ERROR"` on the wire).
    pub const HANDLER_ERROR: Code = Code::Unknown;
    /// The code used when the request's payload cannot be decoded
    /// ([`Code::InvalidArgument`]).
    pub const BAD_REQUEST: Code = Code::InvalidArgument;
    /// The code used when a middleware timeout expires ([`Code::DeadlineExceeded`]).
    pub const TIMEOUT: Code = Code::DeadlineExceeded;

    /// An error with a code (a [`Code`], or any string: a well-known one's string is
    /// read as that code) and a message.
    ///
    /// ```
    /// use node::{Code, HandlerError};
    /// let err = HandlerError::new(Code::PermissionDenied, "tenant mismatch");
    /// assert_eq!(err.to_string(), "PERMISSION_DENIED: tenant mismatch");
    /// ```
    pub fn new(code: impl Into<Code>, message: impl Into<String>) -> HandlerError {
        HandlerError {
            code: code.into(),
            message: message.into(),
        }
    }

    /// Its code.
    pub fn code(&self) -> &Code {
        &self.code
    }

    /// Its message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// [`Code::NotFound`] with a message.
    pub fn not_found(message: impl Into<String>) -> HandlerError {
        HandlerError::new(Code::NotFound, message)
    }

    /// [`Code::InvalidArgument`] with a message.
    pub fn invalid_argument(message: impl Into<String>) -> HandlerError {
        HandlerError::new(Code::InvalidArgument, message)
    }

    /// [`Code::PermissionDenied`] with a message.
    pub fn permission_denied(message: impl Into<String>) -> HandlerError {
        HandlerError::new(Code::PermissionDenied, message)
    }

    /// [`Code::Unauthenticated`] with a message.
    pub fn unauthenticated(message: impl Into<String>) -> HandlerError {
        HandlerError::new(Code::Unauthenticated, message)
    }

    /// [`Code::Unavailable`] with a message.
    pub fn unavailable(message: impl Into<String>) -> HandlerError {
        HandlerError::new(Code::Unavailable, message)
    }

    /// [`Code::Internal`] with a message.
    pub fn internal(message: impl Into<String>) -> HandlerError {
        HandlerError::new(Code::Internal, message)
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for HandlerError {}

impl From<crate::Error> for HandlerError {
    /// Lets a handler pass the failure of a call it made on with `?`: a handler error from
    /// the node it called keeps its code and message (so it reaches our caller unchanged);
    /// any other error becomes its stable code ([`ErrorCode::as_str`](crate::ErrorCode::as_str))
    /// and its text.
    fn from(error: crate::Error) -> HandlerError {
        match error {
            crate::Error::Handler { code, message } => HandlerError { code, message },
            other => HandlerError::new(
                Code::Other(other.code().as_str().to_owned()),
                other.to_string(),
            ),
        }
    }
}

/// Turns whatever a service failed with into the error reply sent back.
pub(crate) fn to_remote(error: BoxError) -> RemoteError {
    if let Some(e) = error.downcast_ref::<HandlerError>() {
        return RemoteError::new(e.code.as_str(), e.message.clone());
    }
    if let Some(NoHandler(event)) = error.downcast_ref::<NoHandler>() {
        return RemoteError::no_handler(event);
    }
    if error.is::<tower::timeout::error::Elapsed>() {
        return RemoteError::new(Code::DeadlineExceeded.as_str(), "the handler took too long");
    }
    RemoteError::new(Code::Unknown.as_str(), error.to_string())
}

/// What the end of a middleware stack fails with when no handler matches the event (it was
/// removed while the request went through the middleware): answered as the framework's
/// `NO_HANDLER`, not as a handler's error.
#[derive(Debug)]
pub(crate) struct NoHandler(pub(crate) String);

impl fmt::Display for NoHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no handler for {:?}", self.0)
    }
}

impl std::error::Error for NoHandler {}

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

    pub(crate) fn same(&self, other: &Pattern) -> bool {
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
pub(crate) type BoxLayer = Arc<dyn Fn(HandlerService) -> HandlerService + Send + Sync>;

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

/// A reply: its payload and the metadata its handler set
/// ([`Response::with_meta`](crate::Response::with_meta)).
///
/// The one place that says how to read a reply's metadata: ask for a `Reply` instead of a
/// decoded value. A typed call gives one when `Reply` is the type asked for (its payload
/// still MessagePack, [`decode`](Reply::decode) it); a [`raw`](crate::Call::raw) call always gives
/// one. The same holds for each entry of a gather.
///
/// ```no_run
/// # async fn example(node: node::Node) -> node::Result<()> {
/// use node::Reply;
///
/// let reply: Reply = node.call("billing-1", "invoice:total").send(&"order-17").await?;
/// let total: u64 = reply.decode()?;
/// let served_by = reply.meta().get_str("served-by");
/// # let _ = (total, served_by);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Reply {
    payload: Bytes,
    meta: Meta,
}

impl Reply {
    /// The reply's metadata, checked (its size against
    /// [`Config::max_metadata`](crate::Config::max_metadata)).
    pub(crate) fn from_answer(
        answer: protocol::Answer,
        limits: &protocol::MetaLimits,
    ) -> crate::Result<Reply> {
        Ok(Reply {
            meta: Meta::parse(answer.metadata, limits)?,
            payload: answer.payload,
        })
    }

    /// The raw payload.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// Takes the payload out.
    pub fn into_payload(self) -> Bytes {
        self.payload
    }

    /// The metadata the handler answered with.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// Decodes the payload from MessagePack.
    pub fn decode<R: DeserializeOwned>(&self) -> crate::Result<R> {
        Ok(decode_value(&self.payload)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::system::NO_HANDLER;

    #[test]
    fn errors_become_error_replies_with_codes() {
        let remote = to_remote(Box::new(HandlerError::new("E_BUSY", "busy")));
        assert_eq!(remote.code, "E_BUSY");
        assert_eq!(remote.message, "busy");
        assert!(!remote.system, "a handler's error is not the framework's");

        let other: BoxError = "plain failure".into();
        assert_eq!(to_remote(other).code, HandlerError::HANDLER_ERROR);
        let missing = to_remote(Box::new(NoHandler("gone".into())));
        assert!(missing.is_system(NO_HANDLER));
    }

    #[tokio::test]
    async fn with_state_hands_every_call_a_clone_of_one_state() {
        let state = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handler = with_state(
            Arc::clone(&state),
            |state: Arc<std::sync::atomic::AtomicUsize>, _req: Request| async move {
                state.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Arc::as_ptr(&state) as usize
            },
        );
        let request = || {
            let envelope = protocol::Envelope::new(
                protocol::Kind::Request,
                1,
                "e",
                Bytes::new(),
                Bytes::new(),
            );
            let frames = envelope.encode();
            let decoded = protocol::Envelope::decode(&frames, usize::MAX).unwrap();
            let incoming = Incoming::from_envelope(protocol::PeerId::default(), decoded);
            Request::new(NodeId::from("peer"), incoming, Meta::new(), None)
        };
        let (a, b) = (handler(request()).await, handler.clone()(request()).await);
        assert_eq!(a, b, "the same instance");
        assert_eq!(a, Arc::as_ptr(&state) as usize);
        assert_eq!(state.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn patterns() {
        assert!(Pattern::from("a").matches("a"));
        assert!(!Pattern::from("a").matches("ab"));
        assert!(Pattern::from(Regex::new("^job:\\d+$").unwrap()).matches("job:12"));
    }
}
