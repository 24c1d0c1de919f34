//! The socket core shared by [`Router`](crate::Router) and [`Dealer`](crate::Dealer).
//!
//! # Ownership and threading
//!
//! A libzmq socket is not thread-safe, but it may be used from any thread as long as every
//! use is separated by a full memory barrier. [`Core`] owns the socket behind a mutex: each
//! operation (one non-blocking send, one non-blocking receive, a bind) takes the lock, so the
//! socket is only ever touched by one thread at a time and the lock provides the barrier.
//! Nobody holds the lock across an `.await`.
//!
//! We measured this against a driver task fed by channels: the channel design adds two task
//! wake-ups to every round trip (caller -> driver, driver -> caller), which on a 2-core
//! machine costs more than the whole libzmq round trip's own overhead. With the lock, a
//! caller's `send` goes straight into libzmq, and `recv` reads straight out of it.
//!
//! # Waking up: ZMQ_FD is edge-triggered
//!
//! libzmq signals activity through one file descriptor (ZMQ_FD) that becomes readable when
//! the socket's command mailbox has something, edge-triggered. Any libzmq call on the socket
//! (a send, a receive, reading ZMQ_EVENTS) may process that mailbox and so consume the edge.
//! Three rules keep every waiter awake when it must be:
//!
//! 1. A receiver only waits after a non-blocking receive returned EAGAIN (which drained the
//!    mailbox, so the next command raises a fresh edge): its own, or the last receive on the
//!    socket if nothing but sends touched it since (`Core::drained`; another call such as a
//!    bind or connect clears it and wakes a parked receiver, as a receive that takes a
//!    message without holding the turn does, since either may have taken its edge).
//! 2. The first send after a receiver parked wakes it through [`Core::readable`] (a `Notify`,
//!    whose stored permit closes the race with a receiver about to wait); the receiver
//!    receives again, under the lock and so after every send made since, before it parks
//!    again.
//! 3. A sender blocked at the high-water mark waits on [`Core::writable`] and on a short timer
//!    as a safety net; every receive that finds POLLOUT set wakes blocked senders.
//!
//! Only a receiver waits on the fd, and only the one holding the receivers' turn (`Turn`),
//! so the single waker slot of `AsyncFd::poll_read_ready` is enough. A receiver that finds a
//! message at once (the common case on a busy socket) takes it without the turn: the turn
//! is for waiting.
//!
//! # Closing
//!
//! `close` deregisters the fd from tokio and then closes the libzmq socket (in that order:
//! the fd belongs to the socket). Both live in `Option`s behind mutexes so that every later
//! call finds them gone and returns [`Error::Closed`]. Closing the socket drops every
//! connection, accepted ones included, which a mere `unbind` would not.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;

use crate::curve::AllowList;
use crate::curve::{Curve, Key};
use crate::error::{os, socket_error, Error, Result};
pub(crate) use crate::frame::Frame;
use crate::monitor::{self, Events};
use crate::msg::{Arena, Msg, Recent};
use crate::options::{Backpressure, Options};
use crate::pool::Spares;
use crate::turn::Turn;
use crate::zap;

/// How long a sender blocked at the high-water mark sleeps before retrying even if no wake-up
/// arrived: a safety net, not the main mechanism.
const BLOCKED_SEND_RETRY: Duration = Duration::from_millis(2);

/// The process-wide libzmq context (one I/O thread, libzmq's default).
pub(crate) fn context() -> &'static zmq::Context {
    static CONTEXT: std::sync::OnceLock<zmq::Context> = std::sync::OnceLock::new();
    CONTEXT.get_or_init(zmq::Context::new)
}

/// The raw ZMQ_FD, registered with tokio's reactor.
pub(crate) struct ZmqFd(pub(crate) RawFd);

impl AsRawFd for ZmqFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Endpoints this socket is bound or connected to, so `close` can release them all.
#[derive(Default)]
struct Endpoints {
    bound: Vec<String>,
    connected: Vec<String>,
}

