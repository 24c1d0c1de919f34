//! The node layer: request/reply between two `Node`s (`request_raw` to an
//! `on_request_service` echo answering `Response::raw`), and one-way ticks (`tick_raw`)
//! counted by the receiver.
//!
//! Heartbeats are set to once every ten minutes on both nodes: a point lasts seconds, and a
//! heartbeat (or a dead-peer check) in the middle of one is noise, not the cost being
//! measured. (Not longer: the node also sets libzmq's ZMTP heartbeat TTL to the dead-peer
//! timeout, two and a half intervals, and libzmq refuses a TTL above 6553.5 s.)

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

/// A node with the harness's settings.
fn builder(id: String) -> NodeBuilder {
    Node::builder()
        .id(id)
        .hwm(HWM)
        .max_payload(64 * 1024 * 1024)
        .request_timeout(REQUEST_TIMEOUT)
        .heartbeat_interval(HEARTBEAT)
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
        "echo",
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

/// A client node connected to the server; returns it and the server's id. Over CURVE
/// (`ENDPOINT KEY`, as `serve` announced it) the client has its own key pair.
async fn connect(job: &Job) -> Result<(Node, NodeId)> {
    let builder = builder(format!("bench-client-{}", std::process::id()));
    let (client, peer) = match job.endpoint.split_once(' ') {
        Some((endpoint, key)) => {
            let server_key = Key::from_z85(key)?;
            let client = builder.curve(KeyPair::generate()?).build().await?;
            let peer = client.connect_secure(endpoint, server_key).await?;
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

/// Request/reply: one point.
pub(super) async fn client(job: &Job) -> Result<Point> {
    let (client, server) = connect(job).await?;
    let payload = job.payload();
    let plan = Plan::starting_now(job.warmup, job.duration);
    let recorder = drive_concurrent(job.window, plan, || async {
        let reply = client
            .request_raw(&server, "echo", payload.clone(), REQUEST_TIMEOUT)
            .await?;
        job.check_reply(reply.len())
    })
    .await?;
    client.close().await;
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
            client.tick_raw(server, "tick", payload.clone()).await?;
        }
        // Let the node's own tasks run: a send that never waits never yields.
        tokio::task::yield_now().await;
    }
    Ok(())
}

/// The server's tick count, and when its answer arrived.
async fn tick_count(client: &Node, server: &NodeId) -> Result<(u64, Instant)> {
    let count: u64 = client
        .request_timeout(server, "ticks", &(), REQUEST_TIMEOUT)
        .await?;
    Ok((count, Instant::now()))
}
