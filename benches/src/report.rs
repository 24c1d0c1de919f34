//! The report of one run: the table printed on stdout, `results.json`, `results.csv`, and
//! two SVG charts (`throughput.svg`, `latency.svg`).
//!
//! Every row carries its ratio to raw libzmq at the same payload size and window, measured
//! in the same run: absolute numbers move with the machine's noise, ratios much less.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::gate;
use crate::layers::Layer;
use crate::measure::Point;
use crate::rounds::Merged;
use crate::stats::ratio;

/// Where the run happened; printed beside the numbers because it decides them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Machine {
    /// Cores available to this process (`std::thread::available_parallelism`).
    pub(crate) cores: usize,
    /// `std::env::consts::OS` / `ARCH`.
    pub(crate) platform: String,
    /// The libzmq linked in (the `zmq` crate's bundled build).
    pub(crate) libzmq: String,
    /// `/proc/loadavg` (1, 5, 15 minutes) when the run started: anything above the core
    /// count means other work competed for the CPU during the run. `None` off Linux.
    pub(crate) load_before: Option<String>,
    /// `/proc/loadavg` when the run ended.
    pub(crate) load_after: Option<String>,
}

/// The 1, 5 and 15 minute load averages, on Linux.
pub(crate) fn load_average() -> Option<String> {
    let text = fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

impl Machine {
    /// This machine, at the end of a run that started with `load_before`.
    pub(crate) fn here(cores: usize, load_before: Option<String>) -> Machine {
        let (major, minor, patch) = zmq::version();
        Machine {
            cores,
            platform: format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
            libzmq: format!("{major}.{minor}.{patch}"),
            load_before,
            load_after: load_average(),
        }
    }

    /// The sentence that must stand beside the numbers.
    pub(crate) fn note(&self) -> String {
        format!(
            "Client and server are two processes on one {}-core machine: they share its CPU \
             with each other and with anything else running, so absolute numbers are lower \
             than across two machines and noisy. With a load average above the core count \
             (recorded below) the same point varied by up to 5x between two runs here, most \
             at window 1. Compare rows of the same run (measured seconds apart), and repeat \
             a run before trusting a single ratio.",
            self.cores
        )
    }
}

/// How the run was configured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Settings {
    /// Warm-up seconds per point.
    pub(crate) warmup_s: f64,
    /// Measured seconds per point.
    pub(crate) duration_s: f64,
    /// Payload sizes in bytes.
    pub(crate) sizes: Vec<usize>,
    /// Windows (requests in flight).
    pub(crate) windows: Vec<usize>,
    /// Layers measured.
    pub(crate) layers: Vec<Layer>,
    /// Rounds: how many times every point was measured (interleaved).
    pub(crate) rounds: usize,
}

/// One row: a point (medians over its rounds), its spread and its ratio to raw.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    /// The measurement: with several rounds, the rate and each latency statistic are
    /// medians, `completed` and `seconds` totals.
    #[serde(flatten)]
    pub(crate) point: Point,
    /// Rounds that measured this point.
    pub(crate) rounds: usize,
    /// The slowest round's rate.
    pub(crate) rate_min: f64,
    /// The fastest round's rate.
    pub(crate) rate_max: f64,
    /// `rate / raw rate` at the same size and window; `None` for raw's own baseline being
    /// absent, for streams (raw has no one-way row) and for the CPU-bound rows (their rate
    /// is their handler's job, which raw does not do).
    pub(crate) ratio_to_raw: Option<f64>,
}

/// A point that could not be measured.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Failure {
    /// The layer.
    pub(crate) layer: Layer,
    /// Payload size.
    pub(crate) size: usize,
    /// Window (0 for a stream).
    pub(crate) window: usize,
    /// Which round (from 1).
    pub(crate) round: usize,
    /// What went wrong.
    pub(crate) error: String,
}

/// Everything one run produced.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    /// Where.
    pub(crate) machine: Machine,
    /// The caveat that goes beside the numbers.
    pub(crate) note: String,
    /// How.
    pub(crate) settings: Settings,
    /// What was measured, in measurement order.
    pub(crate) rows: Vec<Row>,
    /// What could not be measured.
    pub(crate) failures: Vec<Failure>,
}

