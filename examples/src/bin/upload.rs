//! A file uploaded in chunks, its checksum compared at the other end.
//!
//! The client sends a generated "file" of 64 KiB chunks as a streamed body; the store
//! reads them as they come (it never holds more than its window of chunks: 32 x 64 KiB),
//! checksums them and answers with the size and the checksum, which the client compares
//! with its own. The checksum is std's `DefaultHasher`: it catches a lost, repeated or
//! reordered chunk, it is no defence against tampering (CURVE is, `secure.rs`).
//!
//! Run it with `cargo run -p examples --bin upload` (64 MiB), or give the size in MiB:
//! `cargo run --release -p examples --bin upload -- 1024` for 1 GiB.

use std::hash::{DefaultHasher, Hasher};
use std::time::Instant;

use bytes::Bytes;
use examples::{address, init_tracing, unexpected, Result};
use futures::StreamExt;
use node::{Body, HandlerError, Node, Request};

const CHUNK: usize = 64 * 1024;

/// Chunk `i` of the generated file: its bytes differ from one chunk to the next.
fn chunk(i: usize) -> Bytes {
    let seed = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let bytes: Vec<u8> = (0..CHUNK)
        .map(|j| (seed >> (j % 8 * 8)) as u8 ^ j as u8)
        .collect();
    Bytes::from(bytes)
}

#[tokio::main]
async fn main() -> Result {
    init_tracing();
    let mib: usize = match std::env::args().nth(1) {
        Some(arg) => arg.parse().map_err(unexpected)?,
        None => 64,
    };
    let chunks = mib * 1024 * 1024 / CHUNK;

    let store = Node::builder()
        .id("store")
        .bind("tcp://127.0.0.1:0")
        .build()
        .await?;
    store.on_upload("put", |req: Request, mut body: Body| async move {
        let name = req.meta().get_str("name").unwrap_or("unnamed").to_owned();
        let (mut size, mut hasher) = (0u64, DefaultHasher::new());
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            size += chunk.len() as u64;
            hasher.write(&chunk);
        }
        println!("store: {name}: {size} bytes received");
        Ok::<_, HandlerError>((size, hasher.finish()))
    });

    let client = Node::builder().id("client").build().await?;
    client.connect(&address(&store)?).await?;
    // The client's own checksum, computed as the chunks leave.
    let mut sent = DefaultHasher::new();
    for i in 0..chunks {
        sent.write(&chunk(i));
    }
    let started = Instant::now();
    // Raw items: each chunk goes as it is, no MessagePack around it.
    let reply = client
        .call("store", "put")
        .meta("name", "data.bin")
        .timeout(std::time::Duration::from_secs(600))
        .raw()
        .upload(futures::stream::iter(0..chunks).map(chunk))
        .await?;
    let (size, checksum): (u64, u64) = reply.decode()?;
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "client: {size} bytes in {chunks} chunks, checksum {}",
        if checksum == sent.finish() {
            "matches"
        } else {
            "DIFFERS"
        }
    );
    eprintln!("client: {:.0} MiB/s", mib as f64 / seconds);

    client.close().await;
    store.close().await;
    Ok(())
}
