//! The native engine against libzmq, both ways, in one run: every pairing of a native and a
//! libzmq socket, plaintext and CURVE, heartbeats, restarts, and hostile bytes at a native
//! Router. Every wait is bounded by `support::LIMIT` (10 s), far above what loopback needs,
//! so a bug fails a test rather than hanging CI.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::{
    Curve, Dealer, Engine, Event, HandshakeFailure, Heartbeat, KeyPair, Options, Router,
};

mod support;
use support::{handshake_outcome, next_event, within};

const NATIVE: Engine = Engine::Native;
const LIBZMQ: Engine = Engine::Libzmq;

/// The two cross pairings: (router's engine, dealer's engine).
const CROSSED: [(Engine, Engine); 2] = [(NATIVE, LIBZMQ), (LIBZMQ, NATIVE)];

fn options(engine: Engine) -> Options {
    Options::default().engine(engine).hwm(10_000)
}

/// A Router of one engine bound on loopback, a Dealer of the other connected, and the first
/// message through (so the connection is up). Returns the Dealer's id at the Router.
async fn pair(router: Options, dealer: Options) -> (Router, Dealer, transport::PeerId, String) {
    let router = Router::with_options(router).unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::with_options(dealer).unwrap();
    dealer.connect(&endpoint).unwrap();
    dealer.send(vec![Bytes::from_static(b"hi")]).await.unwrap();
    let (peer, got) = within("the first message", router.recv()).await.unwrap();
    assert_eq!(got, vec![Bytes::from_static(b"hi")]);
    (router, dealer, peer, endpoint)
}

fn sized(n: usize) -> Bytes {
    Bytes::from((0..n).map(|i| (i % 251) as u8).collect::<Vec<_>>())
}

#[tokio::test]
async fn frames_of_every_size_cross_between_the_engines_both_ways() {
    // 0 B, the short/long length boundary (255/256), 64 KiB and 16 MiB, as one multipart
    // message and one message each.
    let sizes = [0, 255, 256, 64 * 1024, 16 * 1024 * 1024];
    for (r, d) in CROSSED {
        let (router, dealer, peer, _) = pair(options(r), options(d)).await;
        let message: Vec<Bytes> = sizes.iter().map(|&n| sized(n)).collect();
        dealer.send(message.clone()).await.unwrap();
        let (from, got) = within("multipart up", router.recv()).await.unwrap();
        assert_eq!(from, peer);
        assert!(
            got == message,
            "{r}/{d}: the multipart message changed on the way up"
        );
        router.send(&peer, message.clone()).await.unwrap();
        let back = within("multipart down", dealer.recv()).await.unwrap();
        assert!(
            back == message,
            "{r}/{d}: the multipart message changed on the way down"
        );
        for &n in &sizes {
            dealer.send(vec![sized(n)]).await.unwrap();
            let (_, got) = within("one frame", router.recv()).await.unwrap();
            assert_eq!(got.len(), 1);
            assert!(got[0] == sized(n), "{r}/{d}: a frame of {n} bytes changed");
        }
        router.close().await;
        dealer.close().await;
    }
}

