//! Client and Server over real loopback sockets.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use protocol::{
    encode_value, request_fn, tick_fn, Client, Connection, Error, ErrorCode, Limit, RemoteError,
    Server,
};

const LIMIT: Duration = Duration::from_secs(10);
const SECOND: Duration = Duration::from_secs(1);

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

async fn pair() -> (Server, Client) {
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    server.on_request(
        "echo",
        request_fn(|req| async move { Ok(req.payload().clone()) }),
    );
    let client = Client::connect(server.endpoint(), LIMIT).await.unwrap();
    (server, client)
}

/// The id the server knows `client` by (from a tick it sends).
async fn peer_of(server: &Server, client: &Client) -> transport::PeerId {
    let (peer_tx, mut peer_rx) = tokio::sync::mpsc::unbounded_channel();
    server.on_tick(
        "hello",
        tick_fn(move |tick| {
            let _ = peer_tx.send(tick.from.clone());
            async {}
        }),
    );
    client.peer().tick("hello", Bytes::new()).await.unwrap();
    within("hello", peer_rx.recv()).await.unwrap()
}

#[tokio::test]
async fn request_reply_round_trip() {
    let (_server, client) = pair().await;
    assert_eq!(client.connection(), Connection::Connected);
    let reply = client
        .peer()
        .request("echo", Bytes::from_static(b"ping"), SECOND)
        .await
        .unwrap();
    assert_eq!(reply.payload(), &Bytes::from_static(b"ping"));
}

#[tokio::test]
async fn typed_payloads_travel_as_messagepack() {
    let (server, client) = pair().await;
    server.on_request(
        "sum",
        request_fn(|req| async move {
            let numbers: Vec<i64> = req
                .decode()
                .map_err(|e| RemoteError::new("BAD_INPUT", e.to_string()))?;
            encode_value(&numbers.iter().sum::<i64>())
                .map_err(|e| RemoteError::handler(e.to_string()))
        }),
    );
    let reply = client
        .peer()
        .request("sum", encode_value(&vec![1, 2, 3]).unwrap(), SECOND)
        .await
        .unwrap();
    assert_eq!(reply.decode_payload::<i64>().unwrap(), 6);
}

#[tokio::test]
async fn many_requests_in_flight_are_matched_by_id() {
    let (server, client) = pair().await;
    server.on_request(
        "slow-echo",
        request_fn(|req| async move {
            // Answer out of order: later requests finish first.
            let n = u64::from(req.payload()[0]);
            tokio::time::sleep(Duration::from_millis(50 - n % 50)).await;
            Ok(req.payload().clone())
        }),
    );
    let mut calls = Vec::new();
    for i in 0..200u8 {
        let client = client.clone();
        calls.push(tokio::spawn(async move {
            let reply = client
                .peer()
                .request("slow-echo", Bytes::from(vec![i, i, i]), LIMIT)
                .await
                .unwrap();
            assert_eq!(reply.payload(), &Bytes::from(vec![i, i, i]));
        }));
    }
    for call in calls {
        within("call", call).await.unwrap();
    }
}

#[tokio::test]
async fn a_request_with_no_reply_times_out() {
    let (server, client) = pair().await;
    server.on_request(
        "never",
        request_fn(|_req| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(Bytes::new())
        }),
    );
    let err = client
        .peer()
        .request("never", Bytes::new(), Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(err.code(), ErrorCode::RequestTimeout);
    assert_eq!(client.stats().timeouts, 1);
}

