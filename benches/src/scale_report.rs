//! The scale report's output: the table on stdout, `scale.json`, `scale.csv` and
//! `scale.svg` (rates against the number of peers, one line per payload size).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::report::{log_labels, Machine};
use crate::stats::{self, Latency};

/// `tick_all` fan-out at one payload size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FanOut {
    /// Ticks to every match made in the measured phase.
    pub(crate) calls: u64,
    /// Ticks those calls handed to the sockets (peers reached, summed).
    pub(crate) sent: u64,
    /// Ticks the peers counted between the two counts.
    pub(crate) delivered: u64,
    /// Seconds between the two counts (sending, then draining the queues).
    pub(crate) seconds: f64,
    /// `calls / seconds`: fan-outs per second.
    pub(crate) calls_per_s: f64,
    /// `delivered / seconds`: ticks delivered per second, all peers together.
    pub(crate) ticks_per_s: f64,
    /// The hub process's CPU over the phase, in cores (1.0 = one core busy throughout):
    /// near 1 the hub's single runtime thread is the limit, well under it the peers are.
    pub(crate) hub_cpu: Option<f64>,
}

/// `request_any` (or the control, requests by id) at one payload size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RequestAny {
    /// Calls kept in flight.
    pub(crate) window: usize,
    /// Replies in the measured phase.
    pub(crate) completed: u64,
    /// Length of the measured phase.
    pub(crate) seconds: f64,
    /// Replies per second.
    pub(crate) rate: f64,
    /// Latency of every call in the measured phase.
    pub(crate) latency_us: Option<Latency>,
    /// The hub process's CPU over the phase, in cores.
    pub(crate) hub_cpu: Option<f64>,
}

impl RequestAny {
    /// A request phase's result: its measured point, with `window` requests in flight and
    /// the hub's CPU over it.
    pub(crate) fn from_point(
        point: crate::measure::Point,
        window: usize,
        hub_cpu: Option<f64>,
    ) -> RequestAny {
        RequestAny {
            window,
            completed: point.completed,
            seconds: point.seconds,
            rate: point.rate,
            latency_us: point.latency_us,
            hub_cpu,
        }
    }
}

/// Both measurements at one payload size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SizeResult {
    /// Payload bytes.
    pub(crate) size: usize,
    /// The fan-out.
    pub(crate) tick_all: FanOut,
    /// The any-peer requests.
    pub(crate) request_any: RequestAny,
    /// The control: the same requests to each peer in turn by id.
    pub(crate) request_id: RequestAny,
    /// The second control, with more than [`FEW`](crate::scale::FEW) peers: the same
    /// requests by id to the first `FEW` only.
    #[serde(default)]
    pub(crate) request_id_few: Option<RequestAny>,
    /// The floor: the same pattern as `request_any` over plain TCP, one connection per peer.
    #[serde(default)]
    pub(crate) tcp_floor: Option<RequestAny>,
}

/// One hub run: one peer count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct HubResult {
    /// Peers joined to the hub.
    pub(crate) peers: usize,
    /// Rounds merged into this result (1 for one hub run); with more, every figure below is
    /// the median over the rounds.
    pub(crate) rounds: usize,
    /// Processes holding them.
    pub(crate) processes: usize,
    /// Seconds from starting the peer processes until the hub counted every peer.
    pub(crate) join_s: f64,
    /// The hub's `VmRSS` (KiB) once bound, before any peer.
    pub(crate) hub_rss_before_kb: Option<u64>,
    /// Once every peer joined.
    pub(crate) hub_rss_joined_kb: Option<u64>,
    /// After the traffic (queues included).
    pub(crate) hub_rss_after_kb: Option<u64>,
    /// `(joined - before) / peers`: the hub's memory per peer, KiB.
    pub(crate) hub_rss_per_peer_kb: Option<f64>,
    /// The peer processes' growth from start to all joined, per node, KiB.
    pub(crate) peer_rss_per_node_kb: Option<f64>,
    /// Per payload size.
    pub(crate) sizes: Vec<SizeResult>,
}

