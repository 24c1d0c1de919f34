//! A small service mesh at work, in one process.
//!
//! Two gateways (`gw-1`, `gw-2`, options `layer=A`) bind loopback ports; three workers
//! (`w-eu-1`, `w-eu-2`, `w-us-1`, options `layer=B`, a `region` and a `load`) connect to
//! both gateways. For a few seconds:
//!
//! - each gateway keeps a window of requests in flight: `image:resize` to any worker in
//!   Europe (filter `layer=B, region ~ ^eu-`), to any lightly loaded worker (`layer=B,
//!   load < 0.5`), both picked "least in flight first", and `worker:status` to a worker by
//!   id;
//! - each worker asks any gateway for `quota:check` (a request upstream: both ends of a
//!   connection can send);
//! - gateways tick a `config:push` to all of layer B, workers tick a `stats:report` to
//!   layer A.
//!
//! Every half second it prints the traffic so far and one message as it went by; at the end
//! a table per node (requests sent, answered, handled; ticks sent and received; errors) and
//! the overall rate. Any failed request makes it exit non-zero.
//!
//! Run it with `cargo run --release -p examples --bin mesh` (3 seconds), or give the
//! duration in seconds: `cargo run --release -p examples --bin mesh -- 10`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use examples::{address, init_tracing, unexpected, Result};
use node::{Filter, HandlerError, Node, Request, Scope, Strategy, Target};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

/// How long the traffic runs when no duration is given.
const DEFAULT_SECONDS: f64 = 3.0;
/// The gateways (layer A).
const GATEWAYS: [&str; 2] = ["gw-1", "gw-2"];
/// The workers (layer B): id, region, load.
const WORKERS: [(&str, &str, f64); 3] = [
    ("w-eu-1", "eu-west", 0.2),
    ("w-eu-2", "eu-north", 0.6),
    ("w-us-1", "us-east", 0.4),
];
/// Requests each gateway keeps in flight.
const WINDOW: usize = 8;
/// How often each gateway ticks layer B.
const CONFIG_PUSH_EVERY: Duration = Duration::from_millis(10);
/// How often each worker ticks layer A.
const STATS_REPORT_EVERY: Duration = Duration::from_millis(50);
/// How often each worker asks a gateway for quota.
const QUOTA_CHECK_EVERY: Duration = Duration::from_millis(20);
/// How often progress is printed.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// How many failures are printed in full (all are counted).
const ERRORS_SHOWN: u64 = 5;

/// What a node did, counted as it happens.
#[derive(Default)]
struct Counters {
    requests_sent: AtomicU64,
    replies: AtomicU64,
    handled: AtomicU64,
    ticks_sent: AtomicU64,
    ticks_received: AtomicU64,
    errors: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// One node of the mesh and its counters.
struct Member {
    node: Node,
    layer: &'static str,
    options: String,
    counters: Arc<Counters>,
}

/// The kinds of traffic, for the samples printed as the mesh runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    ResizeInEurope,
    ResizeLightLoad,
    StatusById,
    QuotaCheck,
    ConfigPush,
    StatsReport,
}

const KINDS: [Kind; 6] = [
    Kind::ResizeInEurope,
    Kind::ConfigPush,
    Kind::ResizeLightLoad,
    Kind::QuotaCheck,
    Kind::StatusById,
    Kind::StatsReport,
];

/// Catches one message of a wanted kind as it goes by, without slowing the others: the
/// printer asks for a kind, the first sender of that kind describes its message.
#[derive(Default)]
struct Sampler {
    /// The wanted kind's index in `KINDS` plus one; 0 when nothing is wanted.
    wanted: AtomicUsize,
    line: Mutex<Option<String>>,
}

impl Sampler {
    fn ask(&self, kind: Kind) {
        let index = KINDS.iter().position(|k| *k == kind).unwrap_or(0);
        self.wanted.store(index + 1, Ordering::Relaxed);
    }

    fn offer(&self, kind: Kind, describe: impl FnOnce() -> String) {
        let index = KINDS.iter().position(|k| *k == kind).unwrap_or(0);
        if self.wanted.load(Ordering::Relaxed) == index + 1
            && self
                .wanted
                .compare_exchange(index + 1, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            if let Ok(mut line) = self.line.lock() {
                *line = Some(describe());
            }
        }
    }

