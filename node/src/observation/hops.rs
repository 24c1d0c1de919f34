//! Where a router sent what it forwarded: counts per next hop (a local peer or another
//! router), in bounded memory, for a router's description.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::mesh::peer::NodeId;

/// How many next hops a router counts by name; the rest share [`OTHER_HOPS`]. A peer's id
/// is chosen by the peer, so an unbounded table would let peers grow a router's memory.
pub const MAX_DESCRIBED_HOPS: usize = 256;

/// The name under which the next hops past [`MAX_DESCRIBED_HOPS`] are counted together.
pub const OTHER_HOPS: &str = "_other";

/// What a router passed to one next hop.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HopCount {
    /// The next hop's id ([`OTHER_HOPS`] for those past the table's bound).
    pub to: String,
    /// Messages it took (a reply, or a tick's delivery, came back).
    pub forwarded: u64,
    /// Messages it failed (an error, no answer, gone).
    pub failed: u64,
}

/// The counts of one router, keyed by next hop.
#[derive(Default)]
pub(crate) struct HopCounts {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    named: HashMap<NodeId, [u64; 2], foldhash::fast::RandomState>,
    other: [u64; 2],
}

impl Table {
    /// Counts one message to `to`: by name while the table has room (or already holds
    /// it), else under `_other`.
    fn record(&mut self, to: &NodeId, ok: bool) {
        let slot = usize::from(!ok);
        if let Some(counts) = self.named.get_mut(to) {
            counts[slot] += 1;
        } else if self.named.len() < MAX_DESCRIBED_HOPS {
            let mut counts = [0; 2];
            counts[slot] = 1;
            self.named.insert(to.clone(), counts);
        } else {
            self.other[slot] += 1;
        }
    }

    /// The counts by id, then `_other` when anything was counted there.
    fn snapshot(&self) -> Vec<HopCount> {
        let mut hops: Vec<HopCount> = self
            .named
            .iter()
            .map(|(id, [forwarded, failed])| HopCount {
                to: id.to_string(),
                forwarded: *forwarded,
                failed: *failed,
            })
            .collect();
        hops.sort_by(|a, b| a.to.cmp(&b.to));
        if self.other != [0, 0] {
            hops.push(HopCount {
                to: OTHER_HOPS.to_owned(),
                forwarded: self.other[0],
                failed: self.other[1],
            });
        }
        hops
    }
}

impl HopCounts {
    /// Counts one message passed to `to`, taken (`ok`) or failed.
    pub(crate) fn record(&self, to: &NodeId, ok: bool) {
        self.table.lock().record(to, ok);
    }

    /// The counts so far, by next hop.
    pub(crate) fn snapshot(&self) -> Vec<HopCount> {
        self.table.lock().snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(to: &str, forwarded: u64, failed: u64) -> HopCount {
        HopCount {
            to: to.to_owned(),
            forwarded,
            failed,
        }
    }

    #[test]
    fn counts_are_kept_per_next_hop_and_sorted_by_id() {
        let mut table = Table::default();
        table.record(&NodeId::from("worker-b"), true);
        table.record(&NodeId::from("worker-a"), true);
        table.record(&NodeId::from("worker-b"), false);
        table.record(&NodeId::from("worker-b"), true);
        assert_eq!(
            table.snapshot(),
            vec![count("worker-a", 1, 0), count("worker-b", 2, 1)]
        );
    }

    #[test]
    fn hops_past_the_bound_share_other() {
        let mut table = Table::default();
        for i in 0..MAX_DESCRIBED_HOPS + 10 {
            table.record(&NodeId::from(format!("n{i:04}").as_str()), i % 2 == 0);
        }
        // One already named still counts by name once the table is full.
        table.record(&NodeId::from("n0000"), true);
        let hops = table.snapshot();
        assert_eq!(hops.len(), MAX_DESCRIBED_HOPS + 1);
        assert_eq!(hops[0], count("n0000", 2, 0));
        assert_eq!(hops.last(), Some(&count(OTHER_HOPS, 5, 5)));
    }

    #[test]
    fn nothing_forwarded_is_an_empty_list() {
        assert!(HopCounts::default().snapshot().is_empty());
    }
}