#[tokio::test]
async fn a_request_given_up_leaves_nothing_pending_and_its_late_reply_is_unmatched() {
    let (server, client) = pair().await;
    server.on_request(
        "slow",
        request_fn(|_req| async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok(Bytes::new())
        }),
    );
    // The caller stops waiting (its future is dropped) long before the request's deadline.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(50),
        client.peer().request("slow", Bytes::new(), LIMIT),
    )
    .await;
    assert!(gave_up.is_err());
    assert_eq!(client.in_flight(), 0);
    // The reply still comes, matches nothing, and is counted; the client keeps working.
    within("late reply counted", async {
        while client.stats().unmatched_replies == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let reply = within(
        "echo",
        client
            .peer()
            .request("echo", Bytes::from_static(b"x"), LIMIT),
    )
    .await;
    assert_eq!(reply.unwrap().payload(), &Bytes::from_static(b"x"));
}

#[tokio::test]
async fn handler_errors_carry_code_and_message_back() {
    let (server, client) = pair().await;
    server.on_request(
        "fail",
        request_fn(
            |_req| async move { Err::<Bytes, _>(RemoteError::new("E_QUOTA", "quota exceeded")) },
        ),
    );
    match client.peer().request("fail", Bytes::new(), SECOND).await {
        Err(Error::Remote(remote)) => {
            assert_eq!(remote.code, "E_QUOTA");
            assert_eq!(remote.message, "quota exceeded");
        }
        other => panic!("expected a remote error, got {other:?}"),
    }
}

#[tokio::test]
async fn no_handler_is_answered_at_once() {
    let (_server, client) = pair().await;
    // A long timeout: the answer must come from the server, not from the deadline.
    let started = std::time::Instant::now();
    let err = client
        .peer()
        .request("nobody-handles-this", Bytes::new(), Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoHandler { ref event } if event == "nobody-handles-this"));
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test]
async fn a_panicking_handler_becomes_an_error_reply_and_the_server_keeps_serving() {
    let (server, client) = pair().await;
    server.on_request(
        "boom",
        request_fn(|_req| async move {
            if true {
                panic!("handler bug");
            }
            Ok(Bytes::new())
        }),
    );
    let err = client
        .peer()
        .request("boom", Bytes::new(), SECOND)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Remote(ref r) if r.is_system(RemoteError::PANICKED)));
    let reply = client
        .peer()
        .request("echo", Bytes::from_static(b"still here"), SECOND)
        .await
        .unwrap();
    assert_eq!(reply.payload(), &Bytes::from_static(b"still here"));
    assert_eq!(server.stats().handler_panics, 1);
}

#[tokio::test]
async fn a_slow_handler_does_not_block_others() {
    let (server, client) = pair().await;
    server.on_request(
        "slow",
        request_fn(|_req| async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(Bytes::new())
        }),
    );
    let slow_client = client.clone();
    let slow = tokio::spawn(async move {
        slow_client
            .peer()
            .request("slow", Bytes::new(), LIMIT)
            .await
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    for _ in 0..20 {
        client
            .peer()
            .request("echo", Bytes::from_static(b"quick"), SECOND)
            .await
            .unwrap();
    }
    assert!(!slow.is_finished());
    slow.abort();
}

#[tokio::test]
async fn ticks_reach_their_handler() {
    let (server, client) = pair().await;
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&seen);
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    server.on_tick(
        "count",
        tick_fn(move |_tick| {
            let counter = Arc::clone(&counter);
            let done = done_tx.clone();
            async move {
                if counter.fetch_add(1, Ordering::SeqCst) + 1 == 100 {
                    let _ = done.send(());
                }
            }
        }),
    );
    for _ in 0..100 {
        client.peer().tick("count", Bytes::new()).await.unwrap();
    }
    within("100 ticks", done_rx.recv()).await;
    assert_eq!(seen.load(Ordering::SeqCst), 100);
}

#[tokio::test]
async fn the_server_can_request_its_clients() {
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    let client = Client::connect(server.endpoint(), LIMIT).await.unwrap();
    client.on_request(
        "whoami",
        request_fn(|_req| async move { Ok(Bytes::from_static(b"the client")) }),
    );
    let peer = peer_of(&server, &client).await;
    let reply = server
        .peer(&peer)
        .request("whoami", Bytes::new(), SECOND)
        .await
        .unwrap();
    assert_eq!(reply.payload(), &Bytes::from_static(b"the client"));
}

