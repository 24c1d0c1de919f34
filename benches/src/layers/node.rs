//! The node layer: request/reply between two `Node`s (`call(..).raw().send(..)` to an
//! `on_request_service` echo answering `Response::raw`), and one-way ticks (`call(..).raw().tick(..)`)
//! counted by the receiver; and the CPU-bound rows (`node-cpu-N`), whose handler does
//! [`cpu_job`] before answering.
//!
//! Heartbeats are set to once every ten minutes on both nodes: a point lasts seconds, and a
//! heartbeat (or a dead-peer check) in the middle of one is noise, not the cost being
//! measured. (Not longer: the node also sets libzmq's ZMTP heartbeat TTL to the dead-peer
//! timeout, two and a half intervals, and libzmq refuses a TTL above 6553.5 s.)

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use node::{HandlerError, Key, KeyPair, Node, NodeBuilder, NodeId, Request, Response};

use super::{announce, Job, HWM, REQUEST_TIMEOUT};
use crate::error::{Error, Result};
use crate::measure::{drive_concurrent, Plan, Point};

/// The server node's id (the client targets it by the id its handshake reports).
const SERVER_ID: &str = "bench-server";

/// Heartbeat interval of both nodes: far longer than a point.
const HEARTBEAT: Duration = Duration::from_secs(600);

/// Ticks sent between two looks at the clock (and a yield to the runtime).
const TICK_BATCH: usize = 1024;

/// The request the echo rows (`node`, `node-curve`) send.
const ECHO: &str = "echo";

/// The request the CPU-bound rows send: [`cpu_job`], then the payload back.
const WORK: &str = "work";

/// What [`cpu_job`] hashes each round: a fixed buffer, so the job's cost does not depend on
/// the payload size (which the report varies) and is the same on every run.
static JOB_INPUT: [u8; 4096] = [0x5a; 4096];

/// Rounds of [`cpu_job`]: chosen so that one job takes about 200 µs here. Measured on this
/// machine (AMD EPYC, 2 cores, the function built alone with `-C opt-level=3` and timed over
/// 2,000 jobs, load average under 2.5 with the other core idle): 0.89 to 0.93 ns a byte,
/// 3.6 µs a round; 50 rounds took 182 µs, 55 rounds 202 to 210 µs (two copies at once on the
/// two cores: 203 and 207 µs, so the cores do not slow each other). In the server, under
/// `perf record` at window 100, the handler took 83% of the server's 265 µs of CPU a
/// request: about 220 µs.
const JOB_ROUNDS: usize = 55;

/// FNV-1a's 64-bit offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a's 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// A node with the harness's settings. `ZERONODE_DESCRIBE=off` turns the node's
/// description off (its per-request count and histogram record with it), so that one
/// build measures what describing itself costs (benches/README.md, "A/B").
fn builder(id: String) -> NodeBuilder {
    let describe = match std::env::var("ZERONODE_DESCRIBE").as_deref() {
        Ok("off") => node::DescribePolicy::Off,
        _ => node::DescribePolicy::Anyone,
    };
    Node::builder()
        .id(id)
        .describe(describe)
        .engine(super::engine())
        .hwm(HWM)
        .max_payload(64 * 1024 * 1024)
        .request_timeout(REQUEST_TIMEOUT)
        .heartbeat_interval(HEARTBEAT)
}

/// The `node-ctx` row's process set-up: a `tracing` subscriber that records the node's
/// spans (`zeronode=info`; an fmt layer into a sink: spans are created, entered and closed,
/// nothing is printed) and a Prometheus recorder for the node's metrics.
///
/// `ZERONODE_CTX` (a comma-separated subset of `meta,spans,metrics`; all by default) turns
/// parts off, to tell what each costs.
pub(super) fn observe_everything() {
    use tracing_subscriber::layer::SubscriberExt;
    if context_part("spans") {
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::EnvFilter::new("zeronode=info"))
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(std::io::sink),
            );
        let _ = tracing::subscriber::set_global_default(subscriber);
    }
    if context_part("metrics") {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let _ = metrics::set_global_recorder(recorder);
    }
}

/// Whether the `node-ctx` row has `part` on (see [`observe_everything`]).
fn context_part(part: &str) -> bool {
    std::env::var("ZERONODE_CTX").map_or(true, |parts| parts.split(',').any(|p| p == part))
}

/// The `node-ctx` row's server: the `node` row's echo with metrics on.
pub(super) async fn serve_ctx(endpoint: &str) -> Result<()> {
    let server = builder(SERVER_ID.to_owned())
        .metrics(context_part("metrics"))
        .bind(endpoint)
        .build()
        .await?;
    server.on_request_service(
        ECHO,
        tower::service_fn(|req: Request| async move {
            Ok::<_, node::BoxError>(Response::raw(req.payload().clone()))
        }),
    );
    announce(&server.address().ok_or(Error::NotBound)?)?;
    std::future::pending::<()>().await;
    Ok(())
}

