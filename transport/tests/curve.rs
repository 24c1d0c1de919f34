//! CURVE security over real loopback sockets: encryption, server authentication, the
//! client allow-list (ZAP) and the client key on received messages.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use transport::{Curve, Dealer, Error, HandshakeFailure, Key, KeyPair, Options, Router};

mod support;
use support::{frames, handshake_outcome, within};

/// How long we watch for a message that must not arrive.
const QUIET: Duration = Duration::from_millis(300);

fn curve_server(keys: &KeyPair) -> (Router, String) {
    let router = Router::with_options(Options::default().curve(Curve::server(keys))).unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    (router, endpoint)
}

fn curve_client(keys: &KeyPair, server_key: Key) -> Dealer {
    Dealer::with_options(Options::default().curve(Curve::client(keys, server_key))).unwrap()
}

/// Asserts that nothing reaches `router` for a while.
async fn nothing_arrives(router: &Router) {
    if let Ok(message) = tokio::time::timeout(QUIET, router.recv()).await {
        panic!("a message got through: {message:?}");
    }
}

#[test]
fn curve_is_compiled_in() {
    assert!(transport::has_capability("curve"));
}

#[tokio::test]
async fn encrypted_round_trip() {
    let server_keys = KeyPair::generate().unwrap();
    let (router, endpoint) = curve_server(&server_keys);
    let dealer = curve_client(&KeyPair::generate().unwrap(), server_keys.public);
    let mut events = dealer.events().unwrap();
    dealer.connect(&endpoint).unwrap();
    assert_eq!(
        within("handshake", handshake_outcome(&mut events)).await,
        Ok(())
    );

    dealer.send(frames(&[b"secret", b"stuff"])).await.unwrap();
    let (peer, got) = within("router recv", router.recv()).await.unwrap();
    assert_eq!(got, frames(&[b"secret", b"stuff"]));
    router.send(&peer, frames(&[b"reply"])).await.unwrap();
    assert_eq!(
        within("dealer recv", dealer.recv()).await.unwrap(),
        frames(&[b"reply"])
    );
}

#[tokio::test]
async fn wrong_server_key_fails_the_handshake_and_delivers_nothing() {
    let server_keys = KeyPair::generate().unwrap();
    let (router, endpoint) = curve_server(&server_keys);
    let mut router_events = router.events().unwrap();
    let impostor = KeyPair::generate().unwrap();
    let dealer = curve_client(&KeyPair::generate().unwrap(), impostor.public);
    let mut events = dealer.events().unwrap();
    dealer.connect(&endpoint).unwrap();
    dealer
        .send(frames(&[b"for the real server"]))
        .await
        .unwrap();

    assert!(
        within("client handshake", handshake_outcome(&mut events))
            .await
            .is_err(),
        "a client with the wrong server key must not get through"
    );
    // The server cannot open the client's HELLO; the client is only told that the server
    // hung up (libzmq: HANDSHAKE_FAILED_NO_DETAIL) and keeps retrying.
    assert_eq!(
        within("server handshake", handshake_outcome(&mut router_events)).await,
        Err(HandshakeFailure::Protocol)
    );
    nothing_arrives(&router).await;
}

#[tokio::test]
async fn unlisted_client_is_refused_while_a_listed_one_gets_in() {
    let server_keys = KeyPair::generate().unwrap();
    let (router, endpoint) = curve_server(&server_keys);
    let mut router_events = router.events().unwrap();
    let friend = KeyPair::generate().unwrap();
    let stranger = KeyPair::generate().unwrap();
    router.allow_keys([friend.public]).unwrap();
    assert_eq!(router.allowed_keys().unwrap(), Some(vec![friend.public]));

    let refused = curve_client(&stranger, server_keys.public);
    let mut refused_events = refused.events().unwrap();
    refused.connect(&endpoint).unwrap();
    refused.send(frames(&[b"let me in"])).await.unwrap();
    assert_eq!(
        within("refused", handshake_outcome(&mut refused_events)).await,
        Err(HandshakeFailure::Auth)
    );
    assert_eq!(
        within("server saw it", handshake_outcome(&mut router_events)).await,
        Err(HandshakeFailure::Auth)
    );
    nothing_arrives(&router).await;

    let accepted = curve_client(&friend, server_keys.public);
    accepted.connect(&endpoint).unwrap();
    accepted.send(frames(&[b"hello"])).await.unwrap();
    let (_, key, got) = within("friend", router.recv_with_key()).await.unwrap();
    assert_eq!(got, frames(&[b"hello"]));
    assert_eq!(key, Some(friend.public));
    nothing_arrives(&router).await;
}

