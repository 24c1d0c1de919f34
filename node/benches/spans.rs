//! What a recording `tracing` subscriber charges for one request's span, shaped as the
//! node's: `zeronode.handle` with `event` and `from` (and three empty fields), created,
//! entered once around the handler and closed. This is the subscriber's own cost, which the
//! `node-ctx` benchmark rows include on each side of every request.
//!
//! `cargo bench -p node --bench spans`. Group `span`: `none` (no subscriber: the span is
//! disabled), `registry` (`tracing_subscriber`'s registry and an `EnvFilter` of
//! `zeronode=info`), `fmt` (the same with an fmt layer writing nowhere, as the `node-ctx`
//! rows run), and `fmt+record` (also recording an outcome on every request, which the node
//! does only for failures).

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;

/// One request's span as the node makes it, entered once (the handler's one poll).
fn request_span(from: &str, record: bool) {
    let span = tracing::info_span!(
        target: "zeronode",
        "zeronode.handle",
        event = %"echo",
        from = %from,
        trace_id = tracing::field::Empty,
        outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if !span.is_disabled() {
        let _entered = span.enter();
        std::hint::black_box(&span);
    }
    if record {
        span.record("outcome", "ok");
    }
}

fn spans(c: &mut Criterion) {
    let filter = || tracing_subscriber::EnvFilter::new("zeronode=info");
    let dispatches = [
        ("none", None),
        (
            "registry",
            Some(Dispatch::new(tracing_subscriber::registry().with(filter()))),
        ),
        (
            "fmt",
            Some(Dispatch::new(
                tracing_subscriber::registry().with(filter()).with(
                    tracing_subscriber::fmt::layer()
                        .with_ansi(false)
                        .with_writer(std::io::sink),
                ),
            )),
        ),
    ];
    let from = "bench-client-12345";
    let mut group = c.benchmark_group("span");
    for (name, dispatch) in &dispatches {
        let run = |b: &mut criterion::Bencher<'_>, record: bool| match dispatch {
            Some(dispatch) => tracing::dispatcher::with_default(dispatch, || {
                b.iter(|| request_span(from, record))
            }),
            None => b.iter(|| request_span(from, record)),
        };
        group.bench_function(*name, |b| run(b, false));
        if *name == "fmt" {
            group.bench_function("fmt+record", |b| run(b, true));
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = spans
}
criterion_main!(benches);
