//! Socket options, with the defaults zeronode uses.

use std::time::Duration;

use bytes::Bytes;

use crate::curve::Curve;
#[cfg(feature = "libzmq")]
use crate::error::{os, Error, Result};
use crate::ids::Engine;

/// What `send` does when the send high-water mark is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backpressure {
    /// Wait (asynchronously) until the queue has room. Nothing is dropped.
    #[default]
    Wait,
    /// Return [`Error::QueueFull`](crate::Error::QueueFull) at once. Nothing is dropped silently: the caller is told.
    Fail,
}

/// ZMTP-level heartbeats (libzmq's `ZMQ_HEARTBEAT_*`, and the native engine's own): PINGs on
/// the connection, which is closed when it stays silent, and which then shows up as a
/// `Disconnected` event. The type is the ZMTP core's, the same for both engines.
pub use zmtp::Heartbeat;

/// The default of [`Options::max_handshakes`]: a few hundred clients (re)connecting at
/// once are served together, while the handshakes in progress hold at most that many
/// connections and their X25519 work (three per HELLO, about 0.1 ms of a core together
/// when optimized) stays a few tens of milliseconds even if every one of them stalls.
pub const DEFAULT_MAX_HANDSHAKES: usize = 512;

/// Options for a [`Router`](crate::Router) or [`Dealer`](crate::Dealer).
///
/// Built by chaining setters on [`Options::default()`]:
///
/// ```
/// use std::time::Duration;
/// use transport::{Backpressure, Options};
///
/// let options = Options::default()
///     .send_hwm(10)
///     .linger(Duration::from_millis(100))
///     .backpressure(Backpressure::Fail);
/// assert_eq!(options.send_hwm, 10);
/// ```
#[derive(Debug, Clone)]
pub struct Options {
    /// Messages queued per peer for sending before backpressure applies (ZMQ_SNDHWM).
    pub send_hwm: i32,
    /// Messages queued per peer on receipt before libzmq stops reading (ZMQ_RCVHWM).
    pub recv_hwm: i32,
    /// How long queued messages may still be delivered after the socket is closed.
    pub linger: Duration,
    /// First delay before libzmq reconnects a dropped connection.
    pub reconnect_interval: Duration,
    /// Upper bound of the exponential reconnect backoff (zero: no backoff).
    pub reconnect_interval_max: Duration,
    /// Largest inbound message libzmq accepts; a peer that sends more is disconnected.
    /// `None` means no limit.
    pub max_message_size: Option<u64>,
    /// Routing id a Dealer presents to the Router it connects to (the node id, later).
    /// `None` lets the Router assign one.
    pub routing_id: Option<Bytes>,
    /// Router only: sending to an unknown routing id is an error instead of a silent drop.
    /// On by default; turning it off brings back libzmq's silent drop.
    pub router_mandatory: bool,
    /// Router only: a new connection with a routing id already in use takes it over.
    pub router_handover: bool,
    /// What `send` does at the high-water mark.
    pub backpressure: Backpressure,
    /// ZMTP heartbeats; `None` leaves them off.
    pub heartbeat: Option<Heartbeat>,
    /// CurveZMQ encryption and authentication; `None` is ZMTP's NULL mechanism (plaintext,
    /// anyone may connect). Both ends must agree: a CURVE server refuses plaintext clients
    /// and a CURVE client refuses plaintext servers, each with a `HandshakeFailed` event.
    pub curve: Option<Curve>,
    /// How long a connection's greeting and security handshake may take before it is
    /// dropped (libzmq's ZMQ_HANDSHAKE_IVL; 30 s by default, as libzmq's).
    pub handshake_timeout: Duration,
    /// The most CURVE handshakes a listening endpoint of a CURVE server runs at once (0: no
    /// limit). Each HELLO costs the server X25519 work before it knows who is there, so a
    /// connection accepted beyond this is closed at once, with an
    /// [`Event::TooManyHandshakes`](crate::Event::TooManyHandshakes); a real client
    /// connects again after its reconnect interval. Connections that finished their
    /// handshake do not count. Native engine only: libzmq has no such limit (see
    /// ARCHITECTURE.md).
    pub max_handshakes: usize,
    /// Which ZMTP implementation runs the socket (default: the process's, see
    /// [`Engine::from_env`]).
    pub engine: Engine,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            send_hwm: 1000,
            recv_hwm: 1000,
            linger: Duration::from_secs(1),
            reconnect_interval: Duration::from_millis(100),
            reconnect_interval_max: Duration::from_secs(2),
            max_message_size: Some(64 * 1024 * 1024),
            routing_id: None,
            router_mandatory: true,
            router_handover: false,
            backpressure: Backpressure::Wait,
            heartbeat: None,
            curve: None,
            handshake_timeout: Duration::from_secs(30),
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
            engine: Engine::default(),
        }
    }
}

