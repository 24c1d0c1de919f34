//! The streams report: a streamed reply between two processes beside a plain-TCP bulk floor
//! and the node's own one-way and round-trip figures, all measured in one run.
//!
//! ```text
//! cargo run --release -p benches -- streams [--duration 5] [--warmup 1] [--long-mib 1024]
//! zeronode bench streams [same options]
//! ```
//!
//! One server process (`streams-serve`) binds a `Node` on the native engine and a plain TCP
//! listener; one client process (`streams-client`) measures, in order:
//!
//! - **`tcp-bulk`**, the floor: the server writes 128 KiB buffers, no framing, as fast as
//!   TCP takes them, and the client reads into a 128 KiB buffer whatever has arrived, as
//!   iperf3 does: the most bytes a pair of processes moves over this loopback, which a
//!   stream (framing, credit, a copy) cannot beat; bytes per second;
//! - **`stream-64k`**: a streamed reply of 64 KiB raw items (`Sink::send_raw` of one shared
//!   buffer) read through `call(..).raw().stream(..)`, the default window;
//! - **`stream-100b`**: the same with 100-byte items, items per second, beside
//!   **`node-native-tick`**: 100-byte one-way ticks counted by the server (as the per-layer
//!   report's row of that name measures them);
//! - **first item**: the time from opening a stream to its first 100-byte item, beside the
//!   p50 of a 100-byte request's round trip (`echo`), alternating the two;
//! - **long stream**: one stream of `--long-mib` MiB in 64 KiB items, with the resident
//!   memory (`VmRSS`) of both processes after its first item and after its last.
//!
//! Both processes run on one current-thread tokio runtime each, as the per-layer rows do.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use futures::StreamExt;
use node::{HandlerError, Node, NodeId, Request, Response, Sink};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::process::Process;
use crate::{exit_when_stdin_closes, report, seconds, Reexec};

/// The server node's id.
const SERVER_ID: &str = "stream-server";

/// The big items' size.
const CHUNK: usize = 64 * 1024;

/// The floor's write and read size: large, as iperf3's default (128 KiB) is, so that the
/// floor is the loopback's, not the cost of small system calls.
const BULK: usize = 128 * 1024;

/// The small items' size, the ticks' and the round trip's payload.
const SMALL: usize = 100;

/// Heartbeats far apart: a phase lasts seconds (as in the per-layer rows).
const HEARTBEAT: Duration = Duration::from_secs(600);

/// Ticks sent between two looks at the clock.
const TICK_BATCH: usize = 1024;

/// Rounds of the first-item and round-trip comparison (each round one of each).
const LATENCY_ROUNDS: usize = 2000;

/// Options of `streams`.
#[derive(Debug, Args)]
pub(crate) struct StreamsArgs {
    /// Measured seconds per phase.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Warm-up seconds per phase.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Length of the long stream whose memory is reported, in MiB (10240 for 10 GiB).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    long_mib: u64,
    /// Measure the four rates N times, interleaved (floor, 64 KiB, 100 B, ticks, then
    /// again), and report each one's median: a burst of other work lands on one round of
    /// every figure rather than on every round of one.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    rounds: u32,
}

/// Options of the server role.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Exit when stdin closes (the orchestrator is gone).
    #[arg(long)]
    watch_stdin: bool,
}

/// Options of the client role.
#[derive(Debug, Args)]
pub(crate) struct ClientArgs {
    /// The server node's endpoint.
    #[arg(long)]
    endpoint: String,
    /// The server's TCP floor address (`host:port`).
    #[arg(long)]
    tcp: String,
    /// The server process's pid, for its resident memory.
    #[arg(long)]
    server_pid: u32,
    /// Measured seconds per phase.
    #[arg(long)]
    duration: f64,
    /// Warm-up seconds per phase.
    #[arg(long)]
    warmup: f64,
    /// Long stream length in MiB.
    #[arg(long)]
    long_mib: u64,
    /// Interleaved rounds of the rates.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// Exit when stdin closes.
    #[arg(long)]
    watch_stdin: bool,
}

