//! The scale run's floor: the `request_any` phase's pattern over plain TCP, one connection
//! per peer node, held and echoed by the same peer processes.
//!
//! The hub keeps the same window of requests in flight, each on a connection picked at
//! random as the random strategy of a request to any match picks a peer, and waits for its bytes to come
//! back. There is no framing, envelope, handshake or node: what a request costs here is the
//! kernel's TCP, tokio's reactor and the tasks of one connection on each side. Its rate at
//! 1,000 connections over its rate at 100, in the same run, is the machine's own price of
//! spreading calls over many connections, which no node can be under.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::error::{Error, Result};
use crate::layers::Layer;
use crate::measure::{drive_concurrent, Plan};
use crate::scale_report::RequestAny;

/// The hub's end of every floor connection.
pub(crate) struct Floor {
    conns: Vec<Arc<Conn>>,
    /// The bytes of one request (and of its echo) in the phase running now.
    size: Arc<AtomicUsize>,
}

/// One connection: its write half, and the requests waiting for their echo, in order.
struct Conn {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    waiting: Mutex<VecDeque<oneshot::Sender<()>>>,
}

impl Floor {
    /// Accepts `count` connections on `listener`, within `limit`, and starts their readers.
    pub(crate) async fn accept(
        listener: &TcpListener,
        count: usize,
        limit: Duration,
    ) -> Result<Floor> {
        let size = Arc::new(AtomicUsize::new(1));
        let mut conns = Vec::with_capacity(count);
        let deadline = tokio::time::Instant::now() + limit;
        while conns.len() < count {
            let (stream, _) = tokio::time::timeout_at(deadline, listener.accept())
                .await
                .map_err(|_| {
                    Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("{} of {count} floor connections in {limit:?}", conns.len()),
                    ))
                })??;
            stream.set_nodelay(true)?;
            let (reader, writer) = stream.into_split();
            let conn = Arc::new(Conn {
                writer: tokio::sync::Mutex::new(writer),
                waiting: Mutex::new(VecDeque::new()),
            });
            tokio::spawn(read_echoes(reader, Arc::clone(&conn), Arc::clone(&size)));
            conns.push(conn);
        }
        Ok(Floor { conns, size })
    }

    /// `window` requests of `size` bytes in flight, each on a random connection, for
    /// `duration` after `warmup`: rate, latency and the hub's CPU. A request of 0 bytes is
    /// sent as 1 (an echo of nothing would never come back).
    pub(crate) async fn requests(
        &self,
        size: usize,
        window: usize,
        warmup: Duration,
        duration: Duration,
    ) -> Result<RequestAny> {
        let size = size.max(1);
        // Nothing is in flight between phases: the readers see the new size from the start.
        self.size.store(size, Ordering::SeqCst);
        let payload = vec![0xab; size];
        let plan = Plan::starting_now(warmup, duration);
        let cpu_before = crate::scale::cpu_seconds();
        let started = Instant::now();
        // xorshift64: a fixed, cheap stream of picks (the node's random strategy is not
        // what is measured here).
        let state = Cell::new(0x2545_f491_4f6c_dd1du64);
        let pick = || {
            let mut x = state.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            state.set(x);
            (x % self.conns.len() as u64) as usize
        };
        let recorder = drive_concurrent(window, plan, || {
            let conn = Arc::clone(&self.conns[pick()]);
            let payload = &payload;
            async move {
                let (tx, rx) = oneshot::channel();
                // Queued before it is written, so that the echo always finds its request.
                conn.waiting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push_back(tx);
                conn.writer.lock().await.write_all(payload).await?;
                rx.await.map_err(|_| Error::UnexpectedReply)
            }
        })
        .await?;
        let hub_cpu = crate::scale::busy(
            cpu_before,
            crate::scale::cpu_seconds(),
            started.elapsed().as_secs_f64(),
        );
        let point = recorder.finish(Layer::Floor, size, window);
        Ok(RequestAny::from_point(point, window, hub_cpu))
    }
}

/// Completes the connection's waiting requests in order, one per `size` bytes that come
/// back, until the connection ends (its waiting requests then fail).
async fn read_echoes(
    mut reader: tokio::net::tcp::OwnedReadHalf,
    conn: Arc<Conn>,
    size: Arc<AtomicUsize>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    let mut have = 0usize;
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => {
                conn.waiting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clear();
                return;
            }
            Ok(n) => have += n,
        }
        loop {
            let one = size.load(Ordering::SeqCst);
            if have < one {
                break;
            }
            have -= one;
            if let Some(waiter) = conn
                .waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front()
            {
                let _ = waiter.send(());
            }
        }
    }
}

/// The peer side: `count` connections to the hub's floor listener at `address`, each
/// writing back whatever it reads, until the process ends.
pub(crate) async fn echo(address: &str, count: u32) -> Result<()> {
    for _ in 0..count {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        tokio::spawn(async move {
            let (mut reader, mut writer) = stream.into_split();
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if writer.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
    Ok(())
}
