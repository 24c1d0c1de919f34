//! Outgoing calls as a tower service over loopback: `node.caller()` under tower's retry (only
//! what is safe to retry), timeout, concurrency limit, rate limit and load shedding, our
//! circuit breaker, and the caller's own in-flight limit in `poll_ready`.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use node::{
    CircuitBreakerLayer, CircuitOpen, Error, HandlerError, Node, Outbound, Request, RetrySafe,
};
use support::*;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

/// A worker with `slow` (waits the milliseconds it is given, counting how many run at once
/// and at most), `fail` (a handler error, counted) and `echo`.
struct Worker {
    node: Node,
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    started: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
}

async fn worker(id: &str) -> Worker {
    let node = server(id).await;
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let (r, m, s) = (
        Arc::clone(&running),
        Arc::clone(&most),
        Arc::clone(&started),
    );
    node.on_request("slow", move |req: Request| {
        let (r, m) = (Arc::clone(&r), Arc::clone(&m));
        s.fetch_add(1, Ordering::SeqCst);
        async move {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            // Counted out however the handler ends: answered, or stopped at its deadline.
            let _running = Running(r);
            let wait: u64 = req.decode()?;
            tokio::time::sleep(Duration::from_millis(wait)).await;
            Ok::<_, HandlerError>(wait)
        }
    });
    let failed = Arc::new(AtomicUsize::new(0));
    let f = Arc::clone(&failed);
    node.on_request("fail", move |_req: Request| {
        f.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(HandlerError::new("NOPE", "always")) }
    });
    node.on_request("echo", |req: Request| async move { req.decode::<u64>() });
    Worker {
        node,
        running,
        most,
        started,
        failed,
    }
}

/// One running `slow` handler, counted out when dropped.
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn echo(to: &str, n: u64) -> Outbound {
    Outbound::encode(to, "echo", &n).unwrap()
}

#[tokio::test]
async fn a_plain_caller_answers_and_keeps_metadata() {
    let w = worker("w").await;
    w.node.on_request("tenant", |req: Request| async move {
        Ok::<_, HandlerError>(req.meta().get_str("tenant").map(str::to_owned))
    });
    let client = client("c").await;
    client.connect(&address(&w.node)).await.unwrap();
    let mut caller = client.caller();
    let reply = caller
        .ready()
        .await
        .unwrap()
        .call(echo("w", 7))
        .await
        .unwrap();
    assert_eq!(reply.decode::<u64>().unwrap(), 7);
    let request = Outbound::encode("w", "tenant", &())
        .unwrap()
        .meta("tenant", "acme")
        .unwrap();
    let reply = caller.ready().await.unwrap().call(request).await.unwrap();
    assert_eq!(
        reply.decode::<Option<String>>().unwrap().as_deref(),
        Some("acme")
    );
}

