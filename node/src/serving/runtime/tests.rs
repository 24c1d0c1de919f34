//! The runtime's tests: admission, lanes and the jobs' ends, without sockets.
use super::*;

const WAIT: BusyPolicy = BusyPolicy::Wait { max_queued: 2 };

#[test]
fn an_answer_over_the_requesters_limit_becomes_a_typed_error() {
    let answer = |n: usize| Ok(Answer::from(bytes::Bytes::from(vec![0u8; n])));
    assert_eq!(fitting(answer(8), 8), answer(8));
    let refused = fitting(answer(9), 8).unwrap_err();
    assert!(
        refused.is_system(RemoteError::PAYLOAD_TOO_LARGE),
        "{refused:?}"
    );
    assert!(matches!(
        crate::Error::from_remote(refused),
        crate::Error::PayloadTooLarge { size: 9, max: 8 }
    ));
    let error = Err(RemoteError::handler("no"));
    assert_eq!(fitting(error.clone(), 0), error);
}

fn runtime(max: usize, per_peer: usize, when_busy: BusyPolicy, queued_per_peer: usize) -> Runtime {
    Runtime::new(
        &Config {
            max_concurrent_handlers: max,
            max_handlers_per_peer: per_peer,
            max_queued_per_peer: queued_per_peer,
            when_busy,
            ..Config::default()
        },
        &NodeId::from("test"),
    )
}

/// What became of a message, in a word (the waiter kept when it queued).
fn admit(runtime: &Runtime, peer: &Arc<PeerWork>, waiters: &mut Vec<Waiter>) -> &'static str {
    match runtime.admit_for(peer) {
        Admitted::Run => "run",
        Admitted::Queued(waiter) => {
            waiters.push(waiter);
            "queued"
        }
        Admitted::Refused(Full::Node) => "node full",
        Admitted::Refused(Full::Peer) => "peer full",
    }
}

#[test]
fn the_counts_stay_in_step_with_the_decisions() {
    let waiting = runtime(1, 8, WAIT, 8);
    let peer = Arc::new(PeerWork::default());
    let mut waiters = Vec::new();
    let said: Vec<_> = (0..4)
        .map(|_| admit(&waiting, &peer, &mut waiters))
        .collect();
    assert_eq!(said, ["run", "queued", "queued", "node full"]);
    assert_eq!(waiting.queued(), 2, "a refusal leaves the queue as it was");
    assert_eq!(peer.queued.load(Ordering::SeqCst), 2);
    // The slot given back goes to the first in line.
    waiting.give_back(&peer);
    assert!(waiters[0].served.try_recv().is_ok());
    assert!(waiters[1].served.try_recv().is_err());
    assert_eq!((waiting.queued(), waiting.lanes()), (1, 1));

    let refusing = runtime(1, 8, BusyPolicy::Refuse, 8);
    assert_eq!(admit(&refusing, &peer, &mut waiters), "run");
    assert_eq!(admit(&refusing, &peer, &mut waiters), "node full");
    refusing.give_back(&peer);
    assert_eq!(
        admit(&refusing, &peer, &mut waiters),
        "run",
        "a slot given back is free"
    );
    assert_eq!(refusing.queued(), 0);
}

/// The bug this prevents: one peer's flood of slow requests took every slot and every
/// place in line, and another peer's quick requests waited behind it until they timed
/// out. Without sockets or a clock: the decisions and the counts alone.
#[test]
fn a_flooding_peer_is_held_to_its_share_and_the_others_run() {
    let node = runtime(4, 2, BusyPolicy::Wait { max_queued: 16 }, 3);
    let flooder = Arc::new(PeerWork::default());
    let mut waiters = Vec::new();
    let said: Vec<_> = (0..10)
        .map(|_| admit(&node, &flooder, &mut waiters))
        .collect();
    assert_eq!(
        said,
        [
            "run",
            "run",
            "queued",
            "queued",
            "queued",
            "peer full",
            "peer full",
            "peer full",
            "peer full",
            "peer full"
        ]
    );
    // Its jobs never end; the quick peer's run at once, one after another, and take
    // no place in line.
    let quick = Arc::new(PeerWork::default());
    for _ in 0..1000 {
        assert_eq!(admit(&node, &quick, &mut waiters), "run");
        node.give_back(&quick);
    }
    assert_eq!((node.queued(), waiters.len()), (3, 3));
    // The flooder's waiting work is still there, and is not served by others' slots.
    assert!(waiters.iter_mut().all(|w| w.served.try_recv().is_err()));
}

#[test]
fn waiting_work_is_served_a_peer_at_a_time_in_turn() {
    let node = runtime(2, 2, BusyPolicy::Wait { max_queued: 16 }, 8);
    let (flooder, quick) = (Arc::new(PeerWork::default()), Arc::new(PeerWork::default()));
    let (mut flood, mut quicks) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        admit(&node, &flooder, &mut flood);
    }
    assert_eq!(flood.len(), 5, "two run, five wait");
    for _ in 0..2 {
        assert_eq!(admit(&node, &quick, &mut quicks), "queued");
    }
    // Each slot given back (the oldest held first) goes to the next lane in turn: the
    // quick peer waits one turn, not five.
    let mut holders = std::collections::VecDeque::from([&flooder, &flooder]);
    let mut order = String::new();
    while let Some(holder) = holders.pop_front() {
        node.give_back(holder);
        for (name, peer, waiters) in [('f', &flooder, &mut flood), ('q', &quick, &mut quicks)] {
            for waiter in waiters.iter_mut() {
                if waiter.served.try_recv().is_ok() {
                    order.push(name);
                    holders.push_back(peer);
                }
            }
        }
    }
    assert_eq!(order, "fqfqfff");
    assert_eq!((node.queued(), node.lanes()), (0, 0));
}

#[test]
fn waiting_work_whose_peer_leaves_goes_and_leaves_nothing_behind() {
    let node = runtime(1, 1, BusyPolicy::Wait { max_queued: 16 }, 8);
    let (holder, leaver) = (Arc::new(PeerWork::default()), Arc::new(PeerWork::default()));
    let mut waiters = Vec::new();
    assert_eq!(admit(&node, &holder, &mut waiters), "run");
    for _ in 0..3 {
        assert_eq!(admit(&node, &leaver, &mut waiters), "queued");
    }
    assert_eq!((node.queued(), node.lanes()), (3, 1));
    // The leaver's jobs leave the line (as `Work` does when its peer is gone).
    for waiter in &waiters {
        assert!(!node.leave_line(&leaver, waiter.ticket), "none was served");
    }
    assert_eq!((node.queued(), node.lanes()), (0, 0));
    assert_eq!(leaver.queued.load(Ordering::SeqCst), 0);
    // A job served a moment before it left keeps its slots, to give them back.
    let mut late = Vec::new();
    assert_eq!(admit(&node, &leaver, &mut late), "queued");
    node.give_back(&holder);
    assert!(node.leave_line(&leaver, late[0].ticket), "served already");
    node.give_back(&leaver);
    assert_eq!(node.taken.load(Ordering::SeqCst), 0);
}
