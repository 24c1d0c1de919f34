//! One connection's state shared by its driver and the tasks that send on it.
//!
//! The ZMTP state machine sits behind a mutex, as quinn's connection state does: a sender
//! encodes its message straight into the connection's outbox under the lock and wakes the
//! driver, which writes everything queued in one vectored write. Nobody holds the lock
//! across an `.await`.
//!
//! **Write-through.** On an idle connection the sender writes its message to the socket
//! itself, without waking the driver: a request or an answer then costs no hand-off to the
//! driver's task. Only a task on one of the runtime's workers does, or any thread on a
//! current-thread runtime (`Socket::may_write_through` says why). Idle
//! means, under the lock: the driver holds no bytes it took out of the outbox and has not
//! written ([`LinkState::flushing`]), the outbox held nothing before this message, and the
//! driver's last run found the connection quiet ([`LinkState::through`]: it wrote nothing
//! and received at most one message; a write-through takes the permission back). So bytes
//! never overtake bytes queued before them, and batches stay whole: a burst writes through
//! its first message at most, the rest queues behind it and wakes the driver, whose one
//! vectored write takes them all; a run that received a batch of requests, or wrote a
//! batch, leaves every send to the driver until the connection is quiet again. (Re-armed
//! after every run, a write-through split every batch of a flood in two: `tick_all` to 100
//! peers fell from 603k to 386k ticks/s.) The write is non-blocking and under the lock;
//! what the socket does not take stays at the front of the outbox, and the driver is woken
//! to write it once the socket has room, as any queued bytes. It happens after the
//! socket's own lock is let go: [`Link::send`] encodes and says whether to write through,
//! [`Link::write_through`] writes.

use std::io::IoSlice;
use std::sync::Arc;

use bytes::Bytes;
use futures::task::AtomicWaker;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::endpoint::HandshakeSlot;
use super::stream::Writer;
use crate::frame::Frame;

/// Why a message could not be queued on a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    /// The send high-water mark is reached.
    Full,
    /// The connection is closing or gone.
    Gone,
}

/// The most pieces one vectored write takes (Linux's IOV_MAX is 1024; a write of 64 pieces
/// already carries every frame a burst queues here).
pub(super) const IOVECS: usize = 64;

/// What a send did with its message.
#[must_use = "a message to write through is written by `Link::write_through`, or by nobody"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sent {
    /// Queued, and the driver woken to write it.
    Queued,
    /// Queued on an idle connection: the sender is to call [`Link::write_through`] next
    /// (once it has let go of the socket's locks). The driver was not woken.
    Through,
}

/// What the driver and the senders share, under [`Link::state`].
#[derive(Debug)]
pub(super) struct LinkState {
    /// The ZMTP state machine.
    pub(super) conn: zmtp::Connection,
    /// Messages queued since the outbox and the driver's bytes in hand were last both
    /// empty: what the high-water mark counts.
    pub(super) queued: usize,
    /// Set by `close` or when the driver ends: no more sends.
    pub(super) closing: bool,
    /// The driver holds bytes it took out of the outbox and has not written all of: nobody
    /// else writes until it has.
    pub(super) flushing: bool,
    /// The next send on an idle connection may write through: set by the driver when a run
    /// of it had nothing to write and received at most one message, cleared by its other
    /// runs and by a write-through.
    pub(super) through: bool,
    /// The handle senders write through with; the driver takes it as it ends (the
    /// connection closes once the driver's end and this are both gone).
    pub(super) writer: Option<Writer>,
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
    pub(super) fn new(conn: zmtp::Connection, hwm: usize, writer: Writer) -> Arc<Link> {
        Arc::new(Link {
            state: Mutex::new(LinkState {
                conn,
                queued: 0,
                closing: false,
                flushing: false,
                through: false,
                writer: Some(writer),
            }),
            driver: AtomicWaker::new(),
            writable: Notify::new(),
            hwm: hwm.max(1),
            handshake: Mutex::new(None),
        })
    }

    /// Queues one message and wakes the driver to write it, or, on an idle connection and
    /// when the caller `may_through` (see `Socket::may_write_through`), leaves it to the
    /// caller to write through ([`Sent::Through`]: call [`write_through`](Link::write_through)
    /// next). A caller that may not leaves the connection idle for the next one that may.
    pub(super) fn send<F: Frame>(&self, frames: &[F], may_through: bool) -> Result<Sent, Refused> {
        let mut state = self.state.lock();
        if state.closing || !state.conn.is_ready() {
            return Err(Refused::Gone);
        }
        if state.queued >= self.hwm {
            return Err(Refused::Full);
        }
        let idle =
            may_through && state.through && !state.flushing && state.conn.outbox().is_empty();
        encode(&mut state, frames);
        if idle {
            state.through = false;
            return Ok(Sent::Through);
        }
        drop(state);
        self.driver.wake();
        Ok(Sent::Queued)
    }

    /// Writes what the outbox holds, as far as the socket takes it now, after a send that
    /// answered [`Sent::Through`]; wakes the driver for the rest.
    ///
    /// Under the lock, so nothing queued meanwhile goes out before it; the outbox is written
    /// from its front, so what others queued behind the message since goes out after it.
    /// If the driver took the bytes meanwhile (another sender queued behind and woke it),
    /// they are its to write. A failed write is left to the driver too: it finds the
    /// connection broken on its own.
    pub(super) fn write_through(&self) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if state.flushing {
            return;
        }
        let Some(writer) = state.writer.as_ref() else {
            drop(guard);
            self.driver.wake();
            return;
        };
        let outbox = state.conn.outbox();
        if outbox.is_empty() {
            return;
        }
        let mut slices = [IoSlice::new(&[]); IOVECS];
        let n = outbox.io_slices(&mut slices);
        if let Ok(written) = writer.try_write_vectored(&slices[..n]) {
            outbox.advance(written.min(outbox.len()));
        }
        if outbox.is_empty() {
            // Everything is written: the driver's rule when it drains (see `Driver::poll_write`).
            let was_full = state.queued >= self.hwm;
            state.queued = 0;
            drop(guard);
            if was_full {
                self.writable.notify_one();
            }
            return;
        }
        drop(guard);
        self.driver.wake();
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
