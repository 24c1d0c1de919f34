//! `zeronode node`: runs one node until Ctrl-C or SIGTERM.
//!
//! What it prints on stdout, one line each, in this order:
//!
//! ```text
//! listening on tcp://127.0.0.1:40123      (with --bind; the port resolved)
//! metrics on http://127.0.0.1:9100/metrics (with --metrics)
//! health on http://127.0.0.1:8080/readyz   (with --health)
//! following workers.svc:5555                (each --discover)
//! node api-1 ready                         (every --connect joined)
//! discovered workers.svc:5555: 3 listed; added [tcp://10.0.0.7:5555 ...] removed []
//! peer joined w1 (downstream) role=worker
//! peer left w1 (downstream, stopped)
//! stats: 2 peers, 1520.0 requests/s, 0.0 ticks/s      (with --stats)
//! node api-1 stopping (SIGINT)
//! node api-1 stopped
//! ```
//!
//! The built-in request handlers are `echo` (the data back, byte for byte, and the
//! request's metadata as the reply's), `ping`
//! (`"pong"`), `delay` (waits the number of milliseconds it is given, then returns it) and
//! `zeronode:peers` (see [`crate::peers`]); every tick is accepted (and counted). One
//! handler streams its reply (`zeronode stream`): `count`, given `N`, sends the numbers 1 to
//! N; given `{"n": N, "every_ms": MS}`, one every MS milliseconds. A `--router` serves only
//! `zeronode:peers` (it is there to forward; `--demo` adds the others).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use node::{
    BoxError, DescribePolicy, HandlerError, LeaveReason, Node, NodeEvent, Request, Response,
    Signal, Signals, Sink,
};
use regex::Regex;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::args::{DescribeTo, NodeArgs};
use crate::error::Error;
use crate::keys::{self, Security};
use crate::output::say;
use crate::peers::{self, direction_name, format_options, PeerRow};

/// Runs the node until a signal, then closes it gracefully.
pub(crate) async fn run(args: NodeArgs) -> Result<(), Error> {
    // Installed first: a signal while connecting still stops the node cleanly.
    let mut signals = Signals::install().map_err(Error::Start)?;
    let security = Security::load(&args.security, false)?;
    let allowed = args
        .allow
        .iter()
        .map(|key| keys::read_public(key))
        .collect::<Result<Vec<_>, _>>()?;
    if !allowed.is_empty() && security.keys.is_none() {
        return Err(Error::Usage(
            "--allow needs --key: only a secured node checks client keys".into(),
        ));
    }
    let describe = match args.describe {
        DescribeTo::Anyone => DescribePolicy::Anyone,
        DescribeTo::Off => DescribePolicy::Off,
        DescribeTo::Allowed if allowed.is_empty() => {
            return Err(Error::Usage(
                "--describe allowed needs the keys to allow (--key and --allow)".into(),
            ))
        }
        DescribeTo::Allowed => DescribePolicy::Keys(allowed.clone()),
    };
    // The recorder first: the node takes its metric handles from it.
    let metrics = match &args.metrics {
        Some(address) => Some(crate::metrics::serve(address).await?),
        None => None,
    };
    let mut builder = Node::builder()
        .metrics(metrics.is_some())
        .options(args.options())
        .handshake_timeout(Duration::from_millis(args.connect_timeout))
        .close_grace(args.grace)
        .router(args.router)
        .describe(describe);
    if let Some(id) = &args.id {
        builder = builder.id(id.as_str());
    }
    if let Some(ms) = args.heartbeat_ms {
        builder = builder.heartbeat_interval(Duration::from_millis(ms));
    }
    builder = security.apply(builder);
    if !allowed.is_empty() {
        builder = builder.allow_keys(allowed);
    }
    let node = builder.build().await.map_err(Error::Build)?;
    let counters = Arc::new(Counters::default());
    // A router is there to forward: answering `echo` or `count` itself would take calls
    // meant for the nodes behind it.
    if !args.router || args.demo {
        register_demo_handlers(&node, &counters, args.verbose);
    }
    register_peers_handler(&node, &counters, args.verbose);
    // Subscribed before binding, so no join goes unlogged.
    let events = node.events();
    let result = serve(
        &node,
        &args,
        &security,
        events,
        &counters,
        &mut signals,
        metrics,
    )
    .await;
    // Idempotent: returns at once when `serve` already closed the node.
    if !matches!(result, Err(Error::Interrupted)) {
        node.close().await;
    }
    // The `zeronode:peers` handler holds a clone of the node: drop it.
    node.off_request(peers::EVENT);
    result
}

