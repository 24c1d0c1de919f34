//! Router and Dealer over real loopback sockets.

use std::time::Duration;

use bytes::Bytes;
use transport::{Backpressure, Dealer, Engine, Error, Event, Options, PeerId, Router};

mod support;
use support::{connected_pair, frames, ready_pair, within};

#[tokio::test]
async fn round_trip_both_ways() {
    let router = Router::new().unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    assert!(endpoint.starts_with("tcp://127.0.0.1:"));
    assert!(!endpoint.ends_with(":0"), "port 0 resolved: {endpoint}");
    let dealer = Dealer::new().unwrap();
    dealer.connect(&endpoint).unwrap();

    dealer.send(frames(&[b"a", b"bc"])).await.unwrap();
    let (peer, got) = within("router recv", router.recv()).await.unwrap();
    assert_eq!(got, frames(&[b"a", b"bc"]));

    router.send(&peer, frames(&[b"reply", b""])).await.unwrap();
    let got = within("dealer recv", dealer.recv()).await.unwrap();
    assert_eq!(got, frames(&[b"reply", b""]));
}

#[tokio::test]
async fn many_dealers_each_get_their_own_replies() {
    let router = Router::new().unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let server = router.clone();
    tokio::spawn(async move {
        while let Ok((peer, frames)) = server.recv().await {
            // Echo back to whoever sent it.
            if server.send(&peer, frames).await.is_err() {
                break;
            }
        }
    });

    let mut tasks = Vec::new();
    for d in 0..8u32 {
        let endpoint = endpoint.clone();
        tasks.push(tokio::spawn(async move {
            let dealer =
                Dealer::with_options(Options::default().routing_id(format!("dealer-{d}"))).unwrap();
            dealer.connect(&endpoint).unwrap();
            for i in 0..200u32 {
                let body = Bytes::from(format!("{d}:{i}"));
                dealer.send(vec![body.clone()]).await.unwrap();
                let reply = within("echo", dealer.recv()).await.unwrap();
                assert_eq!(reply, vec![body], "dealer {d} got someone else's reply");
            }
        }));
    }
    for task in tasks {
        within("dealer task", task).await.unwrap();
    }
}

#[tokio::test]
async fn router_sees_the_dealer_routing_id() {
    let router = Router::new().unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::with_options(Options::default().routing_id("node-a")).unwrap();
    dealer.connect(&endpoint).unwrap();
    dealer.send(frames(&[b"hi"])).await.unwrap();
    let (peer, _) = within("recv", router.recv()).await.unwrap();
    assert_eq!(peer, PeerId::from("node-a"));
    assert_eq!(peer.to_string(), "node-a");
}

#[tokio::test]
async fn connect_before_the_router_binds() {
    // Reserve a port, release it, then connect to it before anyone listens.
    let probe = Router::new().unwrap();
    let endpoint = probe.bind("tcp://127.0.0.1:0").unwrap();
    probe.close().await;

    let dealer = Dealer::new().unwrap();
    dealer.connect(&endpoint).unwrap();
    dealer.send(frames(&[b"early"])).await.unwrap();

    tokio::time::sleep(Duration::from_millis(50)).await;
    let router = Router::new().unwrap();
    router.bind(&endpoint).unwrap();
    let (_, got) = within("queued message", router.recv()).await.unwrap();
    assert_eq!(got, frames(&[b"early"]));
}

