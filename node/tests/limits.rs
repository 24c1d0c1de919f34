//! Limits as errors the caller sees: sizes are checked before sending, against the limit
//! the receiver gave in its handshake.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use node::{Error, ErrorCode, Filter, Request, Response, Scope};
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
        .request_raw("small", "echo", fits.clone(), LIMIT)
        .await
        .unwrap();
    assert_eq!(reply, fits);

    let over = Bytes::from(vec![7u8; 1025]);
    let started = Instant::now();
    let err = big
        .request_raw("small", "echo", over.clone(), Duration::from_secs(10))
        .await
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
    let err = big.tick_raw("small", "t", over.clone()).await.unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { .. }), "{err:?}");
    let everyone = Filter::new().eq("role", "small");
    let err = big
        .tick_all(&everyone, Scope::Both, "t", &vec![7u8; 2048])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { .. }), "{err:?}");

    // A tick that fits, to know that ticks were handled when they could be.
    big.tick_raw("small", "t", Bytes::from_static(b"ok"))
        .await
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
    let again = big.request_raw("small", "echo", fits.clone(), LIMIT).await;
    assert_eq!(again.unwrap(), fits);
}
