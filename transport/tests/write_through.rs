//! Write-through on the native engine: a send on an idle connection writes to the socket
//! itself, a send behind bytes not yet written queues for the connection's driver. Bytes
//! must go out in the order they were queued either way, every message exactly once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::runtime::{Builder, Runtime};
use transport::{Curve, Dealer, Engine, KeyPair, Options, PeerId, Router};

mod support;
use support::{frames, within};

/// How long we watch for a message that must not arrive (yet).
const QUIET: Duration = Duration::from_millis(300);

/// A payload that says who sent it and its place in that sender's sequence, `len` bytes
/// long (at least 8), each byte after the header following from both so that a byte out of
/// place shows.
fn tagged(sender: u32, seq: u32, len: usize) -> Bytes {
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&sender.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend((8..len).map(|i| (i as u32 ^ seq ^ (sender << 3)) as u8));
    Bytes::from(out)
}

/// The sender and place of a [`tagged`] payload, after checking every byte of it.
fn untag(payload: &[u8]) -> (u32, u32) {
    let sender = u32::from_be_bytes(payload[..4].try_into().unwrap());
    let seq = u32::from_be_bytes(payload[4..8].try_into().unwrap());
    assert_eq!(
        payload,
        &tagged(sender, seq, payload.len())[..],
        "sender {sender}, message {seq}: corrupted"
    );
    (sender, seq)
}

/// The size of a sender's message `seq`: mostly small, some larger than the outbox copies
/// (queued as pieces of their own), a few of several pieces of the socket buffer.
fn size_of(seq: u32) -> usize {
    match seq % 97 {
        0 => 300 * 1024,
        n if n % 10 == 0 => 20 * 1024,
        n => 8 + n as usize * 3,
    }
}

/// Counts each sender's messages, checking that they come in order, each once.
#[derive(Default)]
struct Order(HashMap<u32, u32>);

impl Order {
    fn saw(&mut self, message: &[Bytes]) {
        assert_eq!(message.len(), 2, "a header frame and the payload");
        let (sender, seq) = untag(&message[1]);
        assert_eq!(&message[0][..], &sender.to_be_bytes()[..]);
        let next = self.0.entry(sender).or_insert(0);
        assert_eq!(seq, *next, "sender {sender}: message {seq} after {}", *next);
        *next += 1;
    }
}

fn native() -> Options {
    Options::default().engine(Engine::Native)
}

/// Server and client options: plain, or CURVE.
fn options(curve: bool) -> (Options, Options) {
    if !curve {
        return (native(), native());
    }
    let server = KeyPair::generate().unwrap();
    let client = KeyPair::generate().unwrap();
    (
        native().curve(Curve::server(&server)),
        native().curve(Curve::client(&client, server.public)),
    )
}

/// A Router bound to `endpoint` and a Dealer connected to it, the connection up (a first
/// message went through): the Dealer's routing id at the Router.
async fn pair(endpoint: &str, curve: bool) -> (Router, Dealer, PeerId) {
    let (server, client) = options(curve);
    let router = Router::with_options(server).unwrap();
    let bound = router.bind(endpoint).unwrap();
    let dealer = Dealer::with_options(client).unwrap();
    dealer.connect(&bound).unwrap();
    dealer.send(frames(&[b"hello"])).await.unwrap();
    let (peer, got) = within("first message", router.recv()).await.unwrap();
    assert_eq!(got, frames(&[b"hello"]));
    (router, dealer, peer)
}

const THREADS: u32 = 3;
const TASKS: u32 = 3;
const PER_SENDER: u32 = 1_500;