/// What the client measured: one JSON line.
#[derive(Debug, Serialize, Deserialize)]
struct Figures {
    /// The TCP floor, bytes per second.
    tcp_bulk_bytes_per_s: f64,
    /// 64 KiB items, bytes per second.
    stream_64k_bytes_per_s: f64,
    /// 100 B items per second.
    stream_100b_items_per_s: f64,
    /// 100 B ticks per second, counted by the server.
    tick_per_s: f64,
    /// Each round's ratios, `[64 KiB stream / floor, 100 B items / ticks]`: the spread
    /// of the same-run comparison.
    #[serde(default)]
    round_ratios: Vec<[f64; 2]>,
    /// Time to the first item, p50, microseconds.
    first_item_p50_us: f64,
    /// Time to the first item, p95.
    first_item_p95_us: f64,
    /// Request round trip, p50, microseconds.
    round_trip_p50_us: f64,
    /// Request round trip, p95.
    round_trip_p95_us: f64,
    /// Bytes of the long stream.
    long_bytes: u64,
    /// Its seconds.
    long_seconds: f64,
    /// Client `VmRSS` after the long stream's first item, KiB.
    client_rss_start_kb: Option<u64>,
    /// ... after its last.
    client_rss_end_kb: Option<u64>,
    /// Server `VmRSS` after the first item.
    server_rss_start_kb: Option<u64>,
    /// ... after the last.
    server_rss_end_kb: Option<u64>,
}

/// The orchestrator: starts the server, runs the client, prints the table.
pub(crate) fn run(args: &StreamsArgs, reexec: &Reexec) -> Result<ExitCode> {
    let load_before = report::load_average();
    let mut server = reexec.command();
    server.args(["streams-serve", "--watch-stdin"]);
    let mut server = Process::start(server, "streams server".into())?;
    let wait = Duration::from_secs(10);
    let line = server
        .first_line_within(wait)
        .ok_or_else(|| Error::ServerStart {
            layer: "streams",
            waited: wait,
        })?;
    let (endpoint, tcp) = line.split_once(' ').ok_or(Error::ServerStart {
        layer: "streams",
        waited: wait,
    })?;
    let mut client = reexec.command();
    client.args([
        "streams-client",
        "--watch-stdin",
        "--endpoint",
        endpoint,
        "--tcp",
        tcp,
        "--server-pid",
        &server.child.id().to_string(),
        "--duration",
        &args.duration.to_string(),
        "--warmup",
        &args.warmup.to_string(),
        "--long-mib",
        &args.long_mib.to_string(),
        "--rounds",
        &args.rounds.to_string(),
    ]);
    let mut client = Process::start(client, "streams client".into())?;
    // Five timed phases, the latency rounds, and the long stream at no less than 20 MB/s.
    let phases = 4.0 * f64::from(args.rounds) * (args.duration + args.warmup)
        + 60.0
        + args.long_mib as f64 / 20.0;
    let out = client.finish_within(seconds(phases, 1.0))?;
    server.kill();
    let figures: Figures = serde_json::from_str(out.trim()).map_err(Error::Json)?;
    let load_after = report::load_average();
    print_table(&figures, args, load_before, load_after);
    Ok(ExitCode::SUCCESS)
}

