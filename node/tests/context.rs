//! The request context across real nodes over loopback: metadata set by a caller and read
//! by a handler (also through two routers), deadlines seen by handlers and inherited by
//! nested calls, requests whose deadline passed not run, metadata limits as typed errors,
//! middleware handing typed values to handlers, and a trace carried on by requests and
//! streams.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use node::{BusyPolicy, Error, ErrorCode, HandlerError, Node, Request};
use support::*;
use tower::ServiceExt;

/// A handler that answers with every user metadata entry it got, as text (bytes as hex).
fn echo_meta(node: &Node) {
    node.on_request("meta", |req: Request| async move {
        let entries: Vec<(String, String)> = req
            .meta()
            .iter()
            .map(|(key, value)| {
                let shown = match value.as_str() {
                    Some(text) => text.to_owned(),
                    None => value
                        .as_bytes()
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect(),
                };
                (key.to_owned(), shown)
            })
            .collect();
        Ok::<_, HandlerError>(entries)
    });
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn metadata_set_by_the_caller_reaches_the_handler_directly_and_through_two_routers() {
    let worker = server("worker").await;
    echo_meta(&worker);
    let caller = client("caller").await;
    caller.connect(&address(&worker)).await.unwrap();

    let got: Vec<(String, String)> = caller
        .call("worker", "meta")
        .meta("auth", "t0k3n")
        .meta_bytes("blob", &[0, 0xff])
        .send(&())
        .await
        .unwrap();
    assert_eq!(got, pairs(&[("auth", "t0k3n"), ("blob", "00ff")]));

    // No metadata: nothing but what the framework adds, and none of it shows.
    let none: Vec<(String, String)> = caller.request("worker", "meta", &()).await.unwrap();
    assert!(none.is_empty(), "{none:?}");

    // Through two routers: origin -> r1 -> r2 -> far.
    let r1 = router("r1").await;
    let r2 = router("r2").await;
    r2.connect(&address(&r1)).await.unwrap();
    let far = client("far").await;
    echo_meta(&far);
    far.on_request("route", |req: Request| async move {
        let route = req.route().expect("forwarded");
        Ok::<_, HandlerError>((route.origin.to_string(), route.via.len()))
    });
    far.connect(&address(&r2)).await.unwrap();
    let origin = client("origin").await;
    origin.connect(&address(&r1)).await.unwrap();
    let via_routers: Vec<(String, String)> = within("through the routers", async {
        loop {
            match origin
                .call("far", "meta")
                .meta("tenant", "acme")
                .meta("traceparent", "00-abc-def-01")
                .send(&())
                .await
            {
                Ok(entries) => return entries,
                // The routers may still be joining.
                Err(Error::NodeNotFound { .. }) => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert_eq!(
        via_routers,
        pairs(&[("tenant", "acme"), ("traceparent", "00-abc-def-01")])
    );
    let (from, hops): (String, usize) = origin.request("far", "route", &()).await.unwrap();
    assert_eq!(
        (from.as_str(), hops),
        ("origin", 2),
        "the route is kept too"
    );
}

#[tokio::test]
async fn a_handler_sees_its_callers_deadline() {
    let worker = server("worker").await;
    worker.on_request("left", |req: Request| async move {
        let remaining = req.remaining().expect("a request has a deadline");
        let deadline = req.deadline().expect("a request has a deadline");
        assert!(deadline > Instant::now());
        Ok::<_, HandlerError>(remaining.as_millis() as u64)
    });
    let caller = client("caller").await;
    caller.connect(&address(&worker)).await.unwrap();
    let left: u64 = caller
        .call("worker", "left")
        .timeout(Duration::from_millis(1500))
        .send(&())
        .await
        .unwrap();
    // At most the caller's timeout; more than a third of it (loopback takes microseconds:
    // the margin is for a loaded CI machine).
    assert!((500..=1500).contains(&left), "{left} ms");
}

#[tokio::test]
async fn a_chain_of_three_nodes_gives_up_together() {
    // a -> b -> c; c never answers in time. b's call to c gives no timeout of its own (the
    // default is 5 s here) but inherits a's 400 ms.
    let c = server("c").await;
    let c_started = Arc::new(AtomicUsize::new(0));
    let c_budget = Arc::new(std::sync::Mutex::new(None));
    let (started, budget) = (Arc::clone(&c_started), Arc::clone(&c_budget));
    c.on_request("slow", move |req: Request| {
        started.fetch_add(1, Ordering::SeqCst);
        *budget.lock().unwrap() = req.remaining();
        async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok::<_, HandlerError>(())
        }
    });
    let b = server("b").await;
    b.connect(&address(&c)).await.unwrap();
    let b_outcome = Arc::new(std::sync::Mutex::new(None));
    let outcome = Arc::clone(&b_outcome);
    let weak = b.downgrade();
    b.on_request("relay", move |_req: Request| {
        let outcome = Arc::clone(&outcome);
        let node = weak.upgrade().expect("b is alive");
        async move {
            let began = Instant::now();
            let result: node::Result<()> = node.request("c", "slow", &()).await;
            *outcome.lock().unwrap() = Some((result.map_err(|e| e.code()), began.elapsed()));
            Ok::<_, HandlerError>(())
        }
    });
    let a = client("a").await;
    a.connect(&address(&b)).await.unwrap();

    let began = Instant::now();
    let result: node::Result<()> = a
        .call("b", "relay")
        .timeout(Duration::from_millis(400))
        .send(&())
        .await;
    assert!(result.unwrap_err().is_timeout());
    let a_waited = began.elapsed();

    assert!(a_waited < Duration::from_secs(3), "{a_waited:?}");

    // b gave up too, long before its 5 s default: its nested call timed out at the
    // inherited deadline, or b's handler was stopped at that same deadline, whichever came
    // first (bounded at 3 s: generous for a loaded machine, far from 5 s).
    within("b to be idle", async {
        while b.stats().handlers_active > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let b_done = began.elapsed();
    assert!(b_done < Duration::from_secs(3), "{b_done:?}");
    let b_outcome = *b_outcome.lock().unwrap();
    match b_outcome {
        Some((result, waited)) => {
            assert_eq!(result, Err(ErrorCode::RequestTimeout));
            assert!(waited < Duration::from_secs(3), "{waited:?}");
        }
        None => assert_eq!(b.stats().handlers_expired, 1, "stopped at its deadline"),
    }
    assert_eq!(c_started.load(Ordering::SeqCst), 1);
    let c_budget = c_budget.lock().unwrap().expect("c saw a deadline");
    assert!(
        c_budget <= Duration::from_millis(400),
        "c got what was left of a's 400 ms, not b's 5 s default: {c_budget:?}"
    );

    // c stopped its handler at the deadline it was given, and freed it.
    within("c to stop the expired handler", async {
        while c.stats().handlers_expired < 1 || c.stats().handlers_active > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_request_whose_deadline_passed_while_queued_is_not_run() {
    let worker = builder("worker")
        .max_concurrent_handlers(1)
        .when_busy(BusyPolicy::Wait { max_queued: 16 })
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    worker.on_request("work", move |req: Request| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            let hold: u64 = req.decode()?;
            tokio::time::sleep(Duration::from_millis(hold)).await;
            Ok::<_, HandlerError>(())
        }
    });
    let caller = client("caller").await;
    caller.connect(&address(&worker)).await.unwrap();

    // The first takes the only slot for 1.5 s; the second waits behind it with 200 ms.
    let first = {
        let caller = caller.clone();
        tokio::spawn(async move {
            caller
                .call("worker", "work")
                .timeout(Duration::from_secs(5))
                .send::<_, ()>(&1500u64)
                .await
        })
    };
    within("the first to start", async {
        while runs.load(Ordering::SeqCst) < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let second: node::Result<()> = caller
        .call("worker", "work")
        .timeout(Duration::from_millis(200))
        .send(&0u64)
        .await;
    assert!(second.unwrap_err().is_timeout());
    within("the queued one to expire", async {
        while worker.stats().handlers_expired < 1 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(within("the first", first).await.unwrap().is_ok());
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the expired one never ran");
    assert_eq!(worker.stats().handlers_queued, 0, "and left the queue");
}

#[tokio::test]
async fn metadata_limits_and_bad_keys_are_typed_errors() {
    let worker = builder("worker")
        .max_metadata(2, 1024)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    echo_meta(&worker);
    let caller = client("caller").await;
    caller.connect(&address(&worker)).await.unwrap();

    // Refused here, nothing sent: a reserved key, an empty one.
    for bad in [":budget", ""] {
        let refused: node::Result<()> =
            caller.call("worker", "meta").meta(bad, "x").send(&()).await;
        assert!(
            matches!(refused, Err(Error::Metadata(_))),
            "{bad:?}: {refused:?}"
        );
    }
    // Over our own limit (64 entries by default).
    let mut many = caller.call("worker", "meta");
    for i in 0..65 {
        many = many.meta(&format!("k{i}"), "v");
    }
    let refused: node::Result<()> = many.send(&()).await;
    assert_eq!(refused.unwrap_err().code(), ErrorCode::Metadata);

    // Within ours, over the receiver's (2 entries): refused there, typed here, not run.
    let refused: node::Result<Vec<(String, String)>> = caller
        .call("worker", "meta")
        .meta("a", "1")
        .meta("b", "2")
        .meta("c", "3")
        .send(&())
        .await;
    // The receiver's limits come back as numbers, not text.
    assert!(
        matches!(
            refused,
            Err(Error::Metadata(node::MetaError::TooLarge {
                entries: 3,
                max_entries: 2,
                max_bytes: 1024,
                ..
            }))
        ),
        "{refused:?}"
    );
    assert_eq!(worker.stats().metadata_refused, 1);
    assert_eq!(worker.stats().requests_handled, 0);
    let fits: Vec<(String, String)> = caller
        .call("worker", "meta")
        .meta("a", "1")
        .meta("b", "2")
        .send(&())
        .await
        .unwrap();
    assert_eq!(fits.len(), 2);
}

#[derive(Clone, Debug, PartialEq)]
struct User(String);

#[tokio::test]
async fn middleware_hands_typed_values_to_the_handler() {
    let worker = server("worker").await;
    // An auth layer: reads the token from the metadata, refuses without one, and gives the
    // handler the user it stands for.
    worker.layer(tower::layer::layer_fn(|inner: node::HandlerService| {
        tower::service_fn(move |mut req: Request| {
            let inner = inner.clone();
            async move {
                let Some(token) = req.meta().get_str("auth").map(str::to_owned) else {
                    return Err(HandlerError::new("UNAUTHORIZED", "no token").into());
                };
                req.extensions_mut()
                    .insert(User(format!("user-of-{token}")));
                inner.oneshot(req).await
            }
        })
    }));
    worker.on_request("whoami", |req: Request| async move {
        let user = req
            .extensions()
            .get::<User>()
            .cloned()
            .expect("set by the layer");
        Ok::<_, HandlerError>(user.0)
    });
    let caller = client("caller").await;
    caller.connect(&address(&worker)).await.unwrap();
    let me: String = caller
        .call("worker", "whoami")
        .meta("auth", "42")
        .send(&())
        .await
        .unwrap();
    assert_eq!(me, "user-of-42");
    let refused: node::Result<String> = caller.request("worker", "whoami", &()).await;
    assert!(
        matches!(&refused, Err(Error::Handler { code, .. }) if code == "UNAUTHORIZED"),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_trace_context_is_carried_on_by_the_calls_a_handler_makes() {
    // a -> b -> c: a sets a traceparent; b's handler calls c without touching metadata.
    let c = server("c").await;
    c.on_request("leaf", |req: Request| async move {
        Ok::<_, HandlerError>(req.meta().get_str("traceparent").map(str::to_owned))
    });
    let b = server("b").await;
    b.connect(&address(&c)).await.unwrap();
    let weak = b.downgrade();
    b.on_request("relay", move |_req: Request| {
        let node = weak.upgrade().expect("b is alive");
        async move {
            let seen: Option<String> = node.request("c", "leaf", &()).await?;
            Ok::<_, HandlerError>(seen)
        }
    });
    let a = client("a").await;
    a.connect(&address(&b)).await.unwrap();
    let sent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let seen: Option<String> = a
        .call("b", "relay")
        .meta("traceparent", sent)
        .send(&())
        .await
        .unwrap();
    let seen = node::TraceParent::parse(&seen.expect("c got a traceparent")).unwrap();
    let sent = node::TraceParent::parse(sent).unwrap();
    assert_eq!(seen.trace_id, sent.trace_id, "the same trace");
    assert_ne!(
        seen.parent_id, sent.parent_id,
        "b's span is c's parent, not a's"
    );
    assert_eq!(seen.flags, sent.flags);
    // Outside a handler nothing is added.
    a.connect(&address(&c)).await.unwrap();
    let none: Option<String> = a.request("c", "leaf", &()).await.unwrap();
    assert!(none.is_none());

    // A stream handler is in the trace the same way: b streams what c saw.
    let weak = b.downgrade();
    b.on_stream(
        "relay-stream",
        move |_req: Request, mut sink: node::Sink| {
            let node = weak.upgrade().expect("b is alive");
            async move {
                let seen: Option<String> = node.request("c", "leaf", &()).await?;
                sink.send(&seen).await?;
                Ok(())
            }
        },
    );
    let items: Vec<node::Result<Option<String>>> = within(
        "a traced stream",
        futures::StreamExt::collect(
            a.call("b", "relay-stream")
                .meta("traceparent", &sent.to_string())
                .stream::<Option<String>>(&()),
        ),
    )
    .await;
    let items: Vec<Option<String>> = items.into_iter().map(Result::unwrap).collect();
    let seen = node::TraceParent::parse(items[0].as_deref().expect("a traceparent")).unwrap();
    assert_eq!(
        seen.trace_id, sent.trace_id,
        "the stream is in the same trace"
    );
    assert_ne!(seen.parent_id, sent.parent_id, "under b's span");
}

#[tokio::test]
async fn a_handler_answers_with_metadata_directly_and_through_a_router() {
    let echo = |node: &Node| {
        node.on_request_service(
            "echo-meta",
            tower::service_fn(|req: Request| async move {
                node::Response::raw(req.payload().clone())
                    .with_all_meta(req.meta())
                    .with_meta("served-by", "worker")
                    .map_err(node::BoxError::from)
            }),
        );
    };
    let worker = server("worker").await;
    echo(&worker);
    let caller = client("caller").await;
    caller.connect(&address(&worker)).await.unwrap();
    let reply = caller
        .call("worker", "echo-meta")
        .meta("auth", "t0k3n")
        .raw()
        .send(bytes::Bytes::from_static(b"raw"))
        .await
        .unwrap();
    assert_eq!(reply.payload().as_ref(), b"raw");
    assert_eq!(reply.meta().get_str("auth"), Some("t0k3n"));
    assert_eq!(reply.meta().get_str("served-by"), Some("worker"));

    // Through a router, the reply's metadata comes back too.
    let hub = router("hub").await;
    let far = client("far").await;
    echo(&far);
    far.connect(&address(&hub)).await.unwrap();
    caller.connect(&address(&hub)).await.unwrap();
    let reply = within("far through the hub", async {
        loop {
            match caller
                .call("far", "echo-meta")
                .meta("k", "v")
                .raw()
                .send(bytes::Bytes::from_static(b"x"))
                .await
            {
                Ok(reply) => return reply,
                Err(Error::NodeNotFound { .. }) => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    assert_eq!(reply.meta().get_str("k"), Some("v"));
    assert_eq!(reply.meta().get_str("served-by"), Some("worker"));
    let keys: Vec<&str> = reply.meta().iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["k", "served-by"], "no framework entry shows");
}

/// The name and level of every span made under it (its filter decides which are made).
#[derive(Clone, Default)]
struct SpanLog(Arc<std::sync::Mutex<Vec<(&'static str, tracing::Level)>>>);

impl SpanLog {
    /// The node's request spans recorded so far, as (name, level), sorted.
    fn requests(&self) -> Vec<(&'static str, tracing::Level)> {
        let mut seen: Vec<_> = self
            .0
            .lock()
            .unwrap()
            .iter()
            .copied()
            .filter(|(name, _)| name.starts_with("zeronode."))
            .collect();
        seen.sort_by_key(|(name, level)| (*name, level.to_string()));
        seen
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for SpanLog {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let meta = attrs.metadata();
        self.0.lock().unwrap().push((meta.name(), *meta.level()));
    }
}

#[tokio::test]
async fn request_spans_are_made_at_the_nodes_span_level() {
    use tracing::Level;
    use tracing_subscriber::layer::SubscriberExt;
    let quiet = builder("quiet")
        .span_level(Level::DEBUG)
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let loud = server("loud").await;
    for node in [&quiet, &loud] {
        node.on_request("echo", |req: Request| async move {
            let text: String = req.decode()?;
            Ok::<_, HandlerError>(text)
        });
    }
    loud.connect(&address(&quiet)).await.unwrap();
    // One request each way, under a subscriber filtering `zeronode` at `filter`; this test's
    // runtime has one thread, so every task of both nodes runs under it.
    async fn both_ways(quiet: &Node, loud: &Node, filter: &str) -> SpanLog {
        let log = SpanLog::default();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::EnvFilter::new(filter))
            .with(log.clone());
        let _default = tracing::subscriber::set_default(subscriber);
        let there: String = loud.request("quiet", "echo", &"there").await.unwrap();
        let back: String = quiet.request("loud", "echo", &"back").await.unwrap();
        assert_eq!((there.as_str(), back.as_str()), ("there", "back"));
        log
    }
    // At `info` only the default node's spans are made: its call and its handling.
    let log = both_ways(&quiet, &loud, "zeronode=info").await;
    assert_eq!(
        log.requests(),
        [
            ("zeronode.call", Level::INFO),
            ("zeronode.handle", Level::INFO)
        ]
    );
    // At `debug` the quiet node's are there too, at its level.
    let log = both_ways(&quiet, &loud, "zeronode=debug").await;
    assert_eq!(
        log.requests(),
        [
            ("zeronode.call", Level::DEBUG),
            ("zeronode.call", Level::INFO),
            ("zeronode.handle", Level::DEBUG),
            ("zeronode.handle", Level::INFO),
        ]
    );
}