/// Binds, connects, serves until a signal, and closes.
async fn serve(
    node: &Node,
    args: &NodeArgs,
    security: &Security,
    events: node::EventStream,
    counters: &Arc<Counters>,
    signals: &mut Signals,
    metrics: Option<std::net::SocketAddr>,
) -> Result<(), Error> {
    if let Some(address) = &args.bind {
        let real = node.bind(address).await.map_err(|source| Error::Bind {
            address: address.clone(),
            source,
        })?;
        say(format_args!("listening on {real}"));
        if let Some(key) = node.keys().public() {
            say(format_args!("public key {key}"));
        }
    }
    if let Some(address) = metrics {
        say(format_args!("metrics on http://{address}/metrics"));
    }
    // Held until the node stops: its probes read the drain as it happens.
    let _health = match &args.health {
        Some(address) => {
            let health = node::health::http::serve(address.as_str(), node)
                .await
                .map_err(|e| Error::Usage(format!("--health {address}: {e}")))?;
            say(format_args!(
                "health on http://{}/readyz",
                health.local_addr()
            ));
            Some(health)
        }
        None => None,
    };
    let logger = tokio::spawn(log_events(events));
    let timeout = Duration::from_millis(args.connect_timeout);
    for address in &args.connect {
        tokio::select! {
            joined = security.connect(node, address) => {
                joined.map_err(|source| Error::Connect {
                    address: address.clone(),
                    timeout,
                    source,
                })?;
            }
            signal = signals.recv() => return stop(node, signal, signals, logger).await,
        }
    }
    for name in &args.discover {
        let mut dns = node::Dns::new(name.as_str());
        if let Some(server) = args.dns_server {
            dns = dns.name_server(server);
        }
        let mut options = node::DiscoverOptions::new().connect_timeout(timeout);
        // The same key as --connect's: every discovered connection is secured too.
        if let Some(key) = security.server_key {
            options = options.server_key(key);
        }
        // Said first: the discovery's own lines (`discovered ...`) may follow at once.
        say(format_args!("following {name}"));
        node.discover_with(dns, options);
    }
    // Ready (to a probe) once the discoveries joined a peer as well.
    node.mark_started();
    say(format_args!("node {} ready", node.id()));
    let stats = args
        .stats
        .map(|every| tokio::spawn(report_stats(node.clone(), Arc::clone(counters), every)));
    let signal = signals.recv().await;
    if let Some(stats) = stats {
        stats.abort();
    }
    stop(node, signal, signals, logger).await
}

/// Closes the node gracefully ([`Node::close_on_signal`]); a second signal gives up
/// waiting.
async fn stop(
    node: &Node,
    signal: Signal,
    signals: &mut Signals,
    logger: JoinHandle<()>,
) -> Result<(), Error> {
    say(format_args!("node {} stopping ({signal})", node.id()));
    let shutdown = node.close_on_signal(signal, signals).await;
    let Some(closed) = shutdown.closed else {
        return Err(Error::Interrupted);
    };
    // The logger ends at `Stopped`, after the last `peer left` lines.
    let _ = tokio::time::timeout(Duration::from_secs(1), logger).await;
    say(format_args!("node {} stopped", node.id()));
    if closed.is_complete() {
        Ok(())
    } else {
        Err(Error::DrainIncomplete {
            cancelled: closed.cancelled,
        })
    }
}

/// What the handlers count, for `--stats`.
#[derive(Debug, Default)]
struct Counters {
    /// Requests handled by the built-in handlers.
    requests: AtomicU64,
    /// Ticks received.
    ticks: AtomicU64,
}

impl Counters {
    /// Counts one request (and prints it with `--verbose`).
    fn request(&self, req: &Request, verbose: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if verbose {
            say(format_args!("request {} from {}", req.event(), req.from()));
        }
    }

    /// Counts one tick (and prints it with its data with `--verbose`).
    fn tick(&self, req: &Request, verbose: bool) {
        self.ticks.fetch_add(1, Ordering::Relaxed);
        if verbose {
            let data = req
                .decode::<serde_json::Value>()
                .map(|v| v.to_string())
                .unwrap_or_else(|_| format!("<{} bytes>", req.payload().len()));
            say(format_args!(
                "tick {} from {}: {data}",
                req.event(),
                req.from()
            ));
        }
    }
}