/// The report: a Markdown table, then the machine's load.
fn print_table(f: &Figures, args: &StreamsArgs, before: Option<String>, after: Option<String>) {
    let mib = |b: f64| b / (1024.0 * 1024.0);
    let kb = |k: Option<u64>| k.map_or("?".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
    println!(
        "streams: {} s measured per phase after {} s warm-up, median of {} interleaved \
         rounds, native engine, the default window ({} items, about 2 MiB)",
        args.duration,
        args.warmup,
        args.rounds,
        protocol::DEFAULT_WINDOW
    );
    println!();
    println!("| figure | value | beside |");
    println!("|---|---|---|");
    println!(
        "| `tcp-bulk` 128 KiB writes and reads | {:.0} MiB/s | the floor |",
        mib(f.tcp_bulk_bytes_per_s)
    );
    println!(
        "| `stream-64k` raw items | {:.0} MiB/s | {:.2} x floor |",
        mib(f.stream_64k_bytes_per_s),
        f.stream_64k_bytes_per_s / f.tcp_bulk_bytes_per_s.max(1.0)
    );
    println!(
        "| `stream-100b` items | {:.0} items/s | {:.2} x `node-native-tick` ({:.0} ticks/s) |",
        f.stream_100b_items_per_s,
        f.stream_100b_items_per_s / f.tick_per_s.max(1.0),
        f.tick_per_s
    );
    println!(
        "| first item p50 (p95) | {:.0} µs ({:.0}) | {:.2} x request round trip p50 {:.0} µs ({:.0}) |",
        f.first_item_p50_us,
        f.first_item_p95_us,
        f.first_item_p50_us / f.round_trip_p50_us.max(1.0),
        f.round_trip_p50_us,
        f.round_trip_p95_us
    );
    println!(
        "| long stream {:.0} MiB in {:.1} s | client RSS {} -> {} | server RSS {} -> {} |",
        mib(f.long_bytes as f64),
        f.long_seconds,
        kb(f.client_rss_start_kb),
        kb(f.client_rss_end_kb),
        kb(f.server_rss_start_kb),
        kb(f.server_rss_end_kb)
    );
    if f.round_ratios.len() > 1 {
        let spread = |i: usize| {
            let mut r: Vec<f64> = f.round_ratios.iter().map(|r| r[i]).collect();
            r.sort_by(f64::total_cmp);
            let shown: Vec<String> = r.iter().map(|x| format!("{x:.2}")).collect();
            format!("median {:.2} ({})", percentile(&r, 0.5), shown.join(", "))
        };
        println!();
        println!("each round's ratio, same-run: 64 KiB x floor {}", spread(0));
        println!("each round's ratio, same-run: 100 B x ticks {}", spread(1));
    }
    println!();
    println!(
        "load average: {} before, {} after",
        before.as_deref().unwrap_or("?"),
        after.as_deref().unwrap_or("?")
    );
}

/// A node with the harness's settings on the native engine.
fn builder(id: String) -> node::NodeBuilder {
    Node::builder()
        .id(id)
        .engine(node::Engine::Native)
        .heartbeat_interval(HEARTBEAT)
        .request_timeout(Duration::from_secs(3600))
}

/// The server role: the node and the TCP floor until killed; prints `ENDPOINT HOST:PORT`.
pub(crate) fn serve(args: &ServeArgs) -> Result<()> {
    if args.watch_stdin {
        exit_when_stdin_closes(0);
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let tcp = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || write_chunks(stream));
        }
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let server = builder(SERVER_ID.to_owned())
            .bind("tcp://127.0.0.1:0")
            .build()
            .await?;
        server.on_stream("items", |req: Request, sink: Sink| async move {
            let (size, count) = ask(req.payload())
                .ok_or_else(|| HandlerError::new(HandlerError::BAD_REQUEST, "16 bytes"))?;
            send_items(sink, size, count).await
        });
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
        let mut out = std::io::stdout().lock();
        writeln!(out, "{address} {tcp}")?;
        out.flush()?;
        drop(out);
        std::future::pending::<()>().await;
        Ok(())
    })
}

/// The floor's writer: 128 KiB buffers, no framing, until the reader goes.
fn write_chunks(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let chunk = vec![0x5a; BULK];
    while stream.write_all(&chunk).is_ok() {}
}

/// The item size and count a stream request asks for (count 0: until cancelled).
fn ask(payload: &[u8]) -> Option<(usize, u64)> {
    let size = u64::from_le_bytes(payload.get(..8)?.try_into().ok()?);
    let count = u64::from_le_bytes(payload.get(8..16)?.try_into().ok()?);
    Some((usize::try_from(size).ok()?.min(CHUNK), count))
}

/// The request for `count` items of `size` bytes.
fn asking(size: usize, count: u64) -> Bytes {
    let mut payload = Vec::with_capacity(16);
    payload.extend_from_slice(&(size as u64).to_le_bytes());
    payload.extend_from_slice(&count.to_le_bytes());
    Bytes::from(payload)
}

/// Sends `count` items (forever for 0) of one shared buffer: a clone is a reference count.
async fn send_items(mut sink: Sink, size: usize, count: u64) -> Result<(), HandlerError> {
    let item = Bytes::from(vec![0xa5; size]);
    let mut sent = 0u64;
    while count == 0 || sent < count {
        sink.send_raw(item.clone()).await?;
        sent += 1;
    }
    Ok(())
}