/// A node with an `echo` request handler, a `tick` counter and a `ticks` request that
/// returns the count, until the process ends. With `curve`, the node has a fresh key pair
/// and announces its public key after its endpoint (`ENDPOINT KEY`: Z85 has no space).
pub(super) async fn serve(endpoint: &str, curve: bool) -> Result<()> {
    let mut server = builder(SERVER_ID.to_owned()).bind(endpoint);
    let keys = curve.then(KeyPair::generate).transpose()?;
    if let Some(keys) = &keys {
        server = server.curve(keys.clone());
    }
    let server = server.build().await?;
    server.on_request_service(
        ECHO,
        tower::service_fn(|req: Request| async move {
            Ok::<_, node::BoxError>(Response::raw(req.payload().clone()))
        }),
    );
    let ticks = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&ticks);
    server.on_tick("tick", move |_req: Request| {
        counted.fetch_add(1, Ordering::Relaxed);
        async {}
    });
    server.on_request("ticks", move |_req: Request| {
        let count = ticks.load(Ordering::Relaxed);
        async move { Ok::<u64, HandlerError>(count) }
    });
    let address = server.address().ok_or(Error::NotBound)?;
    match &keys {
        Some(keys) => announce(&format!("{address} {}", keys.public))?,
        None => announce(&address)?,
    }
    std::future::pending::<()>().await;
    Ok(())
}

/// The CPU-bound rows' server: a node whose `work` handler does [`cpu_job`] and answers the
/// payload back, until the process ends.
///
/// The job runs inside the handler's future, as a user's handler that computes would: where
/// that future is polled (the socket's driver task, or a task of its own) is what decides
/// whether a second worker thread helps.
pub(super) async fn serve_cpu(endpoint: &str) -> Result<()> {
    let server = builder(SERVER_ID.to_owned()).bind(endpoint).build().await?;
    server.on_request_service(
        WORK,
        tower::service_fn(|req: Request| async move {
            black_box(cpu_job());
            Ok::<_, node::BoxError>(Response::raw(req.payload().clone()))
        }),
    );
    announce(&server.address().ok_or(Error::NotBound)?)?;
    std::future::pending::<()>().await;
    Ok(())
}

/// A fixed CPU-bound job of about 200 µs: [`JOB_ROUNDS`] rounds of FNV-1a over
/// [`JOB_INPUT`], each round starting from the hash of the one before.
///
/// FNV-1a is a chain of dependent multiplies, one per byte, that the compiler cannot
/// vectorise; `black_box` on the buffer each round hides its contents, so the rounds can
/// be neither folded at compile time nor collapsed into one. Returns the hash (the caller
/// `black_box`es it too).
fn cpu_job() -> u64 {
    let mut hash = FNV_OFFSET;
    for _ in 0..JOB_ROUNDS {
        for &byte in black_box(&JOB_INPUT).iter() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
        }
    }
    hash
}

/// A client node connected to the server; returns it and the server's id. Over CURVE
/// (`ENDPOINT KEY`, as `serve` announced it) the client has its own key pair.
async fn connect(job: &Job) -> Result<(Node, NodeId)> {
    let builder = builder(format!("bench-client-{}", std::process::id()))
        .metrics(job.layer.is_ctx() && context_part("metrics"));
    let (client, peer) = match job.endpoint.split_once(' ') {
        Some((endpoint, key)) => {
            let server_key = Key::from_z85(key)?;
            let client = builder.curve(KeyPair::generate()?).build().await?;
            let peer = client
                .connect_with(endpoint, node::ConnectOptions::new().server_key(server_key))
                .await?;
            (client, peer)
        }
        None => {
            let client = builder.build().await?;
            let peer = client.connect(&job.endpoint).await?;
            (client, peer)
        }
    };
    Ok((client, peer.id))
}

/// Request/reply: one point. The echo rows send `echo`, the CPU-bound rows `work`.
pub(super) async fn client(job: &Job) -> Result<Point> {
    let (client, server) = connect(job).await?;
    let method = if job.layer.is_cpu_bound() { WORK } else { ECHO };
    let payload = job.payload();
    let plan = Plan::starting_now(job.warmup, job.duration);
    let context = job.layer.is_ctx() && context_part("meta");
    let recorder = drive_concurrent(job.window, plan, || async {
        let call = client.call(&server, method).timeout(REQUEST_TIMEOUT);
        // The context row: two short metadata entries, as an auth token and a tenant.
        let call = if context {
            call.meta("auth", "t0k3n-5f3a9c").meta("tenant", "acme")
        } else {
            call
        };
        let reply = call.raw().send(payload.clone()).await?;
        job.check_reply(reply.payload().len())
    })
    .await?;
    client.close().await;
    Ok(recorder.finish(job.layer, job.size, job.window.max(1)))
}