    fn take(&self) -> Option<String> {
        self.line.lock().ok().and_then(|mut line| line.take())
    }
}

/// An `image:resize` job.
#[derive(Serialize, Deserialize)]
struct Job {
    id: u64,
    width: u32,
}

/// A worker's answer to a job.
#[derive(Serialize, Deserialize)]
struct Done {
    worker: String,
    job: u64,
    height: u32,
}

/// What every sending task needs.
#[derive(Clone)]
struct Traffic {
    deadline: Instant,
    sampler: Arc<Sampler>,
    jobs: Arc<AtomicU64>,
    in_europe: Filter,
    light_load: Filter,
    layer_a: Filter,
    layer_b: Filter,
}

/// Counts a failure and prints the first few.
fn failed(counters: &Counters, errors_seen: &AtomicU64, what: String) {
    Counters::add(&counters.errors, 1);
    if errors_seen.fetch_add(1, Ordering::Relaxed) < ERRORS_SHOWN {
        eprintln!("error: {what}");
    }
}

/// One slot of a gateway's request window: sends a request, waits for its reply, repeats
/// until the deadline. Returns the latency of every answered request, in microseconds.
async fn request_lane(
    gw: Node,
    counters: Arc<Counters>,
    traffic: Traffic,
    errors_seen: Arc<AtomicU64>,
    lane: usize,
) -> Vec<u32> {
    let mut latencies = Vec::new();
    let mut turn = lane;
    while Instant::now() < traffic.deadline {
        turn += 1;
        let job = Job {
            id: traffic.jobs.fetch_add(1, Ordering::Relaxed) + 1,
            width: 640 + (turn as u32 % 4) * 320,
        };
        let (kind, filter) = match turn % 4 {
            0 | 1 => (Kind::ResizeInEurope, Some(&traffic.in_europe)),
            2 => (Kind::ResizeLightLoad, Some(&traffic.light_load)),
            _ => (Kind::StatusById, None),
        };
        Counters::add(&counters.requests_sent, 1);
        let began = Instant::now();
        let outcome = match filter {
            Some(filter) => gw
                .request::<_, Done>(Target::any(filter.clone()).scope(Scope::Down), "image:resize", &job)
                .await
                .map(|done| {
                    let elapsed = began.elapsed();
                    traffic.sampler.offer(kind, || {
                        format!(
                            "{gw} -> any {}  image:resize #{} {}px wide -> {} made it {}px high in {elapsed:.0?}",
                            filter.to_json().map(|j| j.to_string()).unwrap_or_default(),
                            done.job,
                            job.width,
                            done.worker,
                            done.height,
                            gw = gw.id(),
                        )
                    });
                }),
            None => {
                let (worker, _, _) = WORKERS[turn / 4 % WORKERS.len()];
                gw.request::<_, u64>(worker, "worker:status", &())
                    .await
                    .map(|handled| {
                        let elapsed = began.elapsed();
                        traffic.sampler.offer(kind, || {
                            format!(
                                "{} -> {worker} (by id)  worker:status -> {worker} has handled {} requests ({elapsed:.0?})",
                                gw.id(),
                                thousands(handled)
                            )
                        });
                    })
            }
        };
        match outcome {
            Ok(()) => {
                Counters::add(&counters.replies, 1);
                latencies.push(u32::try_from(began.elapsed().as_micros()).unwrap_or(u32::MAX));
            }
            Err(e) => failed(
                &counters,
                &errors_seen,
                format!("{}: {kind:?}: {e}", gw.id()),
            ),
        }
    }
    latencies
}

/// Runs `each` every `period` until the deadline.
async fn every<F, Fut>(period: Duration, deadline: Instant, mut each: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if Instant::now() >= deadline {
            return;
        }
        each().await;
    }
}

/// A gateway: answers `quota:check`, counts `stats:report` ticks.
async fn gateway(id: &str) -> Result<Member> {
    let node = Node::builder()
        .id(id)
        .option("layer", "A")
        .strategy(Strategy::LeastInFlight)
        .request_timeout(Duration::from_secs(5))
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    let counters = Arc::new(Counters::default());
    let handled = Arc::clone(&counters);
    let me = id.to_owned();
    node.on_request("quota:check", move |req: Request| {
        let handled = Arc::clone(&handled);
        let me = me.clone();
        async move {
            let _bytes: u64 = req.decode()?;
            Counters::add(&handled.handled, 1);
            Ok::<_, HandlerError>(me)
        }
    });
    let received = Arc::clone(&counters);
    node.on_tick("stats:report", move |_req: Request| {
        Counters::add(&received.ticks_received, 1);
        async {}
    });
    Ok(Member {
        node,
        layer: "A",
        options: String::new(),
        counters,
    })
}