/// This process's or another's resident memory in KiB (Linux only).
fn rss_kb(pid: Option<u32>) -> Option<u64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/status"),
        None => "/proc/self/status".into(),
    };
    crate::scale::parse_vm_rss(&std::fs::read_to_string(path).ok()?)
}

/// The client role: every phase in turn, one JSON line.
pub(crate) fn client(args: &ClientArgs) -> Result<()> {
    if args.watch_stdin {
        exit_when_stdin_closes(1);
    }
    let warmup = seconds(args.warmup, 0.0);
    let duration = seconds(args.duration, 0.01);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let figures = runtime.block_on(async move {
        let client = builder(format!("stream-client-{}", std::process::id()))
            .build()
            .await?;
        let server = client.connect(&args.endpoint).await?.id;
        let mut rates: [Vec<f64>; 4] = Default::default();
        for _ in 0..args.rounds.max(1) {
            // The floor's reads block: this thread is the runtime's, and nothing else of
            // ours runs meanwhile (the node only answers heartbeats, every ten minutes).
            rates[0].push(tcp_floor(&args.tcp, warmup, duration)?);
            rates[1].push(stream_rate(&client, &server, CHUNK, warmup, duration).await?);
            rates[2]
                .push(stream_rate(&client, &server, SMALL, warmup, duration).await? / SMALL as f64);
            rates[3].push(tick_rate(&client, &server, warmup, duration).await?);
        }
        let round_ratios = (0..rates[0].len())
            .map(|i| {
                [
                    rates[1][i] / rates[0][i].max(1.0),
                    rates[2][i] / rates[3][i].max(1.0),
                ]
            })
            .collect();
        let [tcp_bulk_bytes_per_s, stream_64k_bytes_per_s, stream_100b_items_per_s, tick_per_s] =
            rates.map(|r| percentile(&r, 0.5));
        let (first, trip) = latencies(&client, &server).await?;
        let long = long_stream(&client, &server, args.long_mib, args.server_pid).await?;
        client.close().await;
        Ok::<_, Error>(Figures {
            tcp_bulk_bytes_per_s,
            stream_64k_bytes_per_s,
            stream_100b_items_per_s,
            tick_per_s,
            round_ratios,
            first_item_p50_us: percentile(&first, 0.50),
            first_item_p95_us: percentile(&first, 0.95),
            round_trip_p50_us: percentile(&trip, 0.50),
            round_trip_p95_us: percentile(&trip, 0.95),
            long_bytes: long.bytes,
            long_seconds: long.seconds,
            client_rss_start_kb: long.client.0,
            client_rss_end_kb: long.client.1,
            server_rss_start_kb: long.server.0,
            server_rss_end_kb: long.server.1,
        })
    })?;
    println!("{}", serde_json::to_string(&figures)?);
    Ok(())
}

/// The floor: reads whatever has arrived into a 128 KiB buffer; bytes per second over the
/// measured phase.
fn tcp_floor(address: &str, warmup: Duration, duration: Duration) -> Result<f64> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_nodelay(true)?;
    let mut buf = vec![0u8; BULK];
    let mut read_some = |stream: &mut TcpStream| -> Result<usize> {
        match stream.read(&mut buf)? {
            0 => Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
            n => Ok(n),
        }
    };
    let start = Instant::now();
    while start.elapsed() < warmup {
        read_some(&mut stream)?;
    }
    let measured = Instant::now();
    let mut bytes = 0u64;
    while measured.elapsed() < duration {
        bytes += read_some(&mut stream)? as u64;
    }
    Ok(bytes as f64 / measured.elapsed().as_secs_f64())
}

