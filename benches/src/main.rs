//! # benches: zeronode's two-process benchmark harness
//!
//! Measures each layer of the stack beside raw libzmq, in one run, with the server and the
//! client in two separate processes (as a user's services would be):
//!
//! | row | server process | client process |
//! |---|---|---|
//! | `raw` | `zmq` ROUTER echo, blocking | `zmq` DEALER, blocking: the limit |
//! | `transport` | `transport::Router` echo | `transport::Dealer` |
//! | `protocol` | `protocol::Server`, echo handler | `protocol::Client::request` |
//! | `node` | `Node`, `on_request_service` raw echo | `Node::request_raw` |
//! | `node-tick` | `Node`, `on_tick` counter | `Node::tick_raw`, one way |
//!
//! `cargo run --release -p benches -- [--sizes 100,500] [--windows 1,100] [--layers raw,node]
//! [--duration 5] [--warmup 1] [--quick] [--out target/bench-report]`
//!
//! For every point (layer, payload size, window) this process re-executes itself twice:
//! `benches serve --layer L --endpoint tcp://127.0.0.1:0` prints the endpoint it bound and
//! serves until killed, and `benches client --layer L --endpoint E --size S --window W ...`
//! prints one JSON line of results. Both are killed by pid when the point ends, whatever
//! happened. Window 1 gives the latency (mean, p50, p95, p99 of every request); windows 10,
//! 100 and 1000 the throughput.
//!
//! `GATE=1` judges the run against the floors in [`gate::FLOORS`] (ratios to the layer below
//! or to raw, measured in the same run): exit 1 when one is not met, exit 2 when the
//! machine has fewer than two cores or nothing could be judged.
//!
//! ## Layout
//! - `main.rs`: the command line and the orchestration of the processes.
//! - `layers/`: each row's server and client.
//! - `measure.rs`: one point on the client side (phases, window, timings).
//! - `stats.rs`: percentiles; `gate.rs`: the floors; `report.rs`: table, JSON, CSV, SVG.

mod error;
mod gate;
mod layers;
mod measure;
mod report;
mod stats;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};

use crate::error::{Error, Result};
use crate::layers::{Job, Layer};
use crate::measure::Point;
use crate::report::{Failure, Machine, Report, Settings};

/// Default warm-up and measured seconds per point.
const DEFAULT_WARMUP: f64 = 1.0;
/// Default measured seconds per point.
const DEFAULT_DURATION: f64 = 5.0;
/// Warm-up seconds per point with `--quick`.
const QUICK_WARMUP: f64 = 0.2;
/// Measured seconds per point with `--quick`.
const QUICK_DURATION: f64 = 0.5;

/// How long a server may take to print its endpoint.
const SERVER_START: Duration = Duration::from_secs(20);
/// How long a client may run beyond its warm-up and measured phase (connecting, draining
/// the window, closing) before it is killed.
const CLIENT_SLACK: Duration = Duration::from_secs(60);

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "benches",
    about = "zeronode's layers beside raw libzmq, server and client in two processes",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// The hidden server and client roles; none runs the whole report.
    #[command(subcommand)]
    role: Option<Role>,
    /// What the report measures.
    #[command(flatten)]
    run: RunArgs,
}

/// The two roles this binary plays in its child processes.
#[derive(Debug, Subcommand)]
enum Role {
    /// Serve one layer's echo until killed (prints the bound endpoint first).
    #[command(hide = true)]
    Serve(ServeArgs),
    /// Measure one point against a server and print one JSON line.
    #[command(hide = true)]
    Client(ClientArgs),
}

/// Options of a whole run.
#[derive(Debug, Args)]
struct RunArgs {
    /// Measured seconds per point [default: 5; 0.5 with --quick].
    #[arg(long)]
    duration: Option<f64>,
    /// Warm-up seconds per point, before the measured phase [default: 1; 0.2 with --quick].
    #[arg(long)]
    warmup: Option<f64>,
    /// Payload sizes in bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 500, 1000, 2000])]
    sizes: Vec<usize>,
    /// Windows: requests kept in flight (1 is the latency run).
    #[arg(long, value_delimiter = ',', default_values_t = [1, 10, 100, 1000])]
    windows: Vec<usize>,
    /// Layers (rows) to measure.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Layer::ALL)]
    layers: Vec<Layer>,
    /// Short phases, for CI and tests: the numbers are warm-up, not the library.
    #[arg(long)]
    quick: bool,
    /// Directory for results.json, results.csv and the SVG charts.
    #[arg(long, default_value = "target/bench-report")]
    out: PathBuf,
}

