//! What the machine allows of `request_any`'s rate at many peers, from the floor of the same
//! round.
//!
//! `request_any` at the largest peer count over its rate at the smallest, in one round, is
//! the figure the scale run is read for. Part of what a spread request costs is the
//! machine's, not the node's: the kernel's TCP and the reactor touch state of a connection
//! last touched many requests earlier, which the plain-TCP floor pays too. Its growth per
//! request, from the smallest count to the largest, bounds the ratio any node can reach:
//! a node whose own cost per request did not grow at all would pay its small-count price
//! plus that growth. On a machine whose floor grows a lot, a ratio above that ceiling
//! cannot be measured, whatever the node does.
//!
//! Costs are the reciprocals of rates, as they are while the machine is the limit (the
//! hub and the peer processes share its cores). A round's figures are paired by their
//! place: the scale run keeps each peer count's results in the order of the rounds, so the
//! k-th of the smallest count and the k-th of the largest ran in the same round, unless a
//! run failed; with a run missing nothing is paired.

use crate::scale_report::HubResult;

/// One round's ratios, largest peer count over smallest, at one size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Ceiling {
    /// `request_any`'s rate, largest over smallest count.
    pub(crate) request_any: f64,
    /// The plain-TCP floor's rate, largest over smallest.
    pub(crate) floor: f64,
    /// The ratio of a node whose own cost per request stayed at its small-count price:
    /// `c / (c + g)`, with `c` the node's cost at the small count and `g` the floor's
    /// growth per request (none when the floor did not slow down).
    pub(crate) ceiling: f64,
}

impl Ceiling {
    /// The ratios from the rates of one round: the node's and the floor's at the small
    /// count and at the large one. `None` when a rate is not positive.
    pub(crate) fn from_rates(
        any_small: f64,
        any_large: f64,
        floor_small: f64,
        floor_large: f64,
    ) -> Option<Ceiling> {
        if [any_small, any_large, floor_small, floor_large]
            .iter()
            .any(|rate| !rate.is_finite() || *rate <= 0.0)
        {
            return None;
        }
        let cost = 1.0 / any_small;
        let growth = (1.0 / floor_large - 1.0 / floor_small).max(0.0);
        Some(Ceiling {
            request_any: any_large / any_small,
            floor: floor_large / floor_small,
            ceiling: cost / (cost + growth),
        })
    }
}

/// The smallest and the largest peer count of `rounds` and every round's [`Ceiling`] at
/// `size`, the largest over the smallest; `rounds` holds each count's results in the
/// order run. `None` with fewer than two peer counts or with a run of either count
/// missing; rounds without a floor are left out.
pub(crate) fn per_round(rounds: &[HubResult], size: usize) -> Option<(usize, usize, Vec<Ceiling>)> {
    let small = rounds.iter().map(|r| r.peers).min()?;
    let large = rounds.iter().map(|r| r.peers).max()?;
    let count = |peers: usize| rounds.iter().filter(|r| r.peers == peers).count();
    if small == large || count(small) != count(large) {
        return None;
    }
    let at = |peers: usize| {
        rounds
            .iter()
            .filter(move |r| r.peers == peers)
            .map(move |r| r.sizes.iter().find(|s| s.size == size))
    };
    let ceilings = at(small)
        .zip(at(large))
        .filter_map(|(small, large)| {
            let (small, large) = (small?, large?);
            Ceiling::from_rates(
                small.request_any.rate,
                large.request_any.rate,
                small.tcp_floor.as_ref()?.rate,
                large.tcp_floor.as_ref()?.rate,
            )
        })
        .collect();
    Some((small, large, ceilings))
}

/// The report's line for `size`: every round's ratios and ceiling, the largest peer count
/// over the smallest; `None` where [`per_round`] pairs no round.
pub(crate) fn report_line(rounds: &[HubResult], size: usize) -> Option<String> {
    let (small, large, ceilings) = per_round(rounds, size)?;
    if ceilings.is_empty() {
        return None;
    }
    let list = |f: fn(&Ceiling) -> f64| {
        let values: Vec<String> = ceilings.iter().map(|c| format!("{:.2}", f(c))).collect();
        values.join(" ")
    };
    Some(format!(
        "{size} B, {large} peers over {small}, per round: request_any {}; the floor {}; the \
         ceiling (a node whose own cost per request did not grow) {}",
        list(|c| c.request_any),
        list(|c| c.floor),
        list(|c| c.ceiling)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_floor_that_does_not_slow_down_allows_any_ratio() {
        let c = Ceiling::from_rates(100.0, 50.0, 200.0, 200.0).unwrap();
        assert_eq!(c.request_any, 0.5);
        assert_eq!(c.floor, 1.0);
        assert_eq!(c.ceiling, 1.0);
        // A floor faster at the large count (noise) is no growth, not a gain.
        assert_eq!(
            Ceiling::from_rates(100.0, 50.0, 200.0, 400.0)
                .unwrap()
                .ceiling,
            1.0
        );
    }

    #[test]
    fn the_floors_growth_is_added_to_the_nodes_small_count_cost() {
        // The node: 10 µs a request at the small count. The floor: 5 µs, then 15 µs.
        // A node that did not grow would cost 10 + 10 µs at the large count: half its rate.
        let c = Ceiling::from_rates(100_000.0, 40_000.0, 200_000.0, 200_000.0 / 3.0).unwrap();
        assert!((c.ceiling - 0.5).abs() < 1e-9, "{c:?}");
        assert!((c.floor - 1.0 / 3.0).abs() < 1e-9, "{c:?}");
        assert!((c.request_any - 0.4).abs() < 1e-9, "{c:?}");
    }

    #[test]
    fn rounds_pair_by_place_and_rounds_without_a_floor_are_left_out() {
        use crate::scale_report::tests::run;
        use crate::scale_report::RequestAny;
        let with = |peers: usize, any: f64, floor: Option<f64>| {
            let mut r = run(peers);
            for s in &mut r.sizes {
                s.request_any.rate = any;
                s.tcp_floor = floor.map(|rate| RequestAny {
                    rate,
                    ..s.request_any.clone()
                });
            }
            r
        };
        let rounds = [
            with(100, 100.0, Some(200.0)),
            with(1000, 50.0, Some(100.0)),
            with(100, 80.0, None),
            with(1000, 60.0, Some(100.0)),
            with(100, 100.0, Some(100.0)),
            with(1000, 90.0, Some(100.0)),
        ];
        // As the scale run keeps them: each count's results in the order of the rounds.
        let by_count: Vec<HubResult> = rounds
            .iter()
            .filter(|r| r.peers == 100)
            .chain(rounds.iter().filter(|r| r.peers == 1000))
            .cloned()
            .collect();
        let (small, large, got) = per_round(&by_count, 100).unwrap();
        assert_eq!((small, large), (100, 1000));
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].request_any, 0.5);
        assert_eq!(got[0].floor, 0.5);
        assert_eq!(got[1].request_any, 0.9);
        assert_eq!(got[1].ceiling, 1.0);
        assert!(per_round(&by_count, 7).unwrap().2.is_empty());
        assert!(per_round(&by_count[..1], 100).is_none());
        // A failed run of one count: the rounds can no longer be told apart.
        assert!(per_round(&by_count[1..], 100).is_none());
    }

    #[test]
    fn a_missing_or_zero_rate_gives_nothing() {
        assert!(Ceiling::from_rates(0.0, 1.0, 1.0, 1.0).is_none());
        assert!(Ceiling::from_rates(1.0, 1.0, f64::NAN, 1.0).is_none());
    }
}