impl Report {
    /// Builds the rows (ratios to raw, of the medians, included) from the merged points of
    /// one run.
    pub(crate) fn new(
        machine: Machine,
        settings: Settings,
        merged: Vec<Merged>,
        failures: Vec<Failure>,
    ) -> Report {
        let points: Vec<Point> = merged.iter().map(|m| m.point.clone()).collect();
        let rows = merged
            .into_iter()
            .map(|m| Row {
                rounds: m.rounds,
                rate_min: m.rate_min,
                rate_max: m.rate_max,
                ratio_to_raw: if m.point.layer.is_stream() || m.point.layer.is_cpu_bound() {
                    None
                } else {
                    gate::rate(&points, Layer::Raw, m.point.size, m.point.window)
                        .and_then(|raw| ratio(m.point.rate, raw))
                },
                point: m.point,
            })
            .collect();
        Report {
            note: machine.note(),
            machine,
            settings,
            rows,
            failures,
        }
    }

    /// The points alone (medians over the rounds): what the gate judges.
    pub(crate) fn points(&self) -> Vec<Point> {
        self.rows.iter().map(|r| r.point.clone()).collect()
    }

    /// Rows sorted for reading: by size, window (streams last), then layer.
    fn sorted_rows(&self) -> Vec<&Row> {
        let mut rows: Vec<&Row> = self.rows.iter().collect();
        rows.sort_by_key(|r| {
            let p = &r.point;
            (p.size, p.layer.is_stream(), p.window, p.layer)
        });
        rows
    }

    /// The table printed at the end of a run.
    pub(crate) fn table(&self) -> String {
        let mut out = String::new();
        let rounds = self.settings.rounds > 1;
        let _ = write!(
            out,
            "{:<10} {:>6} {:>6} {:>11} {:>9} {:>9} {:>9} {:>9} {:>7}",
            "layer", "size", "window", "req/s", "mean_us", "p50_us", "p95_us", "p99_us", "x raw"
        );
        let _ = writeln!(out, "{}", if rounds { "   min..max req/s" } else { "" });
        let mut last_size = None;
        for row in self.sorted_rows() {
            let p = &row.point;
            if last_size.is_some_and(|s| s != p.size) {
                out.push('\n');
            }
            last_size = Some(p.size);
            let window = if p.layer.is_stream() {
                "-".to_owned()
            } else {
                p.window.to_string()
            };
            let us = |f: fn(&crate::stats::Latency) -> f64| {
                p.latency_us
                    .as_ref()
                    .map_or("-".to_owned(), |l| format!("{:.1}", f(l)))
            };
            let ratio = row
                .ratio_to_raw
                .map_or("-".to_owned(), |r| format!("{r:.2}"));
            let _ = write!(
                out,
                "{:<10} {:>6} {:>6} {:>11.0} {:>9} {:>9} {:>9} {:>9} {:>7}",
                p.layer.name(),
                p.size,
                window,
                p.rate,
                us(|l| l.mean),
                us(|l| l.p50),
                us(|l| l.p95),
                us(|l| l.p99),
                ratio
            );
            if rounds {
                let _ = write!(out, "   {:.0}..{:.0}", row.rate_min, row.rate_max);
            }
            out.push('\n');
        }
        if self.rows.iter().any(|r| r.point.layer.is_stream()) {
            let _ = writeln!(
                out,
                "\nnode-tick: one-way ticks per second, counted by the receiver (no window, no \
                 latency)."
            );
        }
        if self.rows.iter().any(|r| r.point.layer.is_cpu_bound()) {
            let _ = writeln!(
                out,
                "\nnode-cpu-N: the node row with a ~200 us CPU-bound handler, the server on a \
                 multi-thread runtime with N worker threads (no x raw)."
            );
        }
        if rounds {
            let _ = writeln!(
                out,
                "\n{} interleaved rounds per point: req/s and latencies are medians over the \
                 rounds (x raw compares medians); min..max is the slowest and fastest round.",
                self.settings.rounds
            );
        }
        let _ = writeln!(
            out,
            "x raw: throughput over raw libzmq's at the same size and window, same run.\n\
             {}s warm-up, {}s measured per point; libzmq {} on {}; load average {} before, \
             {} after.\n{}",
            self.settings.warmup_s,
            self.settings.duration_s,
            self.machine.libzmq,
            self.machine.platform,
            self.machine.load_before.as_deref().unwrap_or("unknown"),
            self.machine.load_after.as_deref().unwrap_or("unknown"),
            self.note
        );
        out
    }

