//! Streams between nodes over loopback: typed and raw streamed replies and uploads, by id
//! and by filter, both directions of a connection, through middleware; cancellation, the
//! handler's error as the last item, a caller that leaves, a close that ends open streams.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use node::middleware::{from_fn, Next};
use node::{Body, ErrorCode, Filter, HandlerError, Node, Request, Sink};
use support::*;

/// A node serving `count` (a streamed reply of 0..n) and `sum` (an upload of numbers).
async fn serving(id: &str) -> Node {
    let node = builder(id)
        .option("role", "counter")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    serve(&node);
    node
}

fn serve(node: &Node) {
    node.on_stream("count", |req: Request, mut sink: Sink| async move {
        let up_to: u32 = req.decode()?;
        for i in 0..up_to {
            sink.send(&i).await?;
        }
        Ok(())
    });
    node.on_upload("sum", |_req: Request, mut body: Body| async move {
        let mut total = 0u64;
        while let Some(n) = body.next_as::<u64>().await {
            total += n?;
        }
        Ok::<_, HandlerError>(total)
    });
}

#[tokio::test]
async fn a_typed_stream_by_id_and_by_filter() {
    let server = serving("counter-1").await;
    let caller = client("caller").await;
    caller.connect(&address(&server)).await.unwrap();
    let items: Vec<u32> = within(
        "by id",
        caller
            .call("counter-1", "count")
            .stream::<u32>(&100u32)
            .window(4)
            .map(Result::unwrap)
            .collect(),
    )
    .await;
    assert_eq!(items, (0..100).collect::<Vec<u32>>());
    let shards = Filter::new().eq("role", "counter");
    let items = within(
        "by filter",
        caller.call(&shards, "count").stream::<u32>(&10u32).count(),
    )
    .await;
    assert_eq!(items, 10);
    let stats = caller.stats().streams;
    assert_eq!(stats.opened, 2);
    assert_eq!(stats.items_received, 110);
    assert_eq!(server.stats().streams.items_sent, 110);
}

/// The bound node calls the node that connected to it: streams go both ways.
#[tokio::test]
async fn a_bound_node_streams_from_and_uploads_to_the_node_that_connected() {
    let server = server("hub").await;
    let worker = client("worker").await;
    serve(&worker);
    worker.connect(&address(&server)).await.unwrap();
    let items: Vec<u32> = within(
        "downstream stream",
        server
            .call("worker", "count")
            .stream::<u32>(&20u32)
            .map(Result::unwrap)
            .collect(),
    )
    .await;
    assert_eq!(items.len(), 20);
    let total: u64 = within(
        "downstream upload",
        server
            .call("worker", "sum")
            .upload(futures::stream::iter(1..=100u64)),
    )
    .await
    .unwrap();
    assert_eq!(total, 5050);
}

#[tokio::test]
async fn raw_items_and_a_raw_upload() {
    let server = server("files").await;
    server.on_stream("chunks", |req: Request, mut sink: Sink| async move {
        let size = req.payload().len();
        for _ in 0..8 {
            sink.send_raw(Bytes::from(vec![7u8; size])).await?;
        }
        Ok(())
    });
    server.on_upload("store", |req: Request, mut body: Body| async move {
        let name = req.meta().get_str("name").unwrap_or_default().to_owned();
        let mut bytes = 0;
        while let Some(chunk) = body.next().await {
            bytes += chunk?.len();
        }
        Ok::<_, HandlerError>((name, bytes))
    });
    let caller = client("caller").await;
    caller.connect(&address(&server)).await.unwrap();
    let chunks: Vec<Bytes> = within(
        "raw stream",
        caller
            .call("files", "chunks")
            .raw()
            .stream(Bytes::from(vec![0u8; 64 * 1024]))
            .map(Result::unwrap)
            .collect(),
    )
    .await;
    assert_eq!(chunks.len(), 8);
    assert!(chunks.iter().all(|c| c.len() == 64 * 1024 && c[0] == 7));
    let body = futures::stream::iter((0..64).map(|_| Bytes::from(vec![1u8; 64 * 1024])));
    let reply = within(
        "raw upload",
        caller
            .call("files", "store")
            .meta("name", "blob.bin")
            .raw()
            .upload(body),
    )
    .await
    .unwrap();
    let (name, bytes): (String, usize) = reply.decode().unwrap();
    assert_eq!((name.as_str(), bytes), ("blob.bin", 64 * 64 * 1024));
}

