//! Streams over real loopback sockets: streamed replies, uploads, flow control, the
//! lifecycle (cancel, idle timeout, deadline, a peer gone) and bad input from a raw peer.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use protocol::{
    request_fn, stream_fn, tick_fn, upload_fn, Client, Envelope, Error, ErrorCode, Kind,
    RemoteError, Server, StreamOptions, Violation,
};

/// Generous: a loaded 2-core machine runs these beside other builds.
const LIMIT: Duration = Duration::from_secs(10);
const MAX: usize = 16 * 1024 * 1024;

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

async fn pair() -> (Server, Client) {
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    let client = Client::connect(server.endpoint(), LIMIT).await.unwrap();
    (server, client)
}

fn options() -> StreamOptions {
    StreamOptions::new(LIMIT)
}

/// A handler that streams `count` items "0", "1", ... then ends.
fn counting(sent: Arc<AtomicUsize>) -> protocol::RequestHandler {
    stream_fn(move |req, mut sink| {
        let sent = Arc::clone(&sent);
        async move {
            let count: u32 = req
                .decode()
                .map_err(|e| RemoteError::handler(e.to_string()))?;
            for i in 0..count {
                sink.send(Bytes::from(i.to_string()))
                    .await
                    .map_err(|e| RemoteError::new("SINK", e.to_string()))?;
                sent.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        }
    })
}

#[tokio::test]
async fn a_streamed_reply_arrives_item_by_item_then_ends() {
    let (server, client) = pair().await;
    server.on_request("count", counting(Arc::default()));
    let stream = client
        .peer()
        .request_stream(
            "count",
            &[],
            protocol::encode_value(&200u32).unwrap(),
            options().window(4),
        )
        .await
        .unwrap();
    let items: Vec<Bytes> = within("items", stream.map(Result::unwrap).collect()).await;
    let expected: Vec<Bytes> = (0..200).map(|i: u32| Bytes::from(i.to_string())).collect();
    assert_eq!(items, expected);
    let stats = client.stats();
    assert_eq!(stats.stream_items_received, 200);
    assert_eq!(server.stats().stream_items_sent, 200);
    assert_eq!(server.open_streams(), 0);
    assert_eq!(client.in_flight(), 0);
}

/// A stream both ways: the handler reads the body and answers each item as it comes, with
/// small windows both ways so that credit flows in both directions many times.
#[tokio::test]
async fn a_stream_both_ways() {
    let (server, client) = pair().await;
    server.set_stream_limits(2, 16);
    server.on_request(
        "upper",
        stream_fn(|req, mut sink| async move {
            let mut body = req
                .take_body()
                .ok_or_else(|| RemoteError::new("NO_BODY", "a body was expected"))?;
            while let Some(item) = body.next().await {
                let item = item.map_err(|e| RemoteError::new("BODY", e.to_string()))?;
                sink.send(Bytes::from(item.to_ascii_uppercase()))
                    .await
                    .map_err(|e| RemoteError::new("SINK", e.to_string()))?;
            }
            Ok(())
        }),
    );
    let words: Vec<Bytes> = (0..300).map(|i| Bytes::from(format!("word{i}"))).collect();
    let stream = client
        .peer()
        .request_bidi(
            "upper",
            &[],
            Bytes::new(),
            futures::stream::iter(words.clone()),
            options().window(3),
        )
        .await
        .unwrap();
    let back: Vec<Bytes> = within("both ways", stream.map(Result::unwrap).collect()).await;
    let expected: Vec<Bytes> = words
        .iter()
        .map(|w| Bytes::from(w.to_ascii_uppercase()))
        .collect();
    assert_eq!(back, expected);
    assert_eq!(server.open_streams(), 0);
}

/// A window of 0 is a window of 1: the stream still flows, one item at a time.
#[tokio::test]
async fn a_window_of_zero_is_one() {
    let (server, client) = pair().await;
    server.on_request("count", counting(Arc::default()));
    let stream = client
        .peer()
        .request_stream(
            "count",
            &[],
            protocol::encode_value(&20u32).unwrap(),
            options().window(0),
        )
        .await
        .unwrap();
    assert_eq!(within("items", stream.count()).await, 20);
}

#[tokio::test]
async fn the_handlers_error_is_the_last_item() {
    let (server, client) = pair().await;
    server.on_request(
        "fail",
        stream_fn(|_req, mut sink| async move {
            sink.send(Bytes::from_static(b"one")).await.ok();
            Err(RemoteError::new("NOPE", "no more"))
        }),
    );
    let mut stream = client
        .peer()
        .request_stream("fail", &[], Bytes::new(), options())
        .await
        .unwrap();
    assert_eq!(
        within("first", stream.next()).await.unwrap().unwrap(),
        Bytes::from_static(b"one")
    );
    match within("error", stream.next()).await {
        Some(Err(Error::Remote(e))) => assert_eq!(e.code, "NOPE"),
        other => panic!("expected the handler's error, got {other:?}"),
    }
    assert!(within("end", stream.next()).await.is_none());
}

/// The producer waits for credit: with nobody reading, it sends no more than the window.
#[tokio::test]
async fn a_slow_reader_holds_the_producer_to_the_window() {
    let (server, client) = pair().await;
    let sent = Arc::new(AtomicUsize::new(0));
    server.on_request("count", counting(Arc::clone(&sent)));
    let mut stream = client
        .peer()
        .request_stream(
            "count",
            &[],
            protocol::encode_value(&1000u32).unwrap(),
            options().window(8),
        )
        .await
        .unwrap();
    // Wait for the window to be used up (the handler then waits for credit).
    within("window sent", async {
        while sent.load(Ordering::SeqCst) < 8 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // Time for more to go out if anything let it (nothing should).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(sent.load(Ordering::SeqCst), 8);
    // Reading releases it, half a window at a time.
    for _ in 0..4 {
        within("item", stream.next()).await.unwrap().unwrap();
    }
    within("more sent", async {
        while sent.load(Ordering::SeqCst) < 12 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(sent.load(Ordering::SeqCst), 12);
    let rest = within("rest", stream.count()).await;
    assert_eq!(rest, 996);
}

#[tokio::test]
async fn dropping_the_stream_cancels_the_handler() {
    let (server, client) = pair().await;
    let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel();
    server.on_request(
        "forever",
        stream_fn(move |_req, mut sink| {
            let ended_tx = ended_tx.clone();
            async move {
                loop {
                    if let Err(e) = sink.send(Bytes::from_static(b"x")).await {
                        ended_tx.send(e.code()).unwrap();
                        return Ok(());
                    }
                }
            }
        }),
    );
    let mut stream = client
        .peer()
        .request_stream("forever", &[], Bytes::new(), options().window(2))
        .await
        .unwrap();
    for _ in 0..3 {
        within("item", stream.next()).await.unwrap().unwrap();
    }
    drop(stream);
    assert_eq!(
        within("handler ended", ended_rx.recv()).await,
        Some(ErrorCode::Cancelled)
    );
    within("stream closed", async {
        while server.open_streams() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(server.stats().streams_cancelled, 1);
    assert_eq!(client.stats().streams_cancelled, 1);
}

#[tokio::test]
async fn an_idle_timeout_ends_the_stream_and_cancels_the_handler() {
    let (server, client) = pair().await;
    // Told when the handler's task goes, whichever way.
    struct Stopped(tokio::sync::mpsc::UnboundedSender<()>);
    impl Drop for Stopped {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }
    let (stopped_tx, mut stopped_rx) = tokio::sync::mpsc::unbounded_channel();
    server.on_request(
        "stall",
        stream_fn(move |_req, mut sink| {
            let stopped = Stopped(stopped_tx.clone());
            async move {
                let _stopped = stopped;
                sink.send(Bytes::from_static(b"first")).await.ok();
                // Then nothing for far longer than the test waits: the caller's idle
                // timeout cancels the stream, which stops the handler here.
                tokio::time::sleep(Duration::from_secs(600)).await;
                Ok(())
            }
        }),
    );
    let mut stream = client
        .peer()
        .request_stream(
            "stall",
            &[],
            Bytes::new(),
            options().idle_timeout(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    within("first", stream.next()).await.unwrap().unwrap();
    match within("idle", stream.next()).await {
        Some(Err(e)) => assert_eq!(e.code(), ErrorCode::IdleTimeout),
        other => panic!("expected an idle timeout, got {other:?}"),
    }
    assert!(within("end", stream.next()).await.is_none());
    within("handler stopped", stopped_rx.recv()).await.unwrap();
}

#[tokio::test]
async fn the_deadline_bounds_the_whole_stream() {
    let (server, client) = pair().await;
    server.on_request(
        "slow",
        stream_fn(|_req, mut sink| async move {
            loop {
                if sink.send(Bytes::from_static(b"tick")).await.is_err() {
                    return Ok(());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }),
    );
    let stream = client
        .peer()
        .request_stream(
            "slow",
            &[],
            Bytes::new(),
            StreamOptions::new(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    let all: Vec<_> = within("stream", stream.collect()).await;
    // Some items, then the timeout as the last one (every item arrived before it).
    assert!(all.len() >= 2, "{all:?}");
    let (last, items) = all.split_last().unwrap();
    assert!(items.iter().all(Result::is_ok));
    assert!(matches!(last, Err(e) if e.is_timeout()), "{last:?}");
}

#[tokio::test]
async fn an_upload_is_read_as_a_stream_and_answered_once() {
    let (server, client) = pair().await;
    // A small window, so that credit goes back and forth many times.
    server.set_stream_limits(4, 16);
    server.on_request(
        "sum",
        upload_fn(|req, mut body| async move {
            let name: String = req
                .decode()
                .map_err(|e| RemoteError::handler(e.to_string()))?;
            let (mut count, mut bytes) = (0u64, 0u64);
            while let Some(item) = body.next().await {
                let item = item.map_err(|e| RemoteError::new("BODY", e.to_string()))?;
                count += 1;
                bytes += item.iter().map(|&b| u64::from(b)).sum::<u64>();
            }
            protocol::encode_value(&(name, count, bytes))
                .map_err(|e| RemoteError::handler(e.to_string()))
        }),
    );
    let chunks = (0..500u32).map(|i| Bytes::from(vec![(i % 251) as u8; 1000]));
    let expected: u64 = (0..500u64).map(|i| (i % 251) * 1000).sum();
    let reply = within(
        "upload",
        client.peer().upload(
            "sum",
            &[],
            protocol::encode_value("file.bin").unwrap(),
            futures::stream::iter(chunks),
            options(),
        ),
    )
    .await
    .unwrap();
    let (name, count, bytes): (String, u64, u64) = reply.decode_payload().unwrap();
    assert_eq!((name.as_str(), count, bytes), ("file.bin", 500, expected));
    assert_eq!(server.stats().stream_items_received, 500);
    assert_eq!(server.open_streams(), 0);
}

/// A handler that refuses after the first item stops the upload: the caller gets the
/// refusal without sending the rest.
#[tokio::test]
async fn an_upload_refused_early_stops_sending() {
    let (server, client) = pair().await;
    server.set_stream_limits(2, 16);
    server.on_request(
        "picky",
        upload_fn(|_req, mut body| async move {
            body.next().await;
            Err::<Bytes, _>(RemoteError::new("REFUSED", "not this file"))
        }),
    );
    let endless = futures::stream::repeat(Bytes::from_static(b"chunk"));
    match within(
        "upload",
        client
            .peer()
            .upload("picky", &[], Bytes::new(), endless, options()),
    )
    .await
    {
        Err(Error::Remote(e)) => assert_eq!(e.code, "REFUSED"),
        other => panic!("expected the refusal, got {other:?}"),
    }
    // Bounded by the window and the items in flight when the refusal came.
    assert!(client.stats().stream_items_sent < 100);
}

/// The server streams to its client as well: both ends are callers and callees.
#[tokio::test]
async fn a_server_streams_from_its_client_and_uploads_to_it() {
    let (server, client) = pair().await;
    client.on_request("count", counting(Arc::default()));
    client.on_request(
        "len",
        upload_fn(|_req, body| async move {
            let total = body
                .fold(0usize, |total, item| async move {
                    total + item.map(|i| i.len()).unwrap_or(0)
                })
                .await;
            Ok(Bytes::from(total.to_string()))
        }),
    );
    let (peer_tx, mut peer_rx) = tokio::sync::mpsc::unbounded_channel();
    server.on_tick(
        "hello",
        tick_fn(move |tick| {
            let _ = peer_tx.send(tick.from.clone());
            async {}
        }),
    );
    client.peer().tick("hello", Bytes::new()).await.unwrap();
    let peer = within("peer", peer_rx.recv()).await.unwrap();
    let stream = server
        .peer(&peer)
        .request_stream(
            "count",
            &[],
            protocol::encode_value(&50u32).unwrap(),
            options().window(3),
        )
        .await
        .unwrap();
    assert_eq!(within("items", stream.count()).await, 50);
    let items = futures::stream::iter((0..100).map(|_| Bytes::from_static(b"abc")));
    let reply = within(
        "upload",
        server
            .peer(&peer)
            .upload("len", &[], Bytes::new(), items, options()),
    )
    .await
    .unwrap();
    assert_eq!(reply.payload(), &Bytes::from_static(b"300"));
}

#[tokio::test]
async fn a_plain_request_to_a_streaming_handler_is_refused_with_a_code() {
    let (server, client) = pair().await;
    server.on_request("count", counting(Arc::default()));
    match client.peer().request("count", Bytes::new(), LIMIT).await {
        Err(Error::Remote(e)) => assert!(e.is_system(RemoteError::NOT_STREAMED), "{e:?}"),
        other => panic!("expected NOT_STREAMED, got {other:?}"),
    }
    // And a streamed call to a plain handler gets its reply as the one item.
    server.on_request(
        "echo",
        request_fn(|req| async move { Ok(req.payload().clone()) }),
    );
    let stream = client
        .peer()
        .request_stream("echo", &[], Bytes::from_static(b"hi"), options())
        .await
        .unwrap();
    let items: Vec<_> = within("reply", stream.collect()).await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].as_ref().unwrap(), &Bytes::from_static(b"hi"));
}

// --- Bad input, from a raw peer that writes frames by hand -----------------------------

const REPLY_STREAMED: u8 = 0b0000_0100;
const BODY: u8 = 0b0000_1000;

/// One message laid out by hand, as the envelope's documentation gives it (payload inline).
fn frame(kind: Kind, flags: u8, id: u64, event: &str, payload: &[u8]) -> Vec<Bytes> {
    let mut header = vec![0x5A, 1, kind as u8, flags];
    if !payload.is_empty() {
        header[3] |= 0b0000_0010;
    }
    header.extend_from_slice(&id.to_be_bytes());
    header.extend_from_slice(&(event.len() as u16).to_be_bytes());
    header.extend_from_slice(event.as_bytes());
    header.extend_from_slice(&0u32.to_be_bytes());
    header.extend_from_slice(payload);
    vec![Bytes::from(header)]
}

/// A request carrying a time budget (the metadata's first entry, as `meta.rs` lays it out).
fn request_with_budget(flags: u8, id: u64, event: &str, budget: Duration) -> Vec<Bytes> {
    let mut entry = vec![protocol::BUDGET.len() as u8];
    entry.extend_from_slice(protocol::BUDGET.as_bytes());
    entry.push(1); // kind: bytes
    entry.extend_from_slice(&8u32.to_be_bytes());
    entry.extend_from_slice(&(budget.as_micros() as u64).to_be_bytes());
    let mut header = vec![0x5A, 1, Kind::Request as u8, flags];
    header.extend_from_slice(&id.to_be_bytes());
    header.extend_from_slice(&(event.len() as u16).to_be_bytes());
    header.extend_from_slice(event.as_bytes());
    header.extend_from_slice(&(entry.len() as u32).to_be_bytes());
    header.extend_from_slice(&entry);
    vec![Bytes::from(header)]
}

async fn raw_peer(server: &Server) -> transport::Dealer {
    let raw = transport::Dealer::new().unwrap();
    raw.connect(server.endpoint()).unwrap();
    raw
}

/// The next message the raw peer receives, decoded.
async fn next(raw: &transport::Dealer) -> Envelope {
    let frames = within("raw receive", raw.recv()).await.unwrap();
    Envelope::decode(&frames, MAX).unwrap()
}

/// The server still serves a well-behaved client.
async fn still_serves(server: &Server) {
    server.on_request(
        "echo",
        request_fn(|req| async move { Ok(req.payload().clone()) }),
    );
    let client = Client::connect(server.endpoint(), LIMIT).await.unwrap();
    let reply = client
        .peer()
        .request("echo", Bytes::from_static(b"ok"), LIMIT)
        .await
        .unwrap();
    assert_eq!(reply.payload(), &Bytes::from_static(b"ok"));
}

#[tokio::test]
async fn items_credit_and_cancels_for_no_stream_are_dropped_and_counted() {
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    let raw = raw_peer(&server).await;
    raw.send(frame(Kind::StreamItem, BODY, 77, "", b"stray"))
        .await
        .unwrap();
    raw.send(frame(Kind::Credit, 0, 78, "", &5u32.to_be_bytes()))
        .await
        .unwrap();
    raw.send(frame(Kind::Cancel, 0, 79, "", &[])).await.unwrap();
    raw.send(frame(Kind::StreamItem, 0, 80, "", b"stray reply"))
        .await
        .unwrap();
    within("counted", async {
        while server.stats().stream_items_dropped < 4 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    still_serves(&server).await;
}

/// A body sent beyond its credit ends with a violation the handler sees, counted.
#[tokio::test]
async fn a_body_item_without_credit_ends_the_body() {
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    server.set_stream_limits(4, 16);
    server.on_request(
        "up",
        upload_fn(|_req, mut body| async move {
            // Read nothing until everything sent has arrived: no credit comes back early.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let mut read = 0;
            while let Some(item) = body.next().await {
                match item {
                    Ok(_) => read += 1,
                    Err(e) => return Err(RemoteError::new("BODY", format!("{read} {e}"))),
                }
            }
            Ok(Bytes::new())
        }),
    );
    let raw = raw_peer(&server).await;
    raw.send(frame(Kind::Request, BODY, 1, "up", &[]))
        .await
        .unwrap();
    let credit = next(&raw).await;
    assert_eq!(credit.kind(), Kind::Credit);
    // The first credit states the window, then grants: 4 and 4.
    assert_eq!(&credit.payload()[..], &[0, 0, 0, 4, 0, 0, 0, 4]);
    for _ in 0..5 {
        raw.send(frame(Kind::StreamItem, BODY, 1, "", b"item"))
            .await
            .unwrap();
    }
    // Credit for what the handler read comes first; then its answer.
    let answer = loop {
        let message = next(&raw).await;
        if message.kind() != Kind::Credit {
            break message;
        }
    };
    assert_eq!(answer.kind(), Kind::Error);
    let error: RemoteError = answer.decode_payload().unwrap();
    assert_eq!(error.code, "BODY");
    assert_eq!(
        error.message,
        format!(
            "4 stream protocol violation: {}",
            Violation::ItemWithoutCredit
        )
    );
    assert_eq!(server.stats().stream_violations, 1);
    still_serves(&server).await;
}

/// Credit beyond the window stops the handler's sink with a violation.
#[tokio::test]
async fn credit_beyond_the_window_stops_the_sink() {
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    server.on_request(
        "items",
        stream_fn(|_req, mut sink| async move {
            loop {
                if let Err(e) = sink.send(Bytes::from_static(b"x")).await {
                    return Err(RemoteError::new("SINK", e.to_string()));
                }
            }
        }),
    );
    let raw = raw_peer(&server).await;
    raw.send(frame(Kind::Request, REPLY_STREAMED, 1, "items", &[]))
        .await
        .unwrap();
    raw.send(frame(Kind::Credit, 0, 1, "", &2u32.to_be_bytes()))
        .await
        .unwrap();
    raw.send(frame(Kind::Credit, 0, 1, "", &5u32.to_be_bytes()))
        .await
        .unwrap();
    let mut items = 0;
    let answer = loop {
        let message = next(&raw).await;
        match message.kind() {
            Kind::StreamItem => items += 1,
            _ => break message,
        }
    };
    assert!(items <= 2, "{items} items on a window of 2");
    let error: RemoteError = answer.decode_payload().unwrap();
    assert_eq!(error.code, "SINK");
    assert!(
        error.message.contains("exceed the window"),
        "{}",
        error.message
    );
    assert_eq!(server.stats().stream_violations, 1);
    still_serves(&server).await;
}

/// A caller that never grants credit holds the handler no longer than its own budget.
#[tokio::test]
async fn credit_never_granted_ends_with_the_callers_budget() {
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    let (ended_tx, mut ended_rx) = tokio::sync::mpsc::unbounded_channel();
    server.on_request(
        "items",
        stream_fn(move |_req, mut sink| {
            let ended_tx = ended_tx.clone();
            async move {
                let sent = sink.send(Bytes::from_static(b"x")).await;
                ended_tx.send(sent.map_err(|e| e.code())).unwrap();
                Ok(())
            }
        }),
    );
    let raw = raw_peer(&server).await;
    raw.send(request_with_budget(
        REPLY_STREAMED,
        1,
        "items",
        Duration::from_millis(200),
    ))
    .await
    .unwrap();
    assert_eq!(
        within("handler stopped", ended_rx.recv()).await,
        Some(Err(ErrorCode::RequestTimeout))
    );
    within("stream closed", async {
        while server.open_streams() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// A streamed request reusing the id of an open stream is dropped; the open one goes on.
#[tokio::test]
async fn a_stream_id_reused_while_open_is_refused() {
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&started);
    server.on_request(
        "items",
        stream_fn(move |_req, mut sink| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                sink.send(Bytes::from_static(b"one")).await.ok();
                Ok(())
            }
        }),
    );
    let raw = raw_peer(&server).await;
    raw.send(frame(Kind::Request, REPLY_STREAMED, 9, "items", &[]))
        .await
        .unwrap();
    raw.send(frame(Kind::Request, REPLY_STREAMED, 9, "items", &[]))
        .await
        .unwrap();
    within("counted", async {
        while server.stats().stream_violations < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // The first stream is served as asked.
    raw.send(frame(Kind::Credit, 0, 9, "", &1u32.to_be_bytes()))
        .await
        .unwrap();
    let item = next(&raw).await;
    assert_eq!((item.kind(), item.id()), (Kind::StreamItem, 9));
    assert_eq!(next(&raw).await.kind(), Kind::Reply);
    assert_eq!(started.load(Ordering::SeqCst), 1);
}

/// An item over the payload limit ends the body with a typed violation.
#[tokio::test]
async fn a_body_item_over_the_size_limit_ends_the_body() {
    let (server, _events) =
        Server::bind_with("tcp://127.0.0.1:0", transport::Options::default(), 1024)
            .await
            .unwrap();
    server.on_request(
        "up",
        upload_fn(|_req, mut body| async move {
            while let Some(item) = body.next().await {
                if let Err(e) = item {
                    return Err(RemoteError::new("BODY", e.to_string()));
                }
            }
            Ok(Bytes::new())
        }),
    );
    let raw = raw_peer(&server).await;
    raw.send(frame(Kind::Request, BODY, 1, "up", &[]))
        .await
        .unwrap();
    assert_eq!(next(&raw).await.kind(), Kind::Credit);
    raw.send(frame(Kind::StreamItem, BODY, 1, "", &[7; 2000]))
        .await
        .unwrap();
    let error: RemoteError = next(&raw).await.decode_payload().unwrap();
    assert_eq!(error.code, "BODY");
    assert!(error.message.contains("2000 bytes"), "{}", error.message);
    assert_eq!(server.stats().stream_violations, 1);
}

/// A peer opening streams by the thousand and reading none: the server keeps at most its
/// limit open (the rest refused with a code), serves others throughout, and lets every
/// stream go when the peer is gone.
#[tokio::test]
async fn many_streams_opened_and_never_read_stay_bounded() {
    let server = Server::bind("tcp://127.0.0.1:0").await.unwrap();
    server.set_stream_limits(32, 100);
    let (peer_tx, mut peer_rx) = tokio::sync::mpsc::unbounded_channel();
    server.on_request(
        "items",
        stream_fn(move |req, mut sink| {
            let _ = peer_tx.send(req.from.clone());
            async move {
                loop {
                    if sink.send(Bytes::from(vec![0u8; 1000])).await.is_err() {
                        return Ok(());
                    }
                }
            }
        }),
    );
    let raw = raw_peer(&server).await;
    // A hundred thousand opened, none read: the limit refuses all but a hundred.
    const OPENED: u64 = 100_000;
    for id in 0..OPENED {
        raw.send(frame(Kind::Request, REPLY_STREAMED, id, "items", &[]))
            .await
            .unwrap();
        raw.send(frame(Kind::Credit, 0, id, "", &1u32.to_be_bytes()))
            .await
            .unwrap();
    }
    within("all seen", async {
        loop {
            let stats = server.stats();
            if stats.streams_accepted + stats.streams_refused >= OPENED {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let stats = server.stats();
    assert_eq!(stats.streams_accepted, 100);
    assert_eq!(stats.streams_refused, OPENED - 100);
    assert!(server.open_streams() <= 100);
    // One item per stream went out (their credit), no more.
    assert!(
        stats.stream_items_sent <= 100,
        "{}",
        stats.stream_items_sent
    );
    still_serves(&server).await;
    // The peer is gone (the node layer says so): its streams end, their handlers too.
    let peer = peer_rx.recv().await.unwrap();
    server.peer(&peer).fail_pending(|| Error::ConnectionLost);
    within("streams closed", async {
        while server.open_streams() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// A peer that predates streams gets a typed error for their kinds, never a panic (the
/// decoder's), and the item is answered by nothing.
#[test]
fn an_old_decoder_sees_unknown_kinds_as_typed_errors() {
    let mut header = frame(Kind::StreamItem, 0, 1, "", b"x")[0].to_vec();
    header[2] = 8;
    assert!(matches!(
        Envelope::decode(&[Bytes::from(header)], MAX),
        Err(protocol::DecodeError::UnknownKind(8))
    ));
}