    /// The rows as CSV (one header line).
    pub(crate) fn csv(&self) -> String {
        let mut out = String::from(
            "layer,size,window,rate_per_s,mean_us,p50_us,p95_us,p99_us,ratio_to_raw,completed,seconds,rounds,rate_min,rate_max\n",
        );
        let opt =
            |v: Option<f64>, digits: usize| v.map_or(String::new(), |v| format!("{v:.digits$}"));
        for row in self.sorted_rows() {
            let p = &row.point;
            let l = p.latency_us.as_ref();
            let _ = writeln!(
                out,
                "{},{},{},{:.1},{},{},{},{},{},{},{:.3},{},{:.1},{:.1}",
                p.layer.name(),
                p.size,
                p.window,
                p.rate,
                opt(l.map(|l| l.mean), 2),
                opt(l.map(|l| l.p50), 2),
                opt(l.map(|l| l.p95), 2),
                opt(l.map(|l| l.p99), 2),
                opt(row.ratio_to_raw, 4),
                p.completed,
                p.seconds,
                row.rounds,
                row.rate_min,
                row.rate_max
            );
        }
        out
    }

    /// Writes `results.json`, `results.csv`, `throughput.svg` and `latency.svg` into `dir`
    /// (created if missing); returns their paths.
    pub(crate) fn write(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        fs::create_dir_all(dir)?;
        let json = dir.join("results.json");
        fs::write(&json, serde_json::to_string_pretty(self)? + "\n")?;
        let csv = dir.join("results.csv");
        fs::write(&csv, self.csv())?;
        let throughput = dir.join("throughput.svg");
        plot(&throughput, |path| throughput_chart(self, path))?;
        let latency = dir.join("latency.svg");
        plot(&latency, |path| latency_chart(self, path))?;
        Ok(vec![json, csv, throughput, latency])
    }
}

/// A chart-drawing function's error: plotters' error type is generic over the backend.
type PlotResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Runs a chart-drawing function and turns its error into ours.
fn plot(path: &Path, draw: impl FnOnce(&Path) -> PlotResult) -> Result<()> {
    draw(path).map_err(|e| Error::Plot {
        path: path.to_owned(),
        cause: e.to_string(),
    })
}

/// The colour of a layer's line, the same in both charts.
fn colour(layer: Layer) -> RGBColor {
    match layer {
        Layer::Floor => RGBColor(196, 156, 148),
        Layer::Raw => RGBColor(0, 0, 0),
        Layer::Transport => RGBColor(31, 119, 180),
        Layer::TransportNative => RGBColor(174, 199, 232),
        Layer::Protocol => RGBColor(44, 160, 44),
        Layer::Node => RGBColor(214, 39, 40),
        Layer::NodeTick => RGBColor(148, 103, 189),
        Layer::NodeCurve => RGBColor(140, 86, 75),
        Layer::NodeNative => RGBColor(255, 152, 150),
        Layer::NodeNativeCurve => RGBColor(219, 219, 141),
        Layer::NodeNativeBlockOn => RGBColor(199, 199, 199),
        Layer::NodeNativeTick => RGBColor(197, 176, 213),
        Layer::NodeBlockOn => RGBColor(127, 127, 127),
        Layer::NodeCtx => RGBColor(255, 187, 120),
        Layer::NodeCaller => RGBColor(152, 223, 138),
        Layer::NodeNativeCtx => RGBColor(255, 127, 80),
        Layer::NodeNativeCaller => RGBColor(100, 190, 100),
        Layer::NodeIpc => RGBColor(70, 130, 180),
        Layer::NodeNativeIpc => RGBColor(135, 206, 235),
        Layer::NodeCpu1 => RGBColor(227, 119, 194),
        Layer::NodeCpu2 => RGBColor(188, 189, 34),
        Layer::Nats => RGBColor(23, 190, 207),
        Layer::Moleculer => RGBColor(255, 127, 14),
    }
}

/// Panel size of one small multiple, in pixels.
const PANEL: (u32, u32) = (520, 340);

/// Labels for a log axis from `lo` to `hi`: 1, 2 and 5 times each power of ten (plotters
/// labels only the powers themselves, too few over one decade).
pub(crate) fn log_labels(lo: f64, hi: f64) -> Vec<f64> {
    let mut labels = Vec::new();
    let mut decade = 10f64.powi(lo.max(1e-3).log10().floor() as i32);
    while decade <= hi {
        for step in [1.0, 2.0, 5.0] {
            let value = decade * step;
            if (lo..=hi).contains(&value) {
                labels.push(value);
            }
        }
        decade *= 10.0;
    }
    labels
}

/// Canvas size of a grid of panels, with room for the title.
fn canvas(rows: usize, cols: usize) -> (u32, u32) {
    ((PANEL.0 * cols as u32).max(640), PANEL.1 * rows as u32 + 50)
}

/// Rows and columns of a grid of `n` panels: two columns from two panels on.
fn grid(n: usize) -> (usize, usize) {
    let cols = n.clamp(1, 2);
    (n.div_ceil(cols).max(1), cols)
}