impl Options {
    /// Sets both the send and the receive high-water mark.
    pub fn hwm(self, messages: i32) -> Self {
        self.send_hwm(messages).recv_hwm(messages)
    }

    /// Sets the send high-water mark.
    pub fn send_hwm(mut self, messages: i32) -> Self {
        self.send_hwm = messages;
        self
    }

    /// Sets the receive high-water mark.
    pub fn recv_hwm(mut self, messages: i32) -> Self {
        self.recv_hwm = messages;
        self
    }

    /// Sets the linger period.
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Sets the reconnect interval and its maximum (exponential backoff up to it).
    pub fn reconnect(mut self, interval: Duration, max: Duration) -> Self {
        self.reconnect_interval = interval;
        self.reconnect_interval_max = max;
        self
    }

    /// Sets the largest inbound message accepted (`None`: unlimited).
    pub fn max_message_size(mut self, bytes: Option<u64>) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// Sets the routing id a Dealer presents.
    pub fn routing_id(mut self, id: impl Into<Bytes>) -> Self {
        self.routing_id = Some(id.into());
        self
    }

    /// Turns ROUTER_MANDATORY on or off.
    pub fn router_mandatory(mut self, on: bool) -> Self {
        self.router_mandatory = on;
        self
    }

    /// Turns ROUTER_HANDOVER on or off.
    pub fn router_handover(mut self, on: bool) -> Self {
        self.router_handover = on;
        self
    }

    /// Chooses what `send` does at the high-water mark.
    pub fn backpressure(mut self, backpressure: Backpressure) -> Self {
        self.backpressure = backpressure;
        self
    }

    /// Turns ZMTP heartbeats on.
    pub fn heartbeat(mut self, heartbeat: Heartbeat) -> Self {
        self.heartbeat = Some(heartbeat);
        self
    }

    /// Turns CURVE on, as server or client (see [`Curve`]).
    ///
    /// ```
    /// use transport::{Curve, KeyPair, Options};
    ///
    /// let keys = KeyPair::generate()?;
    /// let options = Options::default().curve(Curve::server(&keys));
    /// assert!(options.curve.as_ref().is_some_and(Curve::is_server));
    /// # Ok::<(), transport::Error>(())
    /// ```
    pub fn curve(mut self, curve: Curve) -> Self {
        self.curve = Some(curve);
        self
    }

    /// Sets how long a handshake may take (see [`Options::handshake_timeout`]).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// Sets the most CURVE handshakes in progress per listening endpoint (see
    /// [`Options::max_handshakes`]; 0: no limit).
    pub fn max_handshakes(mut self, handshakes: usize) -> Self {
        self.max_handshakes = handshakes;
        self
    }

    /// Runs the socket on `engine` (libzmq or the native one).
    pub fn engine(mut self, engine: Engine) -> Self {
        self.engine = engine;
        self
    }

