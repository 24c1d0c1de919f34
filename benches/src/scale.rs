//! The scale report: one hub [`Node`] and many peer nodes (100, 1,000) in other processes.
//!
//! For each peer count the orchestrator starts a fresh hub process (`scale-hub`, so that the
//! memory of one count does not carry into the next). The hub binds, reads its resident
//! memory, then starts the peer processes (`scale-peers`, up to `--per-process` nodes each,
//! every node connected to the hub) and measures:
//!
//! - **join time**: from starting the peer processes until the hub counts every peer joined
//!   (process start-up, node creation, TCP connect, handshake);
//! - **memory per peer**: the hub's `VmRSS` once all joined, minus before, over the peer
//!   count (and the peer processes' own growth per node, from their reports);
//! - **`tick_all` fan-out** (the phase's name in the report): the hub ticks
//!   `Target::all(filter)` (filter `role=peer`, downstream) in a loop; every peer counts its
//!   ticks. The delivered rate is the difference of two sums of the peers' counts (asked
//!   with a request to every peer, on the same connection as the ticks, so each count
//!   includes every tick sent before it) over the time between them;
//! - **`request_any` throughput** (the phase's name): the hub keeps `--window` requests to
//!   any match (filter `role=peer`, random strategy) in flight to the peers' raw `echo`;
//!   rate and latency; then, as the control, the same requests addressed to each peer in
//!   turn by id (no filter, no pick), so the cost of choosing among many peers shows
//!   apart; past 100 peers, also by id to the first 100 only, the rest joined and idle, so
//!   the cost of the number of peers shows apart from that of spreading calls over them;
//!   and the floor: the same pattern over plain TCP, one connection per peer held by the
//!   same peer processes (`scale_floor.rs`), the machine's own cost of that spread;
//! - the hub process's CPU (user + system, in cores) over each phase: near 1.0 its one
//!   runtime thread is the limit, well under it the peers' processes are.
//!
//! Heartbeats are every `--heartbeat` seconds (60 by default) on every node: with 1,000
//! peers and the hub's queues full of ticks, a heartbeat waits behind hundreds of ticks per
//! peer, and the default (1 s, dead after 2.5 s) would declare healthy peers dead in the
//! middle of a phase. High-water marks are 1,000 messages per connection.
//!
//! `--rounds N` runs every peer count N times, interleaved (every count, then every count
//! again); the report gives the median of each figure and keeps every round in scale.json.

use crate::progress::Progress;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use clap::Args;
use futures::{StreamExt, TryStreamExt};
use node::{Filter, HandlerError, Node, NodeBuilder, NodeId, Request, Response, Scope, Target};
use serde::{Deserialize, Serialize, Serializer};

use crate::error::{Error, Result};
use crate::layers::Layer;
use crate::measure::{drive_concurrent, Plan};
use crate::process::Process;
use crate::report::{self, Machine};
use crate::scale_report::{
    merge_runs, FanOut, HubResult, RequestAny, ScaleFailure, ScaleReport, ScaleSettings, SizeResult,
};
use crate::{exit_when_stdin_closes, seconds, Reexec};

/// High-water mark of every socket of the scale run, in messages per connection: enough
/// to keep every pipe busy, small enough that 1,000 full pipes stay a few hundred MB.
const HWM: i32 = 1000;
/// Timeout of every request of the scale run (counts, `request_any`): far above any
/// latency, so a timeout means something broke.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long connecting (and the handshake) may take with a thousand peers joining at once.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long all peers may take to join the hub.
const JOIN_LIMIT: Duration = Duration::from_secs(180);
/// How long a hub process may run beyond its phases (joining, draining queues, counts).
const HUB_SLACK: Duration = Duration::from_secs(300);
/// The tag every peer advertises and every hub call filters on.
const ROLE: (&str, &str) = ("role", "peer");
/// How many peers the second control calls by id (the smaller count of the default run).
pub(crate) const FEW: usize = 100;
/// Count requests kept in flight when the hub asks every peer for its tick count.
const COUNT_WINDOW: usize = 100;

