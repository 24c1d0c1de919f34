//! Tests of the parent module.
use super::*;
use transport::{Backpressure, Dealer, Options};

/// A dealer connected to nothing has no queue to put a message in: every send waits
/// (or fails, under `Backpressure::Fail`).
async fn unconnected(backpressure: Backpressure) -> Arc<Conversation<Dealer>> {
    let dealer =
        Dealer::with_options(Options::default().backpressure(backpressure)).expect("a dealer");
    let (conversation, ()) = Conversation::start(dealer, 1024, |_| Ok(()))
        .await
        .expect("nothing to open");
    conversation
}

#[tokio::test]
async fn a_request_waiting_for_room_to_send_still_times_out() {
    let conversation = unconnected(Backpressure::Wait).await;
    let server = PeerId::default();
    let request = conversation.request(
        &server,
        "echo",
        &[],
        Bytes::from_static(b"never sent"),
        Duration::from_millis(50),
    );
    // A hang fails the test instead of blocking it.
    let result = tokio::time::timeout(Duration::from_secs(10), request)
        .await
        .expect("the request ended");
    assert!(
        matches!(result, Err(Error::Timeout { ref event, .. }) if event == "echo"),
        "{result:?}"
    );
    assert_eq!(conversation.in_flight(), 0, "nothing left pending");
    assert_eq!(conversation.stats().timeouts, 1);
    assert_eq!(conversation.stats().requests_sent, 0);
    conversation.abort().await;
}

#[tokio::test]
async fn a_request_with_no_room_fails_at_once_when_told_not_to_wait() {
    let conversation = unconnected(Backpressure::Fail).await;
    let result = conversation
        .request(
            &PeerId::default(),
            "echo",
            &[],
            Bytes::from_static(b"never sent"),
            Duration::from_secs(3600),
        )
        .await;
    assert!(
        matches!(result, Err(Error::Transport(transport::Error::QueueFull))),
        "{result:?}"
    );
    assert_eq!(conversation.in_flight(), 0, "nothing left pending");
    conversation.abort().await;
}
