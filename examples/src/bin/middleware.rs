//! Tower middleware in front of handlers: a timeout, and an auth check.
//!
//! An `api` node puts `tower::timeout::TimeoutLayer` (200 ms) in front of its `report`
//! handler, which takes as long as the caller asks: a quick report passes, a slow one comes
//! back as an error with the code `TIMEOUT`. It also puts a hand-written layer,
//! `RequireToken`, in front of every event matching `^admin:`: a request without the right
//! token never reaches the handler and comes back with the code `UNAUTHORIZED`. Events that
//! do not match (`status`) are not checked.
//!
//! The token travels in the request's metadata (`call(..).meta("token", ..)`), beside the
//! payload; the layer gives the handler who the token stands for through the request's
//! extensions, so the handler never sees the token.
//!
//! Run it with `cargo run -p examples --bin middleware`.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use examples::{address, init_tracing, unexpected, Result};
use futures::future::BoxFuture;
use node::{BoxError, Error, HandlerError, Node, Request, Response};
use regex::Regex;
use tower::timeout::TimeoutLayer;
use tower::{Layer, Service};

/// Who a valid token stands for: what the layer hands the handler.
#[derive(Debug, Clone)]
struct Operator(String);

/// A tower layer that refuses requests whose metadata does not carry `token`.
#[derive(Clone)]
struct RequireToken {
    token: Arc<str>,
}

impl<S> Layer<S> for RequireToken {
    type Service = TokenCheck<S>;

    fn layer(&self, inner: S) -> TokenCheck<S> {
        TokenCheck {
            inner,
            token: Arc::clone(&self.token),
        }
    }
}

/// The service [`RequireToken`] wraps around a handler.
#[derive(Clone)]
struct TokenCheck<S> {
    inner: S,
    token: Arc<str>,
}

impl<S> Service<Request> for TokenCheck<S>
where
    S: Service<Request, Response = Response, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, std::result::Result<Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let token = req.meta().get_str("token");
        if token != Some(&*self.token) {
            let refusal = HandlerError::new(
                "UNAUTHORIZED",
                format!("{} needs a valid token", req.event()),
            );
            return Box::pin(async move { Err(refusal.into()) });
        }
        req.extensions_mut()
            .insert(Operator("ops-on-call".to_owned()));
        // The service that was made ready is the one that must be called (tower's rule);
        // keep a fresh clone in its place for the next request.
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        Box::pin(ready.call(req))
    }
}

#[tokio::main]
async fn main() -> Result {
    init_tracing();

    let api = Node::builder()
        .id("api")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    api.layer_for("report", TimeoutLayer::new(Duration::from_millis(200)));
    api.layer_for(
        Regex::new("^admin:")?,
        RequireToken {
            token: Arc::from("s3cret"),
        },
    );
    api.on_request("report", |req: Request| async move {
        let millis: u64 = req.decode()?;
        tokio::time::sleep(Duration::from_millis(millis)).await;
        Ok::<_, HandlerError>(format!("report ready after {millis} ms"))
    });
    api.on_request(Regex::new("^admin:")?, |req: Request| async move {
        let target: String = req.decode()?;
        let operator = req
            .extensions()
            .get::<Operator>()
            .map_or("nobody", |o| o.0.as_str())
            .to_owned();
        Ok::<_, HandlerError>(format!("{} {target} done by {operator}", req.event()))
    });
    api.on_request("status", |_req: Request| async move {
        Ok::<_, HandlerError>("all good")
    });

    let client = Node::builder().id("client").build().await?;
    client.connect(&address(&api)?).await?;

    println!("-- timeout layer on `report` (200 ms)");
    let quick: String = client.request("api", "report", &20u64).await?;
    println!("report 20 ms     -> allowed: {quick}");
    match client
        .request::<_, String>("api", "report", &2_000u64)
        .await
    {
        Err(Error::Handler { code, message }) if code == HandlerError::TIMEOUT => {
            println!("report 2000 ms   -> refused: {code}: {message}");
        }
        other => return Err(unexpected(format!("{other:?} for a slow report"))),
    }

    println!("-- auth layer on `^admin:`");
    let calls = [
        ("admin:purge", Some("s3cret"), true),
        ("admin:purge", None, false),
        ("admin:restart", Some("guess"), false),
    ];
    for (event, token, allowed) in calls {
        let shown = format!("{event} token={}", token.unwrap_or("none"));
        let call = client.call("api", event);
        let call = match token {
            Some(token) => call.meta("token", token),
            None => call,
        };
        match call.send::<_, String>("cache").await {
            Ok(reply) if allowed => println!("{shown:<28} -> allowed: {reply}"),
            Err(Error::Handler { code, message }) if !allowed && code == "UNAUTHORIZED" => {
                println!("{shown:<28} -> refused: {code}: {message}");
            }
            other => return Err(unexpected(format!("{other:?} for {shown}"))),
        }
    }
    let status: String = client.request("api", "status", &()).await?;
    println!(
        "{:<28} -> allowed: {status} (no layer on it)",
        "status token=none"
    );

    client.close().await;
    api.close().await;
    Ok(())
}
