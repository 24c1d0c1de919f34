//! Upstream connections: the nodes this node connected to.
//!
//! Each address has one `Upstream` (link.rs): one socket (a protocol `Client`) and one supervisor
//! task that owns the connection's joining: it handshakes, publishes who joined (a `watch`
//! that the connection's dispatchers and every `connect` waiting on it read), and after
//! every loss decides by the [`Reconnect`] policy whether to handshake again, with a
//! bounded, jittered backoff between attempts. `connect` to an address that already has an
//! `Upstream` shares it: it returns the joined peer, or waits for the attempt under way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use protocol::{Client, Connection};
use tokio::sync::watch;
use tokio::time::Instant;
use transport::{Curve, Key};

use crate::config::ReconnectPolicy;
use crate::error::{Error, Result};
use crate::mesh::handshake::BYE;
use crate::mesh::link::{Left, Link, Signal, Upstream};
use crate::mesh::peer::{Direction, Entry, LeaveReason, PeerInfo, PeerWork, Reach, Ticket};
use crate::node::dispatch::install_upstream;
use crate::node::inner::Inner;
use crate::node::join::handshake_upstream;
use crate::observation::events::{ErrorSource, NodeEvent};

/// Generations of upstream entries (see `Upstream::generation`).
static GENERATIONS: AtomicU64 = AtomicU64::new(0);

/// How long a dropped connection waits for a goodbye that may still be on its way before
/// its peer counts as disconnected (see `supervise`).
const GOODBYE_GRACE: Duration = Duration::from_millis(100);

/// How to connect: options of [`Node::connect_with`](crate::Node::connect_with).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// The server's CURVE public key: connect encrypted and authenticated (this node needs
    /// a key pair of its own, [`NodeBuilder::curve`](crate::NodeBuilder::curve)).
    pub server_key: Option<Key>,
    /// How long this call waits for the connection and the handshake (default: the node's
    /// `handshake_timeout`).
    pub timeout: Option<Duration>,
}

impl ConnectOptions {
    /// Plaintext, with the node's handshake timeout.
    pub fn new() -> ConnectOptions {
        ConnectOptions::default()
    }

    /// Connects with CURVE to the server whose public key this is.
    pub fn server_key(mut self, key: Key) -> ConnectOptions {
        self.server_key = Some(key);
        self
    }

    /// Waits at most this long.
    pub fn timeout(mut self, timeout: Duration) -> ConnectOptions {
        self.timeout = Some(timeout);
        self
    }
}

/// Whether an upstream connection handshakes again after its peer left for `reason`.
pub(crate) fn rejoins(policy: ReconnectPolicy, reason: LeaveReason) -> bool {
    match policy {
        ReconnectPolicy::Always => true,
        ReconnectPolicy::OnFailure => !matches!(
            reason,
            LeaveReason::Stopped | LeaveReason::Local | LeaveReason::Revoked
        ),
        ReconnectPolicy::Never => false,
    }
}

/// What the first `connect` to an address has to do, or what a later one finds.
enum Found {
    /// Nobody is connected: we are first, with the sender of the new entry's `joined` and
    /// the entry's generation.
    First(watch::Sender<Option<PeerInfo>>, u64),
    /// Another call made it or is making it: wait on its `joined`.
    Shared(watch::Receiver<Option<PeerInfo>>),
}

impl Inner {
    /// Socket options of every connection (and of the bound server, before CURVE).
    pub(crate) fn transport_options(&self) -> transport::Options {
        let config = &self.config;
        transport::Options::default()
            .engine(config.engine)
            .hwm(config.hwm)
            .max_message_size(Some(config.max_payload as u64 + 64 * 1024))
            .linger(Duration::from_millis(200))
            .reconnect(config.reconnect.initial, config.reconnect.max)
            .max_handshakes(config.max_handshakes)
            // ZMTP heartbeats make libzmq drop a connection that went silent (a network cut
            // sends no RST), so the client reconnects by itself once the path heals. They
            // are the backstop: one interval later than the node's own dead-peer check, so
            // a silent peer is reported as `TimedOut` (by the node) rather than raced by
            // libzmq's close (`Disconnected`).
            .heartbeat(transport::Heartbeat {
                interval: config.heartbeat_interval,
                timeout: config.dead_peer_timeout + config.heartbeat_interval,
                ttl: config.dead_peer_timeout + config.heartbeat_interval,
            })
    }

