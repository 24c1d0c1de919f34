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
//! | `node` | `Node`, `on_request_service` raw echo | `call(..).raw().send(..)` |
//! | `node-tick` | `Node`, `on_tick` counter | `call(..).raw().tick(..)`, one way |
//! | `node-curve` | the `node` row's server with a CURVE key pair | `connect_with` a server key, then as `node` |
//! | `node-cpu-1`, `node-cpu-2` | `Node`, a ~200 µs CPU-bound handler, 1 or 2 worker threads | as `node` |
//! | `node-ctx` | the `node` row's server with metrics on, spans recorded | `Node::call` with two metadata entries, metrics on, spans recorded |
//! | `node-caller` | the `node` row's server | `Node::caller()` under retry, `CallTimeoutLayer` and concurrency-limit layers (`ZERONODE_CALLER_TIMEOUT=tower`: tower's timeout) |
//! | `node-native-ctx`, `node-native-caller` | as `node-ctx`, `node-caller`, on the native engine | the same |
//!
//! `node-ctx` and `node-caller` are not in the default set either: `--layers
//! node,node-ctx,node-caller` shows what the request context (metadata, tracing spans,
//! metrics) and the caller's tower stack cost beside the plain row (`node-native,
//! node-native-ctx,node-native-caller` on the native engine). `ZERONODE_CTX` (a subset of
//! `meta,spans,metrics`) turns parts of the context off.
//!
//! The CPU-bound rows are not in the default set: `--layers node-cpu-1,node-cpu-2` measures
//! both in one run (side by side at every size and window), to show whether a second worker
//! thread in the server raises its rate.
//!
//! `cargo run --release -p benches -- [--sizes 100,500] [--windows 1,100] [--layers raw,node]
//! [--duration 5] [--warmup 1] [--rounds 3] [--quick] [--out target/bench-report]`, or the
//! same options after `zeronode bench`.
//!
//! For every point (layer, payload size, window) the harness re-executes itself twice (see
//! [`Reexec`]): `serve --layer L --endpoint tcp://127.0.0.1:0` prints the endpoint it bound
//! and serves until killed, and `client --layer L --endpoint E --size S --window W ...`
//! prints one JSON line of results. Both are killed by pid when the point ends, whatever
//! happened. Window 1 gives the latency (mean, p50, p95, p99 of every request); windows 10,
//! 100 and 1000 the throughput. `--rounds N` measures every point N times in interleaved
//! rounds and reports medians with the spread.
//!
//! `scale` is the second report: one hub node and 100 or 1,000 peer nodes in other processes
//! (`tick_all` fan-out, `request_any`, join time, memory per peer); see the `scale` module.
//!
//! `streams` is the third: a streamed reply's throughput (64 KiB and 100-byte items) beside
//! a plain-TCP bulk floor and one-way ticks, its time to first item beside a request's
//! round trip, and both processes' memory over a long stream; see the `streams` module.
//!
//! `GATE=1` judges the run against the floors in `gate::FLOORS` (ratios to the layer below
//! or to raw, measured in the same run, medians when there are rounds): exit 1 when one is
//! not met, exit 2 when the machine has fewer than two cores or nothing could be judged.
//!
//! ```no_run
//! // What the `benches` binary does; `zeronode bench` passes `Reexec::new(exe, ["bench"])`.
//! let reexec = benches::Reexec::current_exe().expect("this executable");
//! let code = benches::run(["benches", "--quick", "--layers", "raw,node"].map(Into::into), reexec);
//! # let _ = code;
//! ```
//!
//! ## Layout
//! - `lib.rs`: the command line, [`run`] and the hidden roles; `main.rs`: the binary.
//! - `harness.rs`: the per-layer report (points, rounds, the processes of one point).
//! - `scale.rs`: the scale report (hub, peer processes); `scale_report.rs`: its output.
//! - `streams.rs`: the streams report (its server and client roles, the table).
//! - `layers/`: each row's server and client.
//! - `measure.rs`: one point on the client side (phases, window, timings).
//! - `stats.rs`: percentiles, medians; `rounds.rs`: merging rounds; `gate.rs`: the floors;
//!   `report.rs`: table, JSON, CSV, SVG; `process.rs`: child processes killed by pid.

mod error;
mod gate;
mod harness;
mod layers;
mod measure;
mod process;
mod progress;
mod report;
mod rounds;
mod scale;
mod scale_ceiling;
mod scale_floor;
mod scale_report;
mod stats;
mod streams;

use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::thread;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::error::Result;
use crate::layers::{Job, Layer};

