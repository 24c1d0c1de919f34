//! With the `otel` feature: one OpenTelemetry trace across client -> router -> worker, three
//! nodes over loopback, recorded by the SDK's in-memory exporter. Run with
//! `cargo test -p node --features otel --test otel`.

mod support;

use std::time::Duration;

use node::{Error, HandlerError, Request};
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use support::*;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// Whether `span` has the attribute `key` = `value`.
fn has(span: &SpanData, key: &str, value: &str) -> bool {
    span.attributes
        .iter()
        .any(|kv| kv.key.as_str() == key && kv.value.as_str() == value)
}

/// The span called `name` with the attribute `key` = `value`, if there is one.
fn find<'a>(spans: &'a [SpanData], name: &str, key: &str, value: &str) -> Option<&'a SpanData> {
    spans.iter().find(|s| s.name == name && has(s, key, value))
}

fn named<'a>(spans: &'a [SpanData], name: &str, event: &str) -> &'a SpanData {
    find(spans, name, "event", event)
        .unwrap_or_else(|| panic!("no {name} span for {event:?} in {spans:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_spans_client_router_and_worker_with_correct_parents() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let tracer = provider.tracer("zeronode-test");
    // Global: the nodes' tasks run on the runtime's worker threads.
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer)),
    )
    .unwrap();

    let router = router("router").await;
    let worker = client("worker").await;
    worker.on_request("work", |req: Request| async move {
        // The handler runs inside its span, in the caller's trace.
        Ok::<_, HandlerError>(req.meta().get_str("traceparent").map(str::to_owned))
    });
    worker.connect(&address(&router)).await.unwrap();
    let caller = client("caller").await;
    caller.connect(&address(&router)).await.unwrap();

    let root = tracing::info_span!("test.root");
    let seen: Option<String> = async {
        within("the worker through the router", async {
            loop {
                match caller.call("worker", "work").send(&()).await {
                    Ok(seen) => return seen,
                    Err(Error::NodeNotFound { .. }) => {
                        tokio::time::sleep(Duration::from_millis(20)).await
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        })
        .await
    }
    .instrument(root)
    .await;
    assert!(seen.is_some(), "the worker got a traceparent");
    // A call that fails: its span says how, and its status is an error.
    let missing = caller.call("nobody", "work").send::<_, ()>(&()).await;
    assert!(missing.is_err());
    // A call given up before it ended (its future dropped): cancelled, not a success.
    drop(
        caller
            .call("worker", "dropped")
            .raw()
            .send(bytes::Bytes::new()),
    );
    // Spans end when their futures do; the worker's answers before it ends, so give the
    // nodes a moment (bounded) to close theirs.
    let spans = within("the three nodes' spans", async {
        loop {
            let _ = provider.force_flush();
            let spans = exporter.get_finished_spans().unwrap();
            let handles = spans.iter().filter(|s| s.name == "zeronode.handle").count();
            let failed_call = find(&spans, "zeronode.call", "to", "nobody").is_some();
            let dropped = find(&spans, "zeronode.call", "event", "dropped").is_some();
            if spans.iter().any(|s| s.name == "test.root") && handles >= 2 && failed_call && dropped
            {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    let root = spans.iter().find(|s| s.name == "test.root").unwrap();
    let trace_id = root.span_context.trace_id();
    // The last (successful) call: the caller's span, the router's, the worker's. A span
    // records an outcome only when its request failed, and its status is then an error.
    let calls: Vec<&SpanData> = spans.iter().filter(|s| s.name == "zeronode.call").collect();
    let failed = |s: &SpanData| s.attributes.iter().any(|kv| kv.key.as_str() == "outcome");
    let call = calls
        .iter()
        .rev()
        .find(|s| !failed(s))
        .expect("a call that succeeded");
    assert_eq!(
        call.status,
        opentelemetry::trace::Status::Unset,
        "{call:#?}"
    );
    let missed = find(&spans, "zeronode.call", "to", "nobody").unwrap();
    assert!(has(missed, "outcome", "refused"), "{missed:#?}");
    assert!(
        matches!(missed.status, opentelemetry::trace::Status::Error { .. }),
        "{missed:#?}"
    );
    let dropped = named(&spans, "zeronode.call", "dropped");
    assert!(has(dropped, "outcome", "cancelled"), "{dropped:#?}");
    let at_router = named(&spans, "zeronode.handle", "_system:forward");
    let at_worker = named(&spans, "zeronode.handle", "work");
    for span in [*call, at_router, at_worker] {
        assert_eq!(span.span_context.trace_id(), trace_id, "{span:#?}");
    }
    assert_eq!(call.parent_span_id, root.span_context.span_id());
    assert_eq!(at_router.parent_span_id, call.span_context.span_id());
    assert_eq!(at_worker.parent_span_id, at_router.span_context.span_id());
    assert_ne!(at_worker.parent_span_id, SpanId::INVALID);
    // The traceparent the worker's handler read names the router's span as its parent.
    let seen = node::TraceParent::parse(&seen.unwrap()).unwrap();
    assert_eq!(seen.parent_id, at_router.span_context.span_id().to_bytes());
}