/// Request/reply through `Node::caller()` under retry, timeout and concurrency-limit
/// layers (the limit far above the window: it is the layer's cost that is measured, not
/// its limiting). The timeout is the node's [`node::CallTimeoutLayer`] (the call's own
/// deadline); with `ZERONODE_CALLER_TIMEOUT=tower`, tower's (a timer per call).
pub(super) async fn caller_client(job: &Job) -> Result<Point> {
    let (client, server) = connect(job).await?;
    let stack = tower::ServiceBuilder::new().retry(node::RetrySafe::new(3));
    let limit = job.window.max(1) * 4;
    let point = if std::env::var("ZERONODE_CALLER_TIMEOUT").is_ok_and(|t| t == "tower") {
        let stack = stack
            .timeout(REQUEST_TIMEOUT)
            .concurrency_limit(limit)
            .service(client.caller());
        drive_caller(job, &server, stack).await
    } else {
        let stack = stack
            .layer(node::CallTimeoutLayer::new(REQUEST_TIMEOUT))
            .concurrency_limit(limit)
            .service(client.caller());
        drive_caller(job, &server, stack).await
    };
    client.close().await;
    point
}

/// The caller row's request loop over `stack`: a clone of it per request (`oneshot`), as
/// tower services are used from many tasks.
async fn drive_caller<S>(job: &Job, server: &NodeId, stack: S) -> Result<Point>
where
    S: tower::Service<node::Outbound, Response = node::Reply> + Clone,
    S::Error: std::fmt::Display,
{
    use tower::ServiceExt;
    let payload = job.payload();
    let plan = Plan::starting_now(job.warmup, job.duration);
    let recorder = drive_concurrent(job.window, plan, || async {
        let request = node::Outbound::new(server, ECHO, payload.clone());
        let reply = stack
            .clone()
            .oneshot(request)
            .await
            .map_err(|e| Error::Caller(e.to_string()))?;
        job.check_reply(reply.payload().len())
    })
    .await?;
    Ok(recorder.finish(job.layer, job.size, job.window.max(1)))
}

/// One-way ticks: one point, throughput as counted by the receiver.
///
/// The client sends ticks as fast as the socket takes them (backpressure at the high-water
/// mark) through the warm-up, then asks the server for its count; the reply comes after
/// every tick sent before it was handled (one connection, handled in order). It sends for
/// the measured duration and asks again. Ticks per second is the difference of the two
/// counts over the time between the two answers, so ticks still queued when sending stops
/// are waited for, not assumed delivered.
pub(super) async fn tick_client(job: &Job) -> Result<Point> {
    let (client, server) = connect(job).await?;
    let payload = job.payload();
    send_ticks(&client, &server, &payload, Instant::now() + job.warmup).await?;
    let (first, started) = tick_count(&client, &server).await?;
    send_ticks(&client, &server, &payload, started + job.duration).await?;
    let (last, ended) = tick_count(&client, &server).await?;
    client.close().await;
    let seconds = ended.duration_since(started).as_secs_f64();
    let completed = last.saturating_sub(first);
    Ok(Point {
        layer: job.layer,
        size: job.size,
        window: 0,
        completed,
        seconds,
        rate: completed as f64 / seconds,
        latency_us: None,
    })
}

/// Sends ticks as fast as the socket takes them until `deadline`.
async fn send_ticks(
    client: &Node,
    server: &NodeId,
    payload: &Bytes,
    deadline: Instant,
) -> Result<()> {
    while Instant::now() < deadline {
        for _ in 0..TICK_BATCH {
            client
                .call(server, "tick")
                .raw()
                .tick(payload.clone())
                .await
                .map(drop)?;
        }
        // Let the node's own tasks run: a send that never waits never yields.
        tokio::task::yield_now().await;
    }
    Ok(())
}

/// The server's tick count, and when its answer arrived.
async fn tick_count(client: &Node, server: &NodeId) -> Result<(u64, Instant)> {
    let count: u64 = client
        .call(server, "ticks")
        .timeout(REQUEST_TIMEOUT)
        .send(&())
        .await?;
    Ok((count, Instant::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_job_is_deterministic() {
        // Its cost is measured in the report; here only that it does the same work each time.
        assert_eq!(cpu_job(), cpu_job());
        assert_ne!(cpu_job(), FNV_OFFSET);
    }
}