    /// Applies the options to a fresh libzmq socket. `zap_domain` is the domain a CURVE
    /// server socket was registered under with the ZAP handler (zap.rs); a plaintext Router
    /// gets [`PLAINTEXT_DOMAIN`](crate::zap::PLAINTEXT_DOMAIN), which refuses ZMTP 1.0 peers.
    #[cfg(feature = "libzmq")]
    pub(crate) fn apply(
        &self,
        socket: &zmq::Socket,
        router: bool,
        zap_domain: Option<&str>,
    ) -> Result<()> {
        fn set(name: &'static str, r: zmq::Result<()>) -> Result<()> {
            r.map_err(|e| Error::SetOption {
                name,
                source: os(e),
            })
        }
        set("sndhwm", socket.set_sndhwm(self.send_hwm))?;
        set(
            "handshake_ivl",
            socket.set_handshake_ivl(millis(self.handshake_timeout)),
        )?;
        set("rcvhwm", socket.set_rcvhwm(self.recv_hwm))?;
        set("linger", socket.set_linger(millis(self.linger)))?;
        set(
            "reconnect_ivl",
            socket.set_reconnect_ivl(millis(self.reconnect_interval)),
        )?;
        set(
            "reconnect_ivl_max",
            socket.set_reconnect_ivl_max(millis(self.reconnect_interval_max)),
        )?;
        let max = self
            .max_message_size
            .map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX));
        set("maxmsgsize", socket.set_maxmsgsize(max))?;
        if let Some(hb) = self.heartbeat {
            set(
                "heartbeat_ivl",
                socket.set_heartbeat_ivl(millis(hb.interval)),
            )?;
            set(
                "heartbeat_timeout",
                socket.set_heartbeat_timeout(millis(hb.timeout)),
            )?;
            // libzmq carries the TTL in deciseconds in a 16-bit field and refuses more than
            // 6553.5 s; a longer wish means "practically forever".
            let ttl = millis(hb.ttl).min(MAX_HEARTBEAT_TTL_MS);
            set("heartbeat_ttl", socket.set_heartbeat_ttl(ttl))?;
        }
        if router {
            set(
                "router_mandatory",
                socket.set_router_mandatory(self.router_mandatory),
            )?;
            set(
                "router_handover",
                socket.set_router_handover(self.router_handover),
            )?;
        } else if let Some(id) = &self.routing_id {
            set("routing_id", socket.set_identity(id))?;
        }
        match &self.curve {
            // A ZAP domain makes libzmq refuse ZMTP 1.0 and 2.0 peers (zmtp_engine.cpp:
            // "reject ZMTP 1.0 connections if ZAP is enabled"). Without it, any first byte
            // other than 0xFF makes a stray connection a ZMTP 1.0 "peer" whose bytes become
            // messages: libzmq builds a pipe pair for each (about 50 KB while it lives), so
            // a burst of junk connections swells the heap, and the freed memory stays in the
            // process (measured: 2,000 junk connections at a time, RSS +43 MB after the
            // first round, +97 MB after five; 0.8 MB with the domain). Every zeronode peer
            // speaks ZMTP 3. The ZAP handler, when one runs, lets NULL in on this domain.
            None if router => {
                set(
                    "zap_domain",
                    socket.set_zap_domain(crate::zap::PLAINTEXT_DOMAIN),
                )?;
            }
            None => {}
            Some(Curve::Server { secret_key }) => {
                // The domain first: libzmq reads it when a connection's handshake starts.
                if let Some(domain) = zap_domain {
                    set("zap_domain", socket.set_zap_domain(domain))?;
                }
                set("curve_server", socket.set_curve_server(true))?;
                set(
                    "curve_secretkey",
                    socket.set_curve_secretkey(secret_key.as_bytes()),
                )?;
            }
            Some(Curve::Client {
                public_key,
                secret_key,
                server_key,
            }) => {
                set(
                    "curve_serverkey",
                    socket.set_curve_serverkey(server_key.as_bytes()),
                )?;
                set(
                    "curve_publickey",
                    socket.set_curve_publickey(public_key.as_bytes()),
                )?;
                set(
                    "curve_secretkey",
                    socket.set_curve_secretkey(secret_key.as_bytes()),
                )?;
            }
        }
        Ok(())
    }
}

/// The longest ZMTP heartbeat TTL libzmq accepts, in milliseconds.
#[cfg(feature = "libzmq")]
const MAX_HEARTBEAT_TTL_MS: i32 = 6_553_500;

/// A duration as libzmq's milliseconds, saturating.
#[cfg(feature = "libzmq")]
fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}