    /// Connects to `address` (or shares the connection there) and returns the joined peer.
    pub(crate) async fn connect(
        self: &Arc<Self>,
        address: &str,
        options: ConnectOptions,
    ) -> Result<PeerInfo> {
        let transport_options = match options.server_key {
            None => self.transport_options(),
            Some(server_key) => {
                let keys = self.config.curve.as_ref().ok_or(Error::NoKeys)?;
                self.transport_options()
                    .curve(Curve::client(keys, server_key))
            }
        };
        let timeout = options.timeout.unwrap_or(self.config.handshake_timeout);
        let deadline = Instant::now() + timeout;
        loop {
            if self.life.is_stopping() {
                return Err(Error::Closed);
            }
            let found = {
                let mut upstreams = self.links.upstreams.lock();
                match upstreams.get(address) {
                    Some(upstream) => Found::Shared(upstream.joined.clone()),
                    None => {
                        let (tx, rx) = watch::channel(None);
                        let generation = GENERATIONS.fetch_add(1, Ordering::Relaxed);
                        upstreams.insert(
                            address.to_owned(),
                            Upstream {
                                generation,
                                connection: None,
                                joined: rx,
                            },
                        );
                        Found::First(tx, generation)
                    }
                }
            };
            match found {
                Found::First(joined, generation) => {
                    return self
                        .connect_first(
                            address,
                            transport_options,
                            options,
                            (joined, generation),
                            deadline,
                        )
                        .await
                }
                Found::Shared(mut joined) => {
                    let waited =
                        tokio::time::timeout_at(deadline, joined.wait_for(|peer| peer.is_some()))
                            .await;
                    match waited {
                        Ok(Ok(peer)) => match peer.clone() {
                            Some(peer) => return Ok(peer),
                            None => continue,
                        },
                        // That attempt failed (or the connection was given up): try again
                        // ourselves, within our own deadline.
                        Ok(Err(_)) => continue,
                        Err(_) => {
                            return Err(Error::HandshakeTimeout {
                                endpoint: address.to_owned(),
                            })
                        }
                    }
                }
            }
        }
    }

    /// Makes the connection and its supervisor, and waits for the first handshake.
    async fn connect_first(
        self: &Arc<Self>,
        address: &str,
        transport_options: transport::Options,
        options: ConnectOptions,
        (joined, generation): (watch::Sender<Option<PeerInfo>>, u64),
        deadline: Instant,
    ) -> Result<PeerInfo> {
        // Removes our entry (not one a later `connect` made).
        let forget = |inner: &Inner| {
            let mut upstreams = inner.links.upstreams.lock();
            if upstreams
                .get(address)
                .is_some_and(|u| u.generation == generation)
            {
                upstreams.remove(address)
            } else {
                None
            }
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let made =
            Client::connect_with(address, transport_options, self.config.max_payload, left).await;
        let client = match made {
            Ok(client) => client,
            Err(e) => {
                forget(self);
                return Err(match e {
                    protocol::Error::ConnectTimeout { endpoint } => {
                        Error::HandshakeTimeout { endpoint }
                    }
                    e => e.into(),
                });
            }
        };
        install_upstream(
            Arc::downgrade(self),
            &client,
            joined.subscribe(),
            options.server_key,
        );
        let mut first = joined.subscribe();
        let (outcome_tx, outcome_rx) = tokio::sync::oneshot::channel();
        let supervisor = tokio::spawn(supervise(
            Arc::downgrade(self),
            client.clone(),
            joined,
            options.server_key,
            outcome_tx,
        ));
        let kept = {
            let mut upstreams = self.links.upstreams.lock();
            match upstreams.get_mut(address) {
                Some(upstream) if upstream.generation == generation => {
                    upstream.connection = Some((client.clone(), supervisor));
                    None
                }
                // Given up while we were connecting (`disconnect`, `close`).
                _ => Some(supervisor),
            }
        };
        if let Some(supervisor) = kept {
            supervisor.abort();
            client.abort().await;
            return Err(Error::ConnectAbandoned {
                address: address.to_owned(),
            });
        }
        let outcome = tokio::time::timeout_at(deadline, outcome_rx).await;
        let error = match outcome {
            Ok(Ok(Ok(()))) => {
                if let Some(peer) = first.borrow_and_update().clone() {
                    return Ok(peer);
                }
                Error::ConnectAbandoned {
                    address: address.to_owned(),
                }
            }
            Ok(Ok(Err(e))) => e,
            Ok(Err(_)) => Error::Closed,
            Err(_) => Error::HandshakeTimeout {
                endpoint: address.to_owned(),
            },
        };
        // The first handshake failed: give the connection up.
        if let Some(upstream) = forget(self) {
            if let Some((_, supervisor)) = upstream.connection {
                supervisor.abort();
            }
        }
        client.abort().await;
        Err(error)
    }

    /// Drops the connection to `address`: the peer leaves (reason: local).
    pub(crate) async fn disconnect(&self, address: &str) -> Result<()> {
        let upstream =
            self.links
                .upstreams
                .lock()
                .remove(address)
                .ok_or_else(|| Error::NotConnectedTo {
                    address: address.to_owned(),
                })?;
        let joined = upstream.joined.borrow().as_ref().map(|p| p.id.clone());
        let Some((client, supervisor)) = upstream.connection else {
            // Still being made: its `connect` sees it given up.
            return Ok(());
        };
        supervisor.abort();
        let _ = client.peer().system().tick(BYE, Bytes::new()).await;
        if let Some(id) = joined {
            self.peer_left(&id, Direction::Upstream, LeaveReason::Local);
        }
        client.close().await;
        Ok(())
    }
}

/// How often a let-go looks at what is still in flight to the peer it lets go.
const LET_GO_POLL: Duration = Duration::from_millis(10);

/// What a let-go does next, given what is still in flight to the peer and the time. Pure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LetGo {
    /// Requests are still out and the grace is not over: look again later.
    Wait,
    /// Drop the connection now; `cut` requests were still out (the grace ran out).
    Disconnect { cut: usize },
}

