//! The native engine: ZMTP 3.1 in Rust on tokio, through the sans-IO `zmtp` crate.
//!
//! One driver task per connection owns its stream, TCP or Unix (see `driver.rs`); senders encode
//! straight into the connection's outbox under a short lock and wake the driver, so a send
//! from a task on the same runtime costs no thread hop and a burst of sends goes out in one
//! vectored write. On a quiet connection the sender writes its message itself instead
//! (write-through, `link.rs`). Received messages wait in one inbox per socket, bounded by
//! the receive high-water mark.
//!
//! Layout: `mod.rs` (the socket: peers, endpoints, the public operations), `link.rs` (one
//! connection's shared state), `driver.rs` (its task), `inbox.rs` (received messages),
//! `endpoint.rs` (listening, connecting, reconnecting), `stream.rs` (`tcp://` and `ipc://`:
//! endpoints, listeners, streams).

mod driver;
mod endpoint;
mod inbox;
mod link;
mod stream;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use self::driver::Driver;
use self::endpoint::Cancel;
use self::inbox::{Inbound, Inbox};
use self::link::{Link, Refused, Sent};
use self::stream::{Address, Stream};
use crate::curve::{Curve, Key};
use crate::deliver::{Deliver, Delivery};
use crate::error::{Error, Result};
use crate::frame::Frame;
use crate::monitor::{self, Event, Events};

/// Beyond the linger, how long `close` waits for the drivers to end: a driver ends at its
/// linger by its own timer, and needs a wake-up to notice.
const DRIVER_END_SLACK: Duration = Duration::from_millis(100);
use crate::curve::AllowList;
use crate::options::{Backpressure, Options};
use crate::PeerId;

/// How long a sender blocked at the high-water mark sleeps before it looks again even
/// without a wake-up: a safety net, not the mechanism (the wake-up is armed before the
/// sender's second look, so none is missed, and a woken sender passes it on). Every
/// blocked sender wakes this often: 50 ms with 40,000 of them (a flood of requests on one
/// thread, over a high-water mark of 10,000) kept that thread polling them and the
/// connection's own driver waiting its turn for seconds, long enough for the peer to take
/// a healthy node for dead.
const BLOCKED_SEND_RETRY: Duration = Duration::from_secs(1);

/// A high-water mark in messages; libzmq's 0 (no limit) is none here either.
fn hwm(messages: i32) -> usize {
    if messages <= 0 {
        usize::MAX
    } else {
        messages as usize
    }
}

/// Who is connected.
#[derive(Default)]
struct Peers {
    /// A Router's attached peers by routing id (foldhash: SipHash's own cost showed in
    /// every send to a peer, about 26 ns of a call under `perf`).
    by_id: HashMap<Bytes, Arc<Link>, foldhash::fast::RandomState>,
    /// Attached peers in the order a Dealer sends to them, round-robin.
    ready: Vec<Arc<Link>>,
    /// Where the Dealer's next message goes in `ready`.
    next: usize,
    /// Every open connection, attached or not, so `close` reaches them all.
    all: Vec<Arc<Link>>,
    /// A Dealer's messages sent before any peer was there (copied), up to the mark.
    pending: VecDeque<Vec<Bytes>>,
    /// The next routing id a Router generates (libzmq's form: a zero byte, then a 32-bit
    /// counter from a random start).
    next_id: u32,
}

#[derive(Default)]
struct Endpoints {
    bound: Vec<(String, JoinHandle<()>)>,
    connected: Vec<(String, Arc<Cancel>)>,
}

/// What the socket's tasks share (they hold it weakly: the socket's last handle going
/// away ends them).
struct Shared {
    router: bool,
    options: Options,
    inbox: Arc<Inbox>,
    peers: Mutex<Peers>,
    /// Wakes a Dealer's senders waiting for room in `pending`.
    pending_room: Notify,
    events: Mutex<Option<mpsc::UnboundedSender<Event>>>,
    events_taken: AtomicBool,
    endpoints: Mutex<Endpoints>,
    closed: AtomicBool,
    runtime: Handle,
    /// The runtime is a current-thread one: any thread may write through (see
    /// [`Socket::may_write_through`]).
    one_thread: bool,
    /// A CURVE server's allow-list, which its connections' authorizer reads.
    allow_list: Option<Arc<AllowList>>,
    /// The CURVE settings of every connection (`None`: NULL).
    curve: Option<zmtp::curve::CurveConfig>,
    /// Who takes received messages on the drivers (`deliver_to`), instead of the inbox;
    /// dropped when the socket closes (it usually holds what holds the socket).
    deliver: Mutex<Option<Arc<dyn Deliver>>>,
    /// Told when the last connection's driver is gone (`close` waits for it).
    drivers_gone: Notify,
}