/// Default warm-up seconds per point.
const DEFAULT_WARMUP: f64 = 1.0;
/// Default measured seconds per point.
const DEFAULT_DURATION: f64 = 5.0;

/// How the harness starts the child processes that play its hidden roles (`serve`, `client`,
/// and the scale run's `scale-hub` and `scale-peers`): `program prefix... ROLE ARGS...`.
///
/// The `benches` binary re-executes itself with no prefix ([`Reexec::current_exe`]); the
/// `zeronode` command re-executes itself as `zeronode bench ROLE ...`, so its prefix is
/// `["bench"]`.
#[derive(Debug, Clone)]
pub struct Reexec {
    /// The executable to start.
    program: PathBuf,
    /// Arguments before the role, e.g. the subcommand that leads to the harness.
    prefix: Vec<OsString>,
}

impl Reexec {
    /// Children run `program prefix... ROLE ...`.
    pub fn new<I, A>(program: impl Into<PathBuf>, prefix: I) -> Reexec
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        Reexec {
            program: program.into(),
            prefix: prefix.into_iter().map(Into::into).collect(),
        }
    }

    /// This executable, with no prefix: what a binary that is only the harness uses.
    pub fn current_exe() -> std::io::Result<Reexec> {
        Ok(Reexec::new(
            std::env::current_exe()?,
            Vec::<OsString>::new(),
        ))
    }

    /// A command for one role: the program and the prefix, the caller adds the role.
    pub(crate) fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.prefix);
        command
    }
}

/// Runs the harness with `args` (the program name first, as in `std::env::args_os`; it is
/// the name shown in `--help`) and returns the exit code: 0 when every point was measured
/// (and, with `GATE=1`, every floor met), 1 on a failed point or floor, 2 on a bad command
/// line or a run that cannot be judged. Never panics on bad input; errors are one line on
/// stderr.
///
/// Child processes are started through `reexec`. Call it from a plain `main`, outside any
/// tokio runtime: the roles build their own.
pub fn run(args: impl IntoIterator<Item = OsString>, reexec: Reexec) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // --help and --version are "errors" that print to stdout and exit 0.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(0));
        }
        Err(e) => {
            eprintln!("{}", usage_line(&e, &args));
            return ExitCode::from(2);
        }
    };
    let outcome = match cli.role {
        Some(Role::Serve(args)) => serve(&args).map(|()| ExitCode::SUCCESS),
        Some(Role::Client(args)) => client(&args).map(|()| ExitCode::SUCCESS),
        Some(Role::Scale(args)) => scale::run(&args, &reexec),
        Some(Role::ScaleHub(args)) => scale::hub(&args, &reexec).map(|()| ExitCode::SUCCESS),
        Some(Role::ScalePeers(args)) => scale::peers(&args).map(|()| ExitCode::SUCCESS),
        Some(Role::Streams(args)) => streams::run(&args, &reexec),
        Some(Role::StreamsServe(args)) => streams::serve(&args).map(|()| ExitCode::SUCCESS),
        Some(Role::StreamsClient(args)) => streams::client(&args).map(|()| ExitCode::SUCCESS),
        None => harness::run(&cli.run, &reexec),
    };
    outcome.unwrap_or_else(|e| {
        eprintln!("benches: {e}");
        ExitCode::FAILURE
    })
}

/// A bad command line as one line: clap's message (the missing arguments it lists below it
/// joined on), then the `--help` to read; clap's tips and usage are dropped.
fn usage_line(error: &clap::Error, args: &[OsString]) -> String {
    let text = error.render().to_string();
    let mut paragraph = text
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim);
    let mut line = paragraph
        .next()
        .unwrap_or("error: invalid arguments")
        .to_owned();
    let more: Vec<&str> = paragraph.collect();
    if !more.is_empty() {
        line.push(' ');
        line.push_str(&more.join(", "));
    }
    let program = args.first().map_or_else(
        || "benches".to_owned(),
        |arg0| {
            let path = std::path::Path::new(arg0);
            path.file_name()
                .unwrap_or(arg0)
                .to_string_lossy()
                .into_owned()
        },
    );
    let scale = if args.get(1).is_some_and(|arg| arg == "scale") {
        " scale"
    } else {
        ""
    };
    format!("{line} (see {program}{scale} --help)")
}

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "benches",
    about = "zeronode's layers beside raw libzmq, server and client in two processes",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// The scale report and the hidden roles; none runs the per-layer report.
    #[command(subcommand)]
    role: Option<Role>,
    /// What the per-layer report measures.
    #[command(flatten)]
    run: RunArgs,
}

