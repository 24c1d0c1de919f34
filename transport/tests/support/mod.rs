//! Helpers shared by the transport's socket tests.

// Each test binary uses a subset.
#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use transport::{Dealer, Event, Events, HandshakeFailure, Router};

pub(crate) mod descriptors;

/// Every await in these tests is bounded, so a bug fails the test instead of hanging CI.
pub(crate) const LIMIT: Duration = Duration::from_secs(10);

/// Awaits `fut`, failing the test with `what` after [`LIMIT`].
pub(crate) async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// A Router bound to a free loopback port and a Dealer connected to it.
pub(crate) fn connected_pair() -> (Router, Dealer) {
    let router = Router::new().unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::new().unwrap();
    dealer.connect(&endpoint).unwrap();
    (router, dealer)
}

/// A [`connected_pair`] whose connection is up: a first message went from the Dealer to
/// the Router, which returns the Dealer's routing id.
pub(crate) async fn ready_pair() -> (Router, Dealer, transport::PeerId) {
    let (router, dealer) = connected_pair();
    dealer.send(frames(&[b"hello"])).await.unwrap();
    let mut got = Vec::new();
    let peer = within("first message", router.recv_into(&mut got))
        .await
        .unwrap();
    assert_eq!(got, frames(&[b"hello"]));
    (router, dealer, peer)
}

/// A message from static frames.
pub(crate) fn frames(parts: &[&'static [u8]]) -> Vec<Bytes> {
    parts.iter().map(|p| Bytes::from_static(p)).collect()
}

/// The next event for which `pick` returns something, within [`LIMIT`].
pub(crate) async fn next_event<T>(
    events: &mut Events,
    what: &str,
    mut pick: impl FnMut(&Event) -> Option<T>,
) -> T {
    within(what, async {
        loop {
            match events.recv().await {
                Some(event) => {
                    if let Some(found) = pick(&event) {
                        return found;
                    }
                }
                None => panic!("event stream ended while waiting for: {what}"),
            }
        }
    })
    .await
}

/// How the next ZMTP handshake ends: `Ok` on success, the reason on failure.
pub(crate) async fn handshake_outcome(events: &mut Events) -> Result<(), HandshakeFailure> {
    next_event(events, "handshake outcome", |event| match event {
        Event::HandshakeSucceeded { .. } => Some(Ok(())),
        Event::HandshakeFailed { reason, .. } => Some(Err(*reason)),
        _ => None,
    })
    .await
}
