//! Secured nodes (CURVE): encrypted request/reply, refusals as typed errors in bounded time,
//! the allow-list (also changed at run time), the peer's key in the registry and in
//! handlers, and what an observer of the wire sees.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use node::{
    Direction, Error, ErrorCode, HandlerError, HandshakeFailure, KeyPair, LeaveReason, Node,
    NodeEvent, Request,
};
use support::*;

/// A connect that is refused must end well before this: the handshake timeout of the
/// support builder is 3 s, and a refusal must not wait for it.
const PROMPT: Duration = Duration::from_secs(2);

fn keys() -> KeyPair {
    KeyPair::generate().expect("this build has CURVE")
}

/// A CURVE node bound to loopback that counts and answers `whoami` with the caller's key.
async fn secured_server(
    id: &str,
    keys: &KeyPair,
    allow: Option<Vec<node::Key>>,
) -> (Node, Arc<AtomicUsize>) {
    let mut builder = support::builder(id).curve(keys.clone());
    if let Some(allow) = allow {
        builder = builder.allow_keys(allow);
    }
    let node = builder.bind("tcp://127.0.0.1:0").build().await.unwrap();
    let handled = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&handled);
    node.on_request("whoami", move |req: Request| {
        count.fetch_add(1, Ordering::SeqCst);
        let key = req.peer_key().map(|k| k.to_z85());
        async move { Ok::<_, HandlerError>(key) }
    });
    (node, handled)
}

async fn secured_client(id: &str, keys: &KeyPair) -> Node {
    support::builder(id)
        .curve(keys.clone())
        .build()
        .await
        .unwrap()
}

/// Connects and checks the refusal is typed and prompt.
async fn refused(result: impl std::future::Future<Output = node::Result<node::PeerInfo>>) -> Error {
    let started = Instant::now();
    let err = within("a refused connect", result).await.unwrap_err();
    assert!(
        started.elapsed() < PROMPT,
        "refused in {:?}, not left to time out",
        started.elapsed()
    );
    assert_eq!(err.code(), ErrorCode::Refused, "{err:?}");
    err
}

#[tokio::test]
async fn curve_is_available_in_this_build() {
    assert!(transport::has_capability("curve"));
}