#[tokio::test]
async fn the_handlers_error_is_the_last_item() {
    let server = server("flaky").await;
    server.on_stream("items", |_req: Request, mut sink: Sink| async move {
        sink.send(&"one").await?;
        Err(HandlerError::not_found("no two"))
    });
    let caller = client("caller").await;
    caller.connect(&address(&server)).await.unwrap();
    let all: Vec<_> = within(
        "stream",
        caller
            .call("flaky", "items")
            .stream::<String>(&())
            .collect(),
    )
    .await;
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].as_ref().unwrap(), "one");
    let error = all[1].as_ref().unwrap_err();
    assert_eq!(error.code(), ErrorCode::HandlerError);
    assert!(error.to_string().contains("no two"), "{error}");
}

/// A plain request to a streaming handler, and a stream from a plain handler: a typed
/// refusal, not a hang.
#[tokio::test]
async fn calling_a_stream_as_a_request_is_refused_with_a_code() {
    let server = serving("counter-1").await;
    let caller = client("caller").await;
    caller.connect(&address(&server)).await.unwrap();
    let refused = caller
        .request::<_, u32>("counter-1", "count", &3u32)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("FAILED_PRECONDITION"),
        "{refused}"
    );
}

#[tokio::test]
async fn dropping_the_stream_cancels_the_handler() {
    let server = server("forever").await;
    let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel();
    server.on_stream("ticks", move |_req: Request, mut sink: Sink| {
        let ended_tx = ended_tx.clone();
        async move {
            loop {
                if let Err(e) = sink.send(&"tick").await {
                    ended_tx.send(e.code()).unwrap();
                    return Ok(());
                }
            }
        }
    });
    let caller = client("caller").await;
    caller.connect(&address(&server)).await.unwrap();
    let mut items = caller
        .call("forever", "ticks")
        .stream::<String>(&())
        .window(2);
    for _ in 0..5 {
        within("item", items.next()).await.unwrap().unwrap();
    }
    drop(items);
    assert_eq!(
        within("handler told", ended_rx.recv()).await,
        Some(ErrorCode::Cancelled)
    );
}

/// Middleware sees a streamed request as any other: it can refuse it, or let it through.
#[tokio::test]
async fn streams_go_through_middleware() {
    let server = serving("counter-1").await;
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&seen);
    server.layer(from_fn(move |req: Request, next: Next| {
        let counted = Arc::clone(&counted);
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            if req.meta().get_str("tenant").is_none() {
                return Err(HandlerError::unauthenticated("no tenant").into());
            }
            next.run(req).await
        }
    }));
    let caller = client("caller").await;
    caller.connect(&address(&server)).await.unwrap();
    let refused: Vec<_> = within(
        "refused",
        caller
            .call("counter-1", "count")
            .stream::<u32>(&5u32)
            .collect(),
    )
    .await;
    assert_eq!(refused.len(), 1);
    assert!(refused[0]
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("no tenant"));
    let allowed = within(
        "allowed",
        caller
            .call("counter-1", "count")
            .meta("tenant", "acme")
            .stream::<u32>(&5u32)
            .count(),
    )
    .await;
    assert_eq!(allowed, 5);
    assert_eq!(seen.load(Ordering::SeqCst), 2);
}

