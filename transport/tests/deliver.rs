//! Direct delivery (`deliver_to`): messages handed to a receiver on the connections' own
//! drivers, over real loopback sockets.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use transport::{Dealer, Deliver, Delivery, Engine, Key, Options, PeerId, Router};

mod support;
use support::{frames, within};

/// Sends every delivered message, with its sender, to a channel the test reads.
struct Collect {
    tx: mpsc::UnboundedSender<(PeerId, Vec<Bytes>)>,
    /// How many connection receivers were made.
    connections: Mutex<usize>,
}

impl Collect {
    fn new() -> (Arc<Collect>, mpsc::UnboundedReceiver<(PeerId, Vec<Bytes>)>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let collect = Arc::new(Collect {
            tx,
            connections: Mutex::new(0),
        });
        (collect, rx)
    }
}

impl Deliver for Collect {
    fn connection(&self) -> Box<dyn Delivery> {
        *self.connections.lock() += 1;
        Box::new(OnConnection(self.tx.clone()))
    }
}

struct OnConnection(mpsc::UnboundedSender<(PeerId, Vec<Bytes>)>);

impl Delivery for OnConnection {
    fn deliver(&mut self, peer: &PeerId, _key: Option<Key>, frames: &[Bytes], _at: Instant) {
        let _ = self.0.send((peer.clone(), frames.to_vec()));
    }
}

fn native() -> Options {
    Options::default().engine(Engine::Native)
}

#[tokio::test]
async fn a_router_delivers_each_message_with_an_id_its_replies_reach() {
    let router = Router::with_options(native()).unwrap();
    let (collect, mut delivered) = Collect::new();
    assert!(router.deliver_to(Arc::clone(&collect) as Arc<dyn Deliver>));
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let a = Dealer::with_options(native().routing_id("a")).unwrap();
    let b = Dealer::with_options(native().routing_id("b")).unwrap();
    a.connect(&endpoint).unwrap();
    b.connect(&endpoint).unwrap();
    a.send(frames(&[b"from a", b"two frames"])).await.unwrap();
    b.send(frames(&[b"from b"])).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(within("delivery", delivered.recv()).await.unwrap());
    }
    got.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        got[0],
        (PeerId::from("a"), frames(&[b"from a", b"two frames"]))
    );
    assert_eq!(got[1], (PeerId::from("b"), frames(&[b"from b"])));
    assert_eq!(
        *collect.connections.lock(),
        2,
        "one receiver per connection"
    );
    // Nothing waits for `recv` as well.
    assert!(router.try_recv().unwrap().is_none());
    // The id delivered is the one to answer to.
    router.send(&got[1].0, frames(&[b"to b"])).await.unwrap();
    assert_eq!(within("reply", b.recv()).await.unwrap(), frames(&[b"to b"]));
}

#[tokio::test]
async fn a_dealer_delivers_its_remotes_messages_with_an_empty_id() {
    let router = Router::with_options(native()).unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::with_options(native()).unwrap();
    let (collect, mut delivered) = Collect::new();
    assert!(dealer.deliver_to(collect as Arc<dyn Deliver>));
    dealer.connect(&endpoint).unwrap();
    dealer.send(frames(&[b"hello"])).await.unwrap();
    let (peer, _) = within("router recv", router.recv()).await.unwrap();
    router.send(&peer, frames(&[b"back"])).await.unwrap();
    let (from, got) = within("delivery", delivered.recv()).await.unwrap();
    assert_eq!(from, PeerId::default());
    assert_eq!(got, frames(&[b"back"]));
}