impl Shared {
    fn kind(&self) -> &'static str {
        if self.router {
            "router"
        } else {
            "dealer"
        }
    }

    /// Reports a connection event, if someone took the event stream.
    fn emit(&self, event: Event) {
        if let Some(tx) = self.events.lock().as_ref() {
            let _ = tx.send(event);
        }
    }

    fn is_curve(&self) -> bool {
        self.options.curve.is_some()
    }

    fn is_curve_server(&self) -> bool {
        matches!(self.options.curve, Some(Curve::Server { .. }))
    }

    /// The ZMTP settings of a new connection.
    fn zmtp_config(&self) -> zmtp::Config {
        let mut config = zmtp::Config::new(if self.router {
            zmtp::SocketType::Router
        } else {
            zmtp::SocketType::Dealer
        });
        if !self.router {
            config.routing_id = self.options.routing_id.clone().unwrap_or_default();
        }
        config.max_message_size = self.options.max_message_size.unwrap_or(u64::MAX);
        config.heartbeat = self.options.heartbeat;
        config.handshake_timeout = Some(self.options.handshake_timeout);
        if let Some(curve) = &self.curve {
            config.mechanism = zmtp::Mechanism::Curve(curve.clone());
        }
        if let Some(list) = &self.allow_list {
            let list = Arc::clone(list);
            config.authorize = Some(zmtp::Authorizer(Arc::new(move |key| {
                list.allows(&Key::from_bytes(*key))
            })));
        }
        config
    }

    /// A connection on `stream`: its link (known to `close`) and its driver, to be run.
    fn open(self: &Arc<Self>, stream: Stream, endpoint: &Arc<str>) -> (Arc<Link>, Driver) {
        stream.set_nodelay();
        let (reader, writer) = stream.split();
        let conn = zmtp::Connection::new(self.zmtp_config(), std::time::Instant::now());
        let link = Link::new(conn, hwm(self.options.send_hwm), writer);
        self.peers.lock().all.push(Arc::clone(&link));
        if self.closed.load(Ordering::Acquire) {
            link.close();
        }
        let driver = Driver::new(
            Arc::clone(&link),
            reader,
            Arc::clone(&self.inbox),
            Arc::downgrade(self),
            Arc::clone(endpoint),
            self.options.linger,
        );
        (link, driver)
    }

    /// The handshake of `link` is done: gives the peer its routing id (`None`: refused, the
    /// id is taken) and lets messages flow to it.
    fn attach(&self, link: &Arc<Link>, peer: &zmtp::Peer, endpoint: &str) -> Option<Bytes> {
        link.handshake.lock().take();
        let mut peers = self.peers.lock();
        let id = if self.router {
            let id = if peer.routing_id.is_empty() {
                // The next free one: a peer may have chosen an id of this form itself.
                loop {
                    let n = peers.next_id;
                    peers.next_id = n.wrapping_add(1);
                    let mut id = vec![0u8];
                    id.extend_from_slice(&n.to_be_bytes());
                    let id = Bytes::from(id);
                    if !peers.by_id.contains_key(&id) {
                        break id;
                    }
                }
            } else {
                peer.routing_id.clone()
            };
            if let Some(old) = peers.by_id.get(&id) {
                if !self.options.router_handover {
                    tracing::debug!(peer = %PeerId(id.clone()).short(), "routing id taken: connection refused");
                    return None;
                }
                old.close();
            }
            peers.by_id.insert(id.clone(), Arc::clone(link));
            id
        } else {
            Bytes::new()
        };
        peers.ready.push(Arc::clone(link));
        if !peers.pending.is_empty() {
            let mut state = link.state.lock();
            for message in peers.pending.drain(..) {
                link::encode(&mut state, &message);
            }
            drop(state);
            link.driver.wake();
            self.pending_room.notify_waiters();
        }
        drop(peers);
        self.emit(Event::HandshakeSucceeded {
            endpoint: endpoint.to_owned(),
        });
        Some(id)
    }

    /// The receiver of a connection that just attached, if messages go to one rather than
    /// to the inbox.
    fn delivery(&self) -> Option<Box<dyn Delivery>> {
        self.deliver
            .lock()
            .as_ref()
            .map(|deliver| deliver.connection())
    }

    /// The socket closed: the receiver goes (connections that hold one drop theirs as they
    /// close). Dropped outside the lock: it may hold the last handle of what holds the
    /// socket.
    fn forget_deliver(&self) {
        let deliver = self.deliver.lock().take();
        drop(deliver);
    }

    /// `link` ended: no more messages to it.
    fn detach(&self, link: &Arc<Link>, id: &Bytes) {
        let mut peers = self.peers.lock();
        if self.router && peers.by_id.get(id).is_some_and(|l| Arc::ptr_eq(l, link)) {
            peers.by_id.remove(id);
        }
        peers.ready.retain(|l| !Arc::ptr_eq(l, link));
    }

    /// `link`'s driver is gone.
    fn forget(&self, link: &Arc<Link>) {
        let mut peers = self.peers.lock();
        peers.all.retain(|l| !Arc::ptr_eq(l, link));
        if peers.all.is_empty() {
            self.drivers_gone.notify_waiters();
        }
    }

    /// Waits until every connection's driver is gone, for at most `wait`.
    async fn drivers_gone(&self, wait: Duration) {
        let _ = tokio::time::timeout(wait, async {
            loop {
                let gone = self.drivers_gone.notified();
                if self.peers.lock().all.is_empty() {
                    return;
                }
                gone.await;
            }
        })
        .await;
    }
}