/// `scale`: the command line of the scale report.
#[derive(Debug, Clone, Args)]
pub(crate) struct ScaleArgs {
    /// Peer counts: one hub run per count.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1000], value_parser = clap::value_parser!(u32).range(1..=5000))]
    peers: Vec<u32>,
    /// Payload sizes in bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1000], value_parser = clap::value_parser!(u32).range(0..=1_048_576))]
    sizes: Vec<u32>,
    /// Measured seconds of each tick_all and request_any phase.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Warm-up seconds before each phase.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Requests to any match kept in flight (the `request_any` phase).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    window: u32,
    /// Peer nodes per client process. On the libzmq engine keep it at 300 or less: each
    /// node holds three libzmq sockets and libzmq allows 1,023 per process. The native
    /// engine has no such limit (`--per-process 1000` runs every count in one process).
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u32).range(1..=5000))]
    per_process: u32,
    /// Heartbeat interval of every node, in seconds (a peer is dead after 2.5 intervals).
    #[arg(long, default_value_t = 60.0)]
    heartbeat: f64,
    /// Run every peer count N times, in interleaved rounds, and report the medians (each
    /// round's figures stay in scale.json).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Directory for scale.json, scale.csv and scale.svg.
    #[arg(long, default_value = "target/bench-report")]
    out: std::path::PathBuf,
}

/// `scale-hub`: the hub at one peer count (hidden).
#[derive(Debug, Clone, Args)]
pub(crate) struct HubArgs {
    /// How many peers join.
    #[arg(long)]
    peers: u32,
    /// Payload sizes.
    #[arg(long, value_delimiter = ',', required = true)]
    sizes: Vec<u32>,
    /// Measured seconds per phase.
    #[arg(long)]
    duration: f64,
    /// Warm-up seconds per phase.
    #[arg(long)]
    warmup: f64,
    /// request_any window.
    #[arg(long)]
    window: u32,
    /// Peer nodes per client process.
    #[arg(long)]
    per_process: u32,
    /// Heartbeat seconds.
    #[arg(long)]
    heartbeat: f64,
    /// Exit when stdin closes (the orchestrator is gone).
    #[arg(long)]
    watch_stdin: bool,
}

/// `scale-peers`: many peer nodes joined to a hub (hidden).
#[derive(Debug, Clone, Args)]
pub(crate) struct PeersArgs {
    /// The hub's endpoint.
    #[arg(long)]
    endpoint: String,
    /// Index of the first node (ids are `peer-N`).
    #[arg(long)]
    first: u32,
    /// How many nodes.
    #[arg(long)]
    count: u32,
    /// Heartbeat seconds.
    #[arg(long)]
    heartbeat: f64,
    /// The hub's floor listener (`host:port`): also hold `count` plain TCP connections to
    /// it and echo what comes on them (see `scale_floor.rs`).
    #[arg(long)]
    tcp: Option<String>,
    /// Exit when stdin closes (the hub is gone).
    #[arg(long)]
    watch_stdin: bool,
}

/// What a peer process prints once all its nodes joined.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PeersReady {
    /// Nodes joined.
    nodes: u32,
    /// Its `VmRSS` before creating the nodes, in KiB.
    rss_before_kb: Option<u64>,
    /// Its `VmRSS` once all joined.
    rss_after_kb: Option<u64>,
}