#[tokio::test]
async fn allow_list_changes_at_run_time() {
    let server_keys = KeyPair::generate().unwrap();
    let (router, endpoint) = curve_server(&server_keys);
    let client_keys = KeyPair::generate().unwrap();
    router.allow_keys([]).unwrap();

    let dealer = curve_client(&client_keys, server_keys.public);
    let mut events = dealer.events().unwrap();
    dealer.connect(&endpoint).unwrap();
    assert_eq!(
        within("refused first", handshake_outcome(&mut events)).await,
        Err(HandshakeFailure::Auth)
    );

    // libzmq gives up on a connection the server refused, so the client connects again
    // once the list lets it in.
    router.allow_key(client_keys.public).unwrap();
    dealer.disconnect(&endpoint).unwrap();
    dealer.connect(&endpoint).unwrap();
    assert_eq!(
        within("accepted after the change", handshake_outcome(&mut events)).await,
        Ok(())
    );
    dealer.send(frames(&[b"now"])).await.unwrap();
    let (_, key, got) = within("message", router.recv_with_key()).await.unwrap();
    assert_eq!((key, got), (Some(client_keys.public), frames(&[b"now"])));

    // Revoking refuses the next connection (the current one stays up).
    assert!(router.revoke_key(&client_keys.public).unwrap());
    assert_eq!(router.allowed_keys().unwrap(), Some(vec![]));
    let again = curve_client(&client_keys, server_keys.public);
    let mut again_events = again.events().unwrap();
    again.connect(&endpoint).unwrap();
    assert_eq!(
        within("refused after revoke", handshake_outcome(&mut again_events)).await,
        Err(HandshakeFailure::Auth)
    );
    dealer.send(frames(&[b"still up"])).await.unwrap();
    let (_, got) = within("old connection", router.recv()).await.unwrap();
    assert_eq!(got, frames(&[b"still up"]));

    // No list at all: anyone with the server key.
    router.allow_any_key().unwrap();
    assert_eq!(router.allowed_keys().unwrap(), None);
    again.disconnect(&endpoint).unwrap();
    again.connect(&endpoint).unwrap();
    assert_eq!(
        within(
            "accepted with no list",
            handshake_outcome(&mut again_events)
        )
        .await,
        Ok(())
    );
}

#[tokio::test]
async fn plaintext_client_is_refused_by_a_curve_server() {
    let server_keys = KeyPair::generate().unwrap();
    let (router, endpoint) = curve_server(&server_keys);
    let mut router_events = router.events().unwrap();
    let dealer = Dealer::new().unwrap();
    let mut events = dealer.events().unwrap();
    dealer.connect(&endpoint).unwrap();
    dealer.send(frames(&[b"in the clear"])).await.unwrap();

    // A mechanism mismatch: both ends report a protocol failure.
    assert_eq!(
        within("client", handshake_outcome(&mut events)).await,
        Err(HandshakeFailure::Protocol)
    );
    assert_eq!(
        within("server", handshake_outcome(&mut router_events)).await,
        Err(HandshakeFailure::Protocol)
    );
    nothing_arrives(&router).await;
}

/// Plaintext Routers carry a ZAP domain of their own (it makes libzmq refuse ZMTP 1.0
/// peers); once a CURVE server has started the process's ZAP handler, libzmq asks it about
/// their NULL handshakes too, and it lets them in.
#[tokio::test]
async fn plaintext_sockets_still_work_beside_a_curve_server() {
    let server_keys = KeyPair::generate().unwrap();
    let (_curve, _) = curve_server(&server_keys);
    let router = Router::new().unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::new().unwrap();
    let mut events = dealer.events().unwrap();
    dealer.connect(&endpoint).unwrap();
    assert_eq!(
        within("handshake", handshake_outcome(&mut events)).await,
        Ok(())
    );
    dealer.send(frames(&[b"plain"])).await.unwrap();
    let (peer, got) = within("router recv", router.recv()).await.unwrap();
    assert_eq!(got, frames(&[b"plain"]));
    router.send(&peer, frames(&[b"reply"])).await.unwrap();
    assert_eq!(
        within("dealer recv", dealer.recv()).await.unwrap(),
        frames(&[b"reply"])
    );
}

#[tokio::test]
async fn curve_client_refuses_a_plaintext_server() {
    let router = Router::new().unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let anything = KeyPair::generate().unwrap();
    let dealer = curve_client(&KeyPair::generate().unwrap(), anything.public);
    let mut events = dealer.events().unwrap();
    dealer.connect(&endpoint).unwrap();
    dealer.send(frames(&[b"x"])).await.unwrap();
    assert!(within("client", handshake_outcome(&mut events))
        .await
        .is_err());
    nothing_arrives(&router).await;
}