/// Options of the server role.
#[derive(Debug, Args)]
struct ServeArgs {
    /// The layer to serve.
    #[arg(long, value_enum)]
    layer: Layer,
    /// Where to bind; port 0 picks a free one.
    #[arg(long, default_value = "tcp://127.0.0.1:0")]
    endpoint: String,
    /// Exit when stdin closes (the orchestrator is gone).
    #[arg(long)]
    watch_stdin: bool,
}

/// Options of the client role.
#[derive(Debug, Args)]
struct ClientArgs {
    /// The layer to measure (its server must be serving at `endpoint`).
    #[arg(long, value_enum)]
    layer: Layer,
    /// The server's endpoint.
    #[arg(long)]
    endpoint: String,
    /// Payload bytes per request.
    #[arg(long)]
    size: usize,
    /// Requests kept in flight.
    #[arg(long, default_value_t = 1)]
    window: usize,
    /// Warm-up seconds.
    #[arg(long, default_value_t = DEFAULT_WARMUP)]
    warmup: f64,
    /// Measured seconds.
    #[arg(long, default_value_t = DEFAULT_DURATION)]
    duration: f64,
    /// Exit when stdin closes (the orchestrator is gone).
    #[arg(long)]
    watch_stdin: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.role {
        Some(Role::Serve(args)) => serve(&args).map(|()| ExitCode::SUCCESS),
        Some(Role::Client(args)) => client(&args).map(|()| ExitCode::SUCCESS),
        None => run(&cli.run),
    };
    outcome.unwrap_or_else(|e| {
        eprintln!("benches: {e}");
        ExitCode::FAILURE
    })
}

/// Ends this process with `code` once stdin reaches end of file: a child whose orchestrator
/// died (and with it the write end of the pipe) does not outlive it.
fn exit_when_stdin_closes(code: i32) {
    thread::spawn(move || {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        std::process::exit(code);
    });
}

/// The server role.
fn serve(args: &ServeArgs) -> Result<()> {
    if args.watch_stdin {
        exit_when_stdin_closes(0);
    }
    layers::serve(args.layer, &args.endpoint)
}

/// The client role: one point, one JSON line on stdout.
fn client(args: &ClientArgs) -> Result<()> {
    if args.watch_stdin {
        exit_when_stdin_closes(1);
    }
    let job = Job {
        layer: args.layer,
        endpoint: args.endpoint.clone(),
        size: args.size,
        window: args.window,
        warmup: Duration::from_secs_f64(args.warmup.max(0.0)),
        duration: Duration::from_secs_f64(args.duration.max(0.001)),
    };
    let point = layers::client(&job)?;
    println!("{}", serde_json::to_string(&point)?);
    Ok(())
}

/// One point to measure.
#[derive(Debug, Clone, Copy)]
struct Target {
    layer: Layer,
    size: usize,
    /// 0 for a stream.
    window: usize,
}

/// The points of a run, in measurement order: for each size and window, every layer one
/// after the other (so the rows compared with each other ran close together in time),
/// then the streams of that size.
fn targets(args: &RunArgs) -> Vec<Target> {
    let mut targets = Vec::new();
    for &size in &args.sizes {
        for &window in &args.windows {
            for &layer in args.layers.iter().filter(|l| !l.is_stream()) {
                targets.push(Target {
                    layer,
                    size,
                    window,
                });
            }
        }
        for &layer in args.layers.iter().filter(|l| l.is_stream()) {
            targets.push(Target {
                layer,
                size,
                window: 0,
            });
        }
    }
    targets
}

