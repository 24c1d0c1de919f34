//! Middleware from an async function, in axum's shape: `from_fn(|req, next| async { .. })`.

use std::future::Future;
use std::task::{Context, Poll};

use futures::future::{MapErr, TryFutureExt};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Layer, Service, ServiceExt};

use crate::serving::handler::{HandlerService, Request, Response};

/// Makes a middleware from an async function of the request and the rest of the stack.
///
/// The function sees every request and tick its layer applies to
/// ([`Node::layer`](crate::Node::layer) for the whole node,
/// [`Node::layer_for`](crate::Node::layer_for) for one pattern). It may read or change the
/// request (its metadata, its [`extensions`](Request::extensions_mut) for the handler),
/// pass it on with [`next.run(req).await`](Next::run) and look at or change the answer, or
/// refuse it by returning an error without calling `next`: a
/// [`HandlerError`](crate::HandlerError) reaches the caller with its code and message, as a
/// handler's would; a refused tick runs no tick handler.
///
/// Its error type is anything that converts into a [`BoxError`]; `next.run` fails with a
/// `BoxError`, so a function that both refuses and passes on returns
/// `Err(HandlerError::new(..).into())`.
///
/// ```
/// use node::middleware::{from_fn, Next};
/// use node::{HandlerError, Node, Request};
///
/// /// The tenant a request is for, read once by the middleware for every handler.
/// #[derive(Clone)]
/// struct Tenant(String);
///
/// fn require_tenant(node: &Node) {
///     node.layer(from_fn(|mut req: Request, next: Next| async move {
///         let Some(tenant) = req.meta().get_str("tenant").map(str::to_owned) else {
///             return Err(HandlerError::new("UNAUTHENTICATED", "no tenant").into());
///         };
///         req.extensions_mut().insert(Tenant(tenant));
///         next.run(req).await
///     }));
/// }
/// ```
///
/// State for the function: [`from_fn_with_state`].
pub fn from_fn<F>(f: F) -> FromFnLayer<F> {
    FromFnLayer { f }
}

/// [`from_fn`] with a state given to the function as its first argument, a clone per call
/// (share it with an `Arc` or a cheap handle): `from_fn_with_state(limits, |limits, req,
/// next| async move { .. })`, as [`with_state`](crate::with_state) does for handlers.
pub fn from_fn_with_state<S, F, Fut>(
    state: S,
    f: F,
) -> FromFnLayer<impl Fn(Request, Next) -> Fut + Clone + Send + Sync + 'static>
where
    S: Clone + Send + Sync + 'static,
    F: Fn(S, Request, Next) -> Fut + Clone + Send + Sync + 'static,
{
    from_fn(move |req, next| f(state.clone(), req, next))
}

/// The layer [`from_fn`] makes.
#[derive(Clone)]
pub struct FromFnLayer<F> {
    f: F,
}

impl<F> std::fmt::Debug for FromFnLayer<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FromFnLayer").finish_non_exhaustive()
    }
}

impl<F, S> Layer<S> for FromFnLayer<F>
where
    F: Clone,
    S: Service<Request, Response = Response> + Clone + Send + Sync + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Service = FromFn<F>;

    fn layer(&self, inner: S) -> FromFn<F> {
        FromFn {
            f: self.f.clone(),
            // Boxed once, here (a layer is applied once), so `Next` is one type whatever
            // is behind it.
            next: BoxCloneSyncService::new(inner.map_err(Into::into)),
        }
    }
}

/// The service [`from_fn`] puts in front of the rest of the stack.
#[derive(Clone)]
pub struct FromFn<F> {
    f: F,
    next: HandlerService,
}

impl<F> std::fmt::Debug for FromFn<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FromFn").finish_non_exhaustive()
    }
}

impl<F, Fut, E> Service<Request> for FromFn<F>
where
    F: Fn(Request, Next) -> Fut,
    Fut: Future<Output = Result<Response, E>>,
    E: Into<BoxError>,
{
    type Response = Response;
    type Error = BoxError;
    type Future = MapErr<Fut, fn(E) -> BoxError>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The rest of the stack is made ready in `Next::run`, when (if) the function calls
        // it: a refusal never waits for a permit it does not use.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let next = Next {
            inner: self.next.clone(),
        };
        (self.f)(request, next).map_err(Into::into as fn(E) -> BoxError)
    }
}

/// The rest of the stack behind a [`from_fn`] middleware: the next layers, then the
/// handler (or every matching tick handler).
pub struct Next {
    inner: HandlerService,
}

impl Next {
    /// Passes the request on and returns the answer: the handler's response, or the error
    /// a layer behind or the handler failed with (pass it on with `?` or look at it).
    /// A tick's answer is an empty response once its handlers ran.
    pub async fn run(self, request: Request) -> Result<Response, BoxError> {
        self.inner.oneshot(request).await
    }
}

impl std::fmt::Debug for Next {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Next").finish_non_exhaustive()
    }
}