/// The orchestrator: a hub process per peer count, then the report.
pub(crate) fn run(args: &ScaleArgs, reexec: &Reexec) -> Result<ExitCode> {
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    let load_before = report::load_average();
    let duration = seconds(args.duration, 0.01).as_secs_f64();
    let warmup = seconds(args.warmup, 0.0).as_secs_f64();
    let heartbeat = heartbeat(args.heartbeat).as_secs_f64();
    let sizes = list(&args.sizes);
    for &peers in &args.peers {
        check_open_files(peers, args.per_process, open_files_limit())?;
    }
    let mut rounds: Vec<Vec<HubResult>> = vec![Vec::new(); args.peers.len()];
    let mut failures = Vec::new();
    let order = crate::harness::schedule(args.peers.len(), args.rounds.max(1) as usize);
    let progress = Progress::new(order.len());
    for &(round, i) in &order {
        let peers = args.peers[i];
        let what = format!(
            "benches scale: round {}/{}: {peers} peers, sizes {sizes} B",
            round + 1,
            args.rounds.max(1)
        );
        progress.say(&what);
        progress.running(&what);
        let mut command = reexec.command();
        command
            .args([
                "scale-hub",
                "--peers",
                &peers.to_string(),
                "--sizes",
                &sizes,
            ])
            .args(["--duration", &duration.to_string()])
            .args(["--warmup", &warmup.to_string()])
            .args(["--window", &args.window.to_string()])
            .args(["--per-process", &args.per_process.to_string()])
            .args(["--heartbeat", &heartbeat.to_string(), "--watch-stdin"]);
        let phases = 3.0 * args.sizes.len() as f64 * (warmup + duration);
        let limit = JOIN_LIMIT + HUB_SLACK + Duration::from_secs_f64(phases);
        let outcome =
            Process::start(command, format!("scale hub ({peers} peers)")).and_then(|mut hub| {
                let output = hub.finish_within(limit)?;
                let line = output
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .ok_or_else(|| Error::NoResult {
                        what: hub.what.clone(),
                    })?;
                Ok(serde_json::from_str::<HubResult>(line)?)
            });
        match outcome {
            Ok(result) => {
                rounds[i].push(result);
                progress.done(&format!("benches scale: {peers} peers: done"));
            }
            Err(e) => {
                progress.done(&format!("benches scale: {peers} peers: FAILED: {e}"));
                failures.push(ScaleFailure {
                    peers,
                    round: round + 1,
                    error: e.to_string(),
                });
            }
        }
    }
    drop(progress);
    let runs = rounds.iter().filter_map(|r| merge_runs(r)).collect();
    let all_rounds = rounds.into_iter().flatten().collect();
    let report = ScaleReport::new(
        Machine::here(cores, load_before),
        ScaleSettings {
            window: args.window,
            heartbeat_s: heartbeat,
            duration_s: duration,
            warmup_s: warmup,
            rounds: args.rounds.max(1),
        },
        runs,
        all_rounds,
        failures,
    );
    println!("{}", report.table());
    for file in report.write(&args.out)? {
        println!("wrote {}", file.display());
    }
    if report.failures.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "benches scale: {} peer count(s) failed",
            report.failures.len()
        );
        Ok(ExitCode::FAILURE)
    }
}

/// `1,2,3`.
fn list(values: &[u32]) -> String {
    let mut out = String::new();
    for (i, v) in values.iter().enumerate() {
        let _ = write!(out, "{}{v}", if i > 0 { "," } else { "" });
    }
    out
}

/// The heartbeat interval: 1 s to 10 min (libzmq caps the ZMTP heartbeat TTL the node
/// derives from it at 6553 s).
fn heartbeat(value: f64) -> Duration {
    seconds(value, 1.0).min(Duration::from_secs(600))
}

/// A node with the scale run's settings.
fn builder(id: String, heartbeat: Duration) -> NodeBuilder {
    Node::builder()
        .id(id)
        .hwm(HWM)
        .max_payload(16 * 1024 * 1024)
        .request_timeout(REQUEST_TIMEOUT)
        .handshake_timeout(HANDSHAKE_TIMEOUT)
        .heartbeat_interval(heartbeat)
}

/// The current-thread runtime the hub and the peer processes run on (as the per-layer
/// rows' processes do).
fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// `VmRSS` in KiB from the text of `/proc/self/status`; `None` when absent or malformed.
pub(crate) fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") | None => Some(value),
        Some(_) => None,
    }
}

/// Clock ticks per second of `/proc/*/stat` times (`USER_HZ`, 100 on every Linux the
/// harness runs on).
const USER_HZ: f64 = 100.0;