/// A worker: answers `image:resize` and `worker:status`, counts `config:push` ticks.
async fn worker(id: &str, region: &str, load: f64, gateways: &[Member]) -> Result<Member> {
    let node = Node::builder()
        .id(id)
        .option("layer", "B")
        .option("region", region)
        .option("load", load)
        .request_timeout(Duration::from_secs(5))
        .build()
        .await?;
    let counters = Arc::new(Counters::default());
    let (handled, me) = (Arc::clone(&counters), id.to_owned());
    node.on_request("image:resize", move |req: Request| {
        let handled = Arc::clone(&handled);
        let worker = me.clone();
        async move {
            let job: Job = req.decode()?;
            Counters::add(&handled.handled, 1);
            Ok::<_, HandlerError>(Done {
                worker,
                job: job.id,
                height: job.width * 9 / 16,
            })
        }
    });
    let handled = Arc::clone(&counters);
    node.on_request("worker:status", move |_req: Request| {
        let handled = Arc::clone(&handled);
        async move {
            let before = handled.handled.fetch_add(1, Ordering::Relaxed);
            Ok::<_, HandlerError>(before + 1)
        }
    });
    let received = Arc::clone(&counters);
    node.on_tick("config:push", move |_req: Request| {
        Counters::add(&received.ticks_received, 1);
        async {}
    });
    for gw in gateways {
        node.connect(&address(&gw.node)?).await?;
    }
    Ok(Member {
        node,
        layer: "B",
        options: format!("region={region} load={load}"),
        counters,
    })
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The sum of one counter over every member.
fn total(members: &[Member], counter: impl Fn(&Counters) -> &AtomicU64) -> u64 {
    members
        .iter()
        .map(|m| counter(&m.counters).load(Ordering::Relaxed))
        .sum()
}

#[tokio::main]
async fn main() -> Result {
    init_tracing();
    let seconds = match std::env::args().nth(1) {
        Some(arg) => arg
            .parse::<f64>()
            .ok()
            .filter(|s| *s > 0.0 && *s <= 3600.0)
            .ok_or_else(|| format!("usage: mesh [SECONDS], got {arg:?}"))?,
        None => DEFAULT_SECONDS,
    };
    let sampler = Arc::new(Sampler::default());

    println!(
        "mesh: {} gateways (layer A) and {} workers (layer B) in one process, for {seconds} s",
        GATEWAYS.len(),
        WORKERS.len()
    );
    let mut gateways = Vec::new();
    for id in GATEWAYS {
        let gw = gateway(id).await?;
        println!("  {id:<7} layer=A {:<28} bound {}", "", address(&gw.node)?);
        gateways.push(gw);
    }
    let mut workers = Vec::new();
    for (id, region, load) in WORKERS {
        let w = worker(id, region, load, &gateways).await?;
        println!(
            "  {id:<7} layer=B {:<28} connected to {}",
            w.options,
            GATEWAYS.join(", ")
        );
        workers.push(w);
    }
    println!("traffic:");
    println!(
        "  each gateway keeps {WINDOW} requests in flight to the workers: image:resize by filter \
         (least in flight first), worker:status by id"
    );
    println!("  each gateway ticks config:push to layer B every {CONFIG_PUSH_EVERY:?}");
    println!(
        "  each worker asks any gateway for quota:check every {QUOTA_CHECK_EVERY:?} and ticks \
         stats:report to layer A every {STATS_REPORT_EVERY:?}"
    );

    let started = Instant::now();
    let traffic = Traffic {
        deadline: started + Duration::from_secs_f64(seconds),
        sampler: Arc::clone(&sampler),
        jobs: Arc::new(AtomicU64::new(0)),
        in_europe: Filter::new().eq("layer", "B").regex("region", "^eu-")?,
        light_load: Filter::new().eq("layer", "B").lt("load", 0.5),
        layer_a: Filter::new().eq("layer", "A"),
        layer_b: Filter::new().eq("layer", "B"),
    };
    let errors_seen = Arc::new(AtomicU64::new(0));
    let mut lanes: Vec<JoinHandle<Vec<u32>>> = Vec::new();
    let mut background: Vec<JoinHandle<()>> = Vec::new();
    for gw in &gateways {
        for lane in 0..WINDOW {
            lanes.push(tokio::spawn(request_lane(
                gw.node.clone(),
                Arc::clone(&gw.counters),
                traffic.clone(),
                Arc::clone(&errors_seen),
                lane,
            )));
        }
        let (node, counters, t, errs) = (
            gw.node.clone(),
            Arc::clone(&gw.counters),
            traffic.clone(),
            Arc::clone(&errors_seen),
        );
        background.push(tokio::spawn(async move {
            let mut version = 0u64;
            every(CONFIG_PUSH_EVERY, t.deadline, || {
                version += 1;
                let (node, counters, t, errs) = (&node, &counters, &t, &errs);
                async move {
                    match node
                        .tick(Target::all(t.layer_b.clone()).scope(Scope::Down), "config:push", &version)
                        .await.map(|sent| sent.nodes)
                    {
                        Ok(reached) => {
                            Counters::add(&counters.ticks_sent, reached as u64);
                            t.sampler.offer(Kind::ConfigPush, || {
                                format!(
                                    "{} => all {}  tick config:push v{version}, sent to {reached} workers",
                                    node.id(),
                                    t.layer_b.to_json().map(|j| j.to_string()).unwrap_or_default()
                                )
                            });
                        }
                        Err(e) => failed(counters, errs, format!("{}: config:push: {e}", node.id())),
                    }
                }
            })
            .await;
        }));
    }
    for w in &workers {
        let (node, counters, t, errs) = (
            w.node.clone(),
            Arc::clone(&w.counters),
            traffic.clone(),
            Arc::clone(&errors_seen),
        );
        background.push(tokio::spawn(async move {
            every(STATS_REPORT_EVERY, t.deadline, || async {
                let handled = counters.handled.load(Ordering::Relaxed);
                match node
                    .tick(Target::all(t.layer_a.clone()).scope(Scope::Up), "stats:report", &handled)
                    .await.map(|sent| sent.nodes)
                {
                    Ok(reached) => {
                        Counters::add(&counters.ticks_sent, reached as u64);
                        t.sampler.offer(Kind::StatsReport, || {
                            format!(
                                "{} => all {} up  tick stats:report ({} handled), sent to {reached} gateways",
                                node.id(),
                                t.layer_a.to_json().map(|j| j.to_string()).unwrap_or_default(),
                                thousands(handled)
                            )
                        });
                    }
                    Err(e) => failed(&counters, &errs, format!("{}: stats:report: {e}", node.id())),
                }
            })
            .await;
        }));
        let (node, counters, t, errs) = (
            w.node.clone(),
            Arc::clone(&w.counters),
            traffic.clone(),
            Arc::clone(&errors_seen),
        );
        background.push(tokio::spawn(async move {
            every(QUOTA_CHECK_EVERY, t.deadline, || async {
                Counters::add(&counters.requests_sent, 1);
                let began = Instant::now();
                match node
                    .request::<_, String>(Target::any(t.layer_a.clone()).scope(Scope::Up), "quota:check", &4096u64)
                    .await
                {
                    Ok(granted_by) => {
                        Counters::add(&counters.replies, 1);
                        let elapsed = began.elapsed();
                        t.sampler.offer(Kind::QuotaCheck, || {
                            format!(
                                "{} -> any {} up  quota:check 4096 bytes -> granted by {granted_by} in {elapsed:.0?}",
                                node.id(),
                                t.layer_a.to_json().map(|j| j.to_string()).unwrap_or_default()
                            )
                        });
                    }
                    Err(e) => failed(&counters, &errs, format!("{}: quota:check: {e}", node.id())),
                }
            })
            .await;
        }));
    }

    // Progress while the traffic runs.
    let members: Vec<Member> = gateways.into_iter().chain(workers).collect();
    let mut kinds = KINDS.iter().cycle().skip(1);
    sampler.ask(KINDS[0]);
    let mut last_answered = 0;
    let mut last_at = started;
    while Instant::now() + PROGRESS_EVERY / 2 < traffic.deadline {
        let wait = PROGRESS_EVERY.min(traffic.deadline.saturating_duration_since(Instant::now()));
        tokio::time::sleep(wait).await;
        let answered = total(&members, |c| &c.replies);
        let now = Instant::now();
        let rate = (answered - last_answered) as f64 / (now - last_at).as_secs_f64();
        (last_answered, last_at) = (answered, now);
        println!(
            "[{:>4.1}s] {} requests answered ({}/s), {} ticks received, {} errors",
            (now - started).as_secs_f64(),
            thousands(answered),
            thousands(rate as u64),
            thousands(total(&members, |c| &c.ticks_received)),
            total(&members, |c| &c.errors)
        );
        if let Some(line) = sampler.take() {
            println!("        {line}");
        }
        if let Some(kind) = kinds.next() {
            sampler.ask(*kind);
        }
    }

    // Stop: every sender ends at the deadline.
    let mut latencies = Vec::new();
    for lane in lanes {
        latencies.extend(lane.await?);
    }
    for task in background {
        task.await?;
    }
    let elapsed = started.elapsed();
    // Ticks have no reply: give the last ones a moment to land before counting them.
    let ticks_sent = total(&members, |c| &c.ticks_sent);
    let drain_until = Instant::now() + Duration::from_secs(2);
    while total(&members, |c| &c.ticks_received) < ticks_sent && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    print_summary(&members, elapsed, &mut latencies)?;

    for member in members.iter().rev() {
        member.node.close().await;
    }
    let errors = total(&members, |c| &c.errors);
    if errors > 0 {
        return Err(unexpected(format!("{errors} requests or ticks failed")));
    }
    Ok(())
}

/// Prints the table per node and the totals.
fn print_summary(members: &[Member], elapsed: Duration, latencies: &mut [u32]) -> Result {
    let mut out = String::new();
    writeln!(
        out,
        "\n== summary after {:.1} s ==\n{:<8} {:<5} {:<26} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}",
        elapsed.as_secs_f64(),
        "node",
        "layer",
        "options",
        "req sent",
        "answered",
        "handled",
        "ticks sent",
        "ticks recv",
        "errors"
    )?;
    let row = |out: &mut String, name: &str, layer: &str, options: &str, v: [u64; 6]| {
        writeln!(
            out,
            "{name:<8} {layer:<5} {options:<26} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}",
            thousands(v[0]),
            thousands(v[1]),
            thousands(v[2]),
            thousands(v[3]),
            thousands(v[4]),
            thousands(v[5])
        )
    };
    let values = |c: &Counters| {
        [
            &c.requests_sent,
            &c.replies,
            &c.handled,
            &c.ticks_sent,
            &c.ticks_received,
            &c.errors,
        ]
        .map(|v| v.load(Ordering::Relaxed))
    };
    for m in members {
        row(
            &mut out,
            m.node.id().as_str(),
            m.layer,
            &m.options,
            values(&m.counters),
        )?;
    }
    let sum = |i: usize| members.iter().map(|m| values(&m.counters)[i]).sum::<u64>();
    let totals = [sum(0), sum(1), sum(2), sum(3), sum(4), sum(5)];
    row(&mut out, "total", "", "", totals)?;

    let secs = elapsed.as_secs_f64();
    latencies.sort_unstable();
    let percentile = |p: f64| -> Duration {
        if latencies.is_empty() {
            return Duration::ZERO;
        }
        let index = ((latencies.len() - 1) as f64 * p).round() as usize;
        Duration::from_micros(u64::from(latencies[index]))
    };
    writeln!(
        out,
        "requests: {} answered in {secs:.1} s = {} req/s (gateway round trips: p50 {:.0?}, p99 {:.0?}, {} in flight per gateway)",
        thousands(totals[1]),
        thousands((totals[1] as f64 / secs) as u64),
        percentile(0.50),
        percentile(0.99),
        WINDOW
    )?;
    let delivered = if totals[4] == totals[3] {
        "all delivered".to_owned()
    } else {
        format!("{} received", thousands(totals[4]))
    };
    writeln!(
        out,
        "ticks: {} sent = {} ticks/s, {delivered}; errors: {}",
        thousands(totals[3]),
        thousands((totals[3] as f64 / secs) as u64),
        totals[5]
    )?;
    print!("{out}");
    Ok(())
}