/// Sends each sender's messages on `send`: `THREADS` threads outside the runtime and
/// `TASKS` tasks on it, each pausing now and then so that the connection goes idle (the
/// next message written through) between bursts (queued behind it).
fn send_from_many<S>(runtime: &Runtime, send: S) -> Vec<std::thread::JoinHandle<()>>
where
    S: Fn(Vec<Bytes>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send
        + Sync
        + 'static,
{
    let send = Arc::new(send);
    let mut threads = Vec::new();
    for sender in 0..THREADS + TASKS {
        let send = Arc::clone(&send);
        let one = move |seq: u32| {
            let message = vec![
                Bytes::copy_from_slice(&sender.to_be_bytes()),
                tagged(sender, seq, size_of(seq)),
            ];
            send(message)
        };
        let pause = move |seq: u32| match (seq + sender * 7) % 50 {
            0 => Some(Duration::from_millis(1)),
            n if n % 5 == 0 => Some(Duration::from_micros(50)),
            _ => None,
        };
        if sender < THREADS {
            let handle = runtime.handle().clone();
            threads.push(std::thread::spawn(move || {
                for seq in 0..PER_SENDER {
                    handle.block_on(one(seq));
                    if let Some(pause) = pause(seq) {
                        std::thread::sleep(pause);
                    }
                }
            }));
        } else {
            let task = runtime.spawn(async move {
                for seq in 0..PER_SENDER {
                    one(seq).await;
                    match pause(seq) {
                        Some(pause) => tokio::time::sleep(pause).await,
                        None if seq % 3 == 0 => tokio::task::yield_now().await,
                        None => {}
                    }
                }
            });
            let handle = runtime.handle().clone();
            threads.push(std::thread::spawn(move || {
                handle.block_on(task).unwrap();
            }));
        }
    }
    threads
}

/// Every sender's messages, from threads and tasks at once, arrive in order and once, on
/// one connection, both ways.
fn many_senders_keep_their_order(endpoint: &str, curve: bool) {
    let runtime = Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (router, dealer, peer) = runtime.block_on(pair(endpoint, curve));
    let total = (THREADS + TASKS) * PER_SENDER;

    // Requests' way: Dealer to Router.
    let sending = {
        let dealer = dealer.clone();
        send_from_many(&runtime, move |message| {
            let dealer = dealer.clone();
            Box::pin(async move { dealer.send(message).await.unwrap() })
        })
    };
    runtime.block_on(within("every message to the router", async {
        let mut order = Order::default();
        for _ in 0..total {
            let (from, message) = router.recv().await.unwrap();
            assert_eq!(from, peer);
            order.saw(&message);
        }
    }));
    for thread in sending {
        thread.join().unwrap();
    }

    // Replies' way: Router to Dealer.
    let sending = {
        let router = router.clone();
        send_from_many(&runtime, move |message| {
            let router = router.clone();
            let peer = peer.clone();
            Box::pin(async move { router.send(&peer, message).await.unwrap() })
        })
    };
    runtime.block_on(within("every message to the dealer", async {
        let mut order = Order::default();
        for _ in 0..total {
            order.saw(&dealer.recv().await.unwrap());
        }
    }));
    for thread in sending {
        thread.join().unwrap();
    }
    runtime.block_on(async {
        dealer.close().await;
        router.close().await;
    });
}

#[test]
fn many_senders_keep_their_order_over_tcp() {
    many_senders_keep_their_order("tcp://127.0.0.1:0", false);
}

#[test]
fn many_senders_keep_their_order_over_ipc() {
    many_senders_keep_their_order("ipc://*", false);
}

#[test]
fn many_senders_keep_their_order_over_tcp_with_curve() {
    many_senders_keep_their_order("tcp://127.0.0.1:0", true);
}

#[test]
fn many_senders_keep_their_order_over_ipc_with_curve() {
    many_senders_keep_their_order("ipc://*", true);
}

/// A Dealer on a runtime nobody drives (current-thread, outside `block_on`) and a Router on
/// a runtime of its own: what reaches the Router while the Dealer's runtime stands still
/// was written by the sender itself.
struct Still {
    client: Runtime,
    server: Runtime,
    router: Router,
    dealer: Dealer,
    peer: PeerId,
}

impl Still {
    fn new(endpoint: &str, server: Options, client: Options) -> Still {
        let server_rt = Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let client_rt = Builder::new_current_thread().enable_all().build().unwrap();
        let router = server_rt.block_on(async { Router::with_options(server).unwrap() });
        let bound = server_rt.block_on(async { router.bind(endpoint).unwrap() });
        let dealer = client_rt.block_on(async {
            let dealer = Dealer::with_options(client).unwrap();
            dealer.connect(&bound).unwrap();
            dealer
        });
        let mut still = Still {
            client: client_rt,
            server: server_rt,
            router,
            dealer,
            peer: PeerId::from(""),
        };
        // Up, both ways: the Dealer's driver has run since its last write, having read the
        // reply.
        still.dealer.send_now(&frames(&[b"hello"])).unwrap();
        let (peer, _) = still.while_driven(|| {
            still
                .server
                .block_on(within("hello", still.router.recv()))
                .unwrap()
        });
        still
            .server
            .block_on(still.router.send(&peer, frames(&[b"welcome"])))
            .unwrap();
        let got = still
            .client
            .block_on(within("welcome", still.dealer.recv()))
            .unwrap();
        assert_eq!(got, frames(&[b"welcome"]));
        still.peer = peer;
        still
    }

    /// Runs `f` on another thread while the Dealer's runtime runs (its driver with it),
    /// until `f` returns.
    fn while_driven<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| tx.send(f()).unwrap());
            self.client.block_on(async {
                loop {
                    if let Ok(got) = rx.try_recv() {
                        return got;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        })
    }

    /// The next message at the Router, if one comes within `wait`.
    fn at_router(&self, wait: Duration) -> Option<Vec<Bytes>> {
        self.server.block_on(async {
            tokio::time::timeout(wait, self.router.recv())
                .await
                .ok()
                .map(|got| {
                    let (peer, message) = got.unwrap();
                    assert_eq!(peer, self.peer);
                    message
                })
        })
    }

    /// Runs the Dealer's runtime (its driver) until the next message reached the Router:
    /// that message.
    fn drive_until_received(&self) -> Vec<Bytes> {
        self.while_driven(|| self.at_router(support::LIMIT))
            .expect("the message reached the router")
    }
}

/// On an idle connection the sender writes its message itself (it arrives while the
/// driver cannot run); the next one, before the driver has run again, waits for it. The
/// connection is idle again after a run of the driver that wrote nothing and received one
/// message, not after one that wrote, nor after one that received several (a batch of
/// requests, whose answers are best written together).
fn write_through_only_when_idle(endpoint: &str, curve: bool) {
    let (server, client) = options(curve);
    let still = Still::new(endpoint, server, client);
    let written_through = |what: &'static [u8]| {
        still.dealer.send_now(&frames(&[what])).unwrap();
        assert_eq!(
            still.at_router(support::LIMIT),
            Some(frames(&[what])),
            "written through by the sender, its driver standing still"
        );
    };
    let queued = |what: &[&'static [u8]]| {
        for message in what {
            still.dealer.send_now(&frames(&[message])).unwrap();
        }
        assert_eq!(
            still.at_router(QUIET),
            None,
            "queued for the driver, which has not run"
        );
        assert_eq!(still.drive_until_received(), frames(&[what[0]]));
        for message in &what[1..] {
            assert_eq!(still.at_router(support::LIMIT), Some(frames(&[message])));
        }
    };
    // From the router, `n` messages the dealer's driver reads in one run.
    let answers = |n: usize| {
        for _ in 0..n {
            still
                .server
                .block_on(still.router.send(&still.peer, frames(&[b"answer"])))
                .unwrap();
        }
        std::thread::sleep(QUIET);
        still.client.block_on(async {
            for _ in 0..n {
                let got = within("answer", still.dealer.recv()).await.unwrap();
                assert_eq!(got, frames(&[b"answer"]));
            }
        });
    };
    written_through(b"first");
    queued(&[b"second", b"third"]);
    // The driver's last run wrote those two: the connection is not idle yet.
    queued(&[b"fourth"]);
    // A run that read one message and wrote nothing: idle.
    answers(1);
    written_through(b"fifth");
    // A run that read several: their answers queue.
    answers(3);
    queued(&[b"sixth", b"seventh"]);
    answers(1);
    written_through(b"eighth");
}