#[tokio::test]
async fn retry_sends_again_only_what_reached_no_handler() {
    let w = worker("late").await;
    let client = client("c").await;
    let mut retried = ServiceBuilder::new()
        .retry(RetrySafe::new(20))
        .service(client.caller());
    // `late` is not joined yet: not found, safe to retry; it joins while we retry.
    let address = address(&w.node);
    let joiner = {
        let client = client.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            client.connect(&address).await.unwrap();
        })
    };
    let reply = within("the retried call", async {
        retried.ready().await.unwrap().call(echo("late", 3)).await
    })
    .await
    .unwrap();
    assert_eq!(reply.decode::<u64>().unwrap(), 3);
    joiner.await.unwrap();

    // A handler's error may have done work: never retried.
    let request = Outbound::encode("late", "fail", &()).unwrap();
    let failed = retried.ready().await.unwrap().call(request).await;
    assert!(matches!(failed, Err(Error::Handler { .. })), "{failed:?}");
    assert_eq!(w.failed.load(Ordering::SeqCst), 1, "the handler ran once");

    // Nor a timeout (the handler may be running).
    let mut timing_out = ServiceBuilder::new()
        .retry(RetrySafe::new(20))
        .service(client.caller());
    let slow = Outbound::encode("late", "slow", &300u64)
        .unwrap()
        .timeout(Duration::from_millis(50));
    let result = timing_out.ready().await.unwrap().call(slow).await;
    assert!(result.unwrap_err().is_timeout());
    within("the slow handler to end", async {
        while w.running.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(
        w.started.load(Ordering::SeqCst),
        1,
        "it ran once, not again"
    );
}

/// Sends `slow` (a handler that waits a minute, with a 50 ms deadline by one means or
/// another) through `service`: the node's timeout, and the worker's handler stopped at the
/// deadline the call carried. Both well before the node's 5 s default would end them
/// (3 s: generous for a loaded machine).
async fn expires_and_stops<S>(w: &Worker, mut service: S, slow: Outbound)
where
    S: Service<Outbound, Error = Error>,
{
    let started = Instant::now();
    let error = service.ready().await.unwrap().call(slow).await.err();
    assert!(error.as_ref().is_some_and(Error::is_timeout), "{error:?}");
    within("the worker to stop the expired handler", async {
        while w.running.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "{took:?}");
}

#[tokio::test]
async fn timeout_concurrency_limit_and_rate_limit_layers() {
    let w = worker("w").await;
    let client = client("c").await;
    client.connect(&address(&w.node)).await.unwrap();

    // tower's timeout: its own error, whatever the call's timeout.
    let mut timed = ServiceBuilder::new()
        .timeout(Duration::from_millis(50))
        .service(client.caller());
    let slow = Outbound::encode("w", "slow", &500u64).unwrap();
    let error = timed.ready().await.unwrap().call(slow).await.unwrap_err();
    assert!(error.is::<tower::timeout::error::Elapsed>(), "{error}");
    // The worker's handler runs on (its deadline is the call's own 5 s): let it end.
    within("the slow handler to end", async {
        while w.running.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    w.most.store(0, Ordering::SeqCst);

    // The node's call timeout: the call's own deadline, so the error is the node's
    // timeout and the worker's handler is stopped at it, not left running.
    let short = ServiceBuilder::new()
        .layer(node::CallTimeoutLayer::new(Duration::from_millis(50)))
        .service(client.caller());
    let slow = Outbound::encode("w", "slow", &60_000u64).unwrap();
    expires_and_stops(&w, short, slow).await;
    // A request's own shorter timeout is kept under a longer layer.
    let long = ServiceBuilder::new()
        .layer(node::CallTimeoutLayer::new(Duration::from_secs(30)))
        .service(client.caller());
    let slow = Outbound::encode("w", "slow", &60_000u64)
        .unwrap()
        .timeout(Duration::from_millis(50));
    expires_and_stops(&w, long, slow).await;
    w.most.store(0, Ordering::SeqCst);

    // Concurrency limit: 12 calls, at most 3 at the worker at once.
    let limited = ServiceBuilder::new()
        .concurrency_limit(3)
        .service(client.caller());
    let calls = (0..12).map(|_| {
        let service = limited.clone();
        async move {
            service
                .oneshot(Outbound::encode("w", "slow", &30u64).unwrap())
                .await
        }
    });
    let results = within("the limited calls", futures::future::join_all(calls)).await;
    assert!(results.iter().all(Result::is_ok));
    let most = w.most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "at most 3 at once, saw {most}");

    // Rate limit, 3 per 300 ms: 7 calls need at least two more periods (a lower bound:
    // never flaky on a slow machine).
    let mut rated = ServiceBuilder::new()
        .rate_limit(3, Duration::from_millis(300))
        .service(client.caller());
    let began = Instant::now();
    for n in 0..7 {
        let reply = rated
            .ready()
            .await
            .unwrap()
            .call(echo("w", n))
            .await
            .unwrap();
        assert_eq!(reply.decode::<u64>().unwrap(), n);
    }
    assert!(
        began.elapsed() >= Duration::from_millis(600),
        "{:?}",
        began.elapsed()
    );
}

#[tokio::test]
async fn load_shed_refuses_at_once_when_the_caller_is_not_ready() {
    let w = worker("w").await;
    let client = client("c").await;
    client.connect(&address(&w.node)).await.unwrap();
    // The caller's own in-flight limit (1): poll_ready is pending while one call is out,
    // so load shedding refuses the next at once instead of queueing it.
    let shedding = ServiceBuilder::new()
        .load_shed()
        .service(client.caller().max_in_flight(1));
    let first = tokio::spawn(
        shedding
            .clone()
            .oneshot(Outbound::encode("w", "slow", &300u64).unwrap()),
    );
    within("the first call to reach the worker", async {
        while w.running.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let began = Instant::now();
    let second = shedding.clone().oneshot(echo("w", 1)).await;
    let error = second.unwrap_err();
    assert!(error.is::<tower::load_shed::error::Overloaded>(), "{error}");
    assert!(
        began.elapsed() < Duration::from_millis(250),
        "refused at once"
    );
    assert!(first.await.unwrap().is_ok());
    // Once the first ended, there is room again.
    assert!(shedding.oneshot(echo("w", 2)).await.is_ok());
}

#[tokio::test]
async fn the_circuit_breaker_opens_fails_fast_and_closes_after_a_good_probe() {
    let w = worker("flaky").await;
    let client = client("c").await;
    let mut guarded = ServiceBuilder::new()
        .layer(CircuitBreakerLayer::new(3, Duration::from_millis(300)))
        .service(client.caller());
    // `flaky` is not joined: three failures open the circuit.
    for _ in 0..3 {
        let error = guarded
            .ready()
            .await
            .unwrap()
            .call(echo("flaky", 1))
            .await
            .unwrap_err();
        assert!(
            matches!(
                error.downcast_ref::<Error>(),
                Some(Error::NodeNotFound { .. })
            ),
            "{error}"
        );
    }
    let error = guarded
        .ready()
        .await
        .unwrap()
        .call(echo("flaky", 1))
        .await
        .unwrap_err();
    let open = error
        .downcast_ref::<CircuitOpen>()
        .expect("refused by the breaker");
    assert!(open.retry_in <= Duration::from_millis(300));
    // Handler errors do not count: the node is up.
    client.connect(&address(&w.node)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(350)).await;
    // The probe succeeds: closed again.
    let reply = guarded
        .ready()
        .await
        .unwrap()
        .call(echo("flaky", 9))
        .await
        .unwrap();
    assert_eq!(reply.decode::<u64>().unwrap(), 9);
    for _ in 0..5 {
        let error: BoxError = guarded
            .ready()
            .await
            .unwrap()
            .call(Outbound::encode("flaky", "fail", &()).unwrap())
            .await
            .unwrap_err();
        assert!(matches!(
            error.downcast_ref::<Error>(),
            Some(Error::Handler { .. })
        ));
    }
    assert_eq!(
        w.failed.load(Ordering::SeqCst),
        5,
        "every call reached the handler"
    );
}