/// 20,000 small messages arrive many to a read, more than a driver hands on per wake-up
/// (the rest wait for the next one): every one is delivered, once, in the order sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_delivered_whole_and_in_order() {
    const COUNT: u32 = 20_000;
    let router = Router::with_options(native().hwm(100_000)).unwrap();
    let (collect, mut delivered) = Collect::new();
    router.deliver_to(collect);
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::with_options(native().hwm(100_000)).unwrap();
    dealer.connect(&endpoint).unwrap();
    for i in 0..COUNT {
        dealer
            .send(vec![Bytes::from(i.to_be_bytes().to_vec())])
            .await
            .unwrap();
    }
    for expected in 0..COUNT {
        let (_, got) = within("delivery", delivered.recv()).await.unwrap();
        assert_eq!(got, vec![Bytes::from(expected.to_be_bytes().to_vec())]);
    }
    assert!(delivered.try_recv().is_err(), "nothing delivered twice");
}

#[tokio::test]
async fn closing_the_socket_lets_the_receiver_go() {
    let router = Router::with_options(native()).unwrap();
    let (collect, mut delivered) = Collect::new();
    router.deliver_to(Arc::clone(&collect) as Arc<dyn Deliver>);
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::with_options(native()).unwrap();
    dealer.connect(&endpoint).unwrap();
    dealer.send(frames(&[b"hi"])).await.unwrap();
    within("delivery", delivered.recv()).await.unwrap();
    router.close().await;
    // The socket's hold and the connection's (its driver ends with the close) both go.
    within("the receiver released", async {
        while Arc::strong_count(&collect) > 1 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
    // And a receiver given to a closed socket is not kept.
    let (late, _rx) = Collect::new();
    router.deliver_to(Arc::clone(&late) as Arc<dyn Deliver>);
    assert_eq!(Arc::strong_count(&late), 1);
}

#[tokio::test]
async fn the_libzmq_engine_declines_and_queues_for_recv() {
    let libzmq = Options::default().engine(Engine::Libzmq);
    let router = Router::with_options(libzmq.clone()).unwrap();
    let (collect, mut delivered) = Collect::new();
    assert!(!router.deliver_to(Arc::clone(&collect) as Arc<dyn Deliver>));
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::with_options(libzmq).unwrap();
    dealer.connect(&endpoint).unwrap();
    dealer.send(frames(&[b"queued"])).await.unwrap();
    let (_, got) = within("recv", router.recv()).await.unwrap();
    assert_eq!(got, frames(&[b"queued"]));
    assert!(delivered.try_recv().is_err());
    assert_eq!(Arc::strong_count(&collect), 1, "not kept by the socket");
}

/// Panics on a message that says so.
struct Fragile;

impl Deliver for Fragile {
    fn connection(&self) -> Box<dyn Delivery> {
        Box::new(FragileConnection)
    }
}

struct FragileConnection;

impl Delivery for FragileConnection {
    fn deliver(&mut self, _peer: &PeerId, _key: Option<Key>, frames: &[Bytes], _at: Instant) {
        assert_ne!(frames[0], Bytes::from_static(b"boom"), "the receiver broke");
    }
}

#[tokio::test]
async fn a_receiver_that_panics_closes_that_connection_only() {
    let router = Router::with_options(native()).unwrap();
    router.deliver_to(Arc::new(Fragile));
    let mut events = router.events().unwrap();
    let endpoint = router.bind("tcp://127.0.0.1:0").unwrap();
    let dealer = Dealer::with_options(native().routing_id("fragile")).unwrap();
    dealer.connect(&endpoint).unwrap();
    dealer.send(frames(&[b"fine"])).await.unwrap();
    dealer.send(frames(&[b"boom"])).await.unwrap();
    // The connection is dropped, as a broken one is: the socket reports it.
    support::next_event(&mut events, "the connection dropped", |event| {
        matches!(event, transport::Event::Disconnected { .. }).then_some(())
    })
    .await;
    // The socket itself goes on: it still sends to the peer once it is back, and the
    // dealer (which reconnects by itself) hears it.
    within("the peer is back and reached", async {
        loop {
            if router
                .send(&PeerId::from("fragile"), frames(&[b"still here"]))
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(
        within("the dealer hears", dealer.recv()).await.unwrap(),
        frames(&[b"still here"])
    );
}