/// The caller's node closing ends the stream on its side and the handler on the other.
#[tokio::test]
async fn a_caller_that_leaves_cancels_the_handler() {
    let server = server("forever").await;
    let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel();
    server.on_stream("ticks", move |_req: Request, mut sink: Sink| {
        let ended_tx = ended_tx.clone();
        async move {
            while sink.send(&"tick").await.is_ok() {}
            ended_tx.send(()).unwrap();
            Ok(())
        }
    });
    let caller = client("caller").await;
    caller.connect(&address(&server)).await.unwrap();
    let mut items = caller.call("forever", "ticks").stream::<String>(&());
    within("item", items.next()).await.unwrap().unwrap();
    within("caller closed", caller.close()).await;
    // What the caller still holds ends (with an error, or simply ends).
    let rest: Vec<_> = within("rest", items.collect()).await;
    // At most the window (the default, for small items) and the one in hand.
    let most = protocol::DEFAULT_WINDOW as usize + 1;
    assert!(rest.len() <= most, "{} items after the close", rest.len());
    within("handler ended", ended_rx.recv()).await.unwrap();
}

/// A close drains open streams within its grace, then ends them with a typed error.
#[tokio::test]
async fn a_close_ends_open_streams_after_its_grace() {
    let server = builder("forever")
        .close_grace(Duration::from_millis(300))
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    server.on_stream("ticks", |_req: Request, mut sink: Sink| async move {
        loop {
            sink.send(&"tick").await?;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let caller = client("caller").await;
    caller.connect(&address(&server)).await.unwrap();
    let mut items = caller.call("forever", "ticks").stream::<String>(&());
    within("item", items.next()).await.unwrap().unwrap();
    let closing = tokio::spawn({
        let server = server.clone();
        async move { server.close().await }
    });
    let last = within("the stream's end", async {
        let mut last = None;
        while let Some(item) = items.next().await {
            last = Some(item);
        }
        last
    })
    .await;
    let error = last.unwrap().unwrap_err();
    assert!(
        matches!(
            error.code(),
            ErrorCode::Cancelled | ErrorCode::PeerLeft | ErrorCode::ShuttingDown
        ),
        "{error:?}"
    );
    within("closed", closing).await.unwrap();
}

/// An idle timeout ends a stream whose next item is late, and tells the handler.
#[tokio::test]
async fn an_idle_timeout_ends_the_stream() {
    let server = server("slow").await;
    let (stopped_tx, mut stopped_rx) = tokio::sync::mpsc::unbounded_channel();
    server.on_stream("items", move |_req: Request, mut sink: Sink| {
        let stopped = Stopped(stopped_tx.clone());
        async move {
            let _stopped = stopped;
            sink.send(&"first").await?;
            // Far longer than the test waits: the idle timeout's cancel stops this.
            tokio::time::sleep(Duration::from_secs(600)).await;
            Ok(())
        }
    });
    let caller = client("caller").await;
    caller.connect(&address(&server)).await.unwrap();
    let all: Vec<_> = within(
        "stream",
        caller
            .call("slow", "items")
            .stream::<String>(&())
            .idle_timeout(Duration::from_millis(100))
            .collect(),
    )
    .await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[0].as_ref().unwrap(), "first");
    let idle = all[1].as_ref().unwrap_err();
    assert_eq!(idle.code(), ErrorCode::IdleTimeout, "{idle:?}");
    assert!(idle.is_idle_timeout() && idle.is_timeout());
    within("handler stopped", stopped_rx.recv()).await.unwrap();
}

/// Tells its channel when dropped: a handler holding one was stopped (or ended).
struct Stopped(tokio::sync::mpsc::UnboundedSender<()>);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// A network cut: the peer is declared gone by its heartbeats, and the stream ends with
/// `PeerLeft` on the caller while the handler on the other side is stopped.
#[tokio::test]
async fn a_peer_gone_ends_the_stream_with_peer_left() {
    let server = server("forever").await;
    let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel();
    /// Says when the handler ends, whether it returns or the node drops it.
    struct Ended(tokio::sync::mpsc::UnboundedSender<()>);
    impl Drop for Ended {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }
    server.on_stream("ticks", move |_req: Request, mut sink: Sink| {
        let ended = Ended(ended_tx.clone());
        async move {
            let _ended = ended;
            loop {
                sink.send(&"tick").await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let proxy = Proxy::start(&address(&server)).await;
    let caller = client("caller").await;
    caller.connect(&proxy.address).await.unwrap();
    let mut items = caller
        .call("forever", "ticks")
        .timeout(Duration::from_secs(60))
        .stream::<String>(&());
    within("item", items.next()).await.unwrap().unwrap();
    proxy.set_cut(true);
    let last = within("the stream's end", async {
        let mut last = None;
        while let Some(item) = items.next().await {
            last = Some(item);
        }
        last
    })
    .await;
    assert_eq!(last.unwrap().unwrap_err().code(), ErrorCode::PeerLeft);
    within("handler stopped", ended_rx.recv()).await.unwrap();
}

/// A leaf that can reach `counter-1` only through a router: the stream is relayed item by
/// item; the handler's error comes through as it was; a dropped stream stops the handler
/// two hops away; a slow reader holds the producer to the windows on the path; an upload
/// goes the same way.
#[tokio::test]
async fn a_stream_through_a_router() {
    let hub = router("hub").await;
    let worker = client("counter-1").await;
    serve(&worker);
    let sent = Arc::new(AtomicUsize::new(0));
    let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel();
    let counted = Arc::clone(&sent);
    worker.on_stream("forever", move |_req: Request, mut sink: Sink| {
        let (counted, ended_tx) = (Arc::clone(&counted), ended_tx.clone());
        async move {
            loop {
                if let Err(e) = sink.send(&"tick").await {
                    ended_tx.send(e.code()).unwrap();
                    return Ok(());
                }
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    worker.on_stream("fail", |_req: Request, _sink: Sink| async move {
        Err(HandlerError::permission_denied("not you"))
    });
    worker.connect(&address(&hub)).await.unwrap();
    let caller = client("caller").await;
    caller.connect(&address(&hub)).await.unwrap();

    let items: Vec<u32> = within(
        "through the router",
        caller
            .call("counter-1", "count")
            .stream::<u32>(&50u32)
            .window(4)
            .map(Result::unwrap)
            .collect(),
    )
    .await;
    assert_eq!(items, (0..50).collect::<Vec<u32>>());

    let failed: Vec<_> = within(
        "an error through the router",
        caller
            .call("counter-1", "fail")
            .stream::<u32>(&())
            .collect(),
    )
    .await;
    assert_eq!(failed.len(), 1);
    assert!(failed[0]
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("not you"));

    // Nobody reads: the worker stops at the windows on the path (the caller's 4, the
    // router's default for items this small, and the one item the router holds while it
    // waits to send it on).
    let mut items = caller
        .call("counter-1", "forever")
        .stream::<String>(&())
        .window(4);
    within("first", items.next()).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ahead = sent.load(Ordering::SeqCst);
    assert!(
        ahead <= 4 + protocol::DEFAULT_WINDOW as usize + 1 + 1,
        "{ahead} items sent ahead of the reader"
    );
    drop(items);
    assert_eq!(
        within("the worker told", ended_rx.recv()).await,
        Some(ErrorCode::Cancelled)
    );
    // An upload goes through the router too.
    let total: u64 = within(
        "an upload through the router",
        caller
            .call("counter-1", "sum")
            .upload(futures::stream::iter(1..=1000u64)),
    )
    .await
    .unwrap();
    assert_eq!(total, 500_500);
}

/// Two routers between caller and handler, by filter: each relays the items on (a stream
/// and an upload), and the handler sees where the request came from.
#[tokio::test]
async fn a_stream_through_two_routers_by_filter() {
    let r1 = router("r1").await;
    let r2 = router("r2").await;
    r2.connect(&address(&r1)).await.unwrap();
    let worker = builder("far")
        .option("role", "counter")
        .build()
        .await
        .unwrap();
    serve(&worker);
    worker.on_upload("bytes", |_req: Request, mut body: Body| async move {
        let mut total = 0u64;
        while let Some(chunk) = body.next().await {
            total += chunk?.iter().map(|&b| u64::from(b)).sum::<u64>();
        }
        Ok::<_, HandlerError>(total)
    });
    worker.on_stream("route", |req: Request, mut sink: Sink| async move {
        let route = req.route().map(|r| r.via).unwrap_or_default();
        for hop in route {
            sink.send(&hop.to_string()).await?;
        }
        Ok(())
    });
    worker.connect(&address(&r2)).await.unwrap();
    let caller = client("caller").await;
    caller.connect(&address(&r1)).await.unwrap();
    let counters = Filter::new().eq("role", "counter");
    let items = within(
        "two hops",
        caller
            .call(&counters, "count")
            .stream::<u32>(&300u32)
            .window(2)
            .map(Result::unwrap)
            .collect::<Vec<u32>>(),
    )
    .await;
    assert_eq!(items, (0..300).collect::<Vec<u32>>());
    let via: Vec<String> = within(
        "the route",
        caller
            .call("far", "route")
            .stream::<String>(&())
            .map(Result::unwrap)
            .collect(),
    )
    .await;
    assert_eq!(via, ["r1", "r2"]);
    let body = futures::stream::iter((0..200).map(|_| Bytes::from(vec![3u8; 10_000])));
    let total: u64 = within(
        "an upload through two routers",
        caller.call(&counters, "bytes").raw().upload(body),
    )
    .await
    .unwrap()
    .decode()
    .unwrap();
    assert_eq!(total, 200 * 10_000 * 3);
}

/// `upper`, a stream both ways: each item of the body comes back in capitals.
fn serve_upper(node: &Node) {
    node.on_stream("upper", |req: Request, mut sink: Sink| async move {
        let mut body = Body::take(&req).ok_or_else(|| HandlerError::invalid_argument("no body"))?;
        while let Some(word) = body.next().await {
            sink.send_raw(Bytes::from(word?.to_ascii_uppercase()))
                .await?;
        }
        Ok(())
    });
}

/// A stream both ways: the caller sends words, the handler answers each in upper case as
/// it reads them.
#[tokio::test]
async fn a_stream_both_ways() {
    let server = server("upper").await;
    serve_upper(&server);
    let caller = client("caller").await;
    caller.connect(&address(&server)).await.unwrap();
    let words: Vec<Bytes> = (0..200).map(|i| Bytes::from(format!("w{i}"))).collect();
    let back: Vec<Bytes> = within(
        "both ways",
        caller
            .call("upper", "upper")
            .raw()
            .bidi(Bytes::new(), futures::stream::iter(words.clone()))
            .window(2)
            .map(Result::unwrap)
            .collect(),
    )
    .await;
    let expected: Vec<Bytes> = words
        .iter()
        .map(|w| Bytes::from(w.to_ascii_uppercase()))
        .collect();
    assert_eq!(back, expected);
}

/// A stream both ways through routers: the body goes on as each next hop grants credit and
/// the reply comes back item by item, through one router and through two.
#[tokio::test]
async fn a_stream_both_ways_through_one_and_two_routers() {
    let r1 = router("r1").await;
    let r2 = router("r2").await;
    r2.connect(&address(&r1)).await.unwrap();
    let worker = client("upper").await;
    serve_upper(&worker);
    worker.connect(&address(&r2)).await.unwrap();
    let near = client("near").await;
    near.connect(&address(&r2)).await.unwrap();
    let far = client("far").await;
    far.connect(&address(&r1)).await.unwrap();
    let words: Vec<Bytes> = (0..500).map(|i| Bytes::from(format!("w{i}"))).collect();
    let expected: Vec<Bytes> = words
        .iter()
        .map(|w| Bytes::from(w.to_ascii_uppercase()))
        .collect();
    for (caller, hops) in [(&near, "one router"), (&far, "two routers")] {
        let back: Vec<Bytes> = within(
            hops,
            caller
                .call("upper", "upper")
                .raw()
                .bidi(Bytes::new(), futures::stream::iter(words.clone()))
                .window(2)
                .map(Result::unwrap)
                .collect(),
        )
        .await;
        assert_eq!(back, expected, "through {hops}");
    }
    assert_eq!(r1.stats().router.forwarded, 1);
    assert_eq!(r2.stats().router.forwarded, 2);
}

/// Streams under CURVE: the handler sees the caller's key and the call's metadata, for a
/// streamed reply and for an upload alike.
#[tokio::test]
async fn streams_under_curve_carry_the_callers_key_and_metadata() {
    let keys = || node::KeyPair::generate().expect("this build has CURVE");
    let (server_keys, client_keys) = (keys(), keys());
    let server = builder("vault")
        .curve(server_keys.clone())
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    // Echoes what the request carried: the caller's key and its `tenant`.
    let seen = |req: &Request| {
        let key = req.peer_key().map(|k| k.to_z85()).unwrap_or_default();
        let tenant = req
            .meta()
            .get("tenant")
            .and_then(|v| v.as_str().map(str::to_owned));
        (key, tenant.unwrap_or_default())
    };
    server.on_stream("who", move |req: Request, mut sink: Sink| async move {
        let (key, tenant) = seen(&req);
        sink.send(&key).await?;
        sink.send(&tenant).await?;
        Ok(())
    });
    server.on_upload("who-up", move |req: Request, mut body: Body| async move {
        let mut items = 0u32;
        while let Some(item) = body.next().await {
            item?;
            items += 1;
        }
        let (key, tenant) = seen(&req);
        Ok::<_, HandlerError>((key, tenant, items))
    });
    let caller = builder("teller")
        .curve(client_keys.clone())
        .build()
        .await
        .unwrap();
    caller
        .connect_with(
            &address(&server),
            node::ConnectOptions::new().server_key(server_keys.public),
        )
        .await
        .unwrap();

    let items: Vec<String> = within(
        "a stream under CURVE",
        caller
            .call("vault", "who")
            .meta("tenant", "acme")
            .stream::<String>(&())
            .map(Result::unwrap)
            .collect(),
    )
    .await;
    assert_eq!(items, [client_keys.public.to_z85(), "acme".to_owned()]);

    let chunks = futures::stream::iter((0..5).map(|_| Bytes::from_static(&[7; 100])));
    let (key, tenant, count): (String, String, u32) = within(
        "an upload under CURVE",
        caller
            .call("vault", "who-up")
            .meta("tenant", "globex")
            .upload(chunks),
    )
    .await
    .unwrap();
    assert_eq!(key, client_keys.public.to_z85());
    assert_eq!((tenant.as_str(), count), ("globex", 5));
    caller.close().await;
    server.close().await;
}

/// A handler waiting between items (not sending) is stopped when its caller drops the
/// stream, directly and through a router: the handler's task ends, not only its next send.
#[tokio::test]
async fn a_handler_idle_between_items_is_stopped_when_its_caller_drops_the_stream() {
    let hub = router("hub").await;
    let worker = builder("slow-worker")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    let (dropped_tx, mut dropped_rx) = tokio::sync::mpsc::unbounded_channel();
    worker.on_stream("slow", move |_req: Request, mut sink: Sink| {
        let guard = Stopped(dropped_tx.clone());
        async move {
            let _guard = guard;
            sink.send(&"first").await?;
            // Far longer than the test waits: only a cancellation ends this.
            tokio::time::sleep(Duration::from_secs(600)).await;
            Ok(())
        }
    });
    worker.connect(&address(&hub)).await.unwrap();
    let direct = client("direct").await;
    direct.connect(&address(&worker)).await.unwrap();
    let routed = client("routed").await;
    routed.connect(&address(&hub)).await.unwrap();
    for caller in [&direct, &routed] {
        let mut items = (caller.call("slow-worker", "slow"))
            .timeout(Duration::from_secs(600))
            .stream::<String>(&());
        let first = within("first item", items.next()).await.unwrap().unwrap();
        assert_eq!(first, "first");
        drop(items);
        // Bounded by the test's limit (15 s), well before the stream's own deadline.
        within("the handler stopped", dropped_rx.recv())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_stream_from_every_match_tags_each_item_and_one_failing_source_ends_alone() {
    let a = serving("a").await;
    let b = serving("b").await;
    // `c` matches too, but its handler fails after two items.
    let c = builder("c")
        .option("role", "counter")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await
        .unwrap();
    c.on_stream("count", |_req: Request, mut sink: Sink| async move {
        sink.send(&0u32).await?;
        sink.send(&1u32).await?;
        Err(HandlerError::new("E_DISK", "index unreadable"))
    });
    let caller = client("caller").await;
    for node in [&a, &b, &c] {
        caller.connect(&address(node)).await.unwrap();
    }
    let counters = Filter::new().eq("role", "counter");
    let found = caller.find(&counters).await.unwrap();
    let ids: Vec<_> = found.iter().map(|f| f.id.to_string()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert!(found.iter().all(|f| f.via.is_none() && !f.router));

    let items = within(
        "the streams",
        caller
            .call(node::Target::all(counters.clone()), "count")
            .stream_all::<u32>(&100u32),
    )
    .await
    .unwrap();
    let all: Vec<_> = within("every item", items.collect::<Vec<_>>()).await;
    let from = |id: &str| -> Vec<u32> {
        all.iter()
            .filter(|(from, _)| from.as_str() == id)
            .filter_map(|(_, item)| item.as_ref().ok().copied())
            .collect()
    };
    assert_eq!(from("a"), (0..100).collect::<Vec<_>>());
    assert_eq!(from("b"), (0..100).collect::<Vec<_>>());
    assert_eq!(from("c"), [0, 1]);
    let errors: Vec<_> = all
        .iter()
        .filter_map(|(from, item)| item.as_ref().err().map(|e| (from.as_str(), e)))
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "c");
    assert_eq!(
        errors[0].1.handler_code().map(|c| c.as_str()),
        Some("E_DISK")
    );

    // No match anywhere: refused before anything is sent; an id is not a fan-out.
    let nobody = Filter::new().eq("role", "nobody");
    let none = caller
        .call(node::Target::all(nobody), "count")
        .stream_all::<u32>(&1u32)
        .await;
    assert!(matches!(none, Err(node::Error::NoNodesMatchFilter)));
    let by_id = caller.call("a", "count").stream_all::<u32>(&1u32).await;
    assert_eq!(
        by_id.err().map(|e| e.code()),
        Some(ErrorCode::InvalidTarget)
    );
    caller.close().await;
}

#[tokio::test]
async fn a_stream_through_a_router_to_a_node_without_the_handler_names_the_callers_event() {
    let hub = router("hub").await;
    let leaf = serving("leaf").await;
    leaf.connect(&address(&hub)).await.unwrap();
    let caller = client("caller").await;
    caller.connect(&address(&hub)).await.unwrap();
    let mut items = caller.call("leaf", "nosuch").stream::<u32>(&3u32);
    let first = within("the end", items.next()).await;
    assert!(
        matches!(&first, Some(Err(node::Error::NoHandler { event })) if event == "nosuch"),
        "{first:?}"
    );
    caller.close().await;
}