#[tokio::test]
async fn system_events_are_refused_to_user_code() {
    let (server, client) = pair().await;
    for event in ["_system:handshake", "_system:anything"] {
        assert!(matches!(
            client.peer().request(event, Bytes::new(), SECOND).await,
            Err(Error::ReservedEvent(_))
        ));
        assert!(matches!(
            client.peer().tick(event, Bytes::new()).await,
            Err(Error::ReservedEvent(_))
        ));
        assert!(matches!(
            server
                .peer(&protocol::PeerId::from("x"))
                .tick(event, Bytes::new())
                .await,
            Err(Error::ReservedEvent(_))
        ));
    }
    // The system variants refuse the opposite.
    assert!(matches!(
        client
            .peer()
            .system()
            .tick("user-event", Bytes::new())
            .await,
        Err(Error::InvalidEvent(_))
    ));
}

#[tokio::test]
async fn connecting_to_nothing_times_out_with_a_typed_error() {
    let probe = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    let endpoint = probe.endpoint().to_owned();
    probe.close().await;
    let err = Client::connect(&endpoint, Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ConnectTimeout { .. }), "{err:?}");
    assert_eq!(err.code(), ErrorCode::NotConnected);
}

#[tokio::test]
async fn pending_requests_fail_at_once_when_the_connection_drops() {
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    server.on_request(
        "hang",
        request_fn(|_req| async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(Bytes::new())
        }),
    );
    let client = Client::connect(server.endpoint(), LIMIT).await.unwrap();
    let waiting = client.clone();
    let call = tokio::spawn(async move {
        waiting
            .peer()
            .request("hang", Bytes::new(), Duration::from_secs(60))
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Kill the server without a goodbye.
    server.abort().await;
    let result = within("pending request ends", call).await.unwrap();
    assert!(
        matches!(result, Err(Error::ConnectionLost) | Err(Error::Remote(_))),
        "{result:?}"
    );
    // And new requests are refused while disconnected.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(matches!(
        client.peer().request("hang", Bytes::new(), SECOND).await,
        Err(Error::NotConnected) | Err(Error::ConnectionLost)
    ));
}