/// A peer count that could not be measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ScaleFailure {
    /// The peer count.
    pub(crate) peers: u32,
    /// Which round (from 1).
    pub(crate) round: usize,
    /// What went wrong.
    pub(crate) error: String,
}

/// How the scale run was configured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ScaleSettings {
    /// `request_any` calls in flight.
    pub(crate) window: u32,
    /// Heartbeat interval of every node, seconds.
    pub(crate) heartbeat_s: f64,
    /// Measured seconds per phase.
    pub(crate) duration_s: f64,
    /// Warm-up seconds per phase.
    pub(crate) warmup_s: f64,
    /// Rounds per peer count.
    pub(crate) rounds: u32,
}

/// Everything one scale run produced.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ScaleReport {
    /// Where.
    pub(crate) machine: Machine,
    /// The caveat that goes beside the numbers.
    pub(crate) note: String,
    /// How.
    pub(crate) settings: ScaleSettings,
    /// One entry per peer count (medians over the rounds), in the order given.
    pub(crate) runs: Vec<HubResult>,
    /// Every round of every peer count, in the order run (the spread behind the medians).
    pub(crate) all_rounds: Vec<HubResult>,
    /// Peer counts that failed.
    pub(crate) failures: Vec<ScaleFailure>,
}

impl ScaleReport {
    /// The report of a run.
    pub(crate) fn new(
        machine: Machine,
        settings: ScaleSettings,
        runs: Vec<HubResult>,
        all_rounds: Vec<HubResult>,
        failures: Vec<ScaleFailure>,
    ) -> ScaleReport {
        let note = format!(
            "The hub and every peer process share one {}-core machine: the peers' handling \
             of ticks and requests competes with the hub for the same CPU, so the rates are \
             the whole mesh's on this machine, not the hub's alone.",
            machine.cores
        );
        ScaleReport {
            machine,
            note,
            settings,
            runs,
            all_rounds,
            failures,
        }
    }

