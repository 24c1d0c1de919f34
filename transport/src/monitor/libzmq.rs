//! Connection events from libzmq's socket monitor.
//!
//! libzmq publishes socket events on an inproc PAIR socket as two-frame messages: a 6-byte
//! frame (u16 event id, u32 value, both little-endian) and the endpoint. We parse them
//! ourselves (the `zmq` crate's `SocketEvent::from_raw` panics on ids it does not know) and
//! forward them on a channel read through [`Events`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::{Event, Events, HandshakeFailure};
use crate::error::{socket_error, Error, Result};
use crate::socket::context;

// libzmq 4.3 event ids (zmq.h).
const CONNECTED: u16 = 0x0001;
const CONNECT_DELAYED: u16 = 0x0002;
const CONNECT_RETRIED: u16 = 0x0004;
const LISTENING: u16 = 0x0008;
const ACCEPTED: u16 = 0x0020;
const CLOSED: u16 = 0x0080;
const DISCONNECTED: u16 = 0x0200;
const MONITOR_STOPPED: u16 = 0x0400;
const HANDSHAKE_FAILED_NO_DETAIL: u16 = 0x0800;
const HANDSHAKE_SUCCEEDED: u16 = 0x1000;
const HANDSHAKE_FAILED_PROTOCOL: u16 = 0x2000;
const HANDSHAKE_FAILED_AUTH: u16 = 0x4000;
const ALL_EVENTS: i32 = 0xFFFF;

/// Parses one monitor message of a socket that uses CURVE (`curve`) or not. `None` for a
/// malformed one (never expected from libzmq) and for MONITOR_STOPPED.
pub(crate) fn parse(frames: &[Bytes], curve: bool) -> Option<Event> {
    let head = frames.first()?;
    if head.len() < 6 {
        return None;
    }
    let id = u16::from_le_bytes([head[0], head[1]]);
    let value = u32::from_le_bytes([head[2], head[3], head[4], head[5]]);
    let endpoint = frames
        .get(1)
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .unwrap_or_default();
    let handshake_failed = |reason| Event::HandshakeFailed {
        endpoint: endpoint.clone(),
        reason,
    };
    Some(match id {
        CONNECTED => Event::Connected { endpoint },
        CONNECT_DELAYED => Event::ConnectDelayed { endpoint },
        CONNECT_RETRIED => Event::ConnectRetried { endpoint },
        LISTENING => Event::Listening { endpoint },
        ACCEPTED => Event::Accepted { endpoint },
        CLOSED => Event::Closed { endpoint },
        DISCONNECTED => Event::Disconnected { endpoint },
        HANDSHAKE_SUCCEEDED => Event::HandshakeSucceeded { endpoint },
        // Without CURVE no key can be wrong: the handshake was cut short.
        HANDSHAKE_FAILED_NO_DETAIL if curve => handshake_failed(HandshakeFailure::NoDetail),
        HANDSHAKE_FAILED_NO_DETAIL => handshake_failed(HandshakeFailure::Interrupted),
        HANDSHAKE_FAILED_PROTOCOL => handshake_failed(HandshakeFailure::Protocol),
        HANDSHAKE_FAILED_AUTH => handshake_failed(HandshakeFailure::Auth),
        MONITOR_STOPPED => return None,
        other => Event::Failed {
            endpoint,
            event: other,
            errno: value,
        },
    })
}

/// Starts monitoring `socket` and returns its event stream.
pub(crate) fn start(socket: &zmq::Socket) -> Result<Events> {
    let curve = socket
        .get_mechanism()
        .map_err(socket_error("read ZMQ_MECHANISM"))?
        == zmq::Mechanism::ZMQ_CURVE;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let address = format!(
        "inproc://zeronode-monitor-{}",
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    socket
        .monitor(&address, ALL_EVENTS)
        .map_err(socket_error("start socket monitor"))?;
    let pair = context()
        .socket(zmq::PAIR)
        .map_err(socket_error("create monitor socket"))?;
    pair.connect(&address)
        .map_err(socket_error("connect monitor socket"))?;
    let (tx, rx) = mpsc::unbounded_channel();
    hub()?.register(Monitor { pair, tx, curve })?;
    Ok(Events { rx })
}

/// The one thread that reads every monitor socket of the process.
///
/// libzmq writes monitor events with a *blocking* send from its I/O thread: a monitor socket
/// that nobody reads stalls every socket of the context. So the readers must not depend on
/// anything that can go away while the monitored socket lives, such as a tokio runtime
/// being shut down with its tasks. This thread owns all monitor sockets, polls them with
/// `zmq_poll`, forwards parsed events, and drops a monitor when libzmq says it stopped (the
/// monitored socket was closed).
struct Hub {
    /// Connected to the hub thread's wake-up socket; a byte on it means "new monitors".
    wake: Mutex<zmq::Socket>,
    /// Monitors registered but not yet picked up by the hub thread.
    incoming: Mutex<Vec<Monitor>>,
}

/// One monitored socket, as the hub thread reads it.
struct Monitor {
    /// Connected to the socket's monitor.
    pair: zmq::Socket,
    /// Where its events go.
    tx: mpsc::UnboundedSender<Event>,
    /// Whether the socket uses CURVE (what a failure without detail means depends on it).
    curve: bool,
}

const HUB_ADDRESS: &str = "inproc://zeronode-monitor-hub";

fn hub() -> Result<&'static Hub> {
    static HUB: OnceLock<Hub> = OnceLock::new();
    static STARTING: Mutex<()> = Mutex::new(());
    if let Some(hub) = HUB.get() {
        return Ok(hub);
    }
    let _one_at_a_time = STARTING.lock();
    if let Some(hub) = HUB.get() {
        return Ok(hub);
    }
    let receiver = context()
        .socket(zmq::PAIR)
        .map_err(socket_error("create monitor hub"))?;
    receiver
        .bind(HUB_ADDRESS)
        .map_err(socket_error("bind monitor hub"))?;
    let wake = context()
        .socket(zmq::PAIR)
        .map_err(socket_error("create monitor hub"))?;
    wake.connect(HUB_ADDRESS)
        .map_err(socket_error("connect monitor hub"))?;
    let hub = HUB.get_or_init(|| Hub {
        wake: Mutex::new(wake),
        incoming: Mutex::new(Vec::new()),
    });
    std::thread::Builder::new()
        .name("zeronode-monitor".into())
        .spawn(move || run_hub(receiver, hub))
        .map_err(|source| Error::Socket {
            operation: "start monitor thread",
            source,
        })?;
    Ok(hub)
}