/// Throughput against window (log scale) per layer, one panel per payload size.
fn throughput_chart(report: &Report, path: &Path) -> PlotResult {
    let points: Vec<&Point> = report
        .rows
        .iter()
        .map(|r| &r.point)
        .filter(|p| !p.layer.is_stream())
        .collect();
    let mut sizes: Vec<usize> = points.iter().map(|p| p.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let (rows, cols) = grid(sizes.len());
    let root = SVGBackend::new(path, canvas(rows, cols)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "Throughput against window ({} cores shared by client and server)",
            report.machine.cores
        ),
        ("sans-serif", 18),
    )?;
    let panels = root.split_evenly((rows, cols));
    for (panel, &size) in panels.iter().zip(&sizes) {
        let here: Vec<&&Point> = points.iter().filter(|p| p.size == size).collect();
        let (lo, hi) = here.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            (lo.min(p.window as f64), hi.max(p.window as f64))
        });
        let (lo, hi) = if lo < hi {
            (lo, hi)
        } else {
            (lo / 2.0, hi * 2.0)
        };
        let top = here.iter().map(|p| p.rate).fold(0.0, f64::max).max(1.0) * 1.15;
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{size} B payload"), ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("window (requests in flight)")
            .y_desc("requests/s")
            .x_label_formatter(&|w| format!("{w:.0}"))
            .y_label_formatter(&|r| format!("{:.0}k", r / 1000.0))
            .draw()?;
        // Every row measured, in report order (the peers' rows too, when they ran).
        let mut layers: Vec<Layer> = here.iter().map(|p| p.layer).collect();
        layers.sort_unstable();
        layers.dedup();
        for layer in layers {
            let mut line: Vec<(f64, f64)> = here
                .iter()
                .filter(|p| p.layer == layer)
                .map(|p| (p.window as f64, p.rate))
                .collect();
            if line.is_empty() {
                continue;
            }
            line.sort_by(|a, b| a.0.total_cmp(&b.0));
            let c = colour(layer);
            chart
                .draw_series(LineSeries::new(line, c.stroke_width(2)).point_size(3))?
                .label(layer.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// Latency percentiles (p50, p95, p99) per layer at window 1, one panel per payload size.
fn latency_chart(report: &Report, path: &Path) -> PlotResult {
    let points: Vec<&Point> = report
        .rows
        .iter()
        .map(|r| &r.point)
        .filter(|p| p.window == 1 && p.latency_us.is_some())
        .collect();
    let mut sizes: Vec<usize> = points.iter().map(|p| p.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let (rows, cols) = grid(sizes.len());
    let root = SVGBackend::new(path, canvas(rows, cols)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!(
            "Latency at window 1 ({} cores shared by client and server)",
            report.machine.cores
        ),
        ("sans-serif", 18),
    )?;
    let panels = root.split_evenly((rows, cols));
    for (panel, &size) in panels.iter().zip(&sizes) {
        let here: Vec<(Layer, crate::stats::Latency)> = points
            .iter()
            .filter(|p| p.size == size)
            .filter_map(|p| p.latency_us.map(|l| (p.layer, l)))
            .collect();
        // Log scale: a p99 is often ten times the median on a shared machine.
        let top = here.iter().map(|(_, l)| l.p99).fold(1.0, f64::max) * 1.5;
        let bottom = here.iter().map(|(_, l)| l.p50).fold(top, f64::min).max(0.1) / 1.5;
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("{size} B payload"), ("sans-serif", 15))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(
                (0..2).into_segmented(),
                (bottom..top)
                    .log_scale()
                    .with_key_points(log_labels(bottom, top)),
            )?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("percentile")
            .y_desc("microseconds (log scale)")
            .x_label_formatter(&|q| {
                match q {
                    SegmentValue::CenterOf(0) => "p50",
                    SegmentValue::CenterOf(1) => "p95",
                    SegmentValue::CenterOf(2) => "p99",
                    _ => "",
                }
                .to_owned()
            })
            .y_label_formatter(&|us| format!("{us:.0}"))
            .draw()?;
        for (layer, l) in here {
            let c = colour(layer);
            chart
                .draw_series(
                    LineSeries::new(
                        [
                            (SegmentValue::CenterOf(0), l.p50),
                            (SegmentValue::CenterOf(1), l.p95),
                            (SegmentValue::CenterOf(2), l.p99),
                        ],
                        c.stroke_width(2),
                    )
                    .point_size(3),
                )?
                .label(layer.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Latency;

    fn report() -> Report {
        let latency = |mean| {
            Some(Latency {
                mean,
                p50: mean,
                p95: mean * 1.5,
                p99: mean * 2.0,
            })
        };
        let point = |layer, window, rate, latency_us| Point {
            layer,
            size: 100,
            window,
            completed: rate as u64,
            seconds: 1.0,
            rate,
            latency_us,
        };
        Report::new(
            Machine::here(2, None),
            Settings {
                warmup_s: 1.0,
                duration_s: 1.0,
                sizes: vec![100],
                windows: vec![1, 10],
                layers: vec![Layer::Raw, Layer::Node, Layer::NodeTick],
                rounds: 1,
            },
            [
                point(Layer::Raw, 1, 20_000.0, latency(50.0)),
                point(Layer::Node, 1, 10_000.0, latency(100.0)),
                point(Layer::Raw, 10, 100_000.0, latency(100.0)),
                point(Layer::Node, 10, 50_000.0, latency(200.0)),
                point(Layer::NodeTick, 0, 300_000.0, None),
            ]
            .into_iter()
            .map(Merged::single)
            .collect(),
            Vec::new(),
        )
    }

    #[test]
    fn rows_carry_their_ratio_to_raw() {
        let report = report();
        let ratios: Vec<Option<f64>> = report.rows.iter().map(|r| r.ratio_to_raw).collect();
        assert_eq!(ratios, [Some(1.0), Some(0.5), Some(1.0), Some(0.5), None]);
    }

    #[test]
    fn the_cpu_bound_rows_have_no_ratio_to_raw() {
        let mut report = report();
        let mut row = report.rows[1].clone();
        row.point.layer = Layer::NodeCpu2;
        let merged = report
            .rows
            .iter()
            .map(|r| &r.point)
            .chain([&row.point])
            .cloned()
            .map(Merged::single)
            .collect();
        report = Report::new(report.machine, report.settings, merged, Vec::new());
        let cpu = report.rows.last().unwrap();
        assert_eq!(cpu.point.layer, Layer::NodeCpu2);
        assert_eq!(cpu.ratio_to_raw, None);
        let table = report.table();
        assert!(table.contains("node-cpu-2"), "{table}");
        assert!(table.contains("N worker threads"), "{table}");
    }

    #[test]
    fn the_table_has_a_line_per_point_and_the_note() {
        let table = report().table();
        assert_eq!(table.lines().filter(|l| l.starts_with("node ")).count(), 2);
        assert!(table.contains("node-tick"));
        assert!(table.contains("two processes on one 2-core machine"));
    }

    #[test]
    fn csv_has_a_header_and_a_line_per_point() {
        let csv = report().csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 6);
        assert!(lines[0].starts_with("layer,size,window,rate_per_s"));
        assert!(lines.iter().skip(1).all(|l| l.split(',').count() == 14));
        assert!(lines.contains(&"node-tick,100,0,300000.0,,,,,,300000,1.000,1,300000.0,300000.0"));
    }

    #[test]
    fn rounds_show_their_spread_in_the_table_and_the_json() {
        let mut report = report();
        report.settings.rounds = 3;
        report.rows[1].rounds = 3;
        report.rows[1].rate_min = 8000.0;
        report.rows[1].rate_max = 12_000.0;
        let table = report.table();
        assert!(table.contains("min..max"), "{table}");
        assert!(table.contains("8000..12000"), "{table}");
        assert!(table.contains("3 interleaved rounds"), "{table}");
        let json: serde_json::Value = serde_json::to_value(&report).unwrap();
        assert_eq!(json["rows"][1]["rate_min"], 8000.0);
        assert_eq!(json["rows"][1]["rounds"], 3);
        assert_eq!(json["rows"][1]["rate"], 10_000.0);
        // One round: no spread column.
        assert!(!super::tests::report().table().contains("min..max"));
    }

    #[test]
    fn writes_json_csv_and_two_svgs() {
        let dir = std::env::temp_dir().join(format!("benches-report-{}", std::process::id()));
        let files = report().write(&dir).unwrap();
        assert_eq!(files.len(), 4);
        for file in &files {
            assert!(fs::metadata(file).unwrap().len() > 0, "{}", file.display());
        }
        let svg = fs::read_to_string(dir.join("throughput.svg")).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("transport") || svg.contains("node"));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn log_labels_are_one_two_five() {
        assert_eq!(
            log_labels(15.0, 1200.0),
            [20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]
        );
        assert_eq!(log_labels(1.0, 1.0), [1.0]);
    }

    #[test]
    fn grid_is_two_columns_wide() {
        assert_eq!(grid(1), (1, 1));
        assert_eq!(grid(2), (1, 2));
        assert_eq!(grid(3), (2, 2));
        assert_eq!(grid(4), (2, 2));
    }
}