/// Registers the built-in handlers a mesh is tried with: `echo`, `ping`, `delay`, `count`
/// and the catch-all tick handler.
fn register_demo_handlers(node: &Node, counters: &Arc<Counters>, verbose: bool) {
    let c = Arc::clone(counters);
    // A service rather than `on_request`: the payload goes back untouched, whatever it is.
    node.on_request_service(
        "echo",
        tower::service_fn(move |req: Request| {
            c.request(&req, verbose);
            // The request's metadata goes back too (`zeronode request -m` prints it).
            std::future::ready(Ok::<_, BoxError>(
                Response::raw(req.payload().clone()).with_all_meta(req.meta()),
            ))
        }),
    );

    let c = Arc::clone(counters);
    node.on_request("ping", move |req: Request| {
        c.request(&req, verbose);
        async { Ok::<_, HandlerError>("pong") }
    });

    let c = Arc::clone(counters);
    node.on_request("delay", move |req: Request| {
        c.request(&req, verbose);
        async move {
            let data: serde_json::Value = req.decode()?;
            let wait = delay_of(&data)?;
            tokio::time::sleep(wait).await;
            Ok::<_, HandlerError>(data)
        }
    });

    let c = Arc::clone(counters);
    node.on_stream("count", move |req: Request, sink: Sink| {
        c.request(&req, verbose);
        async move {
            let data: serde_json::Value = req.decode()?;
            let (n, every) = count_of(&data)?;
            count(sink, n, every).await
        }
    });

    let c = Arc::clone(counters);
    let every_event = Regex::new(".*").expect("a constant, valid regex");
    node.on_tick(every_event, move |req: Request| {
        c.tick(&req, verbose);
        async {}
    });
}

/// Registers `zeronode:peers` (what `zeronode peers` asks), on every node, routers too.
fn register_peers_handler(node: &Node, counters: &Arc<Counters>, verbose: bool) {
    let c = Arc::clone(counters);
    // This clone of the node lives in the node's own handler table (a cycle): `run` removes
    // the handler once the node is closed.
    let me = node.clone();
    node.on_request(peers::EVENT, move |req: Request| {
        c.request(&req, verbose);
        let rows: Vec<PeerRow> = me.peers().into_iter().map(PeerRow::from).collect();
        async move { Ok::<_, HandlerError>(rows) }
    });
}

/// The wait a `delay` request asks for: a non-negative number of milliseconds.
fn delay_of(data: &serde_json::Value) -> Result<Duration, HandlerError> {
    let bad = || {
        HandlerError::new(
            HandlerError::BAD_REQUEST,
            format!("delay expects a number of milliseconds (e.g. 500), got {data}"),
        )
    };
    let ms = data.as_f64().filter(|ms| *ms >= 0.0).ok_or_else(bad)?;
    Duration::try_from_secs_f64(ms / 1000.0).map_err(|_| bad())
}

/// What a `count` request asks for: how many numbers, and the pause between two.
fn count_of(data: &serde_json::Value) -> Result<(u64, Duration), HandlerError> {
    let bad = || {
        HandlerError::new(
            HandlerError::BAD_REQUEST,
            format!("count expects N or {{\"n\": N, \"every_ms\": MS}}, got {data}"),
        )
    };
    let (n, every_ms) = match data {
        serde_json::Value::Object(fields) => (
            fields.get("n").and_then(serde_json::Value::as_u64),
            match fields.get("every_ms") {
                None => Some(0),
                Some(ms) => ms.as_u64(),
            },
        ),
        n => (n.as_u64(), Some(0)),
    };
    match (n, every_ms) {
        (Some(n), Some(ms)) => Ok((n, Duration::from_millis(ms))),
        _ => Err(bad()),
    }
}

/// Streams 1 to `n`, pausing `every` before each item after the first. The sink waits
/// while the caller reads slowly, and fails once the caller is gone: `?` stops the count.
async fn count(mut sink: Sink, n: u64, every: Duration) -> Result<(), HandlerError> {
    for i in 1..=n {
        if i > 1 && !every.is_zero() {
            tokio::time::sleep(every).await;
        }
        sink.send(&i).await?;
    }
    Ok(())
}

