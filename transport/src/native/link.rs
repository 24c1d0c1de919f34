//! One connection's state shared by its driver and the tasks that send on it.
//!
//! The ZMTP state machine sits behind a mutex, as quinn's connection state does: a sender
//! encodes its message straight into the connection's outbox under the lock and wakes the
//! driver, which writes everything queued in one vectored write. Nobody holds the lock
//! across an `.await`.

use std::sync::Arc;

use bytes::Bytes;
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::endpoint::HandshakeSlot;
use crate::frame::Frame;

/// Why a message could not be queued on a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// The send high-water mark is reached.
    Full,
    /// The connection is closing or gone.
    Gone,
}

/// What the driver and the senders share, under [`Link::state`].
#[derive(Debug)]
pub(super) struct LinkState {
    /// The ZMTP state machine.
    pub(super) conn: zmtp::Connection,
    /// Messages queued since the outbox was last empty: what the high-water mark counts.
    pub(super) queued: usize,
    /// Set by `close` or when the driver ends: no more sends.
    pub(super) closing: bool,
}

/// One connection.
#[derive(Debug)]
pub(super) struct Link {
    pub(super) state: Mutex<LinkState>,
    /// The driver's waker, woken when there is something to write or to close.
    pub(super) driver: AtomicWaker,
    /// Wakes senders waiting at the high-water mark once the outbox drained.
    pub(super) writable: Notify,
    /// The send high-water mark, in messages.
    pub(super) hwm: usize,
    /// Its place among its listener's handshakes in progress, given back when the
    /// handshake completes or the connection ends (`None`: not counted).
    pub(super) handshake: Mutex<Option<HandshakeSlot>>,
}

impl Link {
    pub(super) fn new(conn: zmtp::Connection, hwm: usize) -> Arc<Link> {
        Arc::new(Link {
            state: Mutex::new(LinkState {
                conn,
                queued: 0,
                closing: false,
            }),
            driver: AtomicWaker::new(),
            writable: Notify::new(),
            hwm: hwm.max(1),
            handshake: Mutex::new(None),
        })
    }

    /// Queues one message and wakes the driver to write it.
    pub(super) fn send<F: Frame>(&self, frames: &[F]) -> Result<(), Refused> {
        let mut state = self.state.lock();
        if state.closing || !state.conn.is_ready() {
            return Err(Refused::Gone);
        }
        if state.queued >= self.hwm {
            return Err(Refused::Full);
        }
        encode(&mut state, frames);
        drop(state);
        self.driver.wake();
        Ok(())
    }

    /// Asks the driver to write what is queued and end (after the linger period at most).
    pub(super) fn close(&self) {
        self.state.lock().closing = true;
        self.driver.wake();
        self.writable.notify_waiters();
    }
}

/// Encodes one message into the outbox (the handshake is done).
pub(super) fn encode<F: Frame>(state: &mut LinkState, frames: &[F]) {
    let last = frames.len().saturating_sub(1);
    for (i, frame) in frames.iter().enumerate() {
        // Ready was checked by the caller: this cannot fail.
        let _ = state.conn.send_frame(&AsPayload(frame), i < last);
    }
    state.queued += 1;
}

/// A transport [`Frame`] as the ZMTP core's payload.
struct AsPayload<'a, F: ?Sized>(&'a F);

impl<F: Frame + ?Sized> zmtp::Payload for AsPayload<'_, F> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn write_to(&self, out: &mut [u8]) {
        self.0.write_to(out)
    }

    fn to_bytes(&self) -> Option<Bytes> {
        self.0.to_bytes()
    }
}