/// An open socket and the frames it received last (see [`Recent`]).
struct Live {
    socket: zmq::Socket,
    recent: Recent,
    /// Where small received frames are copied (see [`Arena`]).
    arena: Arena,
    /// Buffers for frames sent (see [`crate::pool`]).
    spares: Spares,
    /// A ROUTER's last routing id, handed out again while the same peer keeps sending, so
    /// the id frame of most messages costs no allocation. `None` on a DEALER.
    last_peer: Option<Bytes>,
}

/// One libzmq socket and what it takes to drive it from tokio.
pub(crate) struct Core {
    /// The registration of ZMQ_FD with tokio. Declared before `socket` so that, when the
    /// Core is dropped without `close`, it is deregistered before the socket closes the fd.
    fd: Mutex<Option<AsyncFd<ZmqFd>>>,
    /// The libzmq socket and the frames it received last; see the module docs for why a
    /// mutex. `None` once closed.
    socket: Mutex<Option<Live>>,
    /// Receivers take turns: only one waits on the fd at a time.
    receiving: Turn,
    /// Wakes a receiver when someone else's call found POLLIN set (rule 2).
    readable: Notify,
    /// Set (under the socket lock) by a receiver about to wait, so that senders only pay for
    /// reading ZMQ_EVENTS when someone could miss a wake-up.
    receiver_parked: AtomicBool,
    /// The last receive found nothing, and no call since could have taken an inbound edge
    /// except sends (which rule 2 covers): a receiver may then wait at once, without a
    /// receive that would only find nothing again (a `poll(2)` inside libzmq).
    drained: AtomicBool,
    /// Wakes senders blocked at the high-water mark (rule 3).
    writable: Notify,
    /// How many senders are blocked, so receivers only check POLLOUT when it matters.
    blocked_senders: AtomicUsize,
    /// Set by `close`.
    closed: AtomicBool,
    endpoints: Mutex<Endpoints>,
    /// Whether the event stream was handed out already.
    events_taken: AtomicBool,
    backpressure: Backpressure,
    /// "router" or "dealer", for traces.
    kind: &'static str,
    /// A CURVE server's entry with the ZAP handler (its domain and allow-list); `None` for
    /// every other socket. Also tells whether received messages carry a client key.
    zap: Option<zap::Registration>,
}