    /// The table printed at the end of a run: a line per peer count and size.
    pub(crate) fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:>6} {:>5} {:>7} {:>9} {:>9} {:>6} {:>11} {:>10} {:>7} {:>13} {:>8} {:>8} {:>7} {:>9} {:>7} {:>10} {:>9}",
            "peers",
            "procs",
            "join_s",
            "hub_kb/pr",
            "node_kb",
            "size",
            "ticks/s",
            "fanouts/s",
            "hub_cpu",
            "request_any/s",
            "p50_us",
            "p99_us",
            "hub_cpu",
            "by_id/s",
            "hub_cpu",
            "by_id100/s",
            "tcp/s"
        );
        let kb = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
        let cpu = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
        for run in &self.runs {
            for s in &run.sizes {
                let us = |f: fn(&Latency) -> f64| {
                    s.request_any
                        .latency_us
                        .as_ref()
                        .map_or("-".to_owned(), |l| format!("{:.0}", f(l)))
                };
                let _ = writeln!(
                    out,
                    "{:>6} {:>5} {:>7.2} {:>9} {:>9} {:>6} {:>11.0} {:>10.1} {:>7} {:>13.0} {:>8} {:>8} {:>7} {:>9.0} {:>7} {:>10} {:>9}",
                    run.peers,
                    run.processes,
                    run.join_s,
                    kb(run.hub_rss_per_peer_kb),
                    kb(run.peer_rss_per_node_kb),
                    s.size,
                    s.tick_all.ticks_per_s,
                    s.tick_all.calls_per_s,
                    cpu(s.tick_all.hub_cpu),
                    s.request_any.rate,
                    us(|l| l.p50),
                    us(|l| l.p99),
                    cpu(s.request_any.hub_cpu),
                    s.request_id.rate,
                    cpu(s.request_id.hub_cpu),
                    s.request_id_few
                        .as_ref()
                        .map_or("-".to_owned(), |few| format!("{:.0}", few.rate)),
                    s.tcp_floor
                        .as_ref()
                        .map_or("-".to_owned(), |tcp| format!("{:.0}", tcp.rate))
                );
            }
        }
        let rounds = self.settings.rounds;
        if rounds > 1 {
            let _ = writeln!(
                out,
                "\nMedians over {rounds} interleaved rounds; min..max over the rounds:"
            );
            for run in &self.runs {
                for s in &run.sizes {
                    let spread = |f: fn(&SizeResult) -> f64| {
                        let values: Vec<f64> = self
                            .all_rounds
                            .iter()
                            .filter(|r| r.peers == run.peers)
                            .filter_map(|r| r.sizes.iter().find(|x| x.size == s.size))
                            .map(f)
                            .collect();
                        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
                        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        format!("{lo:.0}..{hi:.0}")
                    };
                    let _ = writeln!(
                        out,
                        "{:>6} peers {:>6} B: ticks/s {}, request_any/s {}, by_id/s {}",
                        run.peers,
                        s.size,
                        spread(|x| x.tick_all.ticks_per_s),
                        spread(|x| x.request_any.rate),
                        spread(|x| x.request_id.rate)
                    );
                }
            }
        }
        for s in self.runs.first().map_or(&[][..], |run| &run.sizes[..]) {
            if let Some(line) = crate::scale_ceiling::report_line(&self.all_rounds, s.size) {
                let _ = writeln!(out, "\n{line}");
            }
        }
        let _ = writeln!(
            out,
            "\nticks/s: tick_all ticks delivered per second, counted by the peers; fanouts/s: \
             tick_all calls per second. hub_cpu: the hub process's CPU in cores over the \
             phase (1.00 = one core). hub_kb/pr: the hub's resident memory per joined peer; \
             node_kb: a peer process's per node. request_any: {} in flight, to a raw echo; by_id/s: the same requests to each peer in \
             turn by id (no filter, no pick); by_id100/s: by id to the first 100 peers only, \
             the others joined and idle; tcp/s: the floor, the same requests over plain TCP, one \
             connection per peer, echoed by the peer processes.\n\
             {}s warm-up, {}s measured per phase; heartbeats every {} s; libzmq {}; load \
             average {} before, {} after.\n{}",
            self.settings.window,
            self.settings.warmup_s,
            self.settings.duration_s,
            self.settings.heartbeat_s,
            self.machine.libzmq,
            self.machine.load_before.as_deref().unwrap_or("unknown"),
            self.machine.load_after.as_deref().unwrap_or("unknown"),
            self.note
        );
        out
    }

    /// The results as CSV: a line per peer count and size.
    pub(crate) fn csv(&self) -> String {
        let mut out = String::from(
            "peers,processes,join_s,hub_rss_before_kb,hub_rss_joined_kb,hub_rss_per_peer_kb,\
             peer_rss_per_node_kb,size,tick_all_calls_per_s,ticks_per_s,ticks_delivered,\
             request_any_per_s,request_any_window,p50_us,p95_us,p99_us,tick_all_hub_cpu,\
             request_any_hub_cpu,request_id_per_s,request_id_hub_cpu,request_id_few_per_s,tcp_floor_per_s\n",
        );
        let opt_u = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
        let opt_f = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.2}"));
        for run in &self.runs {
            for s in &run.sizes {
                let l = s.request_any.latency_us.as_ref();
                let _ = writeln!(
                    out,
                    "{},{},{:.3},{},{},{},{},{},{:.2},{:.1},{},{:.1},{},{},{},{},{},{},{:.1},{},{},{}",
                    run.peers,
                    run.processes,
                    run.join_s,
                    opt_u(run.hub_rss_before_kb),
                    opt_u(run.hub_rss_joined_kb),
                    opt_f(run.hub_rss_per_peer_kb),
                    opt_f(run.peer_rss_per_node_kb),
                    s.size,
                    s.tick_all.calls_per_s,
                    s.tick_all.ticks_per_s,
                    s.tick_all.delivered,
                    s.request_any.rate,
                    s.request_any.window,
                    opt_f(l.map(|l| l.p50)),
                    opt_f(l.map(|l| l.p95)),
                    opt_f(l.map(|l| l.p99)),
                    opt_f(s.tick_all.hub_cpu),
                    opt_f(s.request_any.hub_cpu),
                    s.request_id.rate,
                    opt_f(s.request_id.hub_cpu),
                    s.request_id_few
                        .as_ref()
                        .map_or(String::new(), |few| format!("{:.1}", few.rate)),
                    s.tcp_floor
                        .as_ref()
                        .map_or(String::new(), |tcp| format!("{:.1}", tcp.rate)),
                );
            }
        }
        out
    }

    /// Writes `scale.json`, `scale.csv` and `scale.svg` into `dir` (created if missing).
    pub(crate) fn write(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        fs::create_dir_all(dir)?;
        let json = dir.join("scale.json");
        fs::write(&json, serde_json::to_string_pretty(self)? + "\n")?;
        let csv = dir.join("scale.csv");
        fs::write(&csv, self.csv())?;
        let svg = dir.join("scale.svg");
        chart(self, &svg).map_err(|e| Error::Plot {
            path: svg.clone(),
            cause: e.to_string(),
        })?;
        Ok(vec![json, csv, svg])
    }
}

