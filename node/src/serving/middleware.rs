//! Middleware: what runs in front of handlers, for requests and ticks alike.
//!
//! The short way is an async function, in axum's shape ([`from_fn`]): it gets the request
//! and the rest of the stack ([`Next`]), and passes the request on or refuses it.
//!
//! ```
//! use node::middleware::{from_fn, Next};
//! use node::{HandlerError, Node, Request};
//!
//! fn tenants_only(node: &Node) {
//!     node.layer(from_fn(|req: Request, next: Next| async move {
//!         if req.meta().get_str("tenant").is_none() {
//!             return Err(HandlerError::new("UNAUTHENTICATED", "no tenant").into());
//!         }
//!         next.run(req).await
//!     }));
//! }
//! ```
//!
//! Any tower [`Layer`](tower::Layer) fits as well (`tower::timeout::TimeoutLayer`,
//! `ConcurrencyLimitLayer`, a layer of your own); the same check with tower's `layer_fn`
//! and `service_fn`, for code that already speaks tower:
//!
//! ```
//! use node::{BoxError, HandlerError, HandlerService, Node, Request};
//! use tower::{layer::layer_fn, service_fn, ServiceExt};
//!
//! fn tenants_only(node: &Node) {
//!     node.layer(layer_fn(|inner: HandlerService| {
//!         service_fn(move |req: Request| {
//!             let inner = inner.clone();
//!             async move {
//!                 if req.meta().get_str("tenant").is_none() {
//!                     let refusal = HandlerError::new("UNAUTHENTICATED", "no tenant");
//!                     return Err(BoxError::from(refusal));
//!                 }
//!                 inner.oneshot(req).await
//!             }
//!         })
//!     }));
//! }
//! ```
//!
//! ## How layers are applied
//!
//! Every layer is applied once, when it is added, and its service lives as long as the
//! node: [`Node::layer`](crate::Node::layer) wraps the whole node (one
//! `ConcurrencyLimitLayer::new(1)` lets one request at a time into the node, whatever its
//! event), [`Node::layer_for`](crate::Node::layer_for) wraps the events of one pattern (one
//! instance shared by all of them). Registering handlers or other layers later never
//! rebuilds a layer, so a stateful layer is never reset behind the user's back.
//!
//! The layers form a chain of stages in the order they were added (the first added is
//! outermost). Each stage's service wraps a service that carries the request on to the next
//! stage that applies to its event (a pattern stage whose pattern does not match is
//! skipped), and past the last stage to the handler. Per request, each stage's service is
//! cloned and driven through `poll_ready` and `call` (tower's `oneshot`), so backpressure
//! (`ConcurrencyLimit`'s permit, a `Buffer`'s slot) is real: clones share what their layer
//! shares (`ConcurrencyLimit` shares its semaphore; a layer whose clones do not share
//! state, such as `RateLimit`, is wrapped in `tower::buffer::Buffer` to be node-wide, as
//! with any tower server).
//!
//! Ticks go through the same chain ([`Request::is_tick`]): the end of the chain runs every
//! matching tick handler and answers an empty response, which is dropped. A layer that
//! refuses a tick runs none of them.

mod from_fn;

pub use from_fn::{from_fn, from_fn_with_state, FromFn, FromFnLayer, Next};

use std::future::Future;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use futures::future::{BoxFuture, Either};
use futures::FutureExt;
use parking_lot::RwLock;
use tower::{BoxError, Service, ServiceExt};

use crate::serving::handler::{
    BoxLayer, HandlerService, NoHandler, Pattern, Request, Resolved, Response, TickHandler,
};

/// One middleware, applied once: its service wraps a `ToNext` to the stage after it.
struct Stage {
    /// `None`: every event (`Node::layer`); else the events it wraps (`Node::layer_for`).
    pattern: Option<Pattern>,
    service: HandlerService,
}

impl Stage {
    fn applies(&self, event: &str) -> bool {
        self.pattern.as_ref().is_none_or(|p| p.matches(event))
    }
}