/// A native ROUTER or DEALER socket: what [`Router`](crate::Router) and
/// [`Dealer`](crate::Dealer) hold when their engine is [`Engine::Native`](crate::Engine).
pub(crate) struct Socket {
    shared: Arc<Shared>,
}

impl Socket {
    pub(crate) fn new(router: bool, options: &Options) -> Result<Socket> {
        let runtime = Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let curve = options.curve.as_ref().map(|curve| match curve {
            Curve::Server { secret_key } => zmtp::curve::CurveConfig::Server {
                keys: zmtp::curve::CurveKeys::from_secret(*secret_key.as_bytes()),
            },
            Curve::Client {
                public_key,
                secret_key,
                server_key,
            } => zmtp::curve::CurveConfig::Client {
                keys: zmtp::curve::CurveKeys::new(*public_key.as_bytes(), *secret_key.as_bytes()),
                server_key: *server_key.as_bytes(),
            },
        });
        let allow_list = matches!(options.curve, Some(Curve::Server { .. }))
            .then(|| Arc::new(AllowList::default()));
        let seed = rand::random::<u32>();
        Ok(Socket {
            shared: Arc::new(Shared {
                router,
                options: options.clone(),
                inbox: Arc::new(Inbox::new(hwm(options.recv_hwm))),
                peers: Mutex::new(Peers {
                    next_id: seed,
                    ..Peers::default()
                }),
                pending_room: Notify::new(),
                events: Mutex::new(None),
                events_taken: AtomicBool::new(false),
                endpoints: Mutex::new(Endpoints::default()),
                closed: AtomicBool::new(false),
                one_thread: runtime.runtime_flavor()
                    == tokio::runtime::RuntimeFlavor::CurrentThread,
                runtime,
                allow_list,
                curve,
                deliver: Mutex::new(None),
                drivers_gone: Notify::new(),
            }),
        })
    }