/// User plus system CPU seconds from the text of `/proc/self/stat` (every thread of the
/// process); `None` when malformed.
pub(crate) fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    // The command name is in parentheses and may hold spaces: count fields after the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 (utime) and 15 (stime) of proc(5); `rest` starts at field 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// This process's CPU seconds so far (Linux only).
pub(crate) fn cpu_seconds() -> Option<f64> {
    parse_cpu_seconds(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// The share of one core the hub used between two readings, over `wall` seconds.
pub(crate) fn busy(before: Option<f64>, after: Option<f64>, wall: f64) -> Option<f64> {
    let (before, after) = before.zip(after)?;
    (wall > 0.0).then(|| (after - before).max(0.0) / wall)
}

/// File descriptors a peer node holds in its process (counted at 1,000 peers: 1,775 in a
/// process of 250 nodes), rounded up, with the floor's connection (`scale_floor.rs`).
const FDS_PER_PEER_NODE: u64 = 9;
/// File descriptors the hub holds per joined peer (1,034 at 1,000 peers), with the floor's
/// connection.
const FDS_PER_HUB_PEER: u64 = 2;
/// File descriptors any harness process holds besides (stdio, libzmq's context, tokio).
const FDS_BASE: u64 = 64;

/// The soft limit on open files from the text of `/proc/self/limits`; `None` when absent,
/// malformed or unlimited.
pub(crate) fn parse_open_files_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Checks that the hub (`peers` connections) and a peer process (`per_process` nodes) fit
/// under the open-files limit `limit`, before anything starts: past it libzmq fails deep
/// inside a connection, which would read as a join timeout.
pub(crate) fn check_open_files(peers: u32, per_process: u32, limit: Option<u64>) -> Result<()> {
    let Some(limit) = limit else { return Ok(()) };
    let hub = FDS_BASE + FDS_PER_HUB_PEER * u64::from(peers);
    let process = FDS_BASE + FDS_PER_PEER_NODE * u64::from(per_process.min(peers));
    let needed = hub.max(process);
    if needed > limit {
        return Err(Error::OpenFiles { needed, limit });
    }
    Ok(())
}

/// This process's soft limit on open files (Linux only; children inherit it).
fn open_files_limit() -> Option<u64> {
    parse_open_files_limit(&std::fs::read_to_string("/proc/self/limits").ok()?)
}

/// This process's resident memory in KiB (Linux only).
fn rss_kb() -> Option<u64> {
    parse_vm_rss(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// The payload of a tick: MessagePack `bin` of the given bytes (3 to 5 bytes of header), so
/// the wire size is the payload size, not an array of integers.
struct Blob<'a>(&'a [u8]);

impl Serialize for Blob<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

/// Splits `peers` into `(first index, count)` per process, at most `per_process` each.
pub(crate) fn split(peers: u32, per_process: u32) -> Vec<(u32, u32)> {
    let per = per_process.max(1);
    let mut out = Vec::new();
    let mut first = 0;
    while first < peers {
        let count = per.min(peers - first);
        out.push((first, count));
        first += count;
    }
    out
}

/// The hub role: one peer count, one JSON line on stdout. Every peer process is killed by
/// pid when this returns, whatever happened.
pub(crate) fn hub(args: &HubArgs, reexec: &Reexec) -> Result<()> {
    if args.watch_stdin {
        exit_when_stdin_closes(1);
    }
    let mut children = Vec::new();
    let result = runtime()?.block_on(hub_run(args, reexec, &mut children));
    // Kill the peers before printing: their exit must not be mistaken for the hub's work.
    drop(children);
    let result = result?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}

/// A peer process and the receiver of its `ready` line.
type Child = (Process, mpsc::Receiver<Option<String>>);

/// The hub's measurements; the peer processes go into `children` as they start.
async fn hub_run(args: &HubArgs, reexec: &Reexec, children: &mut Vec<Child>) -> Result<HubResult> {
    let heartbeat = heartbeat(args.heartbeat);
    let peers = args.peers as usize;
    let hub = builder("scale-hub".to_owned(), heartbeat)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    let endpoint = hub.address().ok_or(Error::NotBound)?;
    let floor_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let floor_address = floor_listener.local_addr()?.to_string();
    let rss_before = rss_kb();

    let started = Instant::now();
    for (first, count) in split(args.peers, args.per_process) {
        let mut command = reexec.command();
        command
            .args(["scale-peers", "--endpoint", &endpoint])
            .args(["--first", &first.to_string(), "--count", &count.to_string()])
            .args(["--heartbeat", &heartbeat.as_secs_f64().to_string()])
            .args(["--tcp", &floor_address])
            .arg("--watch-stdin");
        let what = format!("scale peers {first}..{}", first + count);
        let mut process = Process::start(command, what)?;
        let ready = process.first_line();
        children.push((process, ready));
    }
    // Joined: the hub counts every peer.
    loop {
        if hub.stats().peers >= peers {
            break;
        }
        for (process, _) in children.iter_mut() {
            if let Some(status) = process.child.try_wait()? {
                return Err(Error::ChildFailed {
                    what: process.what.clone(),
                    status,
                });
            }
        }
        if started.elapsed() > JOIN_LIMIT {
            return Err(Error::JoinTimeout {
                joined: hub.stats().peers,
                peers,
                waited: JOIN_LIMIT,
            });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let join = started.elapsed();
    eprintln!(
        "  {peers} peers joined in {:.2} s ({} processes)",
        join.as_secs_f64(),
        children.len()
    );
    let mut peer_growth_kb = Some(0u64);
    for (process, ready) in children.iter_mut() {
        let line = loop {
            match ready.try_recv() {
                Ok(line) => break line,
                Err(mpsc::TryRecvError::Empty) if started.elapsed() < JOIN_LIMIT => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(_) => break None,
            }
        };
        let ready: PeersReady = match line {
            Some(line) => serde_json::from_str(&line)?,
            None => {
                return Err(process.no_line_error(Error::NoResult {
                    what: process.what.clone(),
                }))
            }
        };
        peer_growth_kb = match (peer_growth_kb, ready.rss_before_kb, ready.rss_after_kb) {
            (Some(sum), Some(before), Some(after)) => Some(sum + after.saturating_sub(before)),
            _ => None,
        };
    }
    // Let the last handshakes' buffers settle before reading the memory.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_joined = rss_kb();
    let floor = crate::scale_floor::Floor::accept(&floor_listener, peers, JOIN_LIMIT).await?;

    let ids: Vec<NodeId> = hub.peers().into_iter().map(|p| p.id).collect();
    let filter = Filter::new().eq(ROLE.0, ROLE.1);
    let warmup = seconds(args.warmup, 0.0);
    let duration = seconds(args.duration, 0.01);
    let mut sizes = Vec::new();
    for &size in &args.sizes {
        let payload = vec![0xab; size as usize];
        let tick_all = fan_out(&hub, &ids, &filter, &payload, warmup, duration).await?;
        eprintln!(
            "  {size} B: tick_all {:.0} ticks/s delivered ({:.1} fan-outs/s)",
            tick_all.ticks_per_s, tick_all.calls_per_s
        );
        let payload = bytes::Bytes::from(payload);
        let phase = Phase {
            hub: &hub,
            payload: &payload,
            window: args.window.max(1) as usize,
            warmup,
            duration,
        };
        let request_any = phase
            .requests(|| Target::Any(filter.clone(), Scope::Down))
            .await?;
        eprintln!("  {size} B: request_any {:.0}/s", request_any.rate);
        // The control: the same requests to each peer in turn by id, no filter, no pick.
        let mut turn = 0usize;
        let request_id = phase
            .requests(|| {
                turn = turn.wrapping_add(1);
                Target::Id(ids[turn % ids.len().max(1)].clone())
            })
            .await?;
        eprintln!("  {size} B: request by id {:.0}/s", request_id.rate);
        // The second control, past FEW peers: the same requests by id to the first FEW
        // only, the others joined and idle. Near the FEW-peer rate, a joined peer costs
        // nothing until it is called, and what slows the mesh is the calls' spread.
        let request_id_few = if ids.len() > FEW {
            let mut turn = 0usize;
            let few = phase
                .requests(|| {
                    turn = turn.wrapping_add(1);
                    Target::Id(ids[turn % FEW].clone())
                })
                .await?;
            eprintln!(
                "  {size} B: request by id to {FEW} of them {:.0}/s",
                few.rate
            );
            Some(few)
        } else {
            None
        };
        let tcp_floor = floor
            .requests(size as usize, phase.window, warmup, duration)
            .await?;
        eprintln!("  {size} B: the floor, plain TCP {:.0}/s", tcp_floor.rate);
        sizes.push(SizeResult {
            size: size as usize,
            tick_all,
            request_any,
            request_id,
            request_id_few,
            tcp_floor: Some(tcp_floor),
        });
    }
    let rss_after = rss_kb();
    let per_peer = |growth: u64| growth as f64 / peers as f64;
    Ok(HubResult {
        peers,
        rounds: 1,
        processes: children.len(),
        join_s: join.as_secs_f64(),
        hub_rss_before_kb: rss_before,
        hub_rss_joined_kb: rss_joined,
        hub_rss_after_kb: rss_after,
        hub_rss_per_peer_kb: rss_before
            .zip(rss_joined)
            .map(|(before, joined)| per_peer(joined.saturating_sub(before))),
        peer_rss_per_node_kb: peer_growth_kb.map(per_peer),
        sizes,
    })
}

/// `tick_all` as fast as it goes for `duration` after a warm-up; the rate the peers count.
async fn fan_out(
    hub: &Node,
    ids: &[NodeId],
    filter: &Filter,
    payload: &[u8],
    warmup: Duration,
    duration: Duration,
) -> Result<FanOut> {
    let blob = Blob(payload);
    tick_all_until(hub, filter, &blob, Instant::now() + warmup).await?;
    let (first, started) = tick_count(hub, ids).await?;
    let cpu_before = cpu_seconds();
    let (calls, sent) = tick_all_until(hub, filter, &blob, started + duration).await?;
    let (last, ended) = tick_count(hub, ids).await?;
    let seconds = ended.duration_since(started).as_secs_f64();
    let hub_cpu = busy(cpu_before, cpu_seconds(), seconds);
    let delivered = last.saturating_sub(first);
    Ok(FanOut {
        calls,
        sent,
        delivered,
        seconds,
        calls_per_s: calls as f64 / seconds,
        ticks_per_s: delivered as f64 / seconds,
        hub_cpu,
    })
}

/// Ticks every match until `deadline`; returns the calls made and the ticks they sent.
async fn tick_all_until(
    hub: &Node,
    filter: &Filter,
    blob: &Blob<'_>,
    deadline: Instant,
) -> Result<(u64, u64)> {
    let (mut calls, mut sent) = (0u64, 0u64);
    while Instant::now() < deadline {
        sent += hub
            .tick(
                node::Target::all(filter.clone()).scope(Scope::Down),
                "tick",
                blob,
            )
            .await
            .map(|sent| sent.nodes)? as u64;
        calls += 1;
        // Let the node's own tasks run: a send that never waits never yields.
        tokio::task::yield_now().await;
    }
    Ok((calls, sent))
}

/// The sum of every peer's tick count, and when the last answer arrived. Each answer comes
/// after every tick sent to that peer before it (one connection, handled in order).
async fn tick_count(hub: &Node, ids: &[NodeId]) -> Result<(u64, Instant)> {
    let total = futures::stream::iter(ids)
        .map(|id| async move {
            let count: u64 = hub
                .call(id, "ticks")
                .timeout(REQUEST_TIMEOUT)
                .send(&())
                .await?;
            Ok::<u64, Error>(count)
        })
        .buffer_unordered(COUNT_WINDOW)
        .try_fold(0u64, |sum, count| async move { Ok(sum + count) })
        .await?;
    Ok((total, Instant::now()))
}

/// A request phase of the hub: what every request carries and how many are in flight.
struct Phase<'a> {
    /// The hub.
    hub: &'a Node,
    /// The payload of every request (echoed back).
    payload: &'a bytes::Bytes,
    /// Requests in flight.
    window: usize,
    /// Warm-up before the measured phase.
    warmup: Duration,
    /// Length of the measured phase.
    duration: Duration,
}

impl Phase<'_> {
    /// `window` requests in flight to the targets `target` gives, one per request, to the
    /// peers' raw `echo`; rate, latency and the hub's CPU.
    async fn requests(&self, target: impl FnMut() -> Target) -> Result<RequestAny> {
        let size = self.payload.len();
        let plan = Plan::starting_now(self.warmup, self.duration);
        // The hub's CPU over the whole phase (warm-up included: the same steady state).
        let cpu_before = cpu_seconds();
        let started = Instant::now();
        // The window's loops take targets in turn (never across an await).
        let target = std::cell::RefCell::new(target);
        let recorder = drive_concurrent(self.window, plan, || {
            let target = (target.borrow_mut())();
            async move {
                let reply = self
                    .hub
                    .call(target, "echo")
                    .timeout(REQUEST_TIMEOUT)
                    .raw()
                    .send(self.payload.clone())
                    .await
                    .map(node::Reply::into_payload)?;
                if reply.len() == size {
                    Ok(())
                } else {
                    Err(Error::BadReply {
                        sent: size,
                        got: reply.len(),
                    })
                }
            }
        })
        .await?;
        let hub_cpu = busy(cpu_before, cpu_seconds(), started.elapsed().as_secs_f64());
        let point = recorder.finish(Layer::Node, size, self.window);
        Ok(RequestAny::from_point(point, self.window, hub_cpu))
    }
}

/// The peers role: `count` nodes joined to the hub, answering `echo`, counting ticks and
/// answering `ticks` with the count, until killed. Prints one [`PeersReady`] line once all
/// joined.
pub(crate) fn peers(args: &PeersArgs) -> Result<()> {
    if args.watch_stdin {
        exit_when_stdin_closes(0);
    }
    runtime()?.block_on(async {
        let rss_before = rss_kb();
        let heartbeat = heartbeat(args.heartbeat);
        let mut nodes = Vec::with_capacity(args.count as usize);
        for i in args.first..args.first.saturating_add(args.count) {
            let node = builder(format!("peer-{i}"), heartbeat)
                .option(ROLE.0, ROLE.1)
                .build()
                .await?;
            node.on_request_service(
                "echo",
                tower::service_fn(|req: Request| async move {
                    Ok::<_, node::BoxError>(Response::raw(req.payload().clone()))
                }),
            );
            let ticks = Arc::new(AtomicU64::new(0));
            let counted = Arc::clone(&ticks);
            node.on_tick("tick", move |_req: Request| {
                counted.fetch_add(1, Ordering::Relaxed);
                async {}
            });
            node.on_request("ticks", move |_req: Request| {
                let count = ticks.load(Ordering::Relaxed);
                async move { Ok::<u64, HandlerError>(count) }
            });
            nodes.push(node);
        }
        futures::future::try_join_all(nodes.iter().map(|n| n.connect(&args.endpoint))).await?;
        let ready = PeersReady {
            nodes: args.count,
            rss_before_kb: rss_before,
            rss_after_kb: rss_kb(),
        };
        println!("{}", serde_json::to_string(&ready)?);
        // After the memory was read: the floor's connections are not the nodes'.
        if let Some(address) = &args.tcp {
            crate::scale_floor::echo(address, args.count).await?;
        }
        std::future::pending::<()>().await;
        Ok::<(), Error>(())
    })
}

#[cfg(test)]
mod tests;
