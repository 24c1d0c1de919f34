//! Typed outcomes as a caller sees them: a handler's well-known code, a panic, a deadline,
//! and on the receiving side a tick refused by middleware and a handler whose peer left.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use node::{Code, Error, ErrorCode, ErrorSource, HandlerError, NodeEvent, Outcome, Request};
use support::*;

#[tokio::test]
async fn a_well_known_code_and_a_custom_one_reach_the_caller_as_they_were_given() {
    let a = server("a").await;
    a.on_request("get", |req: Request| async move {
        let key: String = req.decode()?;
        if key == "mine" {
            return Err(HandlerError::new("E_QUOTA", "over quota"));
        }
        Err::<String, _>(HandlerError::new(Code::NotFound, format!("no key {key:?}")))
    });
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();

    let err = b.request::<_, String>("a", "get", &"k").await.unwrap_err();
    match &err {
        Error::Handler {
            code: Code::NotFound,
            message,
        } => assert_eq!(message, "no key \"k\""),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(err.handler_code().is_some_and(Code::is_not_found));
    assert_eq!(err.code(), ErrorCode::HandlerError);

    let err = b
        .request::<_, String>("a", "get", &"mine")
        .await
        .unwrap_err();
    assert_eq!(err.handler_code(), Some(&Code::Other("E_QUOTA".into())));
}

#[tokio::test]
async fn a_panicking_handler_is_a_panic_for_its_caller_not_a_handler_error() {
    let a = server("a").await;
    a.on_request("boom", |_req: Request| async move {
        if true {
            panic!("handler bug");
        }
        Ok::<_, HandlerError>("never")
    });
    // Hooks (and the metrics' `outcome` label) tell a panic from a handler's error.
    let handled = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&handled);
    a.hooks()
        .on_handled(move |h| seen.lock().unwrap().push(h.outcome));
    let b = client("b").await;
    let called = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&called);
    b.hooks()
        .on_called(move |c| seen.lock().unwrap().push(c.outcome));
    b.connect(&address(&a)).await.unwrap();
    let err = b.request::<_, String>("a", "boom", &()).await.unwrap_err();
    assert!(matches!(err, Error::HandlerPanicked), "{err:?}");
    assert_eq!(*called.lock().unwrap(), [Outcome::Panicked]);
    // The callee's hook runs just after its answer goes out: wait for it (bounded
    // generously, for a loaded machine).
    for _ in 0..500 {
        if !handled.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*handled.lock().unwrap(), [Outcome::Panicked]);
    // Its description counts it as a panic.
    let described = a.description();
    let boom = described.events.iter().find(|e| e.event == "boom").unwrap();
    assert_eq!((boom.requests.panicked, boom.requests.failed()), (1, 1));
    assert_eq!(Outcome::Panicked.as_str(), "panicked");
    assert!(err.is_panic());
    assert!(!err.is_cancelled() && !err.is_retry_safe());
    assert_eq!(err.code(), ErrorCode::HandlerPanicked);
    // The node goes on.
    a.on_request("ok", |_req: Request| async move {
        Ok::<_, HandlerError>("fine")
    });
    let fine: String = b.request("a", "ok", &()).await.unwrap();
    assert_eq!(fine, "fine");
}

#[tokio::test]
async fn a_handler_past_its_deadline_is_a_timeout_for_its_caller_and_stopped_on_its_node() {
    let a = server("a").await;
    a.on_request("slow", |_req: Request| async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, HandlerError>("never")
    });
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();
    let err = b
        .call("a", "slow")
        .timeout(Duration::from_millis(300))
        .send::<_, String>(&())
        .await
        .unwrap_err();
    // The caller's timer and the remote's stop fall at the same deadline; either is a
    // timeout, never a handler error or a panic.
    assert!(err.is_timeout(), "{err:?}");
    assert!(!err.is_panic() && err.handler_code().is_none());
    // On its node the handler was stopped at the deadline, not left to run 60 s.
    within("the handler is stopped", async {
        while a.stats().handlers_expired < 1 || a.stats().handlers_active > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_handler_whose_caller_left_is_counted_cancelled_on_its_node() {
    let a = server("a").await;
    a.on_request("stuck", |_req: Request| async move {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, HandlerError>("never")
    });
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();
    let call = {
        let b = b.clone();
        tokio::spawn(async move { b.request::<_, String>("a", "stuck", &()).await })
    };
    within("it runs", async {
        while a.stats().handlers_active < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // The caller goes: its answer could go nowhere, so the callee's side says what
    // happened (the caller itself sees its node closed).
    b.close().await;
    let _ = within("the call ends", call).await;
    within("the handler is stopped and counted", async {
        while a.stats().handlers_cancelled < 1 || a.stats().handlers_active > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_tick_refused_by_middleware_is_counted_and_reported() {
    let a = server("a").await;
    let mut events = a.events();
    a.layer(tower::layer::layer_fn(|inner: node::HandlerService| {
        tower::util::BoxCloneSyncService::new(tower::service_fn(move |req: Request| {
            let inner = inner.clone();
            async move {
                if req.is_tick() && req.event() == "blocked" {
                    return Err(HandlerError::new(Code::PermissionDenied, "no tenant").into());
                }
                tower::ServiceExt::oneshot(inner, req).await
            }
        }))
    }));
    a.on_tick("blocked", |_req: Request| async move {});
    let b = client("b").await;
    b.connect(&address(&a)).await.unwrap();
    b.tick("a", "blocked", &()).await.unwrap();
    let message = wait_for(&mut events, "the refusal's event", |event| match event {
        NodeEvent::Error {
            source: ErrorSource::TickRefused,
            message,
        } => Some(message.clone()),
        _ => None,
    })
    .await;
    assert!(
        message.contains("\"blocked\"") && message.contains("PERMISSION_DENIED"),
        "{message}"
    );
    assert_eq!(a.stats().ticks_refused, 1);
}
