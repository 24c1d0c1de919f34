//! The per-layer report: the points of a run, measured in interleaved rounds, each point a
//! server process and a client process; then the report and the gate.

use crate::progress::Progress;
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::gate;
use crate::layers::Layer;
use crate::measure::Point;
use crate::process::Process;
use crate::report::{self, Failure, Machine, Report, Settings};
use crate::rounds;
use crate::{Reexec, RunArgs, DEFAULT_DURATION, DEFAULT_WARMUP};

/// Warm-up seconds per point with `--quick`.
const QUICK_WARMUP: f64 = 0.2;
/// Measured seconds per point with `--quick`.
const QUICK_DURATION: f64 = 0.5;

/// How long a server may take to print its endpoint.
const SERVER_START: Duration = Duration::from_secs(20);
/// How long a client may run beyond its warm-up and measured phase (connecting, draining
/// the window, closing) before it is killed.
const CLIENT_SLACK: Duration = Duration::from_secs(60);

/// One point to measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Target {
    /// The row.
    pub(crate) layer: Layer,
    /// Payload bytes.
    pub(crate) size: usize,
    /// 0 for a stream.
    pub(crate) window: usize,
}

/// The points of a run, in measurement order: for each size and window, every layer one
/// after the other (so the rows compared with each other ran close together in time),
/// then the streams of that size.
pub(crate) fn targets(args: &RunArgs) -> Vec<Target> {
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

/// The order of a run with `rounds` rounds: `(round, index into targets)`, every target
/// once per round, the rounds one after the other (interleaved, not N in a row).
pub(crate) fn schedule(targets: usize, rounds: usize) -> Vec<(usize, usize)> {
    (0..rounds)
        .flat_map(|round| (0..targets).map(move |i| (round, i)))
        .collect()
}

/// The whole run: every point in every round, the report, and the gate if `GATE=1`.
pub(crate) fn run(args: &RunArgs, reexec: &Reexec) -> Result<ExitCode> {
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
    let warmup = crate::seconds(args.warmup.unwrap_or(warmup), 0.0).as_secs_f64();
    let duration = crate::seconds(args.duration.unwrap_or(duration), 0.001).as_secs_f64();
    let mut layers = args.layers.clone();
    layers.sort();
    layers.dedup();
    let windows: Vec<usize> = args.windows.iter().map(|&w| w.max(1)).collect();
    let rounds = args.rounds.max(1) as usize;
    let args = RunArgs {
        duration: Some(duration),
        warmup: Some(warmup),
        sizes: args.sizes.clone(),
        windows,
        layers,
        rounds: args.rounds,
        quick: args.quick,
        out: args.out.clone(),
    };

    let load_before = report::load_average();
    let targets = targets(&args);
    let order = schedule(targets.len(), rounds);
    eprintln!(
        "benches: {} points x {rounds} round(s), {warmup}s warm-up + {duration}s each (about \
         {:.0} s), {cores} cores",
        targets.len(),
        order.len() as f64 * (warmup + duration + 0.3)
    );
    let mut measured: Vec<Vec<Point>> = vec![Vec::new(); targets.len()];
    let mut failures = Vec::new();
    let progress = Progress::new(order.len());
    for (n, &(round, i)) in order.iter().enumerate() {
        let target = targets[i];
        let label = format!(
            "[{}/{}] {}{} {} B {}",
            n + 1,
            order.len(),
            if rounds > 1 {
                format!("round {} ", round + 1)
            } else {
                String::new()
            },
            target.layer,
            target.size,
            if target.layer.is_stream() {
                "stream".to_owned()
            } else {
                format!("window {}", target.window)
            }
        );
        progress.running(&label);
        match run_point(reexec, target, warmup, duration) {
            Ok(point) => {
                let p50 = point
                    .latency_us
                    .map_or(String::new(), |l| format!(", p50 {:.1} us", l.p50));
                progress.done(&format!("{label}: {:.0}/s{p50}", point.rate));
                measured[i].push(point);
            }
            Err(e) => {
                progress.done(&format!("{label}: FAILED: {e}"));
                failures.push(Failure {
                    layer: target.layer,
                    size: target.size,
                    window: target.window,
                    round: round + 1,
                    error: e.to_string(),
                });
            }
        }
    }
    drop(progress);
    let merged = measured.iter().filter_map(|p| rounds::merge(p)).collect();

    let settings = Settings {
        warmup_s: warmup,
        duration_s: duration,
        sizes: args.sizes.clone(),
        windows: args.windows.clone(),
        layers: args.layers.clone(),
        rounds,
    };
    let report = Report::new(
        Machine::here(cores, load_before),
        settings,
        merged,
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

/// Measures one point: starts the server process, then the client process, reads the
/// client's result; both processes are killed when this returns.
fn run_point(reexec: &Reexec, target: Target, warmup: f64, duration: f64) -> Result<Point> {
    let layer = target.layer.name();
    let mut command = reexec.command();
    command.args([
        "serve",
        "--layer",
        layer,
        "--endpoint",
        target.layer.endpoint(),
        "--watch-stdin",
    ]);
    let mut server = Process::start(command, format!("{layer} server"))?;
    let Some(endpoint) = server.first_line_within(SERVER_START) else {
        // Exited (its error is on stderr) or silent past the limit.
        return Err(server.no_line_error(Error::ServerStart {
            layer,
            waited: SERVER_START,
        }));
    };
    let mut command = reexec.command();
    command
        .args(["client", "--layer", layer, "--endpoint", &endpoint])
        .args(["--size", &target.size.to_string()])
        .args(["--window", &target.window.max(1).to_string()])
        .args(["--warmup", &warmup.to_string()])
        .args(["--duration", &duration.to_string(), "--watch-stdin"]);
    let mut client = Process::start(command, format!("{layer} client"))?;
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
    use clap::Parser;

    use super::*;
    use crate::Cli;

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

    #[test]
    fn rounds_are_interleaved() {
        assert_eq!(
            schedule(3, 2),
            [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
        );
        assert_eq!(schedule(2, 1), [(0, 0), (0, 1)]);
        assert!(schedule(0, 3).is_empty());
    }
}