/// Prints one line per peer joining, changing its options or leaving, until the node stops.
async fn log_events(mut events: node::EventStream) {
    loop {
        match events.recv().await {
            Some(NodeEvent::PeerJoined {
                id,
                direction,
                options,
            }) => say(format_args!(
                "peer joined {id} ({}) {}",
                direction_name(direction),
                format_options(&options)
            )),
            Some(NodeEvent::PeerDraining { id, direction }) => say(format_args!(
                "peer draining {id} ({})",
                direction_name(direction)
            )),
            Some(NodeEvent::PeerOptionsChanged { id, options }) => say(format_args!(
                "peer options {id} {}",
                format_options(&options)
            )),
            Some(NodeEvent::PeerLeft {
                id,
                direction,
                reason,
            }) => say(format_args!(
                "peer left {id} ({}, {})",
                direction_name(direction),
                reason_name(reason)
            )),
            Some(NodeEvent::ConnectionRefused { endpoint, reason }) => {
                say(format_args!("connection refused on {endpoint}: {reason}"))
            }
            Some(NodeEvent::AcceptPaused { endpoint, retry_in }) => say(format_args!(
                "not accepting on {endpoint} for {} ms: out of file descriptors",
                retry_in.as_millis()
            )),
            Some(NodeEvent::Error { source, message }) => {
                tracing::warn!(?source, "{message}");
            }
            Some(NodeEvent::Discovery(event)) => say_discovery(&event),
            Some(NodeEvent::Stopped) | None => break,
            Some(NodeEvent::Lagged { missed }) => {
                say(format_args!(
                    "({missed} node events not shown: output too slow)"
                ));
            }
            Some(other) => tracing::debug!(?other, "node event"),
        }
    }
}

/// A discovery event, in one line (a change lists at most a few addresses).
fn say_discovery(event: &node::DiscoveryEvent) {
    use node::DiscoveryEvent;
    let few = |addresses: &[String]| {
        let mut text = addresses
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join(" ");
        if addresses.len() > 5 {
            text.push_str(&format!(" (+{} more)", addresses.len() - 5));
        }
        text
    };
    match event {
        DiscoveryEvent::Changed {
            source,
            added,
            removed,
            listed,
        } => say(format_args!(
            "discovered {source}: {listed} listed; added [{}] removed [{}]",
            few(added),
            few(removed)
        )),
        DiscoveryEvent::Empty { source } => say(format_args!(
            "discovered {source}: empty answer, peers kept"
        )),
        DiscoveryEvent::Failed { source, error } => say(format_args!(
            "discovery of {source} failed: {error}; peers kept"
        )),
        DiscoveryEvent::Capped {
            source,
            listed,
            cap,
        } => say(format_args!(
            "discovered {source}: {listed} listed, connecting to {cap} at most"
        )),
        other => tracing::debug!(?other, "discovery event"),
    }
}

/// Why a peer left, in words.
fn reason_name(reason: LeaveReason) -> &'static str {
    match reason {
        LeaveReason::Stopped => "stopped",
        LeaveReason::TimedOut => "timed out",
        LeaveReason::Disconnected => "disconnected",
        LeaveReason::Local => "closed here",
        LeaveReason::Revoked => "key revoked",
        _ => "other",
    }
}

/// Prints, every `every`, the peer count and the rates since the last line.
async fn report_stats(node: Node, counters: Arc<Counters>, every: Duration) {
    let mut interval = tokio::time::interval_at(Instant::now() + every, every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = (Instant::now(), 0u64, 0u64);
    loop {
        interval.tick().await;
        let now = Instant::now();
        let requests = counters.requests.load(Ordering::Relaxed);
        let ticks = counters.ticks.load(Ordering::Relaxed);
        let seconds = now.duration_since(last.0).as_secs_f64().max(f64::EPSILON);
        say(format_args!(
            "stats: {} peers, {:.1} requests/s, {:.1} ticks/s",
            node.peers().len(),
            (requests - last.1) as f64 / seconds,
            (ticks - last.2) as f64 / seconds,
        ));
        last = (now, requests, ticks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_takes_a_non_negative_number_of_milliseconds() {
        assert_eq!(
            delay_of(&serde_json::json!(250)).ok(),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            delay_of(&serde_json::json!(1.5)).ok(),
            Some(Duration::from_micros(1500))
        );
        for bad in [
            serde_json::json!(-1),
            serde_json::json!("500"),
            serde_json::json!(null),
            serde_json::json!(1e300),
        ] {
            let err = delay_of(&bad).err();
            assert_eq!(
                err.map(|e| e.code),
                Some(HandlerError::BAD_REQUEST.to_owned()),
                "{bad}"
            );
        }
    }

    #[test]
    fn count_takes_a_number_or_n_and_a_pause() {
        assert_eq!(
            count_of(&serde_json::json!(3)).ok(),
            Some((3, Duration::ZERO))
        );
        assert_eq!(
            count_of(&serde_json::json!({"n": 2, "every_ms": 50})).ok(),
            Some((2, Duration::from_millis(50)))
        );
        for bad in [
            serde_json::json!(-1),
            serde_json::json!("3"),
            serde_json::json!(null),
            serde_json::json!({"n": 2, "every_ms": -5}),
        ] {
            assert!(count_of(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reasons_read_as_words() {
        assert_eq!(reason_name(LeaveReason::TimedOut), "timed out");
    }
}
