//! The registry's tests: joins, leaves, picks and the selection cache.
use super::*;
use crate::options::{options, Value};

fn entry(id: &str, direction: Direction, instance: &str, role: &str, now: Instant) -> Entry<u32> {
    Entry {
        reach: Reach::new(NodeId::from(id), direction, 0),
        options: options([("role", Value::from(role))]),
        instance: instance.into(),
        router: false,
        key: None,
        last_seen: Arc::new(Mutex::new(now)),
        dead_after: Duration::from_millis(300),
        work: Arc::default(),
        token: None,
        draining: false,
    }
}

#[test]
fn a_second_instance_under_a_used_id_is_refused() {
    let now = Instant::now();
    let mut registry = Registry::default();
    registry
        .join(entry("a", Direction::Downstream, "i1", "w", now))
        .unwrap();
    assert_eq!(
        registry
            .join(entry("a", Direction::Upstream, "i2", "w", now))
            .unwrap_err(),
        Refusal::DuplicateId
    );
    // The same instance re-joining (a reconnect) replaces its entry.
    assert!(registry
        .join(entry("a", Direction::Downstream, "i1", "w", now))
        .unwrap()
        .is_some());
    // And may join the other way too.
    assert!(registry
        .join(entry("a", Direction::Upstream, "i1", "w", now))
        .unwrap()
        .is_none());
}

