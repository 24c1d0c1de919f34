//! Middleware in front of handlers: a timeout, and an auth check written as an async
//! function.
//!
//! An `api` node puts `tower::timeout::TimeoutLayer` (200 ms) in front of its `report`
//! handler, which takes as long as the caller asks: a quick report passes, a slow one comes
//! back as an error with the code `TIMEOUT`. It also puts an auth check, written with
//! `middleware::from_fn`, in front of every event matching `^admin:`: a request without the
//! right token never reaches the handler and comes back with the code `UNAUTHORIZED`.
//! Events that do not match (`status`) are not checked.
//!
//! The token travels in the request's metadata (`call(..).meta("token", ..)`), beside the
//! payload; the check gives the handler who the token stands for through the request's
//! extensions, so the handler never sees the token. The expected token is the check's
//! state (`from_fn_with_state`).
//!
//! Run it with `cargo run -p examples --bin middleware`.

use std::sync::Arc;
use std::time::Duration;

use examples::{address, init_tracing, unexpected, Result};
use node::middleware::{from_fn_with_state, Next};
use node::{Error, HandlerError, Node, Request};
use regex::Regex;
use tower::timeout::TimeoutLayer;

/// Who a valid token stands for: what the check hands the handler.
#[derive(Debug, Clone)]
struct Operator(String);

/// Refuses a request whose metadata does not carry `token`; tells the handler who it is.
async fn require_token(
    token: Arc<str>,
    mut req: Request,
    next: Next,
) -> std::result::Result<node::Response, node::BoxError> {
    if req.meta().get_str("token") != Some(&*token) {
        let refusal = HandlerError::new(
            "UNAUTHORIZED",
            format!("{} needs a valid token", req.event()),
        );
        return Err(refusal.into());
    }
    req.extensions_mut()
        .insert(Operator("ops-on-call".to_owned()));
    next.run(req).await
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
        from_fn_with_state(Arc::<str>::from("s3cret"), require_token),
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