/// Every handler and middleware of a node.
#[derive(Default)]
pub(crate) struct Table {
    requests: Vec<(Pattern, HandlerService, Shape)>,
    ticks: Vec<(Pattern, TickHandler)>,
    stages: Vec<Stage>,
}

impl Table {
    /// The handler answering `event`: the first exact name, else the first pattern that
    /// matches, in registration order.
    fn request_handler(&self, event: &str) -> Option<&HandlerService> {
        self.requests
            .iter()
            .find(|(p, _, _)| matches!(p, Pattern::Exact(name) if name == event))
            .or_else(|| self.requests.iter().find(|(p, _, _)| p.matches(event)))
            .map(|(_, s, _)| s)
    }

    fn tick_handlers(&self, event: &str) -> Vec<TickHandler> {
        self.ticks
            .iter()
            .filter(|(p, _)| p.matches(event))
            .map(|(_, h)| Arc::clone(h))
            .collect()
    }

    /// The first stage at or after `from` that applies to `event`, with its index.
    fn stage(&self, from: usize, event: &str) -> Option<(usize, HandlerService)> {
        self.stages
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, stage)| stage.applies(event))
            .map(|(i, stage)| (i, stage.service.clone()))
    }
}

/// The node's handlers and middleware, shared by the node and the `ToNext` services inside
/// its stages.
#[derive(Clone, Default)]
pub(crate) struct Handlers {
    table: Arc<RwLock<Table>>,
}

impl Handlers {
    pub(crate) fn add_request(&self, pattern: Pattern, service: HandlerService) {
        self.add_shaped(pattern, service, Shape::Reply);
    }

    /// Adds a request handler that answers in the given shape (a stream, an upload).
    pub(crate) fn add_shaped(&self, pattern: Pattern, service: HandlerService, shape: Shape) {
        self.table.write().requests.push((pattern, service, shape));
    }

    pub(crate) fn remove_request(&self, pattern: &Pattern) -> bool {
        let mut table = self.table.write();
        let before = table.requests.len();
        table.requests.retain(|(p, _, _)| !p.same(pattern));
        before != table.requests.len()
    }

    pub(crate) fn add_tick(&self, pattern: Pattern, handler: TickHandler) {
        self.table.write().ticks.push((pattern, handler));
    }

    pub(crate) fn remove_tick(&self, pattern: &Pattern) -> bool {
        let mut table = self.table.write();
        let before = table.ticks.len();
        table.ticks.retain(|(p, _)| !p.same(pattern));
        before != table.ticks.len()
    }

    /// Adds a stage after the existing ones (innermost so far). The layer is applied here,
    /// once.
    pub(crate) fn add_layer(&self, pattern: Option<Pattern>, layer: BoxLayer) {
        let mut table = self.table.write();
        let next = ToNext {
            table: Arc::downgrade(&self.table),
            from: table.stages.len() + 1,
        };
        let service = layer(HandlerService::new(next));
        table.stages.push(Stage { pattern, service });
    }

    /// The first step of a request (or tick) for `event`: the first stage that applies, or
    /// the handler(s) when none does. `None` when no handler matches: a request nobody
    /// handles is answered `NO_HANDLER` at once, before any middleware; a tick nobody handles
    /// is dropped. Taken on the socket's driver, with the table looked at once: the
    /// handler(s) found here travel with the request to the end of the middleware.
    pub(crate) fn first(&self, event: &str, tick: bool) -> Option<First> {
        let table = self.table.read();
        let resolved = if tick {
            let handlers = table.tick_handlers(event);
            if handlers.is_empty() {
                return None;
            }
            Resolved::Ticks(handlers)
        } else {
            Resolved::Handler(table.request_handler(event)?.clone())
        };
        Some(match (table.stage(0, event), resolved) {
            (Some((_, stage)), resolved) => First::Stage(stage, resolved),
            (None, Resolved::Handler(handler)) => First::Service(handler),
            (None, Resolved::Ticks(handlers)) => First::Ticks(handlers),
        })
    }