/// The whole run: every point, the report, and the gate if `GATE=1`.
fn run(args: &RunArgs) -> Result<ExitCode> {
    let gate_on = std::env::var("GATE").is_ok_and(|v| v == "1");
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    if gate_on && cores < gate::MIN_CORES {
        eprintln!(
            "GATE=1: refusing to judge on {cores} core(s): at least {} are needed, or the \
             client and server processes take turns on one CPU and the ratios measure the \
             scheduler.",
            gate::MIN_CORES
        );
        return Ok(ExitCode::from(2));
    }
    let (warmup, duration) = if args.quick {
        (QUICK_WARMUP, QUICK_DURATION)
    } else {
        (DEFAULT_WARMUP, DEFAULT_DURATION)
    };
    let warmup = args.warmup.unwrap_or(warmup).max(0.0);
    let duration = args.duration.unwrap_or(duration).max(0.001);
    let mut layers = args.layers.clone();
    layers.sort();
    layers.dedup();
    let windows: Vec<usize> = args.windows.iter().map(|&w| w.max(1)).collect();
    let args = RunArgs {
        duration: Some(duration),
        warmup: Some(warmup),
        sizes: args.sizes.clone(),
        windows,
        layers,
        quick: args.quick,
        out: args.out.clone(),
    };

    let load_before = report::load_average();
    let exe = std::env::current_exe()?;
    let targets = targets(&args);
    eprintln!(
        "benches: {} points, {warmup}s warm-up + {duration}s each (about {:.0} s), {cores} cores",
        targets.len(),
        targets.len() as f64 * (warmup + duration + 0.3)
    );
    let mut points = Vec::new();
    let mut failures = Vec::new();
    for (i, target) in targets.iter().enumerate() {
        let label = format!(
            "[{}/{}] {} {} B {}",
            i + 1,
            targets.len(),
            target.layer,
            target.size,
            if target.layer.is_stream() {
                "stream".to_owned()
            } else {
                format!("window {}", target.window)
            }
        );
        match run_point(&exe, *target, warmup, duration) {
            Ok(point) => {
                let p50 = point
                    .latency_us
                    .map_or(String::new(), |l| format!(", p50 {:.1} us", l.p50));
                eprintln!("{label}: {:.0}/s{p50}", point.rate);
                points.push(point);
            }
            Err(e) => {
                eprintln!("{label}: FAILED: {e}");
                failures.push(Failure {
                    layer: target.layer,
                    size: target.size,
                    window: target.window,
                    error: e.to_string(),
                });
            }
        }
    }

    let settings = Settings {
        warmup_s: warmup,
        duration_s: duration,
        sizes: args.sizes.clone(),
        windows: args.windows.clone(),
        layers: args.layers.clone(),
    };
    let report = Report::new(
        Machine::here(cores, load_before),
        settings,
        points,
        failures,
    );
    println!("{}", report.table());
    for file in report.write(&args.out)? {
        println!("wrote {}", file.display());
    }

    let mut code = ExitCode::SUCCESS;
    if !report.failures.is_empty() {
        eprintln!("benches: {} point(s) failed", report.failures.len());
        code = ExitCode::FAILURE;
    }
    if gate_on {
        let checks = gate::judge(&report.points(), &gate::FLOORS);
        println!("\nGATE=1: floors (throughput ratios, same run)");
        for check in &checks {
            println!("  {}", check.describe());
        }
        match gate::verdict(&checks) {
            gate::Verdict::Pass => println!("GATE: pass"),
            gate::Verdict::Fail => {
                let failed = checks.iter().filter(|c| c.failed()).count();
                eprintln!("GATE: FAIL: {failed} floor(s) not met (see above)");
                code = ExitCode::FAILURE;
            }
            gate::Verdict::NothingToJudge => {
                eprintln!(
                    "GATE: nothing to judge: no floor had both its layer and its baseline \
                     measured (run the default layers and windows)"
                );
                return Ok(ExitCode::from(2));
            }
        }
    }
    Ok(code)
}

/// A child process that is killed (by its pid) and reaped when dropped, however the point
/// ended.
struct Process {
    /// The child.
    child: Child,
    /// What it is, for messages.
    what: String,
}

impl Process {
    /// Starts `exe` with `args`, stdin and stdout piped, stderr shared with ours.
    fn start(exe: &Path, args: &[String], what: String) -> Result<Process> {
        let child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        Ok(Process { child, what })
    }

    /// Waits until the process exits, at most `limit`; returns everything it printed on
    /// stdout. Killed and an error on timeout, an error on a failure status.
    fn finish_within(&mut self, limit: Duration) -> Result<String> {
        let stdout = self.child.stdout.take();
        let (tx, rx) = mpsc::channel();
        // Read stdout in a thread so a chatty child never blocks on a full pipe.
        thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut stdout) = stdout {
                let _ = stdout.read_to_string(&mut text);
            }
            let _ = tx.send(text);
        });
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(Error::ChildTimeout {
                    what: self.what.clone(),
                    waited: limit,
                });
            }
            thread::sleep(Duration::from_millis(10));
        };
        if !status.success() {
            return Err(Error::ChildFailed {
                what: self.what.clone(),
                status,
            });
        }
        // The pipe closes with the process; grandchildren would keep it open, so bounded.
        Ok(rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default())
    }

    /// Reads the first stdout line, waiting at most `limit`.
    fn first_line_within(&mut self, limit: Duration) -> Option<String> {
        let stdout = self.child.stdout.take()?;
        let (tx, rx) = mpsc::channel();
        // The thread ends at the first line, or at end of file when the child is killed.
        thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        rx.recv_timeout(limit)
            .ok()
            .map(|line| line.trim().to_owned())
            .filter(|line| !line.is_empty())
    }

    /// SIGKILL by pid, then reap. Errors mean it had already exited and been reaped.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Measures one point: starts the server process, then the client process, reads the
