//! `--rounds N`: every point measured N times, in interleaved rounds (every point once, then
//! every point again), merged into one row per point: the median rate and the median of each
//! latency statistic, with the spread (slowest and fastest round) beside them.
//!
//! Interleaving puts the machine's noise on every layer alike: a burst of other work lands
//! on one round of every row rather than on every round of one row. Pure functions, no I/O.

use serde::Serialize;

use crate::measure::Point;
use crate::stats::{self, Latency};

/// One point after all its rounds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Merged {
    /// The point as reported: `rate` and every latency statistic are medians over the rounds;
    /// `completed` and `seconds` are totals over the rounds.
    pub(crate) point: Point,
    /// How many rounds measured it (failed rounds are not counted).
    pub(crate) rounds: usize,
    /// The slowest round's rate.
    pub(crate) rate_min: f64,
    /// The fastest round's rate.
    pub(crate) rate_max: f64,
}

#[cfg(test)]
impl Merged {
    /// A point measured once: its own median and spread.
    pub(crate) fn single(point: Point) -> Merged {
        Merged {
            rounds: 1,
            rate_min: point.rate,
            rate_max: point.rate,
            point,
        }
    }
}

/// Merges the rounds of one point (same layer, size and window). `None` when no round
/// succeeded.
pub(crate) fn merge(rounds: &[Point]) -> Option<Merged> {
    let first = rounds.first()?;
    let rates: Vec<f64> = rounds.iter().map(|p| p.rate).collect();
    let rate = stats::median(&rates).unwrap_or(0.0);
    let rate_min = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let rate_max = rates.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let latencies: Vec<Latency> = rounds.iter().filter_map(|p| p.latency_us).collect();
    let each = |f: fn(&Latency) -> f64| {
        let values: Vec<f64> = latencies.iter().map(f).collect();
        stats::median(&values).unwrap_or(0.0)
    };
    let latency_us = (!latencies.is_empty()).then(|| Latency {
        mean: each(|l| l.mean),
        p50: each(|l| l.p50),
        p95: each(|l| l.p95),
        p99: each(|l| l.p99),
    });
    Some(Merged {
        point: Point {
            layer: first.layer,
            size: first.size,
            window: first.window,
            completed: rounds.iter().map(|p| p.completed).sum(),
            seconds: rounds.iter().map(|p| p.seconds).sum(),
            rate,
            latency_us,
        },
        rounds: rounds.len(),
        rate_min,
        rate_max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::Layer;

    fn round(rate: f64, p50: f64) -> Point {
        Point {
            layer: Layer::Node,
            size: 100,
            window: 1,
            completed: rate as u64,
            seconds: 1.0,
            rate,
            latency_us: Some(Latency {
                mean: p50 * 1.1,
                p50,
                p95: p50 * 2.0,
                p99: p50 * 3.0,
            }),
        }
    }

    #[test]
    fn no_round_is_nothing() {
        assert_eq!(merge(&[]), None);
    }

    #[test]
    fn one_round_is_itself() {
        let merged = merge(&[round(1000.0, 50.0)]).unwrap();
        assert_eq!(merged, Merged::single(round(1000.0, 50.0)));
        assert_eq!(merged.rate_min, merged.rate_max);
    }

    #[test]
    fn three_rounds_give_the_median_and_the_spread() {
        // The second round was hit by noise: half the rate, four times the latency.
        let merged = merge(&[
            round(1000.0, 50.0),
            round(500.0, 200.0),
            round(1100.0, 45.0),
        ])
        .unwrap();
        assert_eq!(merged.rounds, 3);
        assert_eq!(merged.point.rate, 1000.0);
        assert_eq!(merged.rate_min, 500.0);
        assert_eq!(merged.rate_max, 1100.0);
        let latency = merged.point.latency_us.unwrap();
        assert_eq!(latency.p50, 50.0);
        assert_eq!(latency.p95, 100.0);
        assert_eq!(latency.p99, 150.0);
        assert!((latency.mean - 55.0).abs() < 1e-9);
        // Counts and seconds add up over the rounds.
        assert_eq!(merged.point.completed, 2600);
        assert_eq!(merged.point.seconds, 3.0);
        assert_eq!(
            (merged.point.layer, merged.point.size, merged.point.window),
            (Layer::Node, 100, 1)
        );
    }

    #[test]
    fn each_percentile_is_its_own_median() {
        // The medians need not come from the same round.
        let mut a = round(10.0, 10.0);
        let mut b = round(20.0, 20.0);
        let c = round(30.0, 30.0);
        a.latency_us = a.latency_us.map(|l| Latency { p99: 1000.0, ..l });
        b.latency_us = b.latency_us.map(|l| Latency { p99: 1.0, ..l });
        let latency = merge(&[a, b, c]).unwrap().point.latency_us.unwrap();
        assert_eq!(latency.p50, 20.0);
        assert_eq!(latency.p99, 90.0);
    }

    #[test]
    fn an_even_count_takes_the_middle_two() {
        let merged = merge(&[round(100.0, 10.0), round(300.0, 30.0)]).unwrap();
        assert_eq!(merged.point.rate, 200.0);
        assert_eq!(merged.point.latency_us.unwrap().p50, 20.0);
    }

    #[test]
    fn streams_have_no_latency() {
        let mut tick = round(5000.0, 0.0);
        tick.latency_us = None;
        tick.window = 0;
        let merged = merge(&[tick.clone(), tick]).unwrap();
        assert_eq!(merged.point.latency_us, None);
        assert_eq!(merged.point.rate, 5000.0);
    }
}
