//! Endpoints of the native engine (see `stream.rs` for what they name): listened on and
//! connected to.
//!
//! Each bound endpoint has an accept task; each connected one a connector task that
//! connects, runs the connection's driver, and connects again with backoff (libzmq's
//! reconnect interval, doubling up to its maximum) until it is told to stop or the peer
//! refuses the handshake for good.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::driver::End;
use super::link::Link;
use super::stream::{Address, Listener};
use super::Shared;
use crate::monitor::{Event, HandshakeFailure};

/// The shortest pause between two connection attempts.
const MIN_RECONNECT: Duration = Duration::from_millis(1);

/// How long an accept task waits after a failed `accept` (out of file descriptors, say)
/// before it tries again, so it does not spin; the node above pauses longer on its own.
const ACCEPT_RETRY: Duration = Duration::from_millis(10);

/// What a connector is told: stop, and the connection it is running now.
#[derive(Debug, Default)]
pub(super) struct Cancel {
    stopped: AtomicBool,
    wake: Notify,
    current: Mutex<Option<Arc<Link>>>,
}

impl Cancel {
    /// Stops the connector and closes its connection.
    pub(super) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        if let Some(link) = self.current.lock().take() {
            link.close();
        }
        self.wake.notify_waiters();
        self.wake.notify_one();
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    async fn stopped(&self) {
        while !self.is_stopped() {
            self.wake.notified().await;
        }
    }
}

/// The CURVE handshakes in progress on one listening endpoint, against its limit
/// (`Options::max_handshakes`): each HELLO costs X25519 work before the client is known.
#[derive(Debug)]
pub(super) struct Handshakes {
    in_progress: AtomicUsize,
    limit: usize,
}

impl Handshakes {
    /// A place for one more handshake, unless `limit` are in progress.
    fn enter(self: &Arc<Self>) -> Option<HandshakeSlot> {
        self.in_progress
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()
            .map(|_| HandshakeSlot(Arc::clone(self)))
    }
}