/// The median of some `u64`s, rounded; 0 for none.
fn median_u64(values: impl Iterator<Item = u64>) -> u64 {
    let values: Vec<f64> = values.map(|v| v as f64).collect();
    stats::median(&values).map_or(0, |m| m.round() as u64)
}

/// The median of some optional values; `None` when none is present.
fn median_opt(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let values: Vec<f64> = values.flatten().collect();
    stats::median(&values)
}

/// The median of some `f64`s; 0 for none.
fn median_f64(values: impl Iterator<Item = f64>) -> f64 {
    let values: Vec<f64> = values.collect();
    stats::median(&values).unwrap_or(0.0)
}

/// Medians of several request phases.
fn merge_requests(phases: &[&RequestAny]) -> RequestAny {
    let latencies: Vec<Latency> = phases.iter().filter_map(|p| p.latency_us).collect();
    let each = |f: fn(&Latency) -> f64| median_f64(latencies.iter().map(f));
    RequestAny {
        window: phases.first().map_or(0, |p| p.window),
        completed: median_u64(phases.iter().map(|p| p.completed)),
        seconds: median_f64(phases.iter().map(|p| p.seconds)),
        rate: median_f64(phases.iter().map(|p| p.rate)),
        latency_us: (!latencies.is_empty()).then(|| Latency {
            mean: each(|l| l.mean),
            p50: each(|l| l.p50),
            p95: each(|l| l.p95),
            p99: each(|l| l.p99),
        }),
        hub_cpu: median_opt(phases.iter().map(|p| p.hub_cpu)),
    }
}

