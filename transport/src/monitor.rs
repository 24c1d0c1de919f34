//! Connection events ([`Event`]) and the stream that reads them ([`Events`]): the native
//! engine reports its own on a [`channel`]; the libzmq engine's come from libzmq's socket
//! monitor (`monitor/libzmq.rs`, with the `libzmq` feature).

use tokio::sync::mpsc;

#[cfg(feature = "libzmq")]
mod libzmq;
#[cfg(feature = "libzmq")]
pub(crate) use libzmq::start;

/// One connection event.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The socket listens on this endpoint.
    Listening {
        /// The endpoint.
        endpoint: String,
    },
    /// A connection to this endpoint was established (TCP level; ZMTP handshake follows).
    Connected {
        /// The endpoint.
        endpoint: String,
    },
    /// The connect attempt is in progress (the peer may not be there yet).
    ConnectDelayed {
        /// The endpoint.
        endpoint: String,
    },
    /// libzmq is retrying a connection.
    ConnectRetried {
        /// The endpoint.
        endpoint: String,
    },
    /// A peer connected to this endpoint (bound side).
    Accepted {
        /// The endpoint.
        endpoint: String,
    },
    /// The ZMTP handshake completed: messages can flow.
    HandshakeSucceeded {
        /// The endpoint.
        endpoint: String,
    },
    /// The ZMTP handshake failed (protocol error, authentication failure, ...).
    HandshakeFailed {
        /// The endpoint.
        endpoint: String,
        /// Which failure libzmq reported.
        reason: HandshakeFailure,
    },
    /// A connection to this listening CURVE endpoint was closed as soon as it was accepted:
    /// `limit` handshakes were already in progress on it
    /// ([`Options::max_handshakes`](crate::Options::max_handshakes); native engine only).
    /// Many of these at once is a flood of handshakes, or a limit too low for the clients
    /// that connect together.
    TooManyHandshakes {
        /// The listening endpoint.
        endpoint: String,
        /// The limit that was reached.
        limit: usize,
    },
    /// A connection was lost or closed.
    Disconnected {
        /// The endpoint.
        endpoint: String,
    },
    /// A listening or connecting endpoint was closed.
    Closed {
        /// The endpoint.
        endpoint: String,
    },
    /// Binding or accepting failed in the background.
    Failed {
        /// The endpoint.
        endpoint: String,
        /// libzmq's event id (see `zmq_socket_monitor(3)`).
        event: u16,
        /// The errno libzmq reported.
        errno: u32,
    },
}

impl Event {
    /// libzmq's id of a failed `accept` on a listening endpoint, in [`Event::Failed`]
    /// (ZMQ_EVENT_ACCEPT_FAILED); its errno is EMFILE or ENFILE when the process or the
    /// system is out of file descriptors.
    pub const ACCEPT_FAILED: u16 = 0x0040;
    /// libzmq's id of a failed bind, in [`Event::Failed`] (ZMQ_EVENT_BIND_FAILED).
    pub const BIND_FAILED: u16 = 0x0010;
}

/// Why a ZMTP handshake failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// The peer spoke something that is not ZMTP, or broke the protocol.
    Protocol,
    /// The security mechanism refused the peer (wrong key, not on the allow-list).
    Auth,
    /// libzmq gave no detail on a CURVE socket: a wrong server key (the server hangs up),
    /// or the peer closed or went silent during the handshake.
    NoDetail,
    /// The handshake did not finish on a plaintext socket: the peer closed the connection
    /// or went silent before it completed (libzmq's "no detail" failure; no key is
    /// involved without CURVE).
    Interrupted,
}

impl std::fmt::Display for HandshakeFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HandshakeFailure::Protocol => {
                "handshake protocol error (security mechanism mismatch or malformed handshake)"
            }
            HandshakeFailure::Auth => "not authorized (key not on the allow-list)",
            HandshakeFailure::NoDetail => {
                "handshake failed (a wrong server key, or the peer closed during the handshake)"
            }
            HandshakeFailure::Interrupted => {
                "handshake not completed (the peer closed the connection or went silent)"
            }
        })
    }
}

/// The stream of [`Event`]s of one socket. It ends when the socket is closed.
#[derive(Debug)]
pub struct Events {
    rx: mpsc::UnboundedReceiver<Event>,
}

impl Events {
    /// The next event, or `None` once the socket is gone.
    pub async fn recv(&mut self) -> Option<Event> {
        self.rx.recv().await
    }
}

impl futures::Stream for Events {
    type Item = Event;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Event>> {
        self.rx.poll_recv(cx)
    }
}

/// A sender of events and the stream that reads them, for an engine that reports events
/// itself (the native one).
pub(crate) fn channel() -> (mpsc::UnboundedSender<Event>, Events) {
    let (tx, rx) = mpsc::unbounded_channel();
    (tx, Events { rx })
}