#[tokio::test]
async fn graceful_close_finishes_in_flight_requests_and_refuses_new_ones() {
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    server.on_request(
        "work",
        request_fn(|_req| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(Bytes::from_static(b"done"))
        }),
    );
    let client = Client::connect(server.endpoint(), LIMIT).await.unwrap();
    let busy = client.clone();
    let in_flight =
        tokio::spawn(async move { busy.peer().request("work", Bytes::new(), LIMIT).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let closer = server.clone();
    let closing = tokio::spawn(async move { closer.close().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A request arriving while closing is refused with a typed error.
    let refused = client
        .peer()
        .request("work", Bytes::new(), LIMIT)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, Error::Remote(ref r) if r.code == RemoteError::SHUTTING_DOWN),
        "{refused:?}"
    );
    let reply = within("in-flight", in_flight).await.unwrap().unwrap();
    assert_eq!(reply.payload(), &Bytes::from_static(b"done"));
    within("close", closing).await.unwrap();
}

#[tokio::test]
async fn garbage_from_a_raw_peer_is_counted_and_the_server_keeps_serving() {
    let (server, client) = pair().await;
    let mut rejected = server.rejected();
    let raw = transport::Dealer::new().unwrap();
    raw.connect(server.endpoint()).unwrap();
    for junk in [
        vec![Bytes::from_static(b"GET / HTTP/1.1")],
        vec![Bytes::from_static(&[0x5A, 9, 1, 0])],
        vec![Bytes::new(), Bytes::new(), Bytes::new()],
    ] {
        raw.send(junk).await.unwrap();
    }
    for _ in 0..3 {
        let (_, err) = within("rejected", rejected.recv()).await.unwrap();
        assert_eq!(err.code(), ErrorCode::InvalidEnvelope);
    }
    assert_eq!(server.stats().invalid_envelopes, 3);
    let reply = client
        .peer()
        .request("echo", Bytes::from_static(b"ok"), SECOND)
        .await
        .unwrap();
    assert_eq!(reply.payload(), &Bytes::from_static(b"ok"));
}

#[tokio::test]
async fn large_payloads_reach_the_limit() {
    let (_server, client) = pair().await;
    let big = Bytes::from(vec![42u8; 8 * 1024 * 1024]);
    let reply = client
        .peer()
        .request("echo", big.clone(), LIMIT)
        .await
        .unwrap();
    assert_eq!(reply.payload().len(), big.len());
    assert!(reply.payload() == &big);
}

#[tokio::test]
async fn timeouts_follow_tokio_time() {
    // Once connected, pause the clock: nothing answers, so the runtime idles and tokio's
    // simulated clock jumps to the request's deadline. The request must then end with a
    // timeout, which proves the driver's single timer runs on tokio's (simulated) time.
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    server.on_request(
        "never",
        request_fn(|_req| async move {
            std::future::pending::<()>().await;
            Ok(Bytes::new())
        }),
    );
    let client = Client::connect(server.endpoint(), LIMIT).await.unwrap();
    tokio::time::pause();
    let start = tokio::time::Instant::now();
    let wall = std::time::Instant::now();
    let err = client
        .peer()
        .request("never", Bytes::new(), Duration::from_secs(3600))
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    assert!(start.elapsed() >= Duration::from_secs(3600));
    assert!(wall.elapsed() < Duration::from_secs(60));
}

/// A request one byte over the server's payload limit is answered with a typed error at
/// once (it used to be dropped with a warning, its caller waiting for its whole timeout),
/// and the connection goes on serving.
#[tokio::test]
async fn a_request_over_the_payload_limit_is_answered_with_a_typed_error() {
    let (server, _) = Server::bind_with("tcp://127.0.0.1:0", Default::default(), 1024)
        .await
        .unwrap();
    server.on_request(
        "echo",
        request_fn(|req| async move { Ok(req.payload().clone()) }),
    );
    let client = Client::connect(server.endpoint(), Duration::from_secs(5))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = client
        .peer()
        .request(
            "echo",
            Bytes::from(vec![1u8; 1025]),
            Duration::from_secs(20),
        )
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "answered, not left to time out"
    );
    match err {
        Error::Remote(remote) => {
            assert!(
                remote.is_system(RemoteError::PAYLOAD_TOO_LARGE),
                "{remote:?}"
            );
            assert_eq!(
                remote.limit(),
                Some(&Limit::Payload {
                    size: 1025,
                    max: 1024
                })
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let fits = client
        .peer()
        .request("echo", Bytes::from(vec![1u8; 1024]), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(fits.payload().len(), 1024);
    assert_eq!(server.stats().invalid_envelopes, 1);
}

/// A message over the client's ZMQ_MAXMSGSIZE makes libzmq drop the connection, and for
/// that error (a protocol error) libzmq never reconnects by itself: the Client does.
#[tokio::test]
async fn a_connection_dropped_for_an_oversized_message_comes_back() {
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    server.on_request(
        "big",
        request_fn(|_req| async move { Ok(Bytes::from(vec![7u8; 2 << 20])) }),
    );
    server.on_request(
        "echo",
        request_fn(|req| async move { Ok(req.payload().clone()) }),
    );
    let options = transport::Options::default().max_message_size(Some(1 << 20));
    let client = Client::connect_with(server.endpoint(), options, 1 << 20, LIMIT)
        .await
        .unwrap();
    let mut connection = client.watch_connection();
    let err = client
        .peer()
        .request("big", Bytes::new(), LIMIT)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ConnectionLost), "{err:?}");
    within("the connection comes back", async {
        loop {
            if *connection.borrow_and_update() == Connection::Connected {
                if let Ok(reply) = client
                    .peer()
                    .request("echo", Bytes::from_static(b"hi"), SECOND)
                    .await
                {
                    return reply;
                }
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), connection.changed()).await;
        }
    })
    .await;
}

/// A Client takes its messages on its connection's driver while few of its requests wait,
/// and through the inbox and its driver task while many do: a stream of ticks from the
/// server, arriving while the client's own load moves from the one to the other, reaches
/// the tick handler whole and in the order sent. The handler is slow, so the inbox has a
/// backlog when the client's callers give up: the ticks after it must wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_messages_keep_their_order_as_its_load_changes() {
    const TICKS: u32 = 2_000;
    const PARKED: usize = 8;
    let (server, client) = pair().await;
    let parked = Arc::new(AtomicUsize::new(0));
    let arrived = Arc::clone(&parked);
    server.on_request(
        "park",
        request_fn(move |_req| {
            arrived.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<Result<Bytes, RemoteError>>()
        }),
    );
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    // The handler is called in dispatch order (its future is what runs later).
    client.on_tick(
        "seq",
        tick_fn(move |tick| {
            log.lock()
                .push(u32::from_be_bytes(tick.payload()[..4].try_into().unwrap()));
            std::thread::sleep(Duration::from_micros(20));
            async {}
        }),
    );
    let peer = peer_of(&server, &client).await;
    // The client is busy: eight requests wait for their replies.
    let requests: Vec<_> = (0..PARKED)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.peer().request("park", Bytes::new(), LIMIT).await })
        })
        .collect();
    within("the requests parked", async {
        while parked.load(Ordering::SeqCst) < PARKED {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    for n in 0..TICKS {
        if n == TICKS / 2 {
            // Half way: the callers give up, and the client is no longer busy (its
            // driver task still has ticks to go through).
            requests.iter().for_each(tokio::task::JoinHandle::abort);
        }
        server
            .peer(&peer)
            .tick("seq", Bytes::from(n.to_be_bytes().to_vec()))
            .await
            .unwrap();
    }
    for request in requests {
        assert!(
            within("a parked request", request).await.is_err(),
            "aborted"
        );
    }
    within("every tick", async {
        while seen.lock().len() < TICKS as usize {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(*seen.lock(), (0..TICKS).collect::<Vec<_>>());
}

#[tokio::test]
async fn binding_an_address_in_use_is_a_typed_error() {
    let (server, _client) = pair().await;
    let taken = Server::bind(server.endpoint()).await;
    assert!(
        matches!(taken, Err(Error::Transport(_))),
        "{:?}",
        taken.map(|s| s.endpoint().to_owned())
    );
    // The first server is untouched.
    let client = Client::connect(server.endpoint(), LIMIT).await.unwrap();
    let reply = client
        .peer()
        .request("echo", Bytes::from_static(b"still"), SECOND)
        .await;
    assert_eq!(reply.unwrap().payload(), &Bytes::from_static(b"still"));
}

/// A receiver of every request and tick, as a layer with its own handlers gives a socket:
/// it answers `echo`, refuses the rest with `no_handler`, and counts ticks.
struct OwnTable {
    ticks: Arc<AtomicUsize>,
}

impl protocol::Serve for OwnTable {
    fn request(&self, incoming: protocol::Incoming, responder: protocol::Responder) {
        match incoming.event() {
            "echo" => responder.answer(Ok(incoming.payload().clone().into())),
            other => responder.no_handler(other),
        }
    }

    fn tick(&self, _incoming: protocol::Incoming) {
        self.ticks.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_receiver_of_its_own_takes_every_message_in_place_of_the_table() {
    let (server, client) = pair().await;
    server.on_request(
        "table-only",
        request_fn(|_req| async move { Ok(Bytes::from_static(b"table")) }),
    );
    let ticks = Arc::new(AtomicUsize::new(0));
    server.serve(Arc::new(OwnTable {
        ticks: Arc::clone(&ticks),
    }));
    // The receiver answers what it handles...
    let reply = client
        .peer()
        .request("echo", Bytes::from_static(b"mine"), SECOND)
        .await
        .unwrap();
    assert_eq!(reply.payload(), &Bytes::from_static(b"mine"));
    // ...and the socket's table is gone: its handler is not asked, the receiver refuses.
    let err = client
        .peer()
        .request("table-only", Bytes::new(), SECOND)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoHandler { ref event } if event == "table-only"));
    assert_eq!(server.stats().no_handler, 1, "the refusal is counted");
    client.peer().tick("any", Bytes::new()).await.unwrap();
    within("the tick", async {
        while ticks.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // A named handler set afterwards starts a new table: the receiver is no longer asked.
    server.on_request(
        "table-only",
        request_fn(|_req| async move { Ok(Bytes::from_static(b"table")) }),
    );
    let reply = client
        .peer()
        .request("table-only", Bytes::new(), SECOND)
        .await
        .unwrap();
    assert_eq!(reply.payload(), &Bytes::from_static(b"table"));
    let err = client
        .peer()
        .request("echo", Bytes::new(), SECOND)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoHandler { ref event } if event == "echo"));
}