#[test]
fn a_sender_writes_through_only_on_an_idle_connection_over_tcp() {
    write_through_only_when_idle("tcp://127.0.0.1:0", false);
}

#[test]
fn a_sender_writes_through_only_on_an_idle_connection_over_ipc_with_curve() {
    write_through_only_when_idle("ipc://*", true);
}

/// A message larger than the socket takes at once, written through: its first part goes
/// out at once, the rest stays queued for the driver, and what is sent after it waits
/// behind it. The Router reads slowly (a receive mark of one message), so the socket's
/// buffers fill.
fn a_partial_write_through_is_finished_in_order(endpoint: &str) {
    const BIG: usize = 8 * 1024 * 1024;
    let still = Still::new(endpoint, native().hwm(1), native());
    let big = tagged(1, 0, BIG);
    still
        .dealer
        .send_now(&[Bytes::copy_from_slice(&1u32.to_be_bytes()), big])
        .unwrap();
    for seq in 1..4 {
        still
            .dealer
            .send_now(&[
                Bytes::copy_from_slice(&1u32.to_be_bytes()),
                tagged(1, seq, 100),
            ])
            .unwrap();
    }
    assert_eq!(
        still.at_router(QUIET),
        None,
        "8 MiB do not go through the socket at once"
    );
    let mut order = Order::default();
    let first = still.drive_until_received();
    assert_eq!(first[1].len(), BIG);
    order.saw(&first);
    for _ in 1..4 {
        std::thread::sleep(Duration::from_millis(5));
        order.saw(
            &still
                .at_router(support::LIMIT)
                .expect("the small ones follow"),
        );
    }
    // And the connection is still in order afterwards, written through or queued.
    for seq in 4..40 {
        still
            .dealer
            .send_now(&[
                Bytes::copy_from_slice(&1u32.to_be_bytes()),
                tagged(1, seq, size_of(seq)),
            ])
            .unwrap();
        if seq % 4 == 0 {
            order.saw(&still.drive_until_received());
        }
    }
    while order.0[&1] < 40 {
        order.saw(&still.drive_until_received());
    }
}

#[test]
fn a_partial_write_through_is_finished_in_order_over_tcp() {
    a_partial_write_through_is_finished_in_order("tcp://127.0.0.1:0");
}

#[test]
fn a_partial_write_through_is_finished_in_order_over_ipc() {
    a_partial_write_through_is_finished_in_order("ipc://*");
}