impl LetGo {
    /// With `in_flight` requests out at `now`, for a grace that ends `until`.
    pub(crate) fn next(in_flight: usize, now: Instant, until: Instant) -> LetGo {
        if in_flight == 0 {
            LetGo::Disconnect { cut: 0 }
        } else if now >= until {
            LetGo::Disconnect { cut: in_flight }
        } else {
            LetGo::Wait
        }
    }
}

/// Lets go of the peer joined through `address` gracefully: it is no longer picked for
/// `any`, `all` or group calls from now (marked draining), and the connection is dropped
/// once nothing is in flight to it (this node's requests, those it forwards to it as a
/// router, streams open to it), or once `grace` has passed. Holds the node only weakly
/// while it waits: a node dropped meanwhile ends it.
pub(crate) async fn let_go(node: &Weak<Inner>, address: &str, grace: Duration) -> Result<()> {
    let until = Instant::now() + grace;
    loop {
        let Some(inner) = node.upgrade() else {
            return Err(Error::Closed);
        };
        let in_flight = inner.letting_go(address);
        match LetGo::next(in_flight, Instant::now(), until) {
            LetGo::Wait => {}
            LetGo::Disconnect { cut } => {
                if cut > 0 {
                    tracing::warn!(node = %inner.id, %address, cut, ?grace, "let go with requests still in flight: the grace ran out");
                }
                return inner.disconnect(address).await;
            }
        }
        drop(inner);
        tokio::time::sleep(LET_GO_POLL).await;
    }
}

impl Inner {
    /// One look of a let-go at `address`: its peer is marked draining (again: a rejoin
    /// meanwhile made a new entry), and what is in flight to it, read under the same lock
    /// every pick takes its count under.
    fn letting_go(&self, address: &str) -> usize {
        let joined = self
            .links
            .upstreams
            .lock()
            .get(address)
            .and_then(|u| u.joined.borrow().as_ref().map(|p| p.id.clone()));
        let Some(id) = joined else {
            return 0;
        };
        self.peer_draining(&id, Direction::Upstream);
        self.state
            .lock()
            .registry
            .get(&id, Direction::Upstream)
            .map_or(0, Entry::in_flight)
    }
}