    /// Runs a request or tick through the middleware that applies to its event and then its
    /// handler(s).
    #[cfg(test)]
    pub(crate) async fn call(&self, request: Request) -> Result<Response, BoxError> {
        let tick = request.is_tick();
        match self.first(request.event(), tick) {
            Some(first) => first.run(request).await,
            None => Err(BoxError::from(NoHandler(request.event().to_owned()))),
        }
    }

    /// The patterns handled, by shape, in registration order (a regex as `/regex/`), for a
    /// node's description.
    pub(crate) fn patterns(&self) -> Patterns {
        let show = |p: &Pattern| match p {
            Pattern::Exact(name) => name.clone(),
            Pattern::Regex(regex) => format!("/{}/", regex.as_str()),
        };
        let table = self.table.read();
        let shaped = |shape: Shape| {
            let requests = table.requests.iter();
            requests
                .filter(|(_, _, s)| *s == shape)
                .map(|(p, _, _)| show(p))
                .collect()
        };
        Patterns {
            requests: shaped(Shape::Reply),
            streams: shaped(Shape::Stream),
            uploads: shaped(Shape::Upload),
            ticks: table.ticks.iter().map(|(p, _)| show(p)).collect(),
        }
    }

    /// Drops every handler and layer (closing node: handlers often hold their node, and
    /// dropping them breaks that cycle).
    pub(crate) fn clear(&self) {
        *self.table.write() = Table::default();
    }
}

/// What a request handler answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// One reply.
    Reply,
    /// A streamed reply (`on_stream`).
    Stream,
    /// One reply to a streamed body (`on_upload`).
    Upload,
}

/// The patterns a node handles, by shape (see [`Handlers::patterns`]).
pub(crate) struct Patterns {
    pub(crate) requests: Vec<String>,
    pub(crate) streams: Vec<String>,
    pub(crate) uploads: Vec<String>,
    pub(crate) ticks: Vec<String>,
}

/// Where a request or tick goes first (see [`Handlers::first`]).
pub(crate) enum First {
    /// A stage, with what runs at the end of the middleware.
    Stage(HandlerService, Resolved),
    /// The request's handler (no stage applies).
    Service(HandlerService),
    /// No stage applies to the tick: its handlers.
    Ticks(Vec<TickHandler>),
}

impl First {
    /// Runs the request (or tick) from here to its handler(s).
    ///
    /// A future made of its parts, not an `async fn`: that would hold the request twice
    /// (as its argument and inside the service's future), and a request's work is moved
    /// into its runner whole.
    pub(crate) fn run(
        self,
        request: Request,
    ) -> impl Future<Output = Result<Response, BoxError>> + Send + 'static {
        match self {
            First::Stage(stage, resolved) => {
                Either::Left(stage.oneshot(request.resolved(resolved)))
            }
            First::Service(service) => Either::Right(Either::Left(service.oneshot(request))),
            First::Ticks(handlers) => Either::Right(Either::Right(
                futures::future::join_all(handlers.iter().map(|h| h(request.clone())))
                    .map(|_| Ok(Response::default())),
            )),
        }
    }
}

/// Carries a request from stage `from - 1` to the next stage that applies, or to the
/// handler. Holds the table weakly: the table owns the stages that own this.
#[derive(Clone)]
struct ToNext {
    table: Weak<RwLock<Table>>,
    from: usize,
}

impl Service<Request> for ToNext {
    type Response = Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Response, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The stages after this one are driven (and wait) in `call`'s future.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let table = self.table.upgrade();
        let from = self.from;
        Box::pin(async move {
            match table {
                Some(table) => enter(&table, from, request).await,
                None => Err(BoxError::from(NoHandler(request.event().to_owned()))),
            }
        })
    }
}

