//! Limits as errors the caller sees: sizes are checked before sending, against the limit
//! the receiver gave in its handshake.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use node::{Error, ErrorCode, Filter, HandlerBound, NodeEvent, Request, Response};
use support::*;

#[tokio::test]
async fn a_payload_over_the_receivers_limit_is_refused_before_anything_is_sent() {
    let small = builder("small")
        .max_payload(1024)
        .option("role", "small")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&handled);
    small.on_request_service(
        "echo",
        tower::service_fn(move |req: Request| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, node::BoxError>(Response::raw(req.payload().clone())) }
        }),
    );
    let ticked = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ticked);
    small.on_tick("t", move |_req: Request| {
        counted.fetch_add(1, Ordering::SeqCst);
        async {}
    });
    // The sender's own limit is the default (16 MiB): only the receiver's handshake can
    // tell it that 1025 bytes is too much.
    let big = client("big").await;
    big.connect(&address(&small)).await.unwrap();

    let fits = Bytes::from(vec![7u8; 1024]);
    let reply = big
        .call("small", "echo")
        .timeout(LIMIT)
        .raw()
        .send(fits.clone())
        .await
        .map(node::Reply::into_payload)
        .unwrap();
    assert_eq!(reply, fits);

    let over = Bytes::from(vec![7u8; 1025]);
    let started = Instant::now();
    let err = big
        .call("small", "echo")
        .timeout(Duration::from_secs(10))
        .raw()
        .send(over.clone())
        .await
        .map(node::Reply::into_payload)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::PayloadTooLarge {
                size: 1025,
                max: 1024
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.code(), ErrorCode::PayloadTooLarge);
    // At once, not at the request's 10 s timeout (1 s is far above a local check).
    assert!(started.elapsed() < Duration::from_secs(1));
    let err = big
        .call("small", "t")
        .raw()
        .tick(over.clone())
        .await
        .map(drop)
        .unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { .. }), "{err:?}");
    let everyone = Filter::new().eq("role", "small");
    let err = big
        .tick(node::Target::all(everyone.clone()), "t", &vec![7u8; 2048])
        .await
        .map(|sent| sent.nodes)
        .unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { .. }), "{err:?}");

    // A tick that fits, to know that ticks were handled when they could be.
    big.call("small", "t")
        .raw()
        .tick(Bytes::from_static(b"ok"))
        .await
        .map(drop)
        .unwrap();
    within("the small tick", async {
        while ticked.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // Nothing oversized reached the receiver: one request and one tick handled, no
    // invalid message counted, the link still up.
    assert_eq!(handled.load(Ordering::SeqCst), 1);
    assert_eq!(ticked.load(Ordering::SeqCst), 1);
    assert_eq!(small.stats().invalid_envelopes, 0);
    let again = big
        .call("small", "echo")
        .timeout(LIMIT)
        .raw()
        .send(fits.clone())
        .await
        .map(node::Reply::into_payload);
    assert_eq!(again.unwrap(), fits);
}

/// A requester that leaves takes its work with it: of 2,000 requests to a handler that
/// would take ten minutes, those held to its share (256 running, 1,024 waiting in its
/// lane) are stopped, and their memory freed, when it goes; the other 720 were refused.
#[tokio::test]
async fn the_work_of_a_peer_that_leaves_is_cancelled() {
    let defaults = node::Config::default();
    let (running, waiting) = (defaults.max_handlers_per_peer, defaults.max_queued_per_peer);
    let srv = server("srv").await;
    srv.on_request("park", |_req: Request| async move {
        tokio::time::sleep(Duration::from_secs(600)).await;
        Ok::<_, node::HandlerError>(())
    });
    let requester = client("requester").await;
    requester.connect(&address(&srv)).await.unwrap();
    let parked: Vec<_> = (0..2000)
        .map(|_| {
            let requester = requester.clone();
            tokio::spawn(async move {
                requester
                    .call("srv", "park")
                    .timeout(Duration::from_secs(600))
                    .send::<_, ()>(&())
                    .await
            })
        })
        .collect();
    within("2,000 requests parked in their handler or refused", async {
        while srv.stats().handlers_active + (srv.stats().busy_refused as usize) < 2000 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let stats = srv.stats();
    assert_eq!(
        (stats.handlers_active, stats.handlers_queued),
        (running + waiting, waiting),
        "{stats:?}"
    );
    requester.close().await;
    // Every request of the closed node ended (its own close fails what is pending).
    for request in parked {
        let ended = within("a parked request ends", request).await.unwrap();
        assert!(ended.is_err());
    }
    within("the server's handlers stop", async {
        while srv.stats().handlers_active > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let stats = srv.stats();
    assert_eq!(stats.handlers_queued, 0, "its lane is gone: {stats:?}");
    assert_eq!(stats.handlers_cancelled, (running + waiting) as u64);
}

/// One peer cannot take every handler slot: above `max_handlers_per_peer` running and
/// `max_queued_per_peer` waiting its requests are answered `BUSY`, saying so, while another
/// peer is served.
#[tokio::test]
async fn one_peer_is_held_to_its_share_of_the_handlers() {
    let srv = builder("srv")
        .max_handlers_per_peer(5)
        .max_queued_per_peer(2)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    srv.on_request("slow", |_req: Request| async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok::<_, node::HandlerError>("slow")
    });
    srv.on_request("quick", |_req: Request| async move {
        Ok::<_, node::HandlerError>("quick")
    });
    let greedy = client("greedy").await;
    greedy.connect(&address(&srv)).await.unwrap();
    let polite = client("polite").await;
    polite.connect(&address(&srv)).await.unwrap();
    let flood: Vec<_> = (0..12)
        .map(|_| {
            let greedy = greedy.clone();
            tokio::spawn(async move { greedy.request::<_, String>("srv", "slow", &()).await })
        })
        .collect();
    within("the greedy peer's share is taken", async {
        while srv.stats().busy_refused < 5 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // The greedy peer's five run and two wait; the polite one is answered meanwhile.
    assert_eq!(srv.stats().handlers_queued, 2);
    let quick: String = polite.request("srv", "quick", &()).await.unwrap();
    assert_eq!(quick, "quick");
    let mut answered = 0;
    let mut busy = 0;
    for request in flood {
        match within("a greedy request", request).await.unwrap() {
            Ok(_) => answered += 1,
            Err(Error::Busy { message, bound }) => {
                assert!(message.contains("this peer's share"), "{message}");
                // The bound reached travels as data: this peer's share of 5.
                assert_eq!(
                    bound,
                    Some(HandlerBound {
                        max: 5,
                        per_peer: true
                    })
                );
                busy += 1;
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!((answered, busy), (7, 5));
    assert_eq!(srv.stats().busy_refused, 5);
}

/// A handler's answer over the requester's limit is not sent (the requester's socket would
/// drop the connection for it): the requester gets a typed error, and the link stays.
#[tokio::test]
async fn a_reply_over_the_requesters_limit_is_a_typed_error_and_the_link_stays() {
    let srv = server("srv").await;
    srv.on_request_service(
        "big",
        tower::service_fn(|_req: Request| async move {
            Ok::<_, node::BoxError>(Response::raw(Bytes::from(vec![7u8; 2 << 20])))
        }),
    );
    srv.on_request_service(
        "small",
        tower::service_fn(|_req: Request| async move {
            Ok::<_, node::BoxError>(Response::raw(Bytes::from_static(b"ok")))
        }),
    );
    let small = builder("small").max_payload(1 << 20).build().await.unwrap();
    let mut events = small.events();
    small.connect(&address(&srv)).await.unwrap();
    let err = small
        .call("srv", "big")
        .timeout(LIMIT)
        .raw()
        .send(Bytes::new())
        .await
        .map(node::Reply::into_payload)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::PayloadTooLarge {
                size: 2097152,
                max: 1048576
            }
        ),
        "{err:?}"
    );
    let ok = small
        .call("srv", "small")
        .timeout(LIMIT)
        .raw()
        .send(Bytes::new())
        .await
        .map(node::Reply::into_payload)
        .unwrap();
    assert_eq!(ok, Bytes::from_static(b"ok"));
    while let Ok(Some(event)) = tokio::time::timeout(Duration::from_millis(10), events.recv()).await
    {
        assert!(!matches!(event, NodeEvent::PeerLeft { .. }), "{event:?}");
    }
    assert!(small.peers().get("srv").is_some());
}

/// A peer that does not check our limit (an older node, a raw one) can still send a
/// message over it: libzmq then drops the connection and, for that error, never reconnects
/// it by itself. The node must connect again and rejoin.
#[tokio::test]
async fn a_connection_dropped_for_an_oversized_message_is_made_again_and_rejoined() {
    #[derive(serde::Serialize)]
    struct Hello {
        id: String,
        instance: String,
        version: u32,
        options: node::Options,
    }
    // A server that speaks the node handshake but says nothing of its limits (as an older
    // node), and answers `big` with 2 MiB whatever the requester's limit.
    let raw = protocol::Server::bind("tcp://127.0.0.1:0").await.unwrap();
    let handshakes = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&handshakes);
    raw.on_request(
        "_system:handshake",
        protocol::request_fn(move |_req| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                protocol::encode_value(&Hello {
                    id: "raw".into(),
                    instance: "r-1".into(),
                    version: node::PROTOCOL_VERSION,
                    options: node::Options::new(),
                })
                .map_err(|e| protocol::RemoteError::handler(e.to_string()))
            }
        }),
    );
    raw.on_request(
        "big",
        protocol::request_fn(|_req| async move {
            Ok::<_, protocol::RemoteError>(Bytes::from(vec![7u8; 2 << 20]))
        }),
    );
    raw.on_request(
        "work",
        protocol::request_fn(|_req| async move {
            Ok::<_, protocol::RemoteError>(Bytes::from_static(b"done"))
        }),
    );
    let small = builder("small").max_payload(1 << 20).build().await.unwrap();
    let mut events = small.events();
    small.connect(raw.endpoint()).await.unwrap();
    assert_eq!(handshakes.load(Ordering::SeqCst), 1);
    // libzmq drops the connection for the message (ZMQ_MAXMSGSIZE): the request fails.
    let err = small
        .call("raw", "big")
        .timeout(Duration::from_secs(5))
        .raw()
        .send(Bytes::new())
        .await
        .map(node::Reply::into_payload)
        .unwrap_err();
    assert!(!matches!(err, Error::Timeout { .. }), "{err:?}");
    wait_for(&mut events, "the peer leaves", |e| {
        matches!(e, NodeEvent::PeerLeft { id, .. } if id.as_str() == "raw").then_some(())
    })
    .await;
    wait_for(&mut events, "the peer joins again", |e| {
        matches!(e, NodeEvent::PeerJoined { id, .. } if id.as_str() == "raw").then_some(())
    })
    .await;
    assert_eq!(handshakes.load(Ordering::SeqCst), 2);
    let done = small
        .call("raw", "work")
        .timeout(LIMIT)
        .raw()
        .send(Bytes::new())
        .await
        .map(node::Reply::into_payload)
        .unwrap();
    assert_eq!(done, Bytes::from_static(b"done"));
}