/// Keeps one upstream connection joined: handshakes, and after every loss handshakes
/// again when the policy says so. The first outcome goes to `connect` through `first`.
async fn supervise(
    weak: Weak<Inner>,
    client: Client,
    joined: watch::Sender<Option<PeerInfo>>,
    server_key: Option<Key>,
    first: tokio::sync::oneshot::Sender<Result<()>>,
) {
    let left = Arc::new(Left::default());
    let mut first = Some(first);
    let mut connection = client.watch_connection();
    let mut attempt = 0u32;
    // The ticket the server gave our last join: later handshakes bring it.
    let mut ticket: Option<Ticket> = None;
    loop {
        // Wait for a live connection.
        loop {
            let refused = match &*connection.borrow_and_update() {
                Connection::Connected => break,
                Connection::Closed => return,
                Connection::Refused(reason) => Some(*reason),
                _ => None,
            };
            if let Some(reason) = refused {
                // The server refused a reconnection (it restarted with another key or
                // allow-list): libzmq does not retry after an authentication refusal.
                if let Some(inner) = weak.upgrade() {
                    inner.observers.report(
                        ErrorSource::Handshake,
                        format!("{} refused the connection: {reason}", client.endpoint()),
                    );
                }
            }
            if connection.changed().await.is_err() {
                return;
            }
        }
        let Some(inner) = weak.upgrade() else { return };
        if inner.life.is_stopping() {
            return;
        }
        left.clear();
        let outcome = join(&inner, &client, &left, server_key, &mut ticket).await;
        let reconnect = inner.config.reconnect;
        match (&outcome, first.take()) {
            (Ok(peer), first) => {
                attempt = 0;
                joined.send_replace(Some(peer.clone()));
                if let Some(first) = first {
                    let _ = first.send(Ok(()));
                }
            }
            (Err(_), Some(first)) => {
                let _ = first.send(outcome.map(|_| ()));
                return;
            }
            (Err(e), None) => {
                inner
                    .observers
                    .report(ErrorSource::Handshake, format!("re-handshake failed: {e}"));
                if matches!(e, Error::Refused { .. }) {
                    // Our key was revoked: retrying cannot help. Give the connection up.
                    give_up(&inner, &client).await;
                    return;
                }
            }
        }
        let Ok(peer) = outcome else {
            drop(inner);
            // Not joined: try again after the backoff.
            tokio::time::sleep(reconnect.delay(attempt, rand::random::<f64>())).await;
            attempt = attempt.saturating_add(1);
            continue;
        };
        drop(inner);
        // Joined: stay until the peer leaves or the connection drops; a rejoin request is
        // answered with a new handshake on the same connection.
        let reason = loop {
            let signal = tokio::select! {
                biased;
                signal = left.wait() => signal,
                () = disconnected(&mut connection) => {
                    // A peer that closes gracefully says goodbye and then closes its socket:
                    // the socket's event can overtake the goodbye still being read (they
                    // come by different ways). A moment for it, so that the leave is
                    // `Stopped`.
                    match tokio::time::timeout(GOODBYE_GRACE, left.wait()).await {
                        Ok(Signal::Left(reason)) => Signal::Left(reason),
                        _ => {
                            let Some(inner) = weak.upgrade() else { return };
                            inner.peer_left(&peer.id, Direction::Upstream, LeaveReason::Disconnected);
                            Signal::Left(LeaveReason::Disconnected)
                        }
                    }
                }
            };
            match signal {
                Signal::Left(reason) => break reason,
                Signal::Rejoin => {
                    let Some(inner) = weak.upgrade() else { return };
                    match join(&inner, &client, &left, server_key, &mut ticket).await {
                        Ok(again) => {
                            joined.send_replace(Some(again));
                        }
                        Err(e) => {
                            inner
                                .observers
                                .report(ErrorSource::Handshake, format!("rejoin failed: {e}"));
                            inner.peer_left(
                                &peer.id,
                                Direction::Upstream,
                                LeaveReason::Disconnected,
                            );
                            // Whatever peer_left signalled is this same loss.
                            left.clear();
                            break LeaveReason::Disconnected;
                        }
                    }
                }
            }
        };
        joined.send_replace(None);
        let Some(inner) = weak.upgrade() else { return };
        if !rejoins(reconnect.policy, reason) {
            tracing::debug!(node = %inner.id, peer = %peer.id, ?reason, "not reconnecting (policy)");
            give_up(&inner, &client).await;
            return;
        }
    }
}

/// Resolves when the connection is no longer up (or its watch ends).
async fn disconnected(connection: &mut watch::Receiver<Connection>) {
    loop {
        if connection.changed().await.is_err() {
            return;
        }
        if *connection.borrow() != Connection::Connected {
            return;
        }
    }
}