    fn check_open(&self) -> Result<()> {
        if self.shared.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    pub(crate) fn bind(&self, endpoint: &str) -> Result<String> {
        self.check_open()?;
        let address = Address::parse(endpoint)?;
        let (listener, actual) = {
            let _entered = self.shared.runtime.enter();
            address.bind().map_err(|source| Error::Bind {
                endpoint: endpoint.to_owned(),
                source,
            })?
        };
        let task = self.shared.runtime.spawn(endpoint::accept(
            listener,
            Arc::downgrade(&self.shared),
            Arc::from(actual.as_str()),
        ));
        self.shared
            .endpoints
            .lock()
            .bound
            .push((actual.clone(), task));
        tracing::debug!(kind = self.shared.kind(), endpoint = %actual, "bound (native)");
        self.shared.emit(Event::Listening {
            endpoint: actual.clone(),
        });
        Ok(actual)
    }

    pub(crate) async fn unbind(&self, endpoint: &str) -> Result<()> {
        let task = {
            let mut endpoints = self.shared.endpoints.lock();
            let Some(index) = endpoints.bound.iter().position(|(e, _)| e == endpoint) else {
                return Err(Error::NotBound {
                    endpoint: endpoint.to_owned(),
                });
            };
            endpoints.bound.swap_remove(index).1
        };
        task.abort();
        // The listener is dropped with the task: the port is free once it has ended.
        let _ = task.await;
        self.shared.emit(Event::Closed {
            endpoint: endpoint.to_owned(),
        });
        Ok(())
    }

    pub(crate) fn connect(&self, endpoint: &str) -> Result<()> {
        self.check_open()?;
        let address = Address::parse_remote(endpoint)?;
        let cancel = Arc::new(Cancel::default());
        // Known to `close` before the connector runs, so a close at the same time stops it.
        self.shared
            .endpoints
            .lock()
            .connected
            .push((endpoint.to_owned(), Arc::clone(&cancel)));
        self.shared.runtime.spawn(endpoint::connect(
            Arc::downgrade(&self.shared),
            Arc::from(endpoint),
            address,
            Arc::clone(&cancel),
            self.shared.options.reconnect_interval,
            self.shared.options.reconnect_interval_max,
        ));
        tracing::debug!(kind = self.shared.kind(), endpoint, "connecting (native)");
        Ok(())
    }

    pub(crate) fn disconnect(&self, endpoint: &str) -> Result<()> {
        let cancel = {
            let mut endpoints = self.shared.endpoints.lock();
            let Some(index) = endpoints.connected.iter().position(|(e, _)| e == endpoint) else {
                return Err(Error::NotConnected {
                    endpoint: endpoint.to_owned(),
                });
            };
            endpoints.connected.swap_remove(index).1
        };
        cancel.stop();
        Ok(())
    }

    pub(crate) async fn close(&self) {
        if self.shared.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let endpoints = std::mem::take(&mut *self.shared.endpoints.lock());
        for (_, cancel) in &endpoints.connected {
            cancel.stop();
        }
        for link in self.shared.peers.lock().all.iter() {
            link.close();
        }
        // Each driver writes what is queued (answers, a goodbye) before it ends, within the
        // linger: a close returns after that, so a process that exits next loses nothing.
        self.shared
            .drivers_gone(self.shared.options.linger + DRIVER_END_SLACK)
            .await;
        self.shared.inbox.close();
        self.shared.forget_deliver();
        self.shared.pending_room.notify_waiters();
        for (endpoint, task) in endpoints.bound {
            task.abort();
            let _ = task.await;
            self.shared.emit(Event::Closed { endpoint });
        }
        // The event stream ends with the socket.
        self.shared.events.lock().take();
        tracing::debug!(kind = self.shared.kind(), "closed (native)");
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Connections that attach from now on deliver to `deliver` (see `Router::deliver_to`).
    pub(crate) fn deliver_to(&self, deliver: Arc<dyn Deliver>) {
        let mut slot = self.shared.deliver.lock();
        // Checked under the lock that `close` takes to clear it: never set after.
        if !self.is_closed() {
            *slot = Some(deliver);
        }
    }

    pub(crate) fn events(&self) -> Result<Events> {
        self.check_open()?;
        if self.shared.events_taken.swap(true, Ordering::AcqRel) {
            return Err(Error::EventsTaken);
        }
        let (tx, events) = monitor::channel();
        *self.shared.events.lock() = Some(tx);
        Ok(events)
    }

    pub(crate) fn allow_list(&self) -> Result<&AllowList> {
        self.shared
            .allow_list
            .as_deref()
            .ok_or(Error::NotCurveServer)
    }

    pub(crate) fn is_curve_server(&self) -> bool {
        self.shared.allow_list.is_some()
    }

    pub(crate) async fn send<F: Frame + Sync>(
        &self,
        frames: &[F],
        peer: Option<&Bytes>,
    ) -> Result<()> {
        self.send_with(frames, peer, self.shared.options.backpressure)
            .await
    }

    pub(crate) async fn send_with<F: Frame + Sync>(
        &self,
        frames: &[F],
        peer: Option<&Bytes>,
        backpressure: Backpressure,
    ) -> Result<()> {
        // The link this sender waited for, once it did: see `pass_on`.
        let mut waited: Option<Arc<Link>> = None;
        loop {
            match self.try_send(frames, peer) {
                Ok(result) => {
                    pass_on(waited.as_deref());
                    return result;
                }
                Err(Blocked(_)) if backpressure == Backpressure::Fail => {
                    return Err(Error::QueueFull)
                }
                // Boxed: the wait is the rare path, and inline it would grow every send
                // future, which callers embed.
                Err(Blocked(target)) => {
                    let found = Box::pin(self.wait_for_room(target.as_ref(), frames, peer)).await;
                    waited = target;
                    if let Some(result) = found {
                        pass_on(waited.as_deref());
                        return result;
                    }
                }
            }
        }
    }

    /// Waits until `target` (a link, or a Dealer's queue before any peer) may have room:
    /// the wake-up is armed before the second look, so a drain between the two cannot be
    /// missed. `Some` when that second look sent (or failed).
    async fn wait_for_room<F: Frame>(
        &self,
        target: Option<&Arc<Link>>,
        frames: &[F],
        peer: Option<&Bytes>,
    ) -> Option<Result<()>> {
        let notify = match target {
            Some(link) => &link.writable,
            None => &self.shared.pending_room,
        };
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Ok(result) = self.try_send(frames, peer) {
            return Some(result);
        }
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep(BLOCKED_SEND_RETRY) => {}
        }
        None
    }

    pub(crate) fn send_now<F: Frame>(&self, frames: &[F], peer: Option<&Bytes>) -> Result<()> {
        match self.try_send(frames, peer) {
            Ok(result) => result,
            Err(Blocked(_)) => Err(Error::QueueFull),
        }
    }

    /// One attempt: `Err(Blocked(link))` at the high-water mark of `link` (`None`: a
    /// Dealer's queue before any peer).
    ///
    /// A message queued on an idle connection is written through here, once the socket's
    /// lock is let go (`link.rs`): a sender writing to one connection does not hold up
    /// sends to the others.
    fn try_send<F: Frame>(
        &self,
        frames: &[F],
        peer: Option<&Bytes>,
    ) -> Result<Result<()>, Blocked> {
        let mut through = None;
        let result = self.try_queue(frames, peer, &mut through);
        if let Some(link) = through {
            link.write_through();
        }
        result
    }

    /// Whether this thread may write a message through rather than wake the driver: on a
    /// multi-thread runtime, only a task on one of its workers may.
    ///
    /// Waking the driver from elsewhere (a `block_on` future, a thread of its own) wakes a
    /// parked worker as well, and that worker, parking again, takes the runtime's I/O
    /// driver. Without that wake nobody may be polling the I/O: a worker blocked by a
    /// handler is not, and the idle ones park on a condition variable, not on the I/O
    /// driver, so a node whose handler blocked its thread heard no reply until the handler
    /// returned (`node/tests/runtime.rs`, a caller on the test's `block_on`: answered after
    /// 1.5 s, the handler's sleep, instead of at once). A task on a worker wakes nobody
    /// either way, and its worker parks on the I/O driver itself once it has nothing to run;
    /// on a current-thread runtime the one thread that runs it polls its I/O.
    fn may_write_through(&self) -> bool {
        self.shared.one_thread || tokio::task::try_id().is_some()
    }

    /// [`try_send`](Self::try_send) under the socket's lock: `through` is the link to write
    /// through, if the message was queued on an idle one and this thread may write
    /// (`may_write_through`).
    fn try_queue<F: Frame>(
        &self,
        frames: &[F],
        peer: Option<&Bytes>,
        through: &mut Option<Arc<Link>>,
    ) -> Result<Result<()>, Blocked> {
        if frames.is_empty() {
            return Ok(Err(Error::EmptyMessage));
        }
        if self.is_closed() {
            return Ok(Err(Error::Closed));
        }
        let may_through = self.may_write_through();
        let mut peers = self.shared.peers.lock();
        if let Some(id) = peer.filter(|_| self.shared.router) {
            let unknown = || {
                Ok(if self.shared.options.router_mandatory {
                    Err(Error::UnknownPeer {
                        peer: PeerId(id.clone()),
                    })
                } else {
                    Ok(())
                })
            };
            let Some(link) = peers.by_id.get(id) else {
                return unknown();
            };
            return match link.send(frames, may_through) {
                Ok(sent) => {
                    if sent == Sent::Through {
                        *through = Some(Arc::clone(link));
                    }
                    Ok(Ok(()))
                }
                Err(Refused::Full) => Err(Blocked(Some(Arc::clone(link)))),
                Err(Refused::Gone) => unknown(),
            };
        }
        // Round-robin: the next peer with room.
        let n = peers.ready.len();
        let mut full = None;
        for k in 0..n {
            let i = (peers.next + k) % n;
            match peers.ready[i].send(frames, may_through) {
                Ok(sent) => {
                    if sent == Sent::Through {
                        *through = Some(Arc::clone(&peers.ready[i]));
                    }
                    peers.next = (i + 1) % n;
                    return Ok(Ok(()));
                }
                Err(Refused::Full) => full = Some(Arc::clone(&peers.ready[i])),
                Err(Refused::Gone) => {}
            }
        }
        if let Some(link) = full {
            return Err(Blocked(Some(link)));
        }
        // No peer yet, or every one closing: queued for the next. With no peer at all, only
        // once an endpoint is connected, as libzmq, whose pipe to a peer exists from
        // `connect` on: with none there is nowhere to queue.
        let nowhere = n == 0 && self.shared.endpoints.lock().connected.is_empty();
        if nowhere || peers.pending.len() >= hwm(self.shared.options.send_hwm) {
            return Err(Blocked(None));
        }
        peers
            .pending
            .push_back(frames.iter().map(copy_frame).collect());
        Ok(Ok(()))
    }

    /// Appends the next message's frames to `frames` (a Router's begin with the routing
    /// id, as libzmq's do).
    pub(crate) async fn recv_into(
        &self,
        frames: &mut Vec<Bytes>,
        _with_key: bool,
    ) -> Result<Option<Key>> {
        let item = self.shared.inbox.pop().await?;
        Ok(self.unpack(item, frames))
    }

    pub(crate) fn try_recv_into(
        &self,
        frames: &mut Vec<Bytes>,
        _with_key: bool,
    ) -> Result<Option<Option<Key>>> {
        Ok(self
            .shared
            .inbox
            .try_pop()?
            .map(|item| self.unpack(item, frames)))
    }

    fn unpack(&self, item: Inbound, frames: &mut Vec<Bytes>) -> Option<Key> {
        if self.shared.router {
            frames.push(item.peer);
        }
        if frames.is_empty() {
            *frames = item.frames;
        } else {
            frames.extend(item.frames);
        }
        item.key
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // Without `close`: stop every task now (connections end without lingering).
        self.shared.closed.store(true, Ordering::Release);
        let endpoints = std::mem::take(&mut *self.shared.endpoints.lock());
        for (_, cancel) in &endpoints.connected {
            cancel.stop();
        }
        for (_, task) in &endpoints.bound {
            task.abort();
        }
        for link in self.shared.peers.lock().all.iter() {
            link.close();
        }
        self.shared.inbox.close();
        self.shared.forget_deliver();
    }
}

/// A send that met the high-water mark, and where to wait for room.
struct Blocked(Option<Arc<Link>>);

/// A sender that waited for room on `link` and got it wakes the next one waiting there.
/// A link that drains wakes one blocked sender, not all of them (`driver.rs`): each that
/// sends passes the wake-up on, and the first that finds the link full again waits for
/// the next drain. So a drain costs a wake-up per message it makes room for, not one per
/// blocked sender (40,000 of them woken, 30,000 of them to find no room, after each drain
/// of a flood).
fn pass_on(link: Option<&Link>) {
    if let Some(link) = link {
        link.writable.notify_one();
    }
}

/// A frame as a `Bytes` of its own, for a message that has to wait for a connection.
fn copy_frame<F: Frame>(frame: &F) -> Bytes {
    if let Some(bytes) = frame.to_bytes() {
        return bytes;
    }
    let mut out = vec![0u8; frame.len()];
    frame.write_to(&mut out);
    Bytes::from(out)
}