impl Core {
    /// Creates a socket of `kind` with `options`, registered with the current tokio reactor.
    pub(crate) fn new(kind: zmq::SocketType, options: &Options) -> Result<Core> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::NoRuntime);
        }
        let router = kind == zmq::ROUTER;
        if options.curve.is_some() && !crate::has_capability("curve") {
            return Err(Error::CurveUnavailable);
        }
        // A CURVE server registers with the ZAP handler (starting it) before the socket
        // exists, so the handler is there for its first handshake.
        let zap = match &options.curve {
            Some(Curve::Server { .. }) => Some(zap::register()?),
            _ => None,
        };
        let socket = context()
            .socket(kind)
            .map_err(socket_error("create socket"))?;
        options.apply(&socket, router, zap.as_ref().map(zap::Registration::domain))?;
        let raw = socket.get_fd().map_err(socket_error("read ZMQ_FD"))?;
        // SAFETY: the descriptor belongs to `socket`, which is only closed after this
        // registration is removed: `close` deregisters first, and on drop `fd` is declared
        // (and so dropped) before `socket`.
        #[allow(unsafe_code)]
        let registered = unsafe { AsyncFd::register_with_interest(ZmqFd(raw), Interest::READABLE) };
        let fd = registered.map_err(|e| Error::Socket {
            operation: "register ZMQ_FD",
            source: e.into(),
        })?;
        Ok(Core {
            fd: Mutex::new(Some(fd)),
            socket: Mutex::new(Some(Live {
                socket,
                recent: Recent::default(),
                arena: Arena::default(),
                spares: Spares::default(),
                last_peer: router.then(Bytes::new),
            })),
            receiving: Turn::default(),
            readable: Notify::new(),
            receiver_parked: AtomicBool::new(false),
            drained: AtomicBool::new(false),
            writable: Notify::new(),
            blocked_senders: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            endpoints: Mutex::new(Endpoints::default()),
            events_taken: AtomicBool::new(false),
            backpressure: options.backpressure,
            kind: if router { "router" } else { "dealer" },
            zap,
        })
    }

    /// Runs `f` on the socket under the lock, or fails with `Closed`.
    ///
    /// Such a call (bind, connect, options...) may process libzmq's commands and so take the
    /// edge announcing a message: the next receiver looks before it waits, and one already
    /// waiting is woken to look.
    fn with_socket<T>(&self, f: impl FnOnce(&zmq::Socket) -> Result<T>) -> Result<T> {
        self.with_live(|live| {
            let result = f(&live.socket);
            self.touched();
            result
        })
    }

    /// Runs `f` on the open socket and its recent frames under the lock, or fails with
    /// `Closed`.
    fn with_live<T>(&self, f: impl FnOnce(&mut Live) -> Result<T>) -> Result<T> {
        let mut guard = self.socket.lock();
        match guard.as_mut() {
            Some(live) => f(live),
            None => Err(Error::Closed),
        }
    }

    /// Binds and returns the endpoint actually bound (port 0 resolved to the real port).
    pub(crate) fn bind(&self, endpoint: &str) -> Result<String> {
        let actual = self.with_socket(|socket| {
            socket.bind(endpoint).map_err(|e| match e {
                zmq::Error::EINVAL | zmq::Error::EPROTONOSUPPORT | zmq::Error::ENOCOMPATPROTO => {
                    Error::InvalidEndpoint {
                        endpoint: endpoint.to_owned(),
                        source: os(e),
                    }
                }
                _ => Error::Bind {
                    endpoint: endpoint.to_owned(),
                    source: os(e),
                },
            })?;
            Ok(match socket.get_last_endpoint() {
                Ok(Ok(actual)) => actual,
                _ => endpoint.to_owned(),
            })
        })?;
        tracing::debug!(kind = self.kind, endpoint = %actual, "bound");
        self.endpoints.lock().bound.push(actual.clone());
        Ok(actual)
    }

    /// Stops listening on an endpoint given by `bind` (the resolved form) and waits until the
    /// port is released.
    pub(crate) async fn unbind(&self, endpoint: &str) -> Result<()> {
        {
            let mut endpoints = self.endpoints.lock();
            let Some(index) = endpoints.bound.iter().position(|e| e == endpoint) else {
                return Err(Error::NotBound {
                    endpoint: endpoint.to_owned(),
                });
            };
            self.with_socket(|socket| socket.unbind(endpoint).map_err(socket_error("unbind")))?;
            endpoints.bound.swap_remove(index);
        }
        tracing::debug!(kind = self.kind, endpoint, "unbound");
        wait_released(endpoint).await;
        Ok(())
    }

    /// Starts connecting (libzmq connects and reconnects in the background).
    pub(crate) fn connect(&self, endpoint: &str) -> Result<()> {
        self.with_socket(|socket| {
            socket.connect(endpoint).map_err(|e| match e {
                zmq::Error::EINVAL | zmq::Error::EPROTONOSUPPORT | zmq::Error::ENOCOMPATPROTO => {
                    Error::InvalidEndpoint {
                        endpoint: endpoint.to_owned(),
                        source: os(e),
                    }
                }
                _ => Error::Connect {
                    endpoint: endpoint.to_owned(),
                    source: os(e),
                },
            })
        })?;
        tracing::debug!(kind = self.kind, endpoint, "connecting");
        self.endpoints.lock().connected.push(endpoint.to_owned());
        Ok(())
    }

    /// Drops the connection to an endpoint given to `connect`.
    pub(crate) fn disconnect(&self, endpoint: &str) -> Result<()> {
        let mut endpoints = self.endpoints.lock();
        let Some(index) = endpoints.connected.iter().position(|e| e == endpoint) else {
            return Err(Error::NotConnected {
                endpoint: endpoint.to_owned(),
            });
        };
        self.with_socket(|socket| {
            socket
                .disconnect(endpoint)
                .map_err(socket_error("disconnect"))
        })?;
        endpoints.connected.swap_remove(index);
        tracing::debug!(kind = self.kind, endpoint, "disconnected");
        Ok(())
    }

    /// Closes the socket: every connection drops, bound ports are released (this waits until
    /// they are), and every later call fails with `Closed`. Idempotent.
    pub(crate) async fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let endpoints = std::mem::take(&mut *self.endpoints.lock());
        // Deregister from tokio before libzmq may close the descriptor.
        if let Some(fd) = self.fd.lock().take() {
            let _deregistered: ZmqFd = fd.into_inner();
        }
        if let Some(live) = self.socket.lock().take() {
            // Unbind explicitly: libzmq then closes the listeners now rather than after the
            // linger period.
            for endpoint in &endpoints.bound {
                let _ = live.socket.unbind(endpoint);
            }
            drop(live);
        }
        // Wake everyone waiting so they observe `closed`.
        self.readable.notify_waiters();
        self.readable.notify_one();
        self.writable.notify_waiters();
        for endpoint in &endpoints.bound {
            wait_released(endpoint).await;
        }
        tracing::debug!(kind = self.kind, "closed");
    }

    /// Whether `close` was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Starts libzmq's socket monitor and returns its event stream (once per socket).
    pub(crate) fn events(&self) -> Result<Events> {
        self.with_socket(|socket| {
            if self.events_taken.swap(true, Ordering::AcqRel) {
                return Err(Error::EventsTaken);
            }
            monitor::start(socket)
        })
    }

    /// The allow-list of a CURVE server socket.
    pub(crate) fn allow_list(&self) -> Result<&AllowList> {
        self.zap
            .as_ref()
            .map(zap::Registration::allow_list)
            .ok_or(Error::NotCurveServer)
    }

    /// Whether this socket is a CURVE server, whose messages carry the client's key.
    pub(crate) fn is_curve_server(&self) -> bool {
        self.zap.is_some()
    }

    /// Sends one multipart message, waiting at the high-water mark if so configured.
    pub(crate) async fn send<F: Frame + Sync>(
        &self,
        frames: &[F],
        peer: Option<&Bytes>,
    ) -> Result<()> {
        self.send_with(frames, peer, self.backpressure).await
    }

    /// Sends one multipart message with the given backpressure policy for this call.
    pub(crate) async fn send_with<F: Frame + Sync>(
        &self,
        frames: &[F],
        peer: Option<&Bytes>,
        backpressure: Backpressure,
    ) -> Result<()> {
        if frames.is_empty() {
            return Err(Error::EmptyMessage);
        }
        loop {
            let outcome = self.with_live(|live| Ok(self.send_locked(live, peer, frames)))?;
            match self.send_outcome(outcome, peer) {
                Ok(()) => {
                    tracing::trace!(kind = self.kind, frames = frames.len(), "sent");
                    return Ok(());
                }
                Err(Error::QueueFull) => match backpressure {
                    Backpressure::Fail => return Err(Error::QueueFull),
                    // Boxed: the wait (a `Notify` and a timer) is the rare path, and inline
                    // it would more than double the size of every send future, which the
                    // caller's future embeds and moves (measured: 360 bytes against 152).
                    Backpressure::Wait => Box::pin(self.wait_writable()).await,
                },
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends one multipart message now or not at all: at the high-water mark this is
    /// `QueueFull`. Not async, so a caller that never waits (an answer to a requester that
    /// may not be reading) needs no future for it.
    pub(crate) fn send_now<F: Frame>(&self, frames: &[F], peer: Option<&Bytes>) -> Result<()> {
        if frames.is_empty() {
            return Err(Error::EmptyMessage);
        }
        let outcome = self.with_live(|live| Ok(self.send_locked(live, peer, frames)))?;
        self.send_outcome(outcome, peer)
    }

    /// One non-blocking send under the lock, and rule 2.
    fn send_locked<F: Frame>(
        &self,
        live: &mut Live,
        peer: Option<&Bytes>,
        frames: &[F],
    ) -> zmq::Result<()> {
        let outcome = send_frames(live, peer, frames);
        // Rule 2: our send may have consumed the edge announcing an inbound message. Only a
        // parked receiver can miss it: one that is not parked receives (and so looks at the
        // socket) before it parks. So the first send after a receiver parked wakes it, and
        // marks it unparked: sends until it parks again need not, because it receives (under
        // this lock, after them) before it parks. Reading ZMQ_EVENTS here instead cost a
        // poll(2) in libzmq on every send while a receiver waited (measured with strace:
        // the protocol client made 3x the syscalls per request of the transport client).
        if self.receiver_parked.load(Ordering::Acquire) {
            self.receiver_parked.store(false, Ordering::Release);
            self.readable.notify_one();
        }
        outcome
    }

    /// Turns a send's outcome into ours; EAGAIN is `QueueFull`.
    fn send_outcome(&self, outcome: zmq::Result<()>, peer: Option<&Bytes>) -> Result<()> {
        match outcome {
            Ok(()) => Ok(()),
            Err(zmq::Error::EAGAIN) => Err(Error::QueueFull),
            Err(zmq::Error::EHOSTUNREACH) => Err(Error::UnknownPeer {
                peer: crate::PeerId(peer.cloned().unwrap_or_default()),
            }),
            Err(e) => Err(socket_error("send")(e)),
        }
    }

    /// Waits until a blocked send is worth retrying (rule 3).
    async fn wait_writable(&self) {
        self.blocked_senders.fetch_add(1, Ordering::AcqRel);
        tokio::select! {
            _ = self.writable.notified() => {}
            _ = tokio::time::sleep(BLOCKED_SEND_RETRY) => {}
        }
        self.blocked_senders.fetch_sub(1, Ordering::AcqRel);
    }

    /// Receives one multipart message, appending its frames to `frames` (so a caller that
    /// receives in a loop reuses one buffer), and returns the CURVE client key if `with_key`.
    pub(crate) async fn recv_into(
        &self,
        frames: &mut Vec<Bytes>,
        with_key: bool,
    ) -> Result<Option<Key>> {
        // A receiver that always finds a message never waits, so it must still give the
        // runtime its turn: the budget makes it yield now and then, as every tokio
        // resource does.
        tokio::task::coop::consume_budget().await;
        // A message already there is taken without the turn (the common case on a busy
        // socket): the turn is for waiting, and only one receiver waits at a time.
        if !self.drained.load(Ordering::Acquire) {
            if let Some(key) = self.recv_attempt(frames, with_key, false)? {
                return Ok(key);
            }
        }
        let _turn = match self.receiving.try_take() {
            Some(turn) => turn,
            None => self.receiving.take().await,
        };
        // Whoever had the turn before may have left messages (and taken their edge).
        if !self.drained.load(Ordering::Acquire) {
            if let Some(key) = self.recv_attempt(frames, with_key, true)? {
                return Ok(key);
            }
        }
        // Parked (EAGAIN, now or at the last receive): wait, keeping our turn.
        self.recv_wait(frames, with_key).await
    }

    /// Waits for a message after a receive found none, then receives it. The caller holds
    /// the receiving turn.
    async fn recv_wait(&self, frames: &mut Vec<Bytes>, with_key: bool) -> Result<Option<Key>> {
        loop {
            // Rule 1: the receive before this returned EAGAIN, so the next command raises an
            // edge.
            tokio::select! {
                ready = self.fd_readable() => ready?,
                _ = self.readable.notified() => {}
            }
            if let Some(key) = self.recv_attempt(frames, with_key, true)? {
                return Ok(key);
            }
        }
    }

    /// One non-blocking receive under the socket lock: `Some(key)` when a message was
    /// appended to `frames`, `None` (and parked, rule 2) when there was none. `waiter` is
    /// whether the caller holds the receiving turn (see [`Core::note_received`]).
    fn recv_attempt(
        &self,
        frames: &mut Vec<Bytes>,
        with_key: bool,
        waiter: bool,
    ) -> Result<Option<Option<Key>>> {
        let received = self.with_live(|live| {
            let received = recv_frames(live, with_key, frames);
            // Set under the lock, so a sender that takes the lock after us sees it (rule 2).
            self.note_received(&received, waiter);
            if received.is_ok() && self.blocked_senders.load(Ordering::Acquire) > 0 {
                if let Ok(events) = live.socket.get_events() {
                    if events.contains(zmq::POLLOUT) {
                        self.writable.notify_waiters();
                    }
                }
            }
            Ok(received)
        })?;
        match received {
            Ok(key) => {
                tracing::trace!(kind = self.kind, frames = frames.len(), "received");
                Ok(Some(key))
            }
            Err(zmq::Error::EAGAIN) => Ok(None),
            Err(e) => Err(socket_error("receive")(e)),
        }
    }

    /// After a libzmq call other than a send or a receiver's own receive (under the socket
    /// lock): it may have processed the command announcing a message, taking the edge a
    /// parked receiver waits for. The next receiver looks before it waits, and one already
    /// waiting is woken to look (it parks again if there is nothing; as a send does, rule 2).
    fn touched(&self) {
        self.drained.store(false, Ordering::Release);
        if self.receiver_parked.swap(false, Ordering::AcqRel) {
            self.readable.notify_one();
        }
    }

    /// Records what a receive found, under the socket lock: nothing (EAGAIN) parks the
    /// receivers (rule 2) and marks the socket drained; a message clears both.
    ///
    /// A message taken by a receiver that does not hold the turn (`waiter` false) may have
    /// been announced by the edge the turn's holder waits for: that receive touched the
    /// socket as a `try_recv` does, and wakes a parked holder to look. The holder clears the
    /// flag itself, without the wake-up it would only give itself.
    fn note_received<T>(&self, received: &zmq::Result<T>, waiter: bool) {
        let empty = matches!(received, Err(zmq::Error::EAGAIN));
        if empty {
            self.receiver_parked.store(true, Ordering::Release);
            self.drained.store(true, Ordering::Release);
        } else if waiter {
            self.receiver_parked.store(false, Ordering::Release);
            self.drained.store(false, Ordering::Release);
        } else {
            self.drained.store(false, Ordering::Release);
            // Loaded first: on a busy socket nobody is parked, and the swap is an atomic
            // read-modify-write every message would pay.
            if self.receiver_parked.load(Ordering::Acquire)
                && self.receiver_parked.swap(false, Ordering::AcqRel)
            {
                self.readable.notify_one();
            }
        }
    }

    /// Receives one message if one is already there, without waiting (a busy reader takes a
    /// batch per wake-up), appending its frames to `frames` as
    /// [`recv_into`](Self::recv_into) does: `Some(key)` when a message was there.
    pub(crate) fn try_recv_into(
        &self,
        frames: &mut Vec<Bytes>,
        with_key: bool,
    ) -> Result<Option<Option<Key>>> {
        // A receive without the turn, as `recv`'s first look.
        self.recv_attempt(frames, with_key, false)
    }

    /// Waits until ZMQ_FD signals, and clears that readiness (the caller then receives,
    /// which drains what the signal announced).
    async fn fd_readable(&self) -> Result<()> {
        std::future::poll_fn(|cx| {
            let guard = self.fd.lock();
            let Some(fd) = guard.as_ref() else {
                return std::task::Poll::Ready(Err(Error::Closed));
            };
            match fd.poll_read_ready(cx) {
                std::task::Poll::Ready(Ok(mut ready)) => {
                    ready.clear_ready();
                    std::task::Poll::Ready(Ok(()))
                }
                std::task::Poll::Ready(Err(source)) => std::task::Poll::Ready(Err(Error::Socket {
                    operation: "poll ZMQ_FD",
                    source,
                })),
                std::task::Poll::Pending => std::task::Poll::Pending,
            }
        })
        .await
    }
}

/// libzmq closes a listener in its I/O thread, shortly after `zmq_unbind` returns. For a TCP
/// endpoint, wait (bounded) until the port can be bound again, so that "closed" means "free".
async fn wait_released(endpoint: &str) {
    let Some(address) = endpoint.strip_prefix("tcp://") else {
        return;
    };
    let Ok(address) = address.parse::<std::net::SocketAddr>() else {
        return;
    };
    for _ in 0..500 {
        // std's listener sets SO_REUSEADDR, as libzmq does, so this succeeds exactly when
        // libzmq's listener is gone.
        match std::net::TcpListener::bind(address) {
            Ok(_) => return,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {}
            // Anything else (out of descriptors, say) cannot tell whether the port is free:
            // do not wait for an answer that will not come.
            Err(_) => return,
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tracing::warn!(endpoint, "port still busy one second after unbind");
}

/// Sends `[peer,] frames...` without blocking. libzmq delivers multipart messages atomically:
/// once the first frame is accepted, the others cannot fail with EAGAIN.
///
/// A frame that is one this socket received lately goes back to libzmq as the received
/// message itself (see [`Recent`]); any other is copied into a new message.
fn send_frames<F: Frame>(live: &mut Live, peer: Option<&Bytes>, frames: &[F]) -> zmq::Result<()> {
    if let Some(peer) = peer {
        crate::msg::send_bytes(&mut live.socket, peer, zmq::SNDMORE | zmq::DONTWAIT)?;
    }
    let last = frames.len() - 1;
    for (i, frame) in frames.iter().enumerate() {
        let flags = if i == last {
            zmq::DONTWAIT
        } else {
            zmq::SNDMORE | zmq::DONTWAIT
        };
        let message = match frame
            .contiguous()
            .and_then(|bytes| live.recent.take(bytes, &live.arena))
        {
            Some(received) => received,
            None => Msg::from_frame(frame, &mut live.spares)?,
        };
        message.send(&mut live.socket, flags)?;
    }
    Ok(())
}

/// Receives all frames of one message without blocking.
///
/// With `with_key`, also reads the "User-Id" property libzmq attaches to every message of a
/// connection that ZAP authenticated: our ZAP handler (zap.rs) sets it to the CURVE client's
/// public key in Z85. libzmq gives every frame of the message the connection's metadata; the
/// first frame that has it is used. Off by default: the lookup allocates and scans, which
/// the common NULL-mechanism path has no use for.
///
/// Each frame is kept in the socket's [`Recent`] frames; none are once the socket has
/// nothing more to read (EAGAIN), so they are released when it goes idle.
fn recv_frames(
    live: &mut Live,
    with_key: bool,
    frames: &mut Vec<Bytes>,
) -> zmq::Result<Option<Key>> {
    if let Some(last_peer) = &mut live.last_peer {
        // A ROUTER's first frame is the routing id, which libzmq makes (at most 255 bytes,
        // no metadata) and always follows with the message's own frames: received straight
        // into a buffer here, one libzmq call where a message costs five.
        let mut id = [0u8; 256];
        let size = match crate::msg::recv_bytes(&mut live.socket, &mut id) {
            Ok(size) => size.min(id.len()),
            Err(e) => return Err(receive_failed(&mut live.recent, e)),
        };
        let id = &id[..size];
        if last_peer[..] != *id {
            *last_peer = Bytes::copy_from_slice(id);
        }
        frames.push(last_peer.clone());
    }
    let mut key = None;
    loop {
        let mut message = Msg::new();
        let size = match message.recv(&mut live.socket) {
            Ok(size) => size,
            Err(e) => return Err(receive_failed(&mut live.recent, e)),
        };
        if with_key && key.is_none() {
            key = message
                .property(c"User-Id")
                .and_then(|id| Key::from_z85(id).ok());
        }
        let more = message.more();
        let bytes = message.bytes(size);
        if bytes.len() <= Arena::MAX_FRAME {
            // Small: copied into the socket's arena; the message itself is kept for
            // forwarding (or closed).
            let copy = live.arena.copy(bytes);
            live.recent.keep_owned(message, &copy, &live.arena);
            frames.push(copy);
        } else {
            // Large: `Bytes` owns libzmq's message, so its buffer is never copied.
            live.recent.keep(&mut message);
            frames.push(Bytes::from_owner(message));
        }
        if !more {
            return Ok(key);
        }
    }
}

/// A receive's error, after letting the kept frames go if the socket has nothing more to
/// read (EAGAIN: see [`recv_frames`]).
fn receive_failed(recent: &mut Recent, e: zmq::Error) -> zmq::Error {
    if e == zmq::Error::EAGAIN {
        recent.clear();
    }
    e
}