#[tokio::test]
async fn secured_nodes_exchange_requests_and_know_each_others_keys() {
    let (server_keys, client_keys) = (keys(), keys());
    let (server, _) = secured_server("vault", &server_keys, None).await;
    let client = secured_client("teller", &client_keys).await;
    let peer = client
        .connect_with(
            &address(&server),
            node::ConnectOptions::new().server_key(server_keys.public),
        )
        .await
        .unwrap();
    assert_eq!(peer.id.as_str(), "vault");
    assert_eq!(peer.key, Some(server_keys.public));
    assert_eq!(client.keys().public(), Some(client_keys.public));

    // The handler saw the key libzmq authenticated, not something the client claimed.
    let seen: Option<String> = client.request("vault", "whoami", &()).await.unwrap();
    assert_eq!(seen, Some(client_keys.public.to_z85()));
    let on_server = within("the server lists the client", async {
        loop {
            if let Some(info) = server.peers().get("teller") {
                return info;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(on_server.direction, Direction::Downstream);
    assert_eq!(on_server.key, Some(client_keys.public));

    // The server side calls the client back over the same encrypted connection; there the
    // caller's key is the server's.
    client.on_request("whoami", |req: Request| {
        let key = req.peer_key().map(|k| k.to_z85());
        async move { Ok::<_, HandlerError>(key) }
    });
    let back: Option<String> = server.request("teller", "whoami", &()).await.unwrap();
    assert_eq!(back, Some(server_keys.public.to_z85()));
    client.close().await;
    server.close().await;
}

#[tokio::test]
async fn a_wrong_server_key_is_refused_at_once_and_the_server_keeps_serving() {
    let server_keys = keys();
    let (server, handled) = secured_server("vault", &server_keys, None).await;
    let impostor_key = keys().public;
    let stranger = secured_client("stranger", &keys()).await;
    let err = refused(stranger.connect_with(
        &address(&server),
        node::ConnectOptions::new().server_key(impostor_key),
    ))
    .await;
    assert!(matches!(err, Error::Refused { .. }), "{err:?}");
    assert!(stranger.peers().is_empty());

    let friend = secured_client("friend", &keys()).await;
    friend
        .connect_with(
            &address(&server),
            node::ConnectOptions::new().server_key(server_keys.public),
        )
        .await
        .unwrap();
    let _: Option<String> = friend.request("vault", "whoami", &()).await.unwrap();
    assert_eq!(
        handled.load(Ordering::SeqCst),
        1,
        "only the friend reached a handler"
    );
    for node in [friend, stranger, server] {
        node.close().await;
    }
}

#[tokio::test]
async fn an_unlisted_client_is_refused_and_the_server_says_so() {
    let (server_keys, listed, unlisted) = (keys(), keys(), keys());
    let (server, handled) = secured_server("vault", &server_keys, Some(vec![listed.public])).await;
    let mut events = server.events();

    let outsider = secured_client("outsider", &unlisted).await;
    let err = refused(outsider.connect_with(
        &address(&server),
        node::ConnectOptions::new().server_key(server_keys.public),
    ))
    .await;
    assert!(
        matches!(
            err,
            Error::Refused {
                reason: HandshakeFailure::Auth,
                ..
            }
        ),
        "{err:?}"
    );
    let reason = wait_for(&mut events, "the server reports the refusal", |e| match e {
        NodeEvent::ConnectionRefused { reason, .. } => Some(*reason),
        _ => None,
    })
    .await;
    assert_eq!(reason, HandshakeFailure::Auth);
    assert!(server.peers().is_empty(), "the outsider never joined");

    let insider = secured_client("insider", &listed).await;
    insider
        .connect_with(
            &address(&server),
            node::ConnectOptions::new().server_key(server_keys.public),
        )
        .await
        .unwrap();
    let _: Option<String> = insider.request("vault", "whoami", &()).await.unwrap();
    assert_eq!(handled.load(Ordering::SeqCst), 1);
    for node in [insider, outsider, server] {
        node.close().await;
    }
}

#[tokio::test]
async fn a_plaintext_node_is_refused_by_a_secured_node() {
    let (server, handled) = secured_server("vault", &keys(), None).await;
    let plain = client("plain").await;
    let err = refused(plain.connect(&address(&server))).await;
    assert!(matches!(err, Error::Refused { .. }), "{err:?}");
    assert_eq!(handled.load(Ordering::SeqCst), 0);
    assert!(server.peers().is_empty());
    plain.close().await;
    server.close().await;
}

#[tokio::test]
async fn a_secure_connect_needs_a_key_pair() {
    let (server, _) = secured_server("vault", &keys(), None).await;
    let keyless = client("keyless").await;
    let err = keyless
        .connect_with(
            &address(&server),
            node::ConnectOptions::new().server_key(server.keys().public().unwrap()),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoKeys), "{err:?}");
    assert!(matches!(
        keyless.keys().allow(keys().public).await,
        Err(Error::NoKeys)
    ));
    // An allow-list without a key pair would check nothing: the node refuses to bind.
    let listless = support::builder("listless")
        .allow_keys([keys().public])
        .bind("tcp://127.0.0.1:0")
        .build()
        .await;
    assert!(matches!(listless, Err(Error::NoKeys)), "{listless:?}");
    keyless.close().await;
    server.close().await;
}

#[tokio::test]
async fn the_allow_list_changes_at_run_time() {
    let (server_keys, client_keys) = (keys(), keys());
    let (server, _) = secured_server("vault", &server_keys, Some(vec![])).await;
    let client = secured_client("teller", &client_keys).await;
    let address = address(&server);

    // Not listed: refused.
    refused(client.connect_with(
        &address,
        node::ConnectOptions::new().server_key(server_keys.public),
    ))
    .await;

    // Listed now: the same node connects and is served.
    server.keys().allow(client_keys.public).await.unwrap();
    assert_eq!(
        server.keys().allowed().unwrap(),
        Some(vec![client_keys.public])
    );
    client
        .connect_with(
            &address,
            node::ConnectOptions::new().server_key(server_keys.public),
        )
        .await
        .unwrap();
    let _: Option<String> = client.request("vault", "whoami", &()).await.unwrap();

    // Revoked: the joined client is dropped at once on both sides, and cannot rejoin.
    let mut server_events = server.events();
    let mut client_events = client.events();
    assert!(server.keys().revoke(&client_keys.public).await.unwrap());
    let reason = wait_for(
        &mut server_events,
        "the server drops the client",
        |e| match e {
            NodeEvent::PeerLeft { id, reason, .. } if id.as_str() == "teller" => Some(*reason),
            _ => None,
        },
    )
    .await;
    assert_eq!(reason, LeaveReason::Revoked);
    wait_for(
        &mut client_events,
        "the client sees the server leave",
        |e| match e {
            NodeEvent::PeerLeft { id, .. } if id.as_str() == "vault" => Some(()),
            _ => None,
        },
    )
    .await;
    let late: node::Result<Option<String>> = client.request("vault", "whoami", &()).await;
    assert!(late.is_err(), "a revoked client is not served: {late:?}");
    // Its attempt to rejoin on the old connection is refused too, and it gives up.
    within("the client gives the connection up", async {
        loop {
            let rejoined = server.peers().get("teller").is_some();
            assert!(!rejoined, "a revoked key rejoined");
            if client.peers().is_empty() && client.disconnect(&address).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    refused(client.connect_with(
        &address,
        node::ConnectOptions::new().server_key(server_keys.public),
    ))
    .await;
    client.close().await;
    server.close().await;
}

/// Sends a request and its reply carrying a marker through a recording proxy; whether the
/// marker crossed the wire in clear.
async fn marker_in_clear(secured: bool) -> bool {
    const MARKER: &str = "zeronode-secret-marker-5e2a91";
    let (server_keys, client_keys) = (keys(), keys());
    let server = if secured {
        secured_server("vault", &server_keys, None).await.0
    } else {
        support::server("vault").await
    };
    server.on_request("echo", |req: Request| async move {
        let text: String = req.decode()?;
        Ok::<_, HandlerError>(text)
    });
    let proxy = Proxy::start(&address(&server)).await;
    let client = secured_client("teller", &client_keys).await;
    if secured {
        client
            .connect_with(
                &proxy.address,
                node::ConnectOptions::new().server_key(server_keys.public),
            )
            .await
            .unwrap();
    } else {
        client.connect(&proxy.address).await.unwrap();
    }
    let echoed: String = client.request("vault", "echo", MARKER).await.unwrap();
    assert_eq!(echoed, MARKER);
    let wire = proxy.recorded();
    assert!(
        wire.len() > 2 * MARKER.len(),
        "the proxy carried the traffic"
    );
    let marker = MARKER.as_bytes();
    let seen = wire.windows(marker.len()).any(|w| w == marker);
    client.close().await;
    server.close().await;
    seen
}

#[tokio::test]
async fn nothing_crosses_the_wire_in_clear() {
    // The same exchange without CURVE shows the marker: the check can see it.
    assert!(marker_in_clear(false).await, "plaintext carries the marker");
    assert!(!marker_in_clear(true).await, "CURVE hides it");
}

/// With CURVE an id is bound to the key that first joined with it: another key on the
/// allow-list cannot take the id over, even after its holder left.
#[tokio::test]
async fn an_id_is_bound_to_the_key_it_first_joined_with() {
    let vault_keys = keys();
    let (first_keys, second_keys) = (keys(), keys());
    let (vault, _) = secured_server(
        "vault",
        &vault_keys,
        Some(vec![first_keys.public, second_keys.public]),
    )
    .await;
    let first = secured_client("teller", &first_keys).await;
    first
        .connect_with(
            &address(&vault),
            node::ConnectOptions::new().server_key(vault_keys.public),
        )
        .await
        .unwrap();
    first.close().await;
    within("the first teller left", async {
        while vault.peers().get("teller").is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let impostor = secured_client("teller", &second_keys).await;
    let err = refused(impostor.connect_with(
        &address(&vault),
        node::ConnectOptions::new().server_key(vault_keys.public),
    ))
    .await;
    assert!(matches!(err, Error::Refused { .. }), "{err:?}");
    // The first key still may: the id is its.
    let again = secured_client("teller", &first_keys).await;
    again
        .connect_with(
            &address(&vault),
            node::ConnectOptions::new().server_key(vault_keys.public),
        )
        .await
        .unwrap();
}
