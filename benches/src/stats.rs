//! Latency statistics: pure functions over per-request timings, no I/O and no clock.
//!
//! Timings are kept as whole nanoseconds (`u64`), every one of them, and sorted once at the
//! end of a point: at a few hundred thousand requests per second for a few seconds that is
//! a few tens of megabytes, and the percentiles are exact rather than bucketed.

use serde::{Deserialize, Serialize};

/// Latency of one measurement point, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Latency {
    /// Arithmetic mean.
    pub(crate) mean: f64,
    /// Median (nearest rank).
    pub(crate) p50: f64,
    /// 95th percentile (nearest rank).
    pub(crate) p95: f64,
    /// 99th percentile (nearest rank).
    pub(crate) p99: f64,
}

/// The `q`-quantile (`0.0..=1.0`) of `sorted` (ascending) by the nearest-rank method: the
/// smallest value such that at least `q` of all values are less than or equal to it.
/// `None` for an empty slice.
///
/// Nearest rank always returns a value that was observed (no interpolation), so a p99 is a
/// latency some request really had.
pub(crate) fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let q = q.clamp(0.0, 1.0);
    // Rank 1..=n; rank ceil(q * n), at least 1.
    let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
    Some(sorted[rank.min(sorted.len()) - 1])
}

/// Sorts `timings_ns` in place and summarises them in microseconds. `None` when empty.
pub(crate) fn summarize(timings_ns: &mut [u64]) -> Option<Latency> {
    if timings_ns.is_empty() {
        return None;
    }
    timings_ns.sort_unstable();
    // u128: the sum of millions of nanosecond timings would still fit u64, but need not.
    let sum: u128 = timings_ns.iter().map(|&t| u128::from(t)).sum();
    let mean_ns = sum as f64 / timings_ns.len() as f64;
    let us = |q: f64| percentile(timings_ns, q).map_or(0.0, |ns| ns as f64 / 1000.0);
    Some(Latency {
        mean: mean_ns / 1000.0,
        p50: us(0.50),
        p95: us(0.95),
        p99: us(0.99),
    })
}

/// The median of `values` (the mean of the two middle values for an even count), ignoring
/// values that are not finite. `None` when nothing finite is left.
///
/// Used across rounds (`--rounds N`): one round disturbed by the machine's noise moves a
/// median of three or more rounds much less than it moves a mean.
pub(crate) fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    })
}

/// `value / baseline`, or `None` when the baseline is not a positive finite number.
pub(crate) fn ratio(value: f64, baseline: f64) -> Option<f64> {
    (baseline.is_finite() && baseline > 0.0 && value.is_finite()).then(|| value / baseline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_of_nothing_is_none() {
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn percentile_of_one_value_is_that_value() {
        for q in [0.0, 0.5, 0.99, 1.0] {
            assert_eq!(percentile(&[7], q), Some(7));
        }
    }

    #[test]
    fn nearest_rank_on_one_to_a_hundred() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 0.0), Some(1));
        assert_eq!(percentile(&values, 0.50), Some(50));
        assert_eq!(percentile(&values, 0.95), Some(95));
        assert_eq!(percentile(&values, 0.99), Some(99));
        assert_eq!(percentile(&values, 1.0), Some(100));
    }

    #[test]
    fn nearest_rank_rounds_up_between_ranks() {
        // n = 10: p95 is rank ceil(9.5) = 10, p50 rank 5.
        let values: Vec<u64> = (10..=100).step_by(10).collect();
        assert_eq!(percentile(&values, 0.50), Some(50));
        assert_eq!(percentile(&values, 0.95), Some(100));
        assert_eq!(percentile(&values, 0.51), Some(60));
    }

    #[test]
    fn out_of_range_quantiles_are_clamped() {
        let values = [1, 2, 3];
        assert_eq!(percentile(&values, -1.0), Some(1));
        assert_eq!(percentile(&values, 2.0), Some(3));
    }

    #[test]
    fn summarize_sorts_and_converts_to_microseconds() {
        // 1..=100 microseconds, shuffled.
        let mut timings: Vec<u64> = (1..=100).rev().map(|us| us * 1000).collect();
        timings.swap(3, 70);
        let latency = summarize(&mut timings).unwrap();
        assert_eq!(latency.mean, 50.5);
        assert_eq!(latency.p50, 50.0);
        assert_eq!(latency.p95, 95.0);
        assert_eq!(latency.p99, 99.0);
        assert!(timings.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn summarize_of_nothing_is_none() {
        assert_eq!(summarize(&mut []), None);
    }

    #[test]
    fn one_outlier_moves_the_mean_and_p99_not_the_median() {
        let mut timings = vec![10_000; 99];
        timings.push(10_000_000);
        let latency = summarize(&mut timings).unwrap();
        assert_eq!(latency.p50, 10.0);
        assert_eq!(latency.p99, 10.0);
        assert!(latency.mean > 100.0);
        // The outlier is the 100th value: p99 by nearest rank is still the 99th.
        let mut timings = vec![10_000; 98];
        timings.extend([10_000_000, 10_000_000]);
        assert_eq!(summarize(&mut timings).unwrap().p99, 10_000.0);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[4.0]), Some(4.0));
        assert_eq!(median(&[9.0, 1.0, 5.0]), Some(5.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn median_ignores_values_that_are_not_finite() {
        assert_eq!(median(&[f64::NAN, 3.0, f64::INFINITY, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[f64::NAN]), None);
    }

    #[test]
    fn ratio_needs_a_positive_baseline() {
        assert_eq!(ratio(90.0, 100.0), Some(0.9));
        assert_eq!(ratio(1.0, 0.0), None);
        assert_eq!(ratio(1.0, -3.0), None);
        assert_eq!(ratio(1.0, f64::NAN), None);
        assert_eq!(ratio(f64::INFINITY, 1.0), None);
    }
}
