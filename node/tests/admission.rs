//! The handler slots as a user sees them: a slot is taken by each running handler and given
//! back however the handler ends (answered, panicked, stopped at its deadline), so a node
//! at its limit refuses with `Busy` only while the slots are really held.

mod support;

use std::sync::Arc;
use std::time::Duration;

use node::{BusyPolicy, Error, HandlerError, Node, Request};
use support::*;
use tokio::sync::Notify;

/// A server with one handler slot that refuses when it is taken, and a client whose
/// requests give up after `timeout`.
async fn one_slot(timeout: Duration) -> (Node, Node) {
    let srv = support::builder("srv")
        .max_concurrent_handlers(1)
        .when_busy(BusyPolicy::Refuse)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let client = support::builder("b")
        .request_timeout(timeout)
        .build()
        .await
        .unwrap();
    client.connect(&address(&srv)).await.unwrap();
    (srv, client)
}

async fn ask(client: &Node, event: &str) -> node::Result<String> {
    client.request::<_, String>("srv", event, &()).await
}

#[tokio::test]
async fn the_slot_is_refused_while_held_and_free_again_after_a_panic() {
    // Generous: a loaded machine may take seconds to answer; nothing here waits for it.
    let (srv, client) = one_slot(Duration::from_secs(20)).await;
    let release = Arc::new(Notify::new());
    let gate = Arc::clone(&release);
    srv.on_request("hold", move |_req: Request| {
        let gate = Arc::clone(&gate);
        async move {
            gate.notified().await;
            Ok::<_, HandlerError>("held".to_string())
        }
    });
    srv.on_request("boom", |_req: Request| async move {
        if true {
            panic!("the handler panics");
        }
        Ok::<_, HandlerError>(String::new())
    });
    srv.on_request("echo", |_req: Request| async move {
        Ok::<_, HandlerError>("echo".to_string())
    });

    // A panicking handler gives its slot back: with one slot, each of these would
    // otherwise leave the next refused.
    for _ in 0..3 {
        let result = within("boom", ask(&client, "boom")).await;
        assert!(matches!(result, Err(Error::HandlerPanicked)), "{result:?}");
    }
    assert_eq!(within("echo", ask(&client, "echo")).await.unwrap(), "echo");

    // Held: the next request is refused at once, naming the node's limit.
    let held = tokio::spawn({
        let client = client.clone();
        async move { ask(&client, "hold").await }
    });
    within("the slot taken", async {
        while srv.stats().handlers_active == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let refused = within("refused", ask(&client, "echo")).await;
    assert!(matches!(refused, Err(Error::Busy { .. })), "{refused:?}");
    release.notify_one();
    assert_eq!(within("held", held).await.unwrap().unwrap(), "held");
    assert_eq!(within("echo", ask(&client, "echo")).await.unwrap(), "echo");
    assert_eq!(srv.stats().busy_refused, 1);
}

#[tokio::test]
async fn a_handler_stopped_at_its_deadline_gives_its_slot_back() {
    // The deadline must pass while the handler waits: 300 ms, against a handler that
    // never ends by itself.
    let (srv, client) = one_slot(Duration::from_millis(300)).await;
    srv.on_request("forever", |_req: Request| async move {
        std::future::pending::<()>().await;
        Ok::<_, HandlerError>(String::new())
    });
    srv.on_request("echo", |_req: Request| async move {
        Ok::<_, HandlerError>("echo".to_string())
    });
    for _ in 0..3 {
        let result = within("forever", ask(&client, "forever")).await;
        assert!(matches!(result, Err(Error::Timeout { .. })), "{result:?}");
        // The server stops the handler at the same deadline, a moment after the caller
        // gave up: wait for its slot to come back (bounded by `within`).
        within("the slot back", async {
            while srv.stats().handlers_active != 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
    }
    assert_eq!(within("echo", ask(&client, "echo")).await.unwrap(), "echo");
    assert_eq!(srv.stats().busy_refused, 0);
}