#[test]
fn scope_and_filter_select_peers() {
    let now = Instant::now();
    let mut registry = Registry::default();
    registry
        .join(entry("up-w", Direction::Upstream, "1", "worker", now))
        .unwrap();
    registry
        .join(entry("down-w", Direction::Downstream, "2", "worker", now))
        .unwrap();
    registry
        .join(entry("down-x", Direction::Downstream, "3", "other", now))
        .unwrap();
    let workers = Filter::new().eq("role", "worker");
    let ids = |scope| {
        registry
            .matching(&workers, scope)
            .iter()
            .map(|e| e.id().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(Scope::Both), ["down-w", "up-w"]);
    assert_eq!(ids(Scope::Up), ["up-w"]);
    assert_eq!(ids(Scope::Down), ["down-w"]);
}

#[test]
fn round_robin_takes_turns() {
    let now = Instant::now();
    let mut registry = Registry::default();
    for id in ["a", "b", "c"] {
        registry
            .join(entry(id, Direction::Downstream, id, "w", now))
            .unwrap();
    }
    let picks: Vec<String> = (0..6)
        .map(|_| {
            registry
                .pick(&Filter::any(), Scope::Both, Strategy::RoundRobin, 0)
                .unwrap()
                .id
                .to_string()
        })
        .collect();
    assert_eq!(picks, ["a", "b", "c", "a", "b", "c"]);
}

#[test]
fn least_in_flight_prefers_the_idle_peer() {
    let now = Instant::now();
    let mut registry = Registry::default();
    for id in ["a", "b", "c"] {
        registry
            .join(entry(id, Direction::Downstream, id, "w", now))
            .unwrap();
    }
    for (id, load) in [("a", 3), ("b", 0), ("c", 1)] {
        registry
            .get(&NodeId::from(id), Direction::Downstream)
            .unwrap()
            .reach
            .in_flight
            .store(load, Ordering::Relaxed);
    }
    for random in 0..5 {
        let picked = registry
            .pick(&Filter::any(), Scope::Both, Strategy::LeastInFlight, random)
            .unwrap();
        assert_eq!(picked.id.as_str(), "b");
    }
}

#[test]
fn random_uses_the_drawn_number() {
    let now = Instant::now();
    let mut registry = Registry::default();
    for id in ["a", "b"] {
        registry
            .join(entry(id, Direction::Upstream, id, "w", now))
            .unwrap();
    }
    let pick = |registry: &mut Registry<u32>, r| {
        registry
            .pick(&Filter::any(), Scope::Both, Strategy::Random, r)
            .unwrap()
            .id
            .clone()
    };
    assert_eq!(pick(&mut registry, 0).as_str(), "a");
    assert_eq!(pick(&mut registry, 1).as_str(), "b");
    assert!(registry
        .pick(
            &Filter::new().eq("role", "none"),
            Scope::Both,
            Strategy::Random,
            0
        )
        .is_none());
}

#[test]
fn silence_marks_peers_dead_with_simulated_time() {
    let t0 = Instant::now();
    let mut registry = Registry::default();
    registry
        .join(entry("a", Direction::Upstream, "1", "w", t0))
        .unwrap();
    registry
        .join(entry("b", Direction::Downstream, "2", "w", t0))
        .unwrap();
    let timeout = Duration::from_millis(300);
    registry.seen(
        &NodeId::from("b"),
        Direction::Downstream,
        t0 + Duration::from_millis(250),
    );
    assert!(registry.silent(t0 + timeout).is_empty());
    assert_eq!(
        registry.silent(t0 + Duration::from_millis(301)),
        vec![(NodeId::from("a"), Direction::Upstream)]
    );
}

#[test]
fn a_peer_with_slower_heartbeats_gets_its_own_dead_timeout() {
    let t0 = Instant::now();
    let mut registry = Registry::default();
    let mut slow = entry("slow", Direction::Upstream, "1", "w", t0);
    slow.dead_after = Duration::from_secs(5);
    registry.join(slow).unwrap();
    registry
        .join(entry("fast", Direction::Upstream, "2", "w", t0))
        .unwrap();
    assert_eq!(
        registry.silent(t0 + Duration::from_secs(1)),
        vec![(NodeId::from("fast"), Direction::Upstream)]
    );
}

#[test]
fn routing_by_id_prefers_upstream() {
    let now = Instant::now();
    let mut registry = Registry::default();
    let mut down = entry("a", Direction::Downstream, "1", "w", now);
    down.reach = Reach::new(NodeId::from("a"), Direction::Downstream, 2);
    let mut up = entry("a", Direction::Upstream, "1", "w", now);
    up.reach = Reach::new(NodeId::from("a"), Direction::Upstream, 1);
    registry.join(down).unwrap();
    assert_eq!(registry.route(&NodeId::from("a")).unwrap().link, 2);
    registry.join(up).unwrap();
    assert_eq!(registry.route(&NodeId::from("a")).unwrap().link, 1);
    assert!(registry.route(&NodeId::from("zzz")).is_none());
}

/// The ids `pick` can reach for `filter`, by trying every random draw.
fn reachable(registry: &mut Registry<u32>, filter: &Filter) -> Vec<String> {
    let mut ids: Vec<String> = (0..16)
        .filter_map(|r| registry.pick(filter, Scope::Both, Strategy::Random, r))
        .map(|reach| reach.id.to_string())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

#[test]
fn cached_selection_follows_joins_leaves_and_option_changes() {
    let now = Instant::now();
    let mut registry = Registry::default();
    let workers = Filter::new().eq("role", "worker");
    registry
        .join(entry("a", Direction::Downstream, "1", "worker", now))
        .unwrap();
    assert_eq!(reachable(&mut registry, &workers), ["a"]);
    // The second call is served from the cache.
    assert_eq!(registry.selection.lists.len(), 1);
    assert_eq!(reachable(&mut registry, &workers), ["a"]);

    // A join shows up in the next pick.
    registry
        .join(entry("b", Direction::Downstream, "2", "worker", now))
        .unwrap();
    assert_eq!(reachable(&mut registry, &workers), ["a", "b"]);

    // New options: `a` stops matching, and a filter cached before sees it.
    registry.set_options(
        &NodeId::from("a"),
        Direction::Downstream,
        options([("role", Value::from("idle"))]),
    );
    assert_eq!(reachable(&mut registry, &workers), ["b"]);
    assert_eq!(
        reachable(&mut registry, &Filter::new().eq("role", "idle")),
        ["a"]
    );

    // A leave, too; and the cache lets go of the links it held at once.
    assert!(!registry.selection.lists.is_empty());
    registry.leave(&NodeId::from("b"), Direction::Downstream);
    assert!(registry.selection.lists.is_empty());
    assert!(reachable(&mut registry, &workers).is_empty());
    assert!(registry
        .pick(&workers, Scope::Both, Strategy::Random, 0)
        .is_none());

    // A reconnect (the same instance joining again) replaces the link picked.
    let mut again = entry("a", Direction::Downstream, "1", "worker", now);
    again.reach = Reach::new(NodeId::from("a"), Direction::Downstream, 7);
    registry.join(again).unwrap();
    let picked = registry
        .pick(&workers, Scope::Both, Strategy::Random, 0)
        .unwrap();
    assert_eq!(picked.link, 7);
}

#[test]
fn cache_keys_on_scope_and_on_the_filter_not_its_building_order() {
    let now = Instant::now();
    let mut registry = Registry::default();
    registry
        .join(entry("up", Direction::Upstream, "1", "worker", now))
        .unwrap();
    registry
        .join(entry("down", Direction::Downstream, "2", "worker", now))
        .unwrap();
    let pick = |registry: &mut Registry<u32>, filter: &Filter, scope| {
        (0..4)
            .filter_map(|r| registry.pick(filter, scope, Strategy::Random, r))
            .map(|reach| reach.id.to_string())
            .collect::<std::collections::BTreeSet<_>>()
    };
    let f = Filter::new().eq("role", "worker").ne("role", "x");
    let same = Filter::new().ne("role", "x").eq("role", "worker");
    assert_eq!(f.selection_key(), same.selection_key());
    assert_eq!(pick(&mut registry, &f, Scope::Up), ["up".to_owned()].into());
    assert_eq!(
        pick(&mut registry, &same, Scope::Down),
        ["down".to_owned()].into()
    );
    assert_eq!(pick(&mut registry, &f, Scope::Both).len(), 2);
    assert_eq!(registry.selection.lists.len(), 3);
}

#[test]
fn predicates_are_not_cached_and_still_see_changes() {
    let now = Instant::now();
    let mut registry = Registry::default();
    registry
        .join(entry("a", Direction::Downstream, "1", "worker", now))
        .unwrap();
    let filter = Filter::predicate(|o| o.contains_key("role"));
    assert!(filter.selection_key().is_none());
    assert_eq!(reachable(&mut registry, &filter), ["a"]);
    assert!(registry.selection.lists.is_empty());
    registry.set_options(&NodeId::from("a"), Direction::Downstream, Options::new());
    assert!(reachable(&mut registry, &filter).is_empty());
}

#[test]
fn the_cache_is_bounded() {
    let now = Instant::now();
    let mut registry = Registry::default();
    registry
        .join(entry("a", Direction::Downstream, "1", "worker", now))
        .unwrap();
    for i in 0..(SelectionCache::<u32>::CAPACITY * 3) {
        let filter = Filter::new().ne("role", format!("other-{i}"));
        assert_eq!(reachable(&mut registry, &filter), ["a"]);
        assert!(registry.selection.lists.len() <= SelectionCache::<u32>::CAPACITY);
    }
}

#[test]
fn strategies_pick_the_same_from_the_cache_and_the_walk() {
    let now = Instant::now();
    let mut registry = Registry::default();
    for id in ["a", "b", "c", "d"] {
        registry
            .join(entry(id, Direction::Downstream, id, "w", now))
            .unwrap();
    }
    for (id, load) in [("a", 2), ("b", 0), ("c", 1), ("d", 0)] {
        registry
            .get(&NodeId::from(id), Direction::Downstream)
            .unwrap()
            .reach
            .in_flight
            .store(load, Ordering::Relaxed);
    }
    let cached = Filter::any();
    let walked = Filter::predicate(|_| true);
    for strategy in [
        Strategy::Random,
        Strategy::RoundRobin,
        Strategy::LeastInFlight,
    ] {
        for random in 0..8 {
            let a = registry
                .pick(&cached, Scope::Both, strategy, random)
                .unwrap()
                .id
                .clone();
            // Round-robin moves on by one per pick: compare at the same turn.
            if strategy == Strategy::RoundRobin {
                registry.round_robin -= 1;
            }
            let b = registry
                .pick(&walked, Scope::Both, strategy, random)
                .unwrap()
                .id
                .clone();
            assert_eq!(a, b, "{strategy:?} with {random}");
        }
    }
    // Least in flight picks among the idle ones only; excluding one leaves the other.
    let picked = registry
        .pick_except(&cached, Scope::Both, Strategy::LeastInFlight, 0, |id| {
            id.as_str() == "b"
        })
        .unwrap();
    assert_eq!(picked.id.as_str(), "d");
}

#[test]
fn generated_ids_are_readable_and_distinct() {
    let a = NodeId::generate();
    let b = NodeId::generate();
    assert!(a.as_str().starts_with("node-"));
    assert_ne!(a, b);
}