/// One handshake and the registration of the peer it joins.
async fn join(
    inner: &Arc<Inner>,
    client: &Client,
    left: &Arc<Left>,
    server_key: Option<Key>,
    ticket: &mut Option<Ticket>,
) -> Result<PeerInfo> {
    let hello = handshake_upstream(inner, client, ticket.as_ref()).await?;
    // This server's ticket for us: brought to our next handshake with it (a reconnect
    // on a new connection takes our id over with it).
    if !hello.token.is_empty() {
        *ticket = Some(hello.token.clone());
    }
    let limit = hello.limit(inner.config.max_payload);
    let entry = Entry {
        reach: Reach::new(
            hello.id.clone(),
            Direction::Upstream,
            Arc::new(Link::up(client.clone(), Arc::clone(left), limit)),
        ),
        options: hello.options.clone(),
        instance: hello.instance.clone(),
        token: None,
        draining: false,
        router: hello.router,
        key: server_key,
        last_seen: Arc::new(Mutex::new(Instant::now().into_std())),
        dead_after: inner.dead_after(&hello),
        work: Arc::new(PeerWork::new(limit, inner.runtime.stopping())),
    };
    let joined = {
        let mut state = inner.state.lock();
        let mut entry = entry;
        // A new handshake on this same connection (a rejoin request) keeps the peer's work.
        if let Some(old) = state.registry.get(entry.id(), Direction::Upstream) {
            if old.link().client().is_some_and(|c| c.same_as(client)) {
                old.work.set_limit(limit);
                entry.work = Arc::clone(&old.work);
            }
        }
        state.registry.join(entry)
    };
    match joined {
        Err(_) => {
            let _ = client.peer().system().tick(BYE, Bytes::new()).await;
            return Err(Error::DuplicateId {
                id: hello.id.to_string(),
            });
        }
        // The same peer joined again on this connection (a rejoin request): no news.
        Ok(Some(_)) => {}
        Ok(None) => {
            tracing::debug!(node = %inner.id, peer = %hello.id, "upstream peer joined");
            inner.observers.emit(NodeEvent::PeerJoined {
                id: hello.id.clone(),
                direction: Direction::Upstream,
                options: hello.options.clone(),
            });
        }
    }
    Ok(PeerInfo {
        id: hello.id,
        direction: Direction::Upstream,
        options: hello.options,
        in_flight: 0,
        router: hello.router,
        key: server_key,
        draining: false,
    })
}

/// Gives an upstream connection up from its own supervisor: out of the map (if it is
/// still this one), socket closed.
async fn give_up(inner: &Inner, client: &Client) {
    let removed = {
        let mut upstreams = inner.links.upstreams.lock();
        let ours = upstreams
            .get(client.endpoint())
            .and_then(Upstream::client)
            .is_some_and(|c| c.same_as(client));
        if ours {
            upstreams.remove(client.endpoint())
        } else {
            None
        }
    };
    // Our own task: dropping the handle detaches it, it ends right after this.
    drop(removed);
    client.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_policy_decides_by_the_reason() {
        use LeaveReason::*;
        for reason in [Stopped, TimedOut, Disconnected, Local, Revoked] {
            assert!(rejoins(ReconnectPolicy::Always, reason));
            assert!(!rejoins(ReconnectPolicy::Never, reason));
        }
        assert!(rejoins(ReconnectPolicy::OnFailure, TimedOut));
        assert!(rejoins(ReconnectPolicy::OnFailure, Disconnected));
        assert!(!rejoins(ReconnectPolicy::OnFailure, Stopped));
        assert!(!rejoins(ReconnectPolicy::OnFailure, Revoked));
    }

    #[test]
    fn a_let_go_waits_for_what_is_in_flight_within_its_grace() {
        let now = Instant::now();
        let until = now + Duration::from_secs(10);
        assert_eq!(LetGo::next(0, now, until), LetGo::Disconnect { cut: 0 });
        assert_eq!(LetGo::next(3, now, until), LetGo::Wait);
        assert_eq!(
            LetGo::next(3, until, until),
            LetGo::Disconnect { cut: 3 },
            "the grace bounds the wait"
        );
        assert_eq!(LetGo::next(0, until, until), LetGo::Disconnect { cut: 0 });
    }
}