#[tokio::test]
async fn server_reads_each_client_key() {
    let server_keys = KeyPair::generate().unwrap();
    let (router, endpoint) = curve_server(&server_keys);
    let clients: Vec<(KeyPair, Dealer)> = (0..3)
        .map(|i| {
            let keys = KeyPair::generate().unwrap();
            let dealer = Dealer::with_options(
                Options::default()
                    .routing_id(format!("client-{i}"))
                    .curve(Curve::client(&keys, server_keys.public)),
            )
            .unwrap();
            dealer.connect(&endpoint).unwrap();
            (keys, dealer)
        })
        .collect();
    for (keys, dealer) in &clients {
        dealer
            .send(vec![Bytes::from(keys.public.to_z85())])
            .await
            .unwrap();
    }
    for _ in &clients {
        let (peer, key, got) = within("recv", router.recv_with_key()).await.unwrap();
        let key = key.expect("a CURVE server knows the client's key");
        assert_eq!(got, vec![Bytes::from(key.to_z85())], "from {peer}");
    }
    // The non-blocking variant too.
    let (keys, dealer) = &clients[0];
    dealer.send(frames(&[b"again"])).await.unwrap();
    let received = within("try_recv_with_key", async {
        loop {
            if let Some(message) = router.try_recv_with_key().unwrap() {
                return message;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(received.1, Some(keys.public));

    // A plaintext Router has no key to give.
    let plain = Router::new().unwrap();
    let plain_endpoint = plain.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::new().unwrap();
    dealer.connect(&plain_endpoint).unwrap();
    dealer.send(frames(&[b"plain"])).await.unwrap();
    let (_, key, _) = within("plain", plain.recv_with_key()).await.unwrap();
    assert_eq!(key, None);
}

#[tokio::test]
async fn allow_list_needs_a_curve_server() {
    let router = Router::new().unwrap();
    let key = KeyPair::generate().unwrap().public;
    assert!(matches!(
        router.allow_keys([key]),
        Err(Error::NotCurveServer)
    ));
    assert!(matches!(router.allowed_keys(), Err(Error::NotCurveServer)));
    assert!(matches!(
        "not a key".parse::<Key>(),
        Err(Error::KeyLength { actual: 9 })
    ));
    assert!(matches!(
        "0000000000000000000000000000000000000 ~0".parse::<Key>(),
        Err(Error::KeyEncoding { position: 37 })
    ));
}

/// A TCP proxy that forwards both ways and records every byte it forwards.
async fn recording_proxy(target: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&recorded);
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = tokio::net::TcpStream::connect(target).await else {
                continue;
            };
            let (in_read, in_write) = inbound.into_split();
            let (out_read, out_write) = outbound.into_split();
            tokio::spawn(forward(in_read, out_write, Arc::clone(&record)));
            tokio::spawn(forward(out_read, in_write, Arc::clone(&record)));
        }
    });
    (address, recorded)
}

async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    record: Arc<Mutex<Vec<u8>>>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        // Recorded before it is forwarded: once the peer has it, the record has it too.
        record.lock().extend_from_slice(&buffer[..n]);
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
}

/// Sends a marked request and reply through a recording proxy; whether the marker shows up
/// in the recorded bytes.
async fn marker_visible_on_the_wire(curve: bool) -> bool {
    const REQUEST: &[u8] = b"zeronode-request-marker-3f9c1e";
    const REPLY: &[u8] = b"zeronode-reply-marker-8a7d2b";
    let server_keys = KeyPair::generate().unwrap();
    let client_keys = KeyPair::generate().unwrap();
    let (server_options, client_options) = if curve {
        (
            Options::default().curve(Curve::server(&server_keys)),
            Options::default().curve(Curve::client(&client_keys, server_keys.public)),
        )
    } else {
        (Options::default(), Options::default())
    };
    let router = Router::with_options(server_options).unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let target: SocketAddr = endpoint.trim_start_matches("tcp://").parse().unwrap();
    let (proxy, recorded) = recording_proxy(target).await;

    let dealer = Dealer::with_options(client_options).unwrap();
    dealer.connect(&format!("tcp://{proxy}")).unwrap();
    dealer
        .send(vec![Bytes::from_static(REQUEST)])
        .await
        .unwrap();
    let (peer, got) = within("through the proxy", router.recv()).await.unwrap();
    assert_eq!(got, vec![Bytes::from_static(REQUEST)]);
    router
        .send(&peer, vec![Bytes::from_static(REPLY)])
        .await
        .unwrap();
    assert_eq!(
        within("reply through the proxy", dealer.recv())
            .await
            .unwrap(),
        vec![Bytes::from_static(REPLY)]
    );

    let wire = recorded.lock().clone();
    assert!(
        wire.len() > REQUEST.len() + REPLY.len(),
        "the proxy saw the traffic"
    );
    let contains = |marker: &[u8]| wire.windows(marker.len()).any(|w| w == marker);
    let (request_seen, reply_seen) = (contains(REQUEST), contains(REPLY));
    assert_eq!(request_seen, reply_seen, "both directions alike");
    request_seen
}

#[tokio::test]
async fn curve_hides_the_payload_on_the_wire() {
    assert!(
        marker_visible_on_the_wire(false).await,
        "without CURVE the payload crosses in clear (the check can see it)"
    );
    assert!(
        !marker_visible_on_the_wire(true).await,
        "with CURVE no payload byte sequence crosses in clear"
    );
}