/// Merges the rounds of one peer count: every figure is its median over the rounds (each
/// separately); a payload size counts when every round measured it. `None` for no round.
pub(crate) fn merge_runs(rounds: &[HubResult]) -> Option<HubResult> {
    let first = rounds.first()?;
    let sizes = first
        .sizes
        .iter()
        .filter_map(|s| {
            let same: Vec<&SizeResult> = rounds
                .iter()
                .filter_map(|r| r.sizes.iter().find(|x| x.size == s.size))
                .collect();
            if same.len() != rounds.len() {
                return None;
            }
            let ticks: Vec<&FanOut> = same.iter().map(|x| &x.tick_all).collect();
            let any: Vec<&RequestAny> = same.iter().map(|x| &x.request_any).collect();
            let id: Vec<&RequestAny> = same.iter().map(|x| &x.request_id).collect();
            let few: Option<Vec<&RequestAny>> =
                same.iter().map(|x| x.request_id_few.as_ref()).collect();
            let tcp: Option<Vec<&RequestAny>> = same.iter().map(|x| x.tcp_floor.as_ref()).collect();
            Some(SizeResult {
                size: s.size,
                tick_all: FanOut {
                    calls: median_u64(ticks.iter().map(|t| t.calls)),
                    sent: median_u64(ticks.iter().map(|t| t.sent)),
                    delivered: median_u64(ticks.iter().map(|t| t.delivered)),
                    seconds: median_f64(ticks.iter().map(|t| t.seconds)),
                    calls_per_s: median_f64(ticks.iter().map(|t| t.calls_per_s)),
                    ticks_per_s: median_f64(ticks.iter().map(|t| t.ticks_per_s)),
                    hub_cpu: median_opt(ticks.iter().map(|t| t.hub_cpu)),
                },
                request_any: merge_requests(&any),
                request_id: merge_requests(&id),
                request_id_few: few.map(|few| merge_requests(&few)),
                tcp_floor: tcp.map(|tcp| merge_requests(&tcp)),
            })
        })
        .collect();
    let kb = |f: fn(&HubResult) -> Option<u64>| {
        median_opt(rounds.iter().map(|r| f(r).map(|v| v as f64))).map(|m| m.round() as u64)
    };
    Some(HubResult {
        peers: first.peers,
        rounds: rounds.len(),
        processes: first.processes,
        join_s: median_f64(rounds.iter().map(|r| r.join_s)),
        hub_rss_before_kb: kb(|r| r.hub_rss_before_kb),
        hub_rss_joined_kb: kb(|r| r.hub_rss_joined_kb),
        hub_rss_after_kb: kb(|r| r.hub_rss_after_kb),
        hub_rss_per_peer_kb: median_opt(rounds.iter().map(|r| r.hub_rss_per_peer_kb)),
        peer_rss_per_node_kb: median_opt(rounds.iter().map(|r| r.peer_rss_per_node_kb)),
        sizes,
    })
}

/// Colours of the payload sizes' lines, in order.
const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// A panel of the chart: its caption, the y axis unit and the value it plots.
type Metric = (&'static str, &'static str, fn(&SizeResult) -> f64);