/// client's result; both processes are killed when this returns.
fn run_point(exe: &Path, target: Target, warmup: f64, duration: f64) -> Result<Point> {
    let layer = target.layer.name();
    let mut server = Process::start(
        exe,
        &[
            "serve".into(),
            "--layer".into(),
            layer.into(),
            "--endpoint".into(),
            "tcp://127.0.0.1:0".into(),
            "--watch-stdin".into(),
        ],
        format!("{layer} server"),
    )?;
    let Some(endpoint) = server.first_line_within(SERVER_START) else {
        // Exited (its error is on stderr) or silent past the limit.
        return Err(match server.child.try_wait()? {
            Some(status) => Error::ChildFailed {
                what: server.what.clone(),
                status,
            },
            None => Error::ServerStart {
                layer,
                waited: SERVER_START,
            },
        });
    };
    let mut client = Process::start(
        exe,
        &[
            "client".into(),
            "--layer".into(),
            layer.into(),
            "--endpoint".into(),
            endpoint,
            "--size".into(),
            target.size.to_string(),
            "--window".into(),
            target.window.max(1).to_string(),
            "--warmup".into(),
            warmup.to_string(),
            "--duration".into(),
            duration.to_string(),
            "--watch-stdin".into(),
        ],
        format!("{layer} client"),
    )?;
    let limit = Duration::from_secs_f64(warmup + duration) + CLIENT_SLACK;
    let output = client.finish_within(limit)?;
    let line = output
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| Error::NoResult {
            what: client.what.clone(),
        })?;
    let point: Point = serde_json::from_str(line)?;
    drop(client);
    drop(server);
    Ok(point)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_parses_lists_and_defaults() {
        let cli = Cli::try_parse_from([
            "benches",
            "--quick",
            "--sizes",
            "100,500",
            "--windows",
            "1,100",
            "--layers",
            "raw,node-tick",
        ])
        .unwrap();
        assert!(cli.role.is_none());
        assert_eq!(cli.run.sizes, [100, 500]);
        assert_eq!(cli.run.windows, [1, 100]);
        assert_eq!(cli.run.layers, [Layer::Raw, Layer::NodeTick]);
        let cli = Cli::try_parse_from(["benches"]).unwrap();
        assert_eq!(cli.run.sizes, [100, 500, 1000, 2000]);
        assert_eq!(cli.run.windows, [1, 10, 100, 1000]);
        assert_eq!(cli.run.layers, Layer::ALL);
        assert_eq!(cli.run.out, PathBuf::from("target/bench-report"));
    }

    #[test]
    fn the_roles_parse() {
        let cli = Cli::try_parse_from(["benches", "serve", "--layer", "node"]).unwrap();
        assert!(matches!(
            cli.role,
            Some(Role::Serve(ServeArgs {
                layer: Layer::Node,
                ..
            }))
        ));
        let cli = Cli::try_parse_from([
            "benches",
            "client",
            "--layer",
            "raw",
            "--endpoint",
            "tcp://x:1",
            "--size",
            "100",
        ])
        .unwrap();
        assert!(matches!(
            cli.role,
            Some(Role::Client(ClientArgs { window: 1, .. }))
        ));
    }

    #[test]
    fn streams_get_one_point_per_size() {
        let cli = Cli::try_parse_from([
            "benches",
            "--sizes",
            "100,2000",
            "--windows",
            "1,10,100",
            "--layers",
            "raw,node,node-tick",
        ])
        .unwrap();
        let targets = targets(&cli.run);
        assert_eq!(targets.len(), 2 * (3 * 2 + 1));
        assert!(targets
            .iter()
            .filter(|t| t.layer == Layer::NodeTick)
            .all(|t| t.window == 0));
    }
}