/// The scale report, and the roles this binary plays in its child processes.
#[derive(Debug, Subcommand)]
enum Role {
    /// One hub node and many peer nodes in other processes: tick_all fan-out, request_any,
    /// join time and memory per peer, at each peer count.
    Scale(scale::ScaleArgs),
    /// A streamed reply beside a plain-TCP bulk floor, one-way ticks and the request round
    /// trip, and both processes' memory over a long stream.
    Streams(streams::StreamsArgs),
    /// Serve one layer's echo until killed (prints the bound endpoint first).
    #[command(hide = true)]
    Serve(ServeArgs),
    /// Measure one point against a server and print one JSON line.
    #[command(hide = true)]
    Client(ClientArgs),
    /// The scale run's hub at one peer count: prints one JSON line.
    #[command(hide = true)]
    ScaleHub(scale::HubArgs),
    /// Many peer nodes joined to a hub, until killed.
    #[command(hide = true)]
    ScalePeers(scale::PeersArgs),
    /// The streams report's server: a node and a TCP floor, until killed.
    #[command(hide = true)]
    StreamsServe(streams::ServeArgs),
    /// The streams report's client: every phase, one JSON line.
    #[command(hide = true)]
    StreamsClient(streams::ClientArgs),
}

/// Options of a whole per-layer run.
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
    /// Measure every point N times, in interleaved rounds (all points, then all again), and
    /// report the median and the min..max spread of each.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
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

/// Ends this process with `code` once stdin reaches end of file: a child whose orchestrator
/// died (and with it the write end of the pipe) does not outlive it.
pub(crate) fn exit_when_stdin_closes(code: i32) {
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
        warmup: seconds(args.warmup, 0.0),
        duration: seconds(args.duration, 0.001),
    };
    let point = layers::client(&job)?;
    println!("{}", serde_json::to_string(&point)?);
    Ok(())
}

/// `value` seconds, at least `min`; a value that is not a finite number is `min`.
pub(crate) fn seconds(value: f64, min: f64) -> Duration {
    let value = if value.is_finite() { value } else { min };
    Duration::from_secs_f64(value.clamp(min, 1e6))
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
            "--rounds",
            "3",
        ])
        .unwrap();
        assert!(cli.role.is_none());
        assert_eq!(cli.run.sizes, [100, 500]);
        assert_eq!(cli.run.windows, [1, 100]);
        assert_eq!(cli.run.layers, [Layer::Raw, Layer::NodeTick]);
        assert_eq!(cli.run.rounds, 3);
        let cli = Cli::try_parse_from(["benches"]).unwrap();
        assert_eq!(cli.run.sizes, [100, 500, 1000, 2000]);
        assert_eq!(cli.run.windows, [1, 10, 100, 1000]);
        assert_eq!(cli.run.layers, Layer::ALL);
        assert_eq!(cli.run.rounds, 1);
        assert_eq!(cli.run.out, PathBuf::from("target/bench-report"));
    }

    #[test]
    fn the_cpu_bound_rows_are_named_but_not_measured_by_default() {
        let cli = Cli::try_parse_from(["benches", "--layers", "node-cpu-1,node-cpu-2"]).unwrap();
        assert_eq!(cli.run.layers, [Layer::NodeCpu1, Layer::NodeCpu2]);
        assert!(!Layer::ALL.iter().any(|l| l.is_cpu_bound()));
        let cli = Cli::try_parse_from(["benches", "serve", "--layer", "node-cpu-2"]).unwrap();
        assert!(matches!(
            cli.role,
            Some(Role::Serve(ServeArgs {
                layer: Layer::NodeCpu2,
                ..
            }))
        ));
    }

    #[test]
    fn zero_rounds_is_refused() {
        assert!(Cli::try_parse_from(["benches", "--rounds", "0"]).is_err());
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
    fn a_bad_command_line_is_exit_code_two_not_a_panic() {
        let reexec = Reexec::new("/nonexistent", ["x"]);
        let code = run(["benches", "--sizes", "many"].map(OsString::from), reexec);
        assert_eq!(code, ExitCode::from(2));
    }

    #[test]
    fn seconds_are_clamped() {
        assert_eq!(seconds(f64::NAN, 0.5), Duration::from_millis(500));
        assert_eq!(seconds(-3.0, 0.0), Duration::ZERO);
        assert_eq!(seconds(2.0, 0.0), Duration::from_secs(2));
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