/// Three panels: ticks delivered per second, `request_any` per second and requests by id
/// per second, against the number of peers (log scale), one line per payload size.
fn chart(report: &ScaleReport, path: &Path) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1500, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "Hub and peers on one {}-core machine: rate against peers",
            report.machine.cores
        ),
        ("sans-serif", 18),
    )?;
    let (lo, hi) = report
        .runs
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), r| {
            (lo.min(r.peers as f64), hi.max(r.peers as f64))
        });
    let (lo, hi) = if lo < hi {
        (lo / 1.3, hi * 1.3)
    } else if lo <= hi {
        (lo / 2.0, hi * 2.0)
    } else {
        (1.0, 10.0)
    };
    let mut sizes: Vec<usize> = report
        .runs
        .iter()
        .flat_map(|r| r.sizes.iter().map(|s| s.size))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let panels = root.split_evenly((1, 3));
    let metrics: [Metric; 3] = [
        ("tick_all: ticks delivered/s", "ticks/s", |s| {
            s.tick_all.ticks_per_s
        }),
        ("request_any: replies/s", "requests/s", |s| {
            s.request_any.rate
        }),
        ("control, request by id: replies/s", "requests/s", |s| {
            s.request_id.rate
        }),
    ];
    for (panel, (caption, unit, metric)) in panels.iter().zip(metrics) {
        let top = report
            .runs
            .iter()
            .flat_map(|r| r.sizes.iter().map(metric))
            .fold(0.0, f64::max)
            .max(1.0)
            * 1.15;
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(
                (lo..hi).log_scale().with_key_points(log_labels(lo, hi)),
                0.0..top,
            )?;
        chart
            .configure_mesh()
            .x_desc("peers (log scale)")
            .y_desc(unit)
            .x_label_formatter(&|p| format!("{p:.0}"))
            .y_label_formatter(&|r| format!("{:.0}k", r / 1000.0))
            .draw()?;
        for (i, &size) in sizes.iter().enumerate() {
            let mut line: Vec<(f64, f64)> = report
                .runs
                .iter()
                .filter_map(|r| {
                    r.sizes
                        .iter()
                        .find(|s| s.size == size)
                        .map(|s| (r.peers as f64, metric(s)))
                })
                .collect();
            line.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(line, c.stroke_width(2)).point_size(3))?
                .label(format!("{size} B"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn size(size: usize, ticks: f64, requests: f64) -> SizeResult {
        SizeResult {
            size,
            tick_all: FanOut {
                calls: 10,
                sent: 1000,
                delivered: ticks as u64,
                seconds: 1.0,
                calls_per_s: ticks / 100.0,
                ticks_per_s: ticks,
                hub_cpu: Some(0.9),
            },
            request_any: RequestAny {
                window: 100,
                completed: requests as u64,
                seconds: 1.0,
                rate: requests,
                latency_us: Some(Latency {
                    mean: 500.0,
                    p50: 450.0,
                    p95: 900.0,
                    p99: 1200.0,
                }),
                hub_cpu: None,
            },
            request_id: RequestAny {
                window: 100,
                completed: requests as u64,
                seconds: 1.0,
                rate: requests * 2.0,
                latency_us: Some(Latency {
                    mean: 500.0,
                    p50: 450.0,
                    p95: 900.0,
                    p99: 1200.0,
                }),
                hub_cpu: None,
            },
            request_id_few: None,
            tcp_floor: None,
        }
    }

    pub(crate) fn run(peers: usize) -> HubResult {
        HubResult {
            peers,
            rounds: 1,
            processes: peers.div_ceil(250),
            join_s: 0.5,
            hub_rss_before_kb: Some(10_000),
            hub_rss_joined_kb: Some(10_000 + 20 * peers as u64),
            hub_rss_after_kb: Some(50_000),
            hub_rss_per_peer_kb: Some(20.0),
            peer_rss_per_node_kb: Some(40.0),
            sizes: vec![
                size(100, 400_000.0, 90_000.0),
                size(1000, 250_000.0, 70_000.0),
            ],
        }
    }

    fn report() -> ScaleReport {
        ScaleReport::new(
            Machine::here(2, None),
            ScaleSettings {
                window: 100,
                heartbeat_s: 60.0,
                duration_s: 3.0,
                warmup_s: 0.5,
                rounds: 1,
            },
            vec![run(100), run(1000)],
            vec![run(100), run(1000)],
            Vec::new(),
        )
    }

    #[test]
    fn the_table_has_a_line_per_peer_count_and_size() {
        let table = report().table();
        let lines: Vec<&str> = table
            .lines()
            .filter(|l| l.trim_start().starts_with("100 ") || l.trim_start().starts_with("1000 "))
            .collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(table.contains("400000"), "{table}");
        assert!(table.contains("one 2-core machine"), "{table}");
        assert!(table.contains("heartbeats every 60 s"), "{table}");
        assert!(table.contains(" 0.90 "), "{table}");
    }

    #[test]
    fn csv_has_a_header_and_a_line_per_peer_count_and_size() {
        let csv = report().csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5);
        let columns = lines[0].split(',').count();
        assert_eq!(columns, 22);
        assert!(lines.iter().all(|l| l.split(',').count() == columns));
        assert!(lines[1].starts_with("100,1,0.500,10000,12000,20.00,40.00,100,"));
    }

    #[test]
    fn rounds_merge_into_medians() {
        assert_eq!(merge_runs(&[]), None);
        assert_eq!(merge_runs(&[run(100)]), Some(run(100)));
        let mut slow = run(100);
        slow.join_s = 2.0;
        slow.hub_rss_per_peer_kb = Some(30.0);
        slow.sizes[0].tick_all.ticks_per_s = 100_000.0;
        slow.sizes[0].request_any.latency_us = None;
        slow.sizes[1].request_id.hub_cpu = Some(0.4);
        let mut fast = run(100);
        fast.join_s = 0.1;
        fast.sizes[0].tick_all.ticks_per_s = 900_000.0;
        fast.sizes[0].request_any.rate = 10.0;
        fast.sizes[1].request_id.hub_cpu = Some(0.8);
        let merged = merge_runs(&[slow, run(100), fast]).unwrap();
        assert_eq!(merged.rounds, 3);
        assert_eq!(merged.join_s, 0.5);
        assert_eq!(merged.hub_rss_per_peer_kb, Some(20.0));
        assert_eq!(merged.sizes[0].tick_all.ticks_per_s, 400_000.0);
        assert_eq!(merged.sizes[0].request_any.rate, 90_000.0);
        // Two rounds had a latency: the median of two.
        assert_eq!(merged.sizes[0].request_any.latency_us.unwrap().p50, 450.0);
        // Only two rounds measured the CPU.
        assert!((merged.sizes[1].request_id.hub_cpu.unwrap() - 0.6).abs() < 1e-12);
        // The second control: the median when every round has it, left out otherwise.
        let few = |rate: f64| {
            let mut r = run(1000);
            let mut control = r.sizes[0].request_id.clone();
            control.rate = rate;
            r.sizes[0].request_id_few = Some(control);
            r
        };
        let merged = merge_runs(&[few(3.0), few(1.0), few(2.0)]).unwrap();
        assert_eq!(merged.sizes[0].request_id_few.as_ref().unwrap().rate, 2.0);
        let merged = merge_runs(&[few(3.0), run(1000)]).unwrap();
        assert_eq!(merged.sizes[0].request_id_few, None);
    }

    #[test]
    fn a_size_missing_from_a_round_is_left_out() {
        let mut partial = run(1000);
        partial.sizes.truncate(1);
        let merged = merge_runs(&[run(1000), partial]).unwrap();
        assert_eq!(merged.sizes.len(), 1);
        assert_eq!(merged.sizes[0].size, 100);
    }

    #[test]
    fn the_table_shows_the_spread_of_rounds() {
        let mut report = report();
        let mut slow = run(100);
        slow.sizes[0].tick_all.ticks_per_s = 100_000.0;
        report.all_rounds = vec![run(100), slow, run(1000)];
        report.runs[0].rounds = 2;
        report.settings.rounds = 2;
        let table = report.table();
        assert!(
            table.contains("Medians over 2 interleaved rounds"),
            "{table}"
        );
        assert!(table.contains("ticks/s 100000..400000"), "{table}");
    }

    #[test]
    fn the_table_gives_each_rounds_ceiling_where_the_floor_ran() {
        let mut report = report();
        assert!(!report.table().contains("the ceiling"));
        for (run, floor) in report.all_rounds.iter_mut().zip([200_000.0, 100_000.0]) {
            for s in &mut run.sizes {
                s.tcp_floor = Some(RequestAny {
                    rate: floor,
                    ..s.request_any.clone()
                });
            }
        }
        let table = report.table();
        // 90k/s at both counts, the floor from 200k to 100k: c = 11.1 µs, g = 5 µs.
        assert!(
            table.contains("100 B, 1000 peers over 100, per round: request_any 1.00; the floor 0.50; the ceiling (a node whose own cost per request did not grow) 0.69"),
            "{table}"
        );
    }

    #[test]
    fn writes_json_csv_and_the_chart() {
        let dir = std::env::temp_dir().join(format!("benches-scale-{}", std::process::id()));
        let files = report().write(&dir).unwrap();
        assert_eq!(files.len(), 3);
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.join("scale.json")).unwrap()).unwrap();
        assert_eq!(json["runs"][1]["peers"], 1000);
        assert_eq!(
            json["runs"][0]["sizes"][1]["tick_all"]["ticks_per_s"],
            250_000.0
        );
        let svg = fs::read_to_string(dir.join("scale.svg")).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("1000 B"));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn one_peer_count_or_none_still_draws() {
        let dir = std::env::temp_dir().join(format!("benches-scale1-{}", std::process::id()));
        let mut one = report();
        one.runs.truncate(1);
        assert!(one.write(&dir).is_ok());
        one.runs.clear();
        assert!(one.write(&dir).is_ok());
        let _ = fs::remove_dir_all(&dir);
    }
}