#[tokio::test]
async fn dealer_reconnects_to_a_restarted_router() {
    let router = Router::new().unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::with_options(
        Options::default().reconnect(Duration::from_millis(20), Duration::from_millis(100)),
    )
    .unwrap();
    let mut events = dealer.events().unwrap();
    dealer.connect(&endpoint).unwrap();
    dealer.send(frames(&[b"one"])).await.unwrap();
    let (peer, _) = within("first", router.recv()).await.unwrap();
    router.send(&peer, frames(&[b"ack"])).await.unwrap();
    within("ack", dealer.recv()).await.unwrap();

    router.close().await;
    drop(router);
    let restarted = Router::new().unwrap();
    within("rebind", async {
        // The old socket's port is released by close(); the bind succeeds at once.
        restarted.bind(&endpoint).unwrap()
    })
    .await;

    // The Dealer notices the loss and reconnects by itself (a message sent into the dying
    // connection would be lost with it: the protocol layer's timeouts cover that case).
    within("reconnected", async {
        let mut lost = false;
        loop {
            match events.recv().await {
                Some(Event::Disconnected { .. }) => lost = true,
                Some(Event::HandshakeSucceeded { .. }) if lost => break,
                Some(_) => {}
                None => panic!("event stream ended"),
            }
        }
    })
    .await;
    dealer.send(frames(&[b"two"])).await.unwrap();
    let (_, got) = within("after restart", restarted.recv()).await.unwrap();
    assert_eq!(got, frames(&[b"two"]));
}

#[tokio::test]
async fn sending_to_an_unknown_peer_is_an_error() {
    let router = Router::new().unwrap();
    router.bind("tcp://127.0.0.1:0").unwrap();
    let err = router
        .send(&PeerId::from("nobody"), frames(&[b"x"]))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownPeer { ref peer } if *peer == PeerId::from("nobody")));
}

#[tokio::test]
async fn invalid_endpoints_are_typed_errors() {
    let router = Router::new().unwrap();
    for bad in [
        "nonsense",
        "tcp://",
        "foo://127.0.0.1:1",
        "tcp://127.0.0.1:notaport",
    ] {
        let err = router.bind(bad).unwrap_err();
        assert!(
            matches!(err, Error::InvalidEndpoint { .. } | Error::Bind { .. }),
            "{bad}: {err:?}"
        );
    }
    let dealer = Dealer::new().unwrap();
    assert!(matches!(
        dealer.connect("nonsense").unwrap_err(),
        Error::InvalidEndpoint { .. }
    ));
    assert!(matches!(
        dealer.disconnect("tcp://127.0.0.1:1").unwrap_err(),
        Error::NotConnected { .. }
    ));
    assert!(matches!(
        router.unbind("tcp://127.0.0.1:1").await.unwrap_err(),
        Error::NotBound { .. }
    ));
}

#[tokio::test]
async fn binding_a_busy_port_is_a_bind_error() {
    let first = Router::new().unwrap();
    let endpoint = first.bind("tcp://127.0.0.1:0").unwrap();
    let second = Router::new().unwrap();
    match second.bind(&endpoint).unwrap_err() {
        Error::Bind {
            endpoint: e,
            source,
        } => {
            assert_eq!(e, endpoint);
            assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse);
        }
        other => panic!("expected Bind, got {other:?}"),
    }
}

#[tokio::test]
async fn empty_frames_and_large_messages() {
    let (router, dealer) = connected_pair();

    dealer.send(vec![Bytes::new(), Bytes::new()]).await.unwrap();
    let (peer, got) = within("empty", router.recv()).await.unwrap();
    assert_eq!(got, vec![Bytes::new(), Bytes::new()]);

    let big: Bytes = (0..8 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
    router
        .send(&peer, vec![Bytes::from_static(b"h"), big.clone()])
        .await
        .unwrap();
    let got = within("8 MiB", dealer.recv()).await.unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].len(), big.len());
    assert!(got[1] == big);

    assert!(matches!(
        dealer.send(Vec::new()).await.unwrap_err(),
        Error::EmptyMessage
    ));
}