/// Enters stage `from` (or the first after it that applies), or the handler when there is
/// none.
async fn enter(
    table: &Arc<RwLock<Table>>,
    from: usize,
    mut request: Request,
) -> Result<Response, BoxError> {
    enum Step {
        Stage(HandlerService),
        Request(Option<HandlerService>),
        Ticks(Vec<TickHandler>),
    }
    let step = {
        let table = table.read();
        match table.stage(from, request.event()) {
            Some((_, service)) => Step::Stage(service),
            // Past the last stage: what `Handlers::first` found when the request arrived.
            None => match request.take_resolved() {
                Some(Resolved::Handler(handler)) => Step::Request(Some(handler)),
                Some(Resolved::Ticks(handlers)) => Step::Ticks(handlers),
                // A request that did not come through `first`.
                None if request.is_tick() => Step::Ticks(table.tick_handlers(request.event())),
                None => Step::Request(table.request_handler(request.event()).cloned()),
            },
        }
    };
    match step {
        Step::Stage(service) | Step::Request(Some(service)) => service.oneshot(request).await,
        Step::Request(None) => Err(BoxError::from(NoHandler(request.event().to_owned()))),
        Step::Ticks(handlers) => {
            futures::future::join_all(handlers.iter().map(|h| h(request.clone()))).await;
            Ok(Response::default())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use super::{from_fn, from_fn_with_state, Next};
    use crate::mesh::peer::NodeId;
    use crate::serving::handler::{boxed_layer, service_from_fn, to_remote, HandlerError};
    use bytes::Bytes;
    use protocol::{decode_value, Meta};
    use regex::Regex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;
    use tower::layer::layer_fn;
    use tower::limit::ConcurrencyLimitLayer;
    use tower::util::BoxCloneSyncService;

    fn incoming(event: &str) -> protocol::Incoming {
        let envelope = protocol::Envelope::new(
            protocol::Kind::Request,
            1,
            event,
            Bytes::new(),
            Bytes::new(),
        );
        let frames = envelope.encode();
        let decoded = protocol::Envelope::decode(&frames, usize::MAX).unwrap();
        protocol::Incoming::from_envelope(protocol::PeerId::default(), decoded)
    }

    fn request(event: &str) -> Request {
        Request::new(NodeId::from("peer"), incoming(event), Meta::new(), None)
    }

    fn answering(text: &'static str) -> HandlerService {
        service_from_fn(move |_req| async move { Ok::<_, HandlerError>(text) })
    }

    async fn answer(handlers: &Handlers, event: &str) -> Option<String> {
        let response = handlers.call(request(event)).await.ok()?;
        decode_value::<String>(response.payload()).ok()
    }

    #[tokio::test]
    async fn exact_names_win_over_patterns_then_registration_order() {
        let handlers = Handlers::default();
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
            answer(&handlers, "user:get").await.as_deref(),
            Some("exact")
        );
        assert_eq!(
            answer(&handlers, "user:put").await.as_deref(),
            Some("pattern")
        );
        assert_eq!(
            answer(&handlers, "admin:get").await.as_deref(),
            Some("late")
        );
        assert_eq!(answer(&handlers, "nothing").await, None);
        let missing = handlers.call(request("nothing")).await.unwrap_err();
        assert!(to_remote(missing).is_system(protocol::RemoteError::NO_HANDLER));
        assert!(handlers.remove_request(&Pattern::from("user:get")));
        assert_eq!(
            answer(&handlers, "user:get").await.as_deref(),
            Some("pattern")
        );
    }

    /// A layer that records its name each time a request passes through it.
    fn recording(name: &'static str, order: &Arc<Mutex<Vec<&'static str>>>) -> BoxLayer {
        let order = Arc::clone(order);
        boxed_layer(layer_fn(move |inner: HandlerService| {
            let order = Arc::clone(&order);
            BoxCloneSyncService::new(tower::service_fn(move |req: Request| {
                order.lock().unwrap().push(name);
                inner.clone().oneshot(req)
            }))
        }))
    }

    #[tokio::test]
    async fn middleware_runs_first_registered_outermost_and_only_where_it_matches() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let handlers = Handlers::default();
        handlers.add_request(Pattern::from(Regex::new(".*").unwrap()), answering("ok"));
        handlers.add_layer(None, recording("a", &order));
        handlers.add_layer(Some(Pattern::from("only-this")), recording("b", &order));
        handlers.add_layer(None, recording("c", &order));
        answer(&handlers, "only-this").await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["a", "b", "c"]);
        order.lock().unwrap().clear();
        answer(&handlers, "other").await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["a", "c"]);
    }

    /// The handler is found once, when the request arrives: a request already inside the
    /// middleware reaches the handler it arrived for, even if that handler is removed (or
    /// another one registered) meanwhile; the next request sees the change.
    #[tokio::test]
    async fn a_request_in_the_middleware_keeps_the_handler_it_arrived_for() {
        let handlers = Handlers::default();
        handlers.add_request(Pattern::from("get"), answering("first"));
        let table = handlers.clone();
        handlers.add_layer(
            None,
            boxed_layer(layer_fn(move |inner: HandlerService| {
                let table = table.clone();
                BoxCloneSyncService::new(tower::service_fn(move |req: Request| {
                    // What `Node::off_request` and `on_request` do, while this one passes.
                    table.remove_request(&Pattern::from("get"));
                    table.add_request(Pattern::from("get"), answering("second"));
                    inner.clone().oneshot(req)
                }))
            })),
        );
        assert_eq!(answer(&handlers, "get").await.as_deref(), Some("first"));
        assert_eq!(answer(&handlers, "get").await.as_deref(), Some("second"));
    }

    /// A layer is applied once, when added: registering handlers or layers afterwards never
    /// builds it again (which would reset a stateful layer).
    #[tokio::test]
    async fn a_layer_is_built_once_whatever_is_registered_later() {
        let built = Arc::new(AtomicUsize::new(0));
        let handlers = Handlers::default();
        let counter = Arc::clone(&built);
        handlers.add_layer(
            None,
            boxed_layer(layer_fn(move |inner: HandlerService| {
                counter.fetch_add(1, Ordering::SeqCst);
                inner
            })),
        );
        for i in 0..50 {
            handlers.add_request(Pattern::from(format!("event-{i}")), answering("ok"));
            answer(&handlers, &format!("event-{i}")).await.unwrap();
        }
        handlers.add_layer(
            Some(Pattern::from("event-1")),
            recording("x", &Default::default()),
        );
        answer(&handlers, "event-1").await.unwrap();
        assert_eq!(built.load(Ordering::SeqCst), 1);
    }

    /// `ConcurrencyLimitLayer::new(1)` on the whole node: a request for another event waits
    /// until the first one is done.
    #[tokio::test(start_paused = true)]
    async fn a_node_wide_concurrency_limit_covers_every_event() {
        let handlers = Handlers::default();
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        for event in ["one", "two"] {
            let (running, most) = (Arc::clone(&running), Arc::clone(&most));
            handlers.add_request(
                Pattern::from(event),
                service_from_fn(move |_req| {
                    let (running, most) = (Arc::clone(&running), Arc::clone(&most));
                    async move {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok::<_, HandlerError>("done")
                    }
                }),
            );
        }
        handlers.add_layer(None, boxed_layer(ConcurrencyLimitLayer::new(1)));
        let (a, b) = tokio::join!(answer(&handlers, "one"), answer(&handlers, "two"));
        assert_eq!((a.as_deref(), b.as_deref()), (Some("done"), Some("done")));
        assert_eq!(most.load(Ordering::SeqCst), 1, "never two at once");
    }

    #[tokio::test]
    async fn from_fn_passes_on_changes_the_request_and_its_answer() {
        #[derive(Clone)]
        struct Seen(&'static str);
        let handlers = Handlers::default();
        handlers.add_request(
            Pattern::from("who"),
            service_from_fn(|req: Request| async move {
                Ok::<_, HandlerError>(req.extensions().get::<Seen>().map(|s| s.0))
            }),
        );
        let layer = from_fn(|mut req: Request, next: Next| async move {
            req.extensions_mut().insert(Seen("the middleware"));
            let response = next.run(req).await?;
            Ok::<_, BoxError>(response.with_meta("checked", "yes")?)
        });
        handlers.add_layer(None, boxed_layer(layer));
        let response = handlers.call(request("who")).await.unwrap();
        let seen: Option<String> = decode_value(response.payload()).unwrap();
        assert_eq!(seen.as_deref(), Some("the middleware"));
        assert_eq!(response.meta().get_str("checked"), Some("yes"));
    }

    #[tokio::test]
    async fn from_fn_refuses_with_a_typed_error_and_the_handler_never_runs() {
        let ran = Arc::new(AtomicUsize::new(0));
        let handlers = Handlers::default();
        let counter = Arc::clone(&ran);
        handlers.add_request(
            Pattern::from("guarded"),
            service_from_fn(move |_req| {
                counter.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, HandlerError>("ran") }
            }),
        );
        handlers.add_request(Pattern::from("open"), answering("open"));
        let refuse = from_fn(|_req: Request, _next: Next| async move {
            Err::<Response, _>(HandlerError::new("UNAUTHENTICATED", "who are you"))
        });
        handlers.add_layer(Some(Pattern::from("guarded")), boxed_layer(refuse));
        let refused = to_remote(handlers.call(request("guarded")).await.unwrap_err());
        assert_eq!(
            (refused.code.as_str(), refused.message.as_str()),
            ("UNAUTHENTICATED", "who are you")
        );
        assert!(
            !refused.system,
            "the middleware's refusal, not the framework's"
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        assert_eq!(answer(&handlers, "open").await.as_deref(), Some("open"));
    }

    #[tokio::test]
    async fn from_fn_with_state_gives_every_call_the_same_state() {
        let state = Arc::new(AtomicUsize::new(0));
        let handlers = Handlers::default();
        handlers.add_request(Pattern::from("count"), answering("ok"));
        let layer = from_fn_with_state(
            Arc::clone(&state),
            |seen: Arc<AtomicUsize>, req: Request, next: Next| async move {
                seen.fetch_add(1, Ordering::SeqCst);
                next.run(req).await
            },
        );
        handlers.add_layer(None, boxed_layer(layer));
        for _ in 0..3 {
            answer(&handlers, "count").await.unwrap();
        }
        assert_eq!(state.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_tick_refused_by_from_fn_runs_no_tick_handler() {
        let ran = Arc::new(AtomicUsize::new(0));
        let handlers = Handlers::default();
        let counter = Arc::clone(&ran);
        handlers.add_tick(
            Pattern::from("job"),
            Arc::new(move |_req: Request| {
                counter.fetch_add(1, Ordering::SeqCst);
                Box::pin(async {})
            }),
        );
        let layer = from_fn(|req: Request, next: Next| async move {
            if req.meta().get_str("tenant").is_none() {
                return Err(HandlerError::new("UNAUTHENTICATED", "no tenant").into());
            }
            next.run(req).await
        });
        handlers.add_layer(None, boxed_layer(layer));
        let tick = || Request::new_tick(NodeId::from("peer"), incoming("job"), Meta::new());
        assert!(handlers.call(tick()).await.is_err());
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        let mut meta = Meta::new();
        meta.insert("tenant", "acme").unwrap();
        let allowed = Request::new_tick(NodeId::from("peer"), incoming("job"), meta);
        handlers.call(allowed).await.unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn ticks_go_through_middleware_to_every_matching_tick_handler() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let handlers = Handlers::default();
        let jobs = Regex::new("^job:").unwrap();
        for name in ["first", "second"] {
            let order = Arc::clone(&order);
            handlers.add_tick(
                Pattern::from(&jobs),
                Arc::new(move |req: Request| {
                    assert!(req.is_tick());
                    order.lock().unwrap().push(name);
                    Box::pin(async {})
                }),
            );
        }
        handlers.add_layer(None, recording("layer", &order));
        let tick = Request::new_tick(NodeId::from("peer"), incoming("job:done"), Meta::new());
        handlers.call(tick).await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["layer", "first", "second"]);
    }
}