/// One connection's place among its listener's handshakes in progress, given back on drop.
#[derive(Debug)]
pub(super) struct HandshakeSlot(Arc<Handshakes>);

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        self.0.in_progress.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accepts connections on `listener` until aborted.
pub(super) async fn accept(listener: Listener, socket: Weak<Shared>, endpoint: Arc<str>) {
    // Only a CURVE server's handshakes cost enough to count.
    let handshakes = socket.upgrade().and_then(|shared| {
        let limit = shared.options.max_handshakes;
        (shared.is_curve_server() && limit > 0).then(|| {
            Arc::new(Handshakes {
                in_progress: AtomicUsize::new(0),
                limit,
            })
        })
    });
    loop {
        let accepted = listener.accept().await;
        let Some(shared) = socket.upgrade() else {
            return;
        };
        match accepted {
            Ok(stream) => {
                let slot = match handshakes.as_ref().map(Handshakes::enter) {
                    Some(None) => {
                        // Closed before a byte is read: no handshake work, no memory kept.
                        drop(stream);
                        shared.emit(Event::TooManyHandshakes {
                            endpoint: endpoint.to_string(),
                            limit: handshakes.as_ref().map_or(0, |h| h.limit),
                        });
                        continue;
                    }
                    Some(slot) => slot,
                    None => None,
                };
                shared.emit(Event::Accepted {
                    endpoint: endpoint.to_string(),
                });
                let (link, driver) = shared.open(stream, &endpoint);
                *link.handshake.lock() = slot;
                let socket = socket.clone();
                let endpoint = Arc::clone(&endpoint);
                drop(shared);
                tokio::spawn(async move {
                    let (end, attached) = driver.run().await;
                    link.handshake.lock().take();
                    if let Some(shared) = socket.upgrade() {
                        shared.forget(&link);
                        report(&shared, &endpoint, &end, attached, true);
                    }
                });
            }
            Err(e) => {
                shared.emit(Event::Failed {
                    endpoint: endpoint.to_string(),
                    event: Event::ACCEPT_FAILED,
                    errno: e.raw_os_error().unwrap_or(0) as u32,
                });
                drop(shared);
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
        }
    }
}

/// Connects to `address`, again and again, until stopped.
pub(super) async fn connect(
    socket: Weak<Shared>,
    endpoint: Arc<str>,
    address: Address,
    cancel: Arc<Cancel>,
    interval: Duration,
    max: Duration,
) {
    let mut backoff = interval;
    loop {
        if cancel.is_stopped() {
            return;
        }
        let connected = tokio::select! {
            connected = address.connect() => connected,
            () = cancel.stopped() => return,
        };
        let Some(shared) = socket.upgrade() else {
            return;
        };
        if shared.closed.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        match connected {
            Ok(stream) => {
                shared.emit(Event::Connected {
                    endpoint: endpoint.to_string(),
                });
                let (link, driver) = shared.open(stream, &endpoint);
                *cancel.current.lock() = Some(Arc::clone(&link));
                if cancel.is_stopped() {
                    link.close();
                }
                drop(shared);
                let (end, attached) = driver.run().await;
                cancel.current.lock().take();
                let Some(shared) = socket.upgrade() else {
                    return;
                };
                shared.forget(&link);
                report(&shared, &endpoint, &end, attached, false);
                if cancel.is_stopped() {
                    return;
                }
                if !attached && gives_up(&end) {
                    // As libzmq does after a refused handshake: the endpoint is given up.
                    return;
                }
                if attached {
                    backoff = interval;
                }
            }
            Err(_) => shared.emit(Event::ConnectDelayed {
                endpoint: endpoint.to_string(),
            }),
        }
        if let Some(shared) = socket.upgrade() {
            shared.emit(Event::ConnectRetried {
                endpoint: endpoint.to_string(),
            });
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = cancel.stopped() => return,
        }
        if max > interval {
            backoff = (backoff * 2).min(max);
        }
        // A zero interval must not become a loop that never sleeps.
        backoff = backoff.max(MIN_RECONNECT);
    }
}

/// Whether a failed handshake means the peer will never take us (libzmq stops
/// reconnecting after an authentication or protocol failure).
fn gives_up(end: &End) -> bool {
    matches!(end, End::Failed(e) if !matches!(e, zmtp::Error::HandshakeTimeout))
}

/// The events for a connection that ended: a disconnection, after a failed handshake when it
/// had not completed one.
fn report(shared: &Shared, endpoint: &str, end: &End, attached: bool, accepted: bool) {
    let endpoint = endpoint.to_owned();
    if attached {
        shared.emit(Event::Disconnected { endpoint });
        return;
    }
    let reason = match end {
        End::Closed => return,
        // A peer that connected to us and is not ZMTP 3 at all (random bytes, a ZMTP 1.0 or
        // 2.0 peer): a libzmq Router reports no handshake failure for these, only the
        // connection dropped, and neither do we. (A server we connected to that answers
        // so is a failed handshake, as libzmq reports it.)
        End::Failed(zmtp::Error::BadGreeting { .. } | zmtp::Error::UnsupportedVersion { .. })
            if accepted =>
        {
            shared.emit(Event::Disconnected { endpoint });
            return;
        }
        End::Failed(e) => failure(e, shared.is_curve()),
        End::Lost | End::Duplicate if shared.is_curve() => HandshakeFailure::NoDetail,
        End::Lost | End::Duplicate => HandshakeFailure::Interrupted,
    };
    tracing::debug!(endpoint = %endpoint, %reason, ?end, "handshake failed");
    shared.emit(Event::HandshakeFailed {
        endpoint: endpoint.clone(),
        reason,
    });
    // libzmq reports every connection that ends, a failed handshake too, as disconnected.
    shared.emit(Event::Disconnected { endpoint });
}

/// How a ZMTP error reads as a handshake failure, as libzmq reports the same cases.
fn failure(e: &zmtp::Error, curve: bool) -> HandshakeFailure {
    match e {
        zmtp::Error::Refused { .. } | zmtp::Error::Unauthorized => HandshakeFailure::Auth,
        zmtp::Error::HandshakeTimeout | zmtp::Error::HeartbeatTimeout if curve => {
            HandshakeFailure::NoDetail
        }
        zmtp::Error::HandshakeTimeout | zmtp::Error::HeartbeatTimeout => {
            HandshakeFailure::Interrupted
        }
        _ => HandshakeFailure::Protocol,
    }
}
