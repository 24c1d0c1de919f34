//! Identity that cannot be taken over: a joined id is bound to its connection; a claim of
//! it on another connection needs the ticket this node issued to its holder, which a peer
//! that learned the holder's id and instance never saw; one connection joins one id.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use node::{HandlerError, NodeEvent, Request};
use support::*;

/// A hello as a raw client writes it (the node's handshake message).
#[derive(serde::Serialize, serde::Deserialize)]
struct Hello {
    id: String,
    instance: String,
    version: u32,
    options: node::Options,
    #[serde(default)]
    token: String,
}

fn hello(id: &str, instance: &str, token: &str) -> Bytes {
    protocol::encode_value(&Hello {
        id: id.to_owned(),
        instance: instance.to_owned(),
        version: node::PROTOCOL_VERSION,
        options: node::Options::new(),
        token: token.to_owned(),
    })
    .unwrap()
}

async fn raw_client(address: &str) -> protocol::Client {
    protocol::Client::connect(address, LIMIT).await.unwrap()
}

/// Sends a handshake on `client`; the refusal's code, or `None` when admitted.
async fn handshake(client: &protocol::Client, hello: Bytes) -> Result<Hello, String> {
    match client
        .peer()
        .system()
        .request_with("_system:handshake", &[], hello, Duration::from_secs(5))
        .await
    {
        Ok(reply) => Ok(reply.decode_payload().unwrap()),
        Err(protocol::Error::Remote(remote)) => Err(remote.code),
        Err(e) => panic!("no answer to the handshake: {e}"),
    }
}

#[tokio::test]
async fn a_stolen_instance_does_not_take_a_joined_id_over() {
    let hub = server("hub").await;
    let victim = server("victim").await;
    let served = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&served);
    victim.on_request("who", move |_req: Request| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, HandlerError>("the real victim") }
    });
    let mut victim_events = victim.events();
    victim.connect(&address(&hub)).await.unwrap();
    within("the hub lists the victim", async {
        while hub.peers().get("victim").is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    // The thief joins the victim's own address and learns its instance from its hello.
    let spy = raw_client(&address(&victim)).await;
    let learned = handshake(&spy, hello("thief", "thief-1", ""))
        .await
        .unwrap();
    assert_eq!(learned.id, "victim");

    // Then it claims the victim's id at the hub, with that instance.
    let thief = raw_client(&address(&hub)).await;
    let refused = handshake(&thief, hello("victim", &learned.instance, "")).await;
    assert_eq!(refused.err().as_deref(), Some("DUPLICATE_ID"));
    // A ticket it has (the one the victim issued to its own join) proves nothing here.
    let forged = handshake(&thief, hello("victim", &learned.instance, &learned.token)).await;
    assert_eq!(forged.err().as_deref(), Some("DUPLICATE_ID"));
    let guessed = handshake(&thief, hello("victim", &learned.instance, &"0".repeat(32))).await;
    assert_eq!(guessed.err().as_deref(), Some("DUPLICATE_ID"));

    // The hub's requests to the victim still reach the real one, and the victim never saw
    // the hub leave.
    for _ in 0..20 {
        let who: String = hub.request("victim", "who", &()).await.unwrap();
        assert_eq!(who, "the real victim");
    }
    assert_eq!(served.load(Ordering::SeqCst), 20);
    let left = drain(&mut victim_events)
        .into_iter()
        .any(|e| matches!(e, NodeEvent::PeerLeft { .. }));
    assert!(!left, "the victim was disturbed");
    assert_eq!(hub.peers().len(), 1, "only the victim joined the hub");
}

#[tokio::test]
async fn one_connection_joins_one_id() {
    let hub = server("hub").await;
    let raw = raw_client(&address(&hub)).await;
    handshake(&raw, hello("first", "i-1", "")).await.unwrap();
    for i in 0..100 {
        let refused = handshake(&raw, hello(&format!("more-{i}"), "i-1", "")).await;
        assert_eq!(refused.err().as_deref(), Some("ALREADY_JOINED"));
    }
    // The same id again on its own connection is a new handshake, not a new peer.
    handshake(&raw, hello("first", "i-1", "")).await.unwrap();
    let peers = hub.peers().list();
    assert_eq!(peers.len(), 1, "{peers:?}");
    assert_eq!(peers[0].id.as_str(), "first");
}

/// Every event already delivered to `events`, without waiting for more than a moment.
fn drain(events: &mut node::EventStream) -> Vec<NodeEvent> {
    let mut seen = Vec::new();
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    while let std::task::Poll::Ready(Some(event)) =
        futures::Stream::poll_next(std::pin::Pin::new(&mut *events), &mut cx)
    {
        seen.push(event);
    }
    seen
}

/// The holder itself on a new connection (a reconnect whose old connection the hub has not
/// seen go yet) brings the ticket the hub issued to it, and takes its id over at once; the
/// same instance with another ticket does not.
#[tokio::test]
async fn the_holder_on_a_new_connection_takes_its_id_over_with_its_ticket() {
    let hub = server("hub").await;
    let first = raw_client(&address(&hub)).await;
    let issued = handshake(&first, hello("mobile", "m-1", "")).await.unwrap();
    assert_eq!(issued.token.len(), 32, "a 128-bit ticket");
    let second = raw_client(&address(&hub)).await;
    let wrong = handshake(&second, hello("mobile", "m-1", &"0".repeat(32))).await;
    assert_eq!(wrong.err().as_deref(), Some("DUPLICATE_ID"));
    handshake(&second, hello("mobile", "m-1", &issued.token))
        .await
        .unwrap();
    // Still one peer of that id, now behind the new connection: the old one is refused.
    assert_eq!(hub.peers().len(), 1);
    let old = first
        .peer()
        .request("anything", Bytes::new(), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(
        matches!(&old, protocol::Error::Remote(r) if r.code == "NOT_JOINED"),
        "{old:?}"
    );
}