#[tokio::test]
async fn ipc_crosses_between_the_engines_both_ways() {
    let dir = std::env::temp_dir().join(format!("zn-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sizes = [0, 256, 64 * 1024];
    for (i, (r, d)) in CROSSED.into_iter().enumerate() {
        let endpoint = format!("ipc://{}", dir.join(format!("cross-{i}")).display());
        let router = Router::with_options(options(r)).unwrap();
        assert_eq!(router.bind(&endpoint).unwrap(), endpoint);
        let dealer = Dealer::with_options(options(d)).unwrap();
        dealer.connect(&endpoint).unwrap();
        let message: Vec<Bytes> = sizes.iter().map(|&n| sized(n)).collect();
        dealer.send(message.clone()).await.unwrap();
        let (peer, got) = within("ipc up", router.recv()).await.unwrap();
        assert!(got == message, "{r}/{d}: the message changed on the way up");
        router.send(&peer, message.clone()).await.unwrap();
        let back = within("ipc down", dealer.recv()).await.unwrap();
        assert!(
            back == message,
            "{r}/{d}: the message changed on the way down"
        );
        router.close().await;
        dealer.close().await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_chosen_routing_id_crosses_and_unknown_peers_are_errors() {
    for (r, d) in CROSSED {
        let (router, _dealer, peer, _) =
            pair(options(r), options(d).routing_id(&b"worker-7"[..])).await;
        assert_eq!(peer.as_bytes().as_ref(), b"worker-7", "{r}/{d}");
        let unknown = transport::PeerId::from("nobody");
        assert!(matches!(
            router.send(&unknown, vec![Bytes::from_static(b"x")]).await,
            Err(transport::Error::UnknownPeer { .. })
        ));
        router.close().await;
    }
}

#[tokio::test]
async fn heartbeats_keep_an_idle_connection_and_are_answered_across_engines() {
    // PINGs every 50 ms, dead after 250 ms without traffic: an idle second must pass with
    // the connection up, which needs each side to answer the other's PINGs.
    let beat = Heartbeat {
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(250),
        ttl: Duration::from_millis(500),
    };
    for (r, d) in CROSSED {
        let (router, dealer, peer, _) =
            pair(options(r).heartbeat(beat), options(d).heartbeat(beat)).await;
        let mut events = dealer.events().unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        while let Ok(Some(event)) =
            tokio::time::timeout(Duration::from_millis(1), events.recv()).await
        {
            assert!(
                !matches!(event, Event::Disconnected { .. }),
                "{r}/{d}: heartbeats did not keep the connection: {event:?}"
            );
        }
        router
            .send(&peer, vec![Bytes::from_static(b"still")])
            .await
            .unwrap();
        let got = within("after the idle second", dealer.recv())
            .await
            .unwrap();
        assert_eq!(got, vec![Bytes::from_static(b"still")]);
        router.close().await;
        dealer.close().await;
    }
}

#[tokio::test]
async fn a_silent_peer_is_dropped_by_the_native_heartbeat() {
    // A TCP peer that completes the greeting and READY, then never answers a PING.
    let beat = Heartbeat {
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(200),
        ttl: Duration::from_millis(500),
    };
    let router = Router::with_options(options(NATIVE).heartbeat(beat)).unwrap();
    let mut events = router.events().unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let mut silent = tokio::net::TcpStream::connect(endpoint.trim_start_matches("tcp://"))
        .await
        .unwrap();
    silent.write_all(&ready_bytes(b"NULL")).await.unwrap();
    next_event(&mut events, "handshake", |e| {
        matches!(e, Event::HandshakeSucceeded { .. }).then_some(())
    })
    .await;
    next_event(&mut events, "the silent peer dropped", |e| {
        matches!(e, Event::Disconnected { .. }).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_native_connection_busy_with_traffic_still_sends_its_pings() {
    // A peer that sends a message every 2 ms: the Router's driver is polled for each one
    // while its PING deadline stays where it was (its timer is then not polled again).
    // PINGs (a command frame: size, then the name's length 4 and `PING`) must still go out
    // every interval, as libzmq's do, not only once the connection idles. The timeout is
    // long, so only the interval is tested; the wait is bounded by `within`.
    let beat = Heartbeat {
        interval: Duration::from_millis(50),
        timeout: Duration::from_secs(30),
        ttl: Duration::from_secs(30),
    };
    let router = Router::with_options(options(NATIVE).heartbeat(beat)).unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let stream = tokio::net::TcpStream::connect(endpoint.trim_start_matches("tcp://"))
        .await
        .unwrap();
    let (mut reader, mut writer) = stream.into_split();
    writer.write_all(&ready_bytes(b"NULL")).await.unwrap();
    let traffic = tokio::spawn(async move {
        // One-frame messages of one byte: flags 0 (last frame), size 1.
        while writer.write_all(&[0, 1, b'x']).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    let (_, first) = within("the first message", router.recv()).await.unwrap();
    assert_eq!(first, vec![Bytes::from_static(b"x")]);
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    within("a PING while the peer sends", async {
        loop {
            let n = reader.read(&mut buf).await.unwrap();
            assert!(n > 0, "the Router closed the connection");
            seen.extend_from_slice(&buf[..n]);
            if seen.windows(5).filter(|w| *w == b"\x04PING").count() >= 3 {
                return;
            }
        }
    })
    .await;
    // The Router kept taking the peer's messages meanwhile.
    let (_, later) = within("a later message", router.recv()).await.unwrap();
    assert_eq!(later, vec![Bytes::from_static(b"x")]);
    traffic.abort();
    router.close().await;
}

#[tokio::test]
async fn each_side_reconnects_when_the_other_restarts() {
    for (r, d) in CROSSED {
        let (router, dealer, _, endpoint) = pair(options(r), options(d)).await;
        let mut events = dealer.events().unwrap();
        // The router goes away and comes back on the same port.
        router.close().await;
        let router = Router::with_options(options(r)).unwrap();
        within("rebinding the same port", async {
            loop {
                if router.bind(&endpoint).is_ok() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        // A message sent into the dying connection would be lost with it (the protocol
        // layer's timeouts cover that): send once the dealer has connected again.
        let mut lost = false;
        next_event(&mut events, "reconnected", |e| match e {
            Event::Disconnected { .. } => {
                lost = true;
                None
            }
            Event::HandshakeSucceeded { .. } if lost => Some(()),
            _ => None,
        })
        .await;
        dealer
            .send(vec![Bytes::from_static(b"again")])
            .await
            .unwrap();
        let (peer, got) = within("a message after the restart", router.recv())
            .await
            .unwrap();
        assert_eq!(got, vec![Bytes::from_static(b"again")], "{r}/{d}");
        router
            .send(&peer, vec![Bytes::from_static(b"back")])
            .await
            .unwrap();
        assert_eq!(
            within("an answer after the restart", dealer.recv())
                .await
                .unwrap(),
            vec![Bytes::from_static(b"back")]
        );
        // Now the dealer restarts: the router takes the new connection.
        dealer.close().await;
        let dealer = Dealer::with_options(options(d)).unwrap();
        dealer.connect(&endpoint).unwrap();
        dealer.send(vec![Bytes::from_static(b"new")]).await.unwrap();
        let (_, got) = within("a new dealer's message", router.recv())
            .await
            .unwrap();
        assert_eq!(got, vec![Bytes::from_static(b"new")]);
        router.close().await;
        dealer.close().await;
    }
}

fn curve_router(engine: Engine, keys: &KeyPair) -> (Router, String) {
    let router = Router::with_options(options(engine).curve(Curve::server(keys))).unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    (router, endpoint)
}

#[tokio::test]
async fn curve_between_the_engines_with_the_right_key() {
    for (r, d) in CROSSED {
        let server = KeyPair::generate().unwrap();
        let client = KeyPair::generate().unwrap();
        let (router, endpoint) = curve_router(r, &server);
        router.allow_keys([client.public]).unwrap();
        let dealer =
            Dealer::with_options(options(d).curve(Curve::client(&client, server.public))).unwrap();
        let mut events = dealer.events().unwrap();
        dealer.connect(&endpoint).unwrap();
        assert_eq!(handshake_outcome(&mut events).await, Ok(()), "{r}/{d}");
        let message = vec![sized(0), sized(300), sized(70_000)];
        dealer.send(message.clone()).await.unwrap();
        let (peer, key, got) = within("an encrypted message", router.recv_with_key())
            .await
            .unwrap();
        assert_eq!(key, Some(client.public), "{r}/{d}: the client's key");
        assert!(got == message, "{r}/{d}");
        router.send(&peer, message.clone()).await.unwrap();
        assert!(within("the encrypted answer", dealer.recv()).await.unwrap() == message);
        router.close().await;
        dealer.close().await;
    }
}

#[tokio::test]
async fn curve_refusals_between_the_engines() {
    for (r, d) in CROSSED {
        let server = KeyPair::generate().unwrap();
        let client = KeyPair::generate().unwrap();
        let (router, endpoint) = curve_router(r, &server);
        // Not on the allow-list: refused with an authentication failure on the client.
        router.allow_keys([]).unwrap();
        let refused =
            Dealer::with_options(options(d).curve(Curve::client(&client, server.public))).unwrap();
        let mut events = refused.events().unwrap();
        refused.connect(&endpoint).unwrap();
        assert_eq!(
            handshake_outcome(&mut events).await,
            Err(HandshakeFailure::Auth),
            "{r}/{d}: an unlisted key"
        );
        refused.close().await;
        // A wrong server key never completes a handshake.
        router.allow_any_key().unwrap();
        let wrong = KeyPair::generate().unwrap();
        let lost =
            Dealer::with_options(options(d).curve(Curve::client(&client, wrong.public))).unwrap();
        let mut events = lost.events().unwrap();
        lost.connect(&endpoint).unwrap();
        assert!(
            handshake_outcome(&mut events).await.is_err(),
            "{r}/{d}: a wrong server key"
        );
        lost.close().await;
        // A plaintext client at a CURVE server: a protocol failure.
        let plain = Dealer::with_options(options(d)).unwrap();
        let mut events = plain.events().unwrap();
        plain.connect(&endpoint).unwrap();
        assert_eq!(
            handshake_outcome(&mut events).await,
            Err(HandshakeFailure::Protocol),
            "{r}/{d}: plaintext at CURVE"
        );
        plain.close().await;
        // Nothing got through, and a real client still does.
        assert!(
            tokio::time::timeout(Duration::from_millis(200), router.recv())
                .await
                .is_err()
        );
        router.close().await;
    }
}

/// Sends `bytes` to a native Router on a raw TCP connection and checks that the router
/// closes it, then still serves a real Dealer.
async fn hostile(bytes: &[u8], router_options: Options) {
    let router = Router::with_options(router_options).unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let mut stream = tokio::net::TcpStream::connect(endpoint.trim_start_matches("tcp://"))
        .await
        .unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut rest = Vec::new();
    let read = within("the router hangs up", stream.read_to_end(&mut rest)).await;
    // The router's greeting, maybe its READY: nothing more.
    assert!(
        read.is_err() || rest.len() <= 128,
        "{read:?}: {} bytes",
        rest.len()
    );
    let dealer = Dealer::with_options(options(NATIVE)).unwrap();
    dealer.connect(&endpoint).unwrap();
    dealer
        .send(vec![Bytes::from_static(b"real")])
        .await
        .unwrap();
    let (_, got) = within("a real peer after the hostile one", router.recv())
        .await
        .unwrap();
    assert_eq!(got, vec![Bytes::from_static(b"real")]);
    router.close().await;
}

fn ready_bytes(mechanism: &[u8]) -> Vec<u8> {
    let mut wire = zmtp::greeting::encode(mechanism, false).to_vec();
    let mut props = Vec::new();
    zmtp::command::put_property(&mut props, b"Socket-Type", b"DEALER");
    zmtp::command::write(&mut wire, b"READY", &props);
    wire
}

#[tokio::test]
async fn hostile_bytes_close_the_connection_and_the_native_router_keeps_serving() {
    // A malformed greeting, a ZMTP 2.0 peer and plain garbage.
    hostile(b"GET / HTTP/1.1\r\n\r\n", options(NATIVE)).await;
    let mut old = zmtp::greeting::encode(b"NULL", false);
    old[10] = 2;
    hostile(&old, options(NATIVE)).await;
    let junk: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    hostile(&junk, options(NATIVE)).await;
    // A mechanism the router does not use.
    hostile(&ready_bytes(b"PLAIN"), options(NATIVE)).await;
    // A frame that announces 2^63 bytes: refused from its header, nothing allocated.
    let mut huge = ready_bytes(b"NULL");
    huge.push(zmtp::frame::LONG);
    huge.extend_from_slice(&(1u64 << 63).to_be_bytes());
    hostile(&huge, options(NATIVE).max_message_size(Some(1 << 20))).await;
    // With no limit at all, a length no buffer can hold is refused the same way.
    let mut endless = ready_bytes(b"NULL");
    endless.push(zmtp::frame::LONG);
    endless.extend_from_slice(&u64::MAX.to_be_bytes());
    hostile(&endless, options(NATIVE).max_message_size(None)).await;
}

#[tokio::test]
async fn a_stalled_greeting_is_closed_at_the_handshake_timeout() {
    let router =
        Router::with_options(options(NATIVE).handshake_timeout(Duration::from_millis(200)))
            .unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let mut stream = tokio::net::TcpStream::connect(endpoint.trim_start_matches("tcp://"))
        .await
        .unwrap();
    // Half a signature, then silence.
    stream.write_all(&[0xFF, 0, 0]).await.unwrap();
    let started = std::time::Instant::now();
    let mut rest = Vec::new();
    let _ = within("the router hangs up", stream.read_to_end(&mut rest)).await;
    // Generous: the point is that it is closed by the timeout, not in a second.
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "{:?}",
        started.elapsed()
    );
    router.close().await;
}
