//! The calling side as a tower stack: `node.caller()` under retry, a timeout, a concurrency
//! limit and a circuit breaker.
//!
//! The timeout is `CallTimeoutLayer`: it gives each call its own deadline, which the node
//! keeps with its other requests' (no timer per call) and which the callee sees.
//! `tower::timeout` works in the same place too.
//!
//! A `client` calls a `pricing` node that is not up yet: the calls fail with "node not
//! found", which is safe to retry (nothing ran), so `RetrySafe` keeps trying while the node
//! starts and joins. Then the stack serves twenty concurrent calls with at most four at
//! once. A handler's own error is not retried (it ran). Finally pricing goes away: after
//! three failures in a row the circuit breaker opens and calls fail at once, without
//! touching the network, until a probe finds it back.
//!
//! Run it with `cargo run -p examples --bin caller`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use examples::{address, init_tracing, unexpected, Result};
use node::{
    CallTimeoutLayer, CircuitBreakerLayer, CircuitOpen, Error, HandlerError, Node, Outbound,
    Request, RetrySafe,
};
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

/// The pricing service: `price` answers twice the amount after 20 ms, counting how many run
/// at once; `broken` always fails.
async fn pricing(busy: Arc<AtomicUsize>, most: Arc<AtomicUsize>) -> Result<Node> {
    let node = Node::builder()
        .id("pricing")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    node.on_request("price", move |req: Request| {
        let (busy, most) = (Arc::clone(&busy), Arc::clone(&most));
        async move {
            let amount: u64 = req.decode()?;
            let now = busy.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            busy.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, HandlerError>(amount * 2)
        }
    });
    node.on_request("broken", |_req: Request| async {
        Err::<u64, _>(HandlerError::new("OUT_OF_STOCK", "no price today"))
    });
    Ok(node)
}

#[tokio::main]
async fn main() -> Result {
    init_tracing();
    let client = Node::builder().id("client").build().await?;
    let stack = ServiceBuilder::new()
        .layer(CircuitBreakerLayer::new(3, Duration::from_millis(500)))
        .retry(RetrySafe::new(8))
        .layer(CallTimeoutLayer::new(Duration::from_secs(2)))
        .concurrency_limit(4)
        .service(client.caller());

    println!("-- retry while pricing starts");
    let busy = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let server = pricing(Arc::clone(&busy), Arc::clone(&most)).await?;
    let at = address(&server)?;
    let joiner = {
        let client = client.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            client.connect(&at).await
        })
    };
    let began = Instant::now();
    let reply = stack
        .clone()
        .oneshot(Outbound::encode("pricing", "price", &21u64)?)
        .await?;
    joiner.await??;
    println!(
        "price 21 -> {} after {} ms of retries (not found is safe to retry)",
        reply.decode::<u64>()?,
        began.elapsed().as_millis()
    );

    println!("-- twenty calls, at most four at once");
    let calls = (0..20u64).map(|n| {
        stack
            .clone()
            .oneshot(Outbound::encode("pricing", "price", &n).unwrap())
    });
    let replies = futures::future::join_all(calls).await;
    let ok = replies.iter().filter(|r| r.is_ok()).count();
    println!(
        "{ok} of 20 answered; at most {} ran at once",
        most.load(Ordering::SeqCst)
    );

    println!("-- a handler's error is not retried");
    match stack
        .clone()
        .oneshot(Outbound::encode("pricing", "broken", &())?)
        .await
    {
        Err(e) => match e.downcast_ref::<Error>() {
            Some(Error::Handler { code, .. }) => println!("broken -> {code}, sent once"),
            _ => return Err(unexpected(format!("{e} for broken"))),
        },
        Ok(_) => return Err(unexpected("broken answered")),
    }

    println!("-- pricing goes away: the breaker opens");
    server.close().await;
    let mut guarded = stack.clone();
    let mut opened_after = None;
    for attempt in 1..=10 {
        let outcome: std::result::Result<_, BoxError> = guarded
            .ready()
            .await?
            .call(Outbound::encode("pricing", "price", &1u64)?.timeout(Duration::from_millis(200)))
            .await;
        match outcome {
            Err(e) if e.is::<CircuitOpen>() => {
                opened_after = Some(attempt);
                println!("call {attempt} -> refused at once: {e}");
                break;
            }
            Err(e) => println!("call {attempt} -> failed: {e}"),
            Ok(_) => return Err(unexpected("pricing answered after closing")),
        }
    }
    if opened_after.is_none() {
        return Err(unexpected("the breaker never opened"));
    }
    println!("circuit open");
    client.close().await;
    Ok(())
}