/// An endless stream of `size`-byte items read for the warm-up and the measured phase;
/// bytes per second over the latter. Dropping the stream cancels the handler.
async fn stream_rate(
    client: &Node,
    server: &NodeId,
    size: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<f64> {
    let mut items = client.call(server, "items").raw().stream(asking(size, 0));
    let start = Instant::now();
    let mut measured = None;
    let mut bytes = 0u64;
    while let Some(item) = items.next().await {
        let item = item?;
        match measured {
            None if start.elapsed() >= warmup => measured = Some(Instant::now()),
            None => {}
            Some(at) if Instant::elapsed(&at) >= duration => {
                return Ok(bytes as f64 / at.elapsed().as_secs_f64());
            }
            Some(_) => bytes += item.len() as u64,
        }
    }
    Err(Error::Caller("the endless stream ended".into()))
}

/// One-way 100-byte ticks as fast as the socket takes them, counted by the server.
async fn tick_rate(
    client: &Node,
    server: &NodeId,
    warmup: Duration,
    duration: Duration,
) -> Result<f64> {
    let payload = Bytes::from(vec![0x33; SMALL]);
    let send_until = |deadline: Instant| {
        let payload = payload.clone();
        async move {
            while Instant::now() < deadline {
                for _ in 0..TICK_BATCH {
                    client
                        .call(server, "tick")
                        .raw()
                        .tick(payload.clone())
                        .await?;
                }
            }
            Ok::<_, Error>(())
        }
    };
    let count = || async {
        let n: u64 = client.request(server, "ticks", &()).await?;
        Ok::<_, Error>((n, Instant::now()))
    };
    send_until(Instant::now() + warmup).await?;
    let (first, started) = count().await?;
    send_until(started + duration).await?;
    let (last, ended) = count().await?;
    Ok(last.saturating_sub(first) as f64 / ended.duration_since(started).as_secs_f64())
}

/// Alternating rounds: a one-item stream timed to its first item, a request's round trip.
async fn latencies(client: &Node, server: &NodeId) -> Result<(Vec<f64>, Vec<f64>)> {
    let mut first = Vec::with_capacity(LATENCY_ROUNDS);
    let mut trip = Vec::with_capacity(LATENCY_ROUNDS);
    let payload = Bytes::from(vec![0x44; SMALL]);
    for _ in 0..LATENCY_ROUNDS {
        let started = Instant::now();
        let mut items = client.call(server, "items").raw().stream(asking(SMALL, 1));
        items
            .next()
            .await
            .ok_or_else(|| Error::Caller("a stream ended before its item".into()))??;
        first.push(started.elapsed().as_secs_f64() * 1e6);
        // Read to its end, so the next round starts with nothing open.
        while let Some(item) = items.next().await {
            item?;
        }
        let started = Instant::now();
        let reply = client
            .call(server, "echo")
            .raw()
            .send(payload.clone())
            .await?;
        trip.push(started.elapsed().as_secs_f64() * 1e6);
        if reply.payload().len() != SMALL {
            return Err(Error::BadReply {
                sent: SMALL,
                got: reply.payload().len(),
            });
        }
    }
    Ok((first, trip))
}

/// The long stream's figures.
struct Long {
    bytes: u64,
    seconds: f64,
    client: (Option<u64>, Option<u64>),
    server: (Option<u64>, Option<u64>),
}

/// One stream of `mib` MiB in 64 KiB items; both processes' memory after its first item
/// and after its last.
async fn long_stream(client: &Node, server: &NodeId, mib: u64, server_pid: u32) -> Result<Long> {
    let count = mib * 1024 * 1024 / CHUNK as u64;
    let mut items = client
        .call(server, "items")
        .raw()
        .stream(asking(CHUNK, count));
    let started = Instant::now();
    let mut bytes = 0u64;
    let mut at_start = None;
    while let Some(item) = items.next().await {
        bytes += item?.len() as u64;
        if at_start.is_none() {
            at_start = Some((rss_kb(None), rss_kb(Some(server_pid))));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let (client_start, server_start) = at_start.unwrap_or((None, None));
    Ok(Long {
        bytes,
        seconds,
        client: (client_start, rss_kb(None)),
        server: (server_start, rss_kb(Some(server_pid))),
    })
}

/// The `q` quantile of `samples` (nearest rank), 0 when empty.
fn percentile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_request_round_trips_and_a_short_one_is_refused() {
        assert_eq!(ask(&asking(100, 7)), Some((100, 7)));
        assert_eq!(ask(&asking(1 << 30, 0)), Some((CHUNK, 0)));
        assert_eq!(ask(&[0; 15]), None);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&samples, 0.5), 50.0);
        assert_eq!(percentile(&samples, 0.95), 95.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