/// Thousands of senders blocked at once on a full queue (a flood of requests, each its own
/// task) all get through, each message once: a drain wakes one blocked sender and each one
/// that sends wakes the next, so none is left waiting for a wake-up that went to nobody.
/// On one thread, as a flooding client's runtime would be. Bounded by `within`'s ten
/// seconds: a blocked sender that missed its wake-up waits for the one-second safety net
/// after a drain, and there are 400 drains here.
#[tokio::test(flavor = "current_thread")]
async fn thousands_of_senders_blocked_at_the_high_water_mark_all_get_through() {
    const SENDERS: u32 = 4_000;
    let router = Router::with_options(Options::default().hwm(10)).unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::with_options(Options::default().hwm(10)).unwrap();
    dealer.connect(&endpoint).unwrap();
    // Joined first: before a peer, senders wait for one, not for room.
    dealer
        .send(vec![Bytes::from_static(b"first")])
        .await
        .unwrap();
    let (_, first) = within("the first message", router.recv()).await.unwrap();
    assert_eq!(&first[0][..], b"first");

    let mut senders = tokio::task::JoinSet::new();
    for i in 0..SENDERS {
        let dealer = dealer.clone();
        senders.spawn(async move {
            dealer
                .send(vec![Bytes::from(i.to_be_bytes().to_vec())])
                .await
        });
    }
    // All of them within one bound (normally a few tens of milliseconds; with the wake-up
    // not passed on, half a minute).
    let seen = within("every blocked sender's message", async {
        let mut seen = vec![false; SENDERS as usize];
        for _ in 0..SENDERS {
            let (_, got) = router.recv().await.unwrap();
            let i = u32::from_be_bytes(got[0][..].try_into().unwrap()) as usize;
            assert!(!seen[i], "message {i} arrived twice");
            seen[i] = true;
        }
        seen
    })
    .await;
    while let Some(sent) = senders.join_next().await {
        sent.unwrap().unwrap();
    }
    assert!(seen.iter().all(|s| *s));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_through_a_small_high_water_mark_loses_nothing() {
    const N: u32 = 50_000;
    let router = Router::with_options(Options::default().hwm(10)).unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::with_options(Options::default().hwm(10)).unwrap();
    dealer.connect(&endpoint).unwrap();

    let sender = tokio::spawn(async move {
        for i in 0..N {
            dealer
                .send(vec![Bytes::from(i.to_be_bytes().to_vec())])
                .await
                .unwrap();
        }
        dealer
    });
    let mut expected = 0u32;
    while expected < N {
        let (_, got) = within("burst", router.recv()).await.unwrap();
        let value = u32::from_be_bytes(got[0][..].try_into().unwrap());
        assert_eq!(value, expected, "messages arrive in order, none dropped");
        expected += 1;
    }
    within("sender", sender).await.unwrap();
}

#[tokio::test]
async fn queue_full_is_reported_when_asked_to_fail() {
    // Nobody reads and the peer is absent: the queue fills up to the high-water mark.
    let dealer =
        Dealer::with_options(Options::default().hwm(5).backpressure(Backpressure::Fail)).unwrap();
    dealer.connect("tcp://127.0.0.1:9").unwrap();
    let mut accepted = 0;
    let err = loop {
        match dealer.send(frames(&[b"x"])).await {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted <= 100, "high-water mark never applied");
    };
    assert!(matches!(err, Error::QueueFull), "{err:?}");
    assert!(accepted >= 5);
}

#[tokio::test]
async fn close_releases_the_port_and_refuses_further_use() {
    let router = Router::new().unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let receiver = router.clone();
    let pending = tokio::spawn(async move { receiver.recv().await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    router.close().await;
    assert!(matches!(
        within("pending recv ends", pending).await.unwrap(),
        Err(Error::Closed)
    ));
    assert!(matches!(
        router.bind("tcp://127.0.0.1:0"),
        Err(Error::Closed)
    ));

    let again = Router::new().unwrap();
    assert_eq!(again.bind(&endpoint).unwrap(), endpoint);
}

#[tokio::test]
async fn unbind_stops_listening() {
    let router = Router::new().unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    router.unbind(&endpoint).await.unwrap();
    let other = Router::new().unwrap();
    assert_eq!(other.bind(&endpoint).unwrap(), endpoint);
}

#[tokio::test]
async fn ipc_works_on_both_engines_and_inproc_on_libzmq() {
    let engine = |engine| Options::default().engine(engine);
    let dir = std::env::temp_dir().join(format!("zn-transport-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ipc-test");
    let ipc = format!("ipc://{}", path.display());
    let cases = [
        (Engine::Native, ipc.as_str()),
        (Engine::Libzmq, ipc.as_str()),
        (Engine::Libzmq, "inproc://transport-test"),
    ];
    for (engine_used, endpoint) in cases {
        let router = Router::with_options(engine(engine_used)).unwrap();
        let bound = router.bind(endpoint).unwrap();
        assert_eq!(bound, endpoint, "{engine_used}");
        let dealer = Dealer::with_options(engine(engine_used)).unwrap();
        dealer.connect(&bound).unwrap();
        dealer.send(frames(&[b"via"])).await.unwrap();
        let (peer, got) = within(endpoint, router.recv()).await.unwrap();
        assert_eq!(got, frames(&[b"via"]));
        router.send(&peer, frames(&[b"back"])).await.unwrap();
        assert_eq!(
            within(endpoint, dealer.recv()).await.unwrap(),
            frames(&[b"back"])
        );
        router.close().await;
        dealer.close().await;
    }
    // The native engine removes the file of a path it unbinds, and refuses inproc://. (A
    // path of its own: libzmq closes the listener above on its I/O thread, after `close`.)
    let path = dir.join("ipc-unbound");
    let ipc = format!("ipc://{}", path.display());
    let router = Router::with_options(engine(Engine::Native)).unwrap();
    router.bind(&ipc).unwrap();
    assert!(path.exists());
    router.unbind(&ipc).await.unwrap();
    assert!(!path.exists(), "unbind removes the socket file");
    assert!(matches!(
        router.bind("inproc://transport-test").unwrap_err(),
        Error::InvalidEndpoint { .. }
    ));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_native_ipc_wildcard_binds_a_fresh_path_and_close_removes_it() {
    let router = Router::with_options(Options::default().engine(Engine::Native)).unwrap();
    let bound = router.bind("ipc://*").unwrap();
    let path = std::path::PathBuf::from(bound.strip_prefix("ipc://").unwrap());
    assert!(path.exists(), "{bound}");
    let other = Router::with_options(Options::default().engine(Engine::Native)).unwrap();
    assert_ne!(
        other.bind("ipc://*").unwrap(),
        bound,
        "each wildcard is its own path"
    );
    // A second socket on a path in use is refused (libzmq would take the path over).
    match other.bind(&bound).unwrap_err() {
        Error::Bind { source, .. } => assert_eq!(source.kind(), std::io::ErrorKind::AddrInUse),
        e => panic!("expected Bind, got {e:?}"),
    }
    let dealer = Dealer::with_options(Options::default().engine(Engine::Native)).unwrap();
    dealer.connect(&bound).unwrap();
    dealer.send(frames(&[b"x"])).await.unwrap();
    within("the wildcard path", router.recv()).await.unwrap();
    router.close().await;
    assert!(!path.exists(), "close removes the socket file");
    assert!(
        !path.parent().unwrap().exists(),
        "and the wildcard's directory"
    );
    other.close().await;
    dealer.close().await;
}

#[tokio::test]
async fn connection_events_are_reported() {
    let router = Router::new().unwrap();
    let mut router_events = router.events().unwrap();
    assert!(matches!(router.events(), Err(Error::EventsTaken)));
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();

    let dealer = Dealer::new().unwrap();
    let mut dealer_events = dealer.events().unwrap();
    dealer.connect(&endpoint).unwrap();

    let accepted = within("accepted", async {
        loop {
            if let Some(Event::Accepted { endpoint }) = router_events.recv().await {
                break endpoint;
            }
        }
    })
    .await;
    assert_eq!(accepted, endpoint);
    within("connected", async {
        loop {
            if let Some(Event::Connected { endpoint: e }) = dealer_events.recv().await {
                assert_eq!(e, endpoint);
                break;
            }
        }
    })
    .await;

    router.close().await;
    drop(router);
    within("disconnected", async {
        loop {
            if let Some(Event::Disconnected { .. }) = dealer_events.recv().await {
                break;
            }
        }
    })
    .await;
}

#[tokio::test]
async fn handshake_failure_is_reported_with_its_endpoint() {
    // A plain TCP listener that answers the ZMTP greeting with garbage.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.write_all(&[0xde_u8; 64]).await;
        }
    });
    let endpoint = format!("tcp://127.0.0.1:{port}");
    let dealer = Dealer::new().unwrap();
    let mut events = dealer.events().unwrap();
    dealer.connect(&endpoint).unwrap();
    within("handshake failed", async {
        loop {
            match events.recv().await {
                Some(Event::HandshakeFailed { endpoint: e, .. }) => {
                    assert_eq!(e, endpoint);
                    break;
                }
                Some(_) => {}
                None => panic!("event stream ended"),
            }
        }
    })
    .await;
}

#[test]
fn creating_a_socket_outside_a_runtime_is_an_error() {
    assert!(matches!(Router::new(), Err(Error::NoRuntime)));
}

#[tokio::test]
async fn recv_into_reuses_the_buffer_both_ways() {
    let (router, dealer) = connected_pair();

    let mut at_router = vec![Bytes::from_static(b"stale")];
    let mut at_dealer = vec![Bytes::from_static(b"stale")];
    assert!(!dealer.try_recv_into(&mut at_dealer).unwrap());
    assert!(at_dealer.is_empty(), "cleared even when nothing came");
    for i in 0..50u32 {
        let body = Bytes::from(format!("m{i}"));
        dealer
            .send_frames(&[body.clone(), Bytes::from_static(b"x")])
            .await
            .unwrap();
        let peer = within("router recv_into", router.recv_into(&mut at_router))
            .await
            .unwrap();
        assert_eq!(at_router, vec![body.clone(), Bytes::from_static(b"x")]);
        router.send_frames(&peer, &at_router).await.unwrap();
        within("dealer recv_into", dealer.recv_into(&mut at_dealer))
            .await
            .unwrap();
        assert_eq!(at_dealer, vec![body, Bytes::from_static(b"x")]);
    }

    // The non-blocking forms, once something is there.
    dealer.send(frames(&[b"late"])).await.unwrap();
    let peer = within("router try_recv_into", async {
        loop {
            if let Some(peer) = router.try_recv_into(&mut at_router).unwrap() {
                return peer;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert_eq!(at_router, frames(&[b"late"]));
    router.send_frames(&peer, &at_router).await.unwrap();
    within("dealer try_recv_into", async {
        while !dealer.try_recv_into(&mut at_dealer).unwrap() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    assert_eq!(at_dealer, frames(&[b"late"]));

    router.close().await;
    assert!(matches!(
        router.recv_into(&mut at_router).await,
        Err(Error::Closed)
    ));
}

#[tokio::test]
async fn received_frames_sent_on_arrive_intact_whole_cloned_sliced_or_late() {
    let (router, dealer) = connected_pair();

    // Frames big enough to be forwarded without a copy, and a small one.
    let big: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    let medium: Vec<u8> = (0..100u8).collect();
    let sent = vec![
        Bytes::from(big.clone()),
        Bytes::from(medium.clone()),
        Bytes::from_static(b"tiny"),
    ];
    for round in 0..3 {
        dealer.send(sent.clone()).await.unwrap();
        let (peer, got) = within("router recv", router.recv()).await.unwrap();
        assert_eq!(got, sent, "round {round}");
        // The same frames back, a clone sent twice, and a slice of one.
        router.send_frames(&peer, &got).await.unwrap();
        let clone = got[0].clone();
        router
            .send(&peer, vec![clone.clone(), clone])
            .await
            .unwrap();
        router
            .send(&peer, vec![got[1].slice(10..90)])
            .await
            .unwrap();
        assert_eq!(within("echo", dealer.recv()).await.unwrap(), sent);
        assert_eq!(
            within("twice", dealer.recv()).await.unwrap(),
            vec![Bytes::from(big.clone()), Bytes::from(big.clone())]
        );
        assert_eq!(
            within("slice", dealer.recv()).await.unwrap(),
            vec![Bytes::from(medium[10..90].to_vec())]
        );
    }

    // A frame kept past the point where the socket went idle (and received more) is sent
    // intact too.
    dealer.send(vec![Bytes::from(big.clone())]).await.unwrap();
    let (peer, first) = within("first", router.recv()).await.unwrap();
    for i in 0..20u8 {
        dealer.send(vec![Bytes::from(vec![i; 200])]).await.unwrap();
        let (_, other) = within("other", router.recv()).await.unwrap();
        assert_eq!(other, vec![Bytes::from(vec![i; 200])]);
    }
    router.send_frames(&peer, &first).await.unwrap();
    assert_eq!(
        within("late", dealer.recv()).await.unwrap(),
        vec![Bytes::from(big)]
    );
}

/// A receive that found nothing lets the next `recv` wait without looking again; whatever
/// happens in between (a message arriving, sends in the other direction, a connect) must
/// still wake it.
#[tokio::test]
async fn a_receiver_that_found_nothing_still_gets_what_comes_next() {
    let (router, dealer, peer) = ready_pair().await;
    let mut got = Vec::new();

    for round in 0..50u8 {
        // Drain: nothing is there now.
        while router.try_recv_into(&mut got).unwrap().is_some() {}
        match round % 3 {
            // A send the other way between the empty receive and the wait.
            0 => router
                .send_frames(&peer, &[Bytes::from_static(b"ping")])
                .await
                .unwrap(),
            // Another call on the socket (it may process libzmq's commands).
            1 => {
                let _ = router.connect("tcp://127.0.0.1:9");
            }
            _ => {}
        }
        let sent = Bytes::from(vec![round; 40]);
        dealer.send(vec![sent.clone()]).await.unwrap();
        within(
            "a message after an empty receive",
            router.recv_into(&mut got),
        )
        .await
        .unwrap();
        assert_eq!(got, vec![sent], "round {round}");
    }
}

/// Binding or connecting while a receiver waits (libzmq may process the command that
/// announced a message during that call) must not leave the receiver asleep.
#[tokio::test]
async fn a_waiting_receiver_still_gets_messages_across_binds_and_connects() {
    let (router, dealer, _) = ready_pair().await;
    let router = std::sync::Arc::new(router);
    for round in 0..20u8 {
        let receiver = {
            let router = std::sync::Arc::clone(&router);
            tokio::spawn(async move {
                let mut got = Vec::new();
                router.recv_into(&mut got).await.map(|_| got)
            })
        };
        // Let the receiver park, then touch the socket and send at once.
        tokio::task::yield_now().await;
        let sent = Bytes::from(vec![round; 40]);
        dealer.send(vec![sent.clone()]).await.unwrap();
        if round % 2 == 0 {
            router.bind("tcp://127.0.0.1:0").unwrap();
        } else {
            let _ = router.connect("tcp://127.0.0.1:9");
        }
        let got = within("the waiting receiver's message", receiver)
            .await
            .expect("no panic")
            .unwrap();
        assert_eq!(got, vec![sent], "round {round}");
    }
}

/// Two tasks receiving on one socket take turns: neither gets every message.
#[tokio::test]
async fn two_receivers_on_one_socket_both_get_messages() {
    let (router, dealer, _) = ready_pair().await;
    let router = std::sync::Arc::new(router);
    let total = 200usize;
    let counts: Vec<_> = (0..2)
        .map(|_| {
            let router = std::sync::Arc::clone(&router);
            let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let counted = std::sync::Arc::clone(&count);
            let task = tokio::spawn(async move {
                let mut got = Vec::new();
                while router.recv_into(&mut got).await.is_ok() {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
            (count, task)
        })
        .collect();
    for i in 0..total {
        dealer
            .send(vec![Bytes::from(vec![i as u8; 40])])
            .await
            .unwrap();
        tokio::task::yield_now().await;
    }
    let sum = || {
        counts
            .iter()
            .map(|(c, _)| c.load(std::sync::atomic::Ordering::SeqCst))
            .sum::<usize>()
    };
    within("every message received", async {
        while sum() < total {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let each: Vec<usize> = counts
        .iter()
        .map(|(c, _)| c.load(std::sync::atomic::Ordering::SeqCst))
        .collect();
    assert!(each.iter().all(|&n| n > 0), "both received: {each:?}");
    for (_, task) in counts {
        task.abort();
    }
}

/// A connection whose first byte is not 0xFF would be a ZMTP 1.0 peer to libzmq, its bytes
/// taken as messages (and a pipe pair built for it). A Router refuses it: it is dropped,
/// nothing it sends arrives, and real peers still get in.
#[tokio::test]
async fn a_zmtp_1_0_peer_is_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let router = Router::new().unwrap();
    let mut events = router.events().unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let port = endpoint.rsplit(':').next().unwrap();
    let mut legacy = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    // ZMTP 1.0: a length byte (flags and body), a flags byte, the body. First the routing
    // id "stray", then a message "boo".
    legacy
        .write_all(&[6, 0, b's', b't', b'r', b'a', b'y', 4, 0, b'b', b'o', b'o'])
        .await
        .unwrap();
    // libzmq reports no handshake failure for it (a protocol error before any security
    // mechanism): the connection is accepted and dropped.
    within("the router drops it", async {
        while !matches!(events.recv().await, Some(Event::Disconnected { .. })) {}
    })
    .await;
    // The router hung up on it.
    let mut rest = Vec::new();
    let read = within("the router hangs up", legacy.read_to_end(&mut rest)).await;
    // A greeting at most: libzmq sends its 10-byte signature and waits for the peer's, the
    // native engine its whole 64-byte greeting at once.
    assert!(read.is_err() || rest.len() <= 64, "{read:?} {rest:?}");
    assert!(
        tokio::time::timeout(Duration::from_millis(200), router.recv())
            .await
            .is_err(),
        "a message of the ZMTP 1.0 peer arrived"
    );
    let dealer = Dealer::new().unwrap();
    dealer.connect(&endpoint).unwrap();
    dealer.send(frames(&[b"real"])).await.unwrap();
    let (_, got) = within("a real peer's message", router.recv())
        .await
        .unwrap();
    assert_eq!(got, frames(&[b"real"]));
}

#[tokio::test]
async fn a_native_dealer_waits_for_an_ipc_path_that_is_bound_later() {
    let native = || Options::default().engine(Engine::Native);
    let dir = std::env::temp_dir().join(format!("zn-later-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let endpoint = format!("ipc://{}", dir.join("later").display());
    let dealer = Dealer::with_options(native()).unwrap();
    dealer.connect(&endpoint).unwrap();
    // Queued until the path exists and the connector's next attempt gets through.
    dealer.send(frames(&[b"early"])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let router = Router::with_options(native()).unwrap();
    router.bind(&endpoint).unwrap();
    let (_, got) = within("the queued message", router.recv()).await.unwrap();
    assert_eq!(got, frames(&[b"early"]));
    router.close().await;
    dealer.close().await;
    let _ = std::fs::remove_dir_all(dir);
}