impl Hub {
    fn register(&self, monitor: Monitor) -> Result<()> {
        self.incoming.lock().push(monitor);
        self.wake
            .lock()
            .send(&[0u8][..], 0)
            .map_err(socket_error("wake monitor hub"))
    }
}

fn run_hub(receiver: zmq::Socket, hub: &'static Hub) {
    let mut monitors: Vec<Monitor> = Vec::new();
    loop {
        let ready: Vec<bool> = {
            let mut items = Vec::with_capacity(monitors.len() + 1);
            items.push(receiver.as_poll_item(zmq::POLLIN));
            items.extend(monitors.iter().map(|m| m.pair.as_poll_item(zmq::POLLIN)));
            if zmq::poll(&mut items, -1).is_err() {
                continue;
            }
            items.iter().map(|i| i.is_readable()).collect()
        };
        if ready.first().copied().unwrap_or(false) {
            while receiver.recv_bytes(zmq::DONTWAIT).is_ok() {}
            monitors.append(&mut hub.incoming.lock());
        }
        let mut stopped = Vec::new();
        for (index, monitor) in monitors.iter().enumerate() {
            if !ready.get(index + 1).copied().unwrap_or(false) {
                continue;
            }
            while let Ok(frames) = monitor.pair.recv_multipart(zmq::DONTWAIT) {
                let frames: Vec<Bytes> = frames.into_iter().map(Bytes::from).collect();
                let Some(head) = frames.first() else { continue };
                if head.len() >= 2 && u16::from_le_bytes([head[0], head[1]]) == MONITOR_STOPPED {
                    stopped.push(index);
                    break;
                }
                if let Some(event) = parse(&frames, monitor.curve) {
                    tracing::trace!(?event, "socket event");
                    // A dropped receiver is fine: keep draining, libzmq must never block.
                    let _ = monitor.tx.send(event);
                }
            }
        }
        for index in stopped.into_iter().rev() {
            monitors.swap_remove(index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(id: u16, value: u32, endpoint: &str) -> Vec<Bytes> {
        let mut head = id.to_le_bytes().to_vec();
        head.extend_from_slice(&value.to_le_bytes());
        vec![Bytes::from(head), Bytes::from(endpoint.to_owned())]
    }

    #[test]
    fn parses_known_events() {
        assert_eq!(
            parse(&frames(ACCEPTED, 7, "tcp://127.0.0.1:5"), false),
            Some(Event::Accepted {
                endpoint: "tcp://127.0.0.1:5".into()
            })
        );
        assert_eq!(
            parse(&frames(HANDSHAKE_FAILED_AUTH, 0, "x"), true),
            Some(Event::HandshakeFailed {
                endpoint: "x".into(),
                reason: HandshakeFailure::Auth
            })
        );
    }

    #[test]
    fn a_failure_without_detail_blames_no_key_on_a_plaintext_socket() {
        let plaintext = parse(&frames(HANDSHAKE_FAILED_NO_DETAIL, 104, "x"), false);
        assert_eq!(
            plaintext,
            Some(Event::HandshakeFailed {
                endpoint: "x".into(),
                reason: HandshakeFailure::Interrupted
            })
        );
        assert!(!HandshakeFailure::Interrupted.to_string().contains("key"));
        let curve = parse(&frames(HANDSHAKE_FAILED_NO_DETAIL, 104, "x"), true);
        assert_eq!(
            curve,
            Some(Event::HandshakeFailed {
                endpoint: "x".into(),
                reason: HandshakeFailure::NoDetail
            })
        );
    }

    #[test]
    fn unknown_event_ids_do_not_panic() {
        assert_eq!(
            parse(&frames(0x8000, 98, "e"), false),
            Some(Event::Failed {
                endpoint: "e".into(),
                event: 0x8000,
                errno: 98
            })
        );
    }

    #[test]
    fn malformed_monitor_frames_are_skipped() {
        assert_eq!(parse(&[], false), None);
        assert_eq!(parse(&[Bytes::from_static(&[1, 0])], false), None);
        assert_eq!(parse(&frames(MONITOR_STOPPED, 0, ""), false), None);
    }
}
