//! The task that owns one connection's stream, TCP or Unix (quinn's `ConnectionDriver`): it reads
//! into a reused buffer and feeds the ZMTP state machine, hands whole messages to the
//! socket's inbox, writes what senders queued in vectored writes, and keeps the state
//! machine's timers (handshake timeout, heartbeats).
//!
//! It shares the writing: on a quiet connection a sender writes its message itself
//! (write-through, `link.rs`), through a second handle on the stream that the link holds
//! until the driver ends. The driver says when the connection is quiet (a run that wrote
//! nothing and received at most one message), and while it holds bytes it has taken out
//! of the outbox and not written, nobody else writes.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, IoSlice};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::time::Sleep;

use super::inbox::{Inbound, Inbox};
use super::link::{Link, IOVECS};
use super::stream::Reader;
use super::Shared;
use crate::curve::Key;
use crate::deliver::Delivery;
use crate::ids::PeerId;

/// The largest block a read buffer takes: larger reads take more of a burst per system
/// call.
const READ_CHUNK: usize = 64 * 1024;

/// The first block a connection's read buffer takes, when it first has something to read.
/// A handshake is a greeting of 64 bytes and a few commands of a few hundred (a CURVE
/// INITIATE with its metadata is the largest), and a peer that sends little (a heartbeat, a
/// request now and then) reads as little, so a small block does for both. The first read
/// that fills the room it was given moves the connection to blocks of [`READ_CHUNK`]: the
/// peer may have more. Why not a full block from the start: a connection that never joins
/// (a port scanner, a load balancer's health check, a peer that is not ZMTP, a ZeroMQ client
/// that is not a node) then cost 64 KiB of address space, and 2,000 of them at once
/// 128 MiB; glibc kept the pages they had touched once freed, and the next round placed its
/// blocks elsewhere in that space, so the node's resident size grew by several MiB every
/// round of 2,000 connections, without end.
const FIRST_CHUNK: usize = 512;

/// The least room a read goes on into, for blocks of `block` bytes: below it, a new block
/// (or the old one back). 8 KiB of a full block.
fn least_room(block: usize) -> usize {
    block / 8
}

/// Reads per wake-up before the driver lets other tasks run.
const READS_PER_POLL: usize = 16;

/// Messages handed to a direct receiver per wake-up before the driver lets other tasks
/// run (the protocol's own receive loop took 64 per wake-up too).
const DELIVERIES_PER_POLL: usize = 64;

/// Makes room in the read buffer `input` for the next read, which needs at least `wanted`
/// more bytes for the frame it holds a part of; a new block is `block` bytes (see
/// [`FIRST_CHUNK`]).
///
/// Frames are handed on as slices of the buffer, so a block stays shared until the last
/// of them is dropped. An empty buffer whose block nobody else holds any more starts again
/// at the block's start, memory that is still warm. Otherwise the read goes on into what
/// is left of the block while that is at least [`least_room`] (and the frame's `wanted`),
/// and only then takes a new block. Asking every read for a whole block of room, as this
/// did before, took a new 64 KiB block whenever a frame of the last read was still alive
/// (most reads at a window of 100), and grew the block to 128 KiB under a partial frame.
fn make_room(input: &mut BytesMut, wanted: usize, block: usize) {
    if input.is_empty() && input.try_reclaim(block) {
        return;
    }
    if input.capacity() - input.len() >= least_room(block).max(wanted) {
        return;
    }
    input.reserve(block.max(wanted));
}

/// The size of the next block, after a read of `read` bytes into `room`: a read that filled
/// its room may have left more unread, so full blocks from then on.
fn next_block(block: usize, read: usize, room: usize) -> usize {
    if read >= room {
        READ_CHUNK
    } else {
        block
    }
}

/// Why a connection ended.
#[derive(Debug)]
pub(super) enum End {
    /// We closed it (`close`, `disconnect`, or the socket went away).
    Closed,
    /// The peer hung up or the connection broke.
    Lost,
    /// ZMTP failed: the handshake, a limit, a silent peer.
    Failed(zmtp::Error),
    /// The peer's routing id is taken by another connection (and handover is off).
    Duplicate,
}

/// One connection's driver.
pub(super) struct Driver {
    link: Arc<Link>,
    /// The driver's end of the stream (senders write through the link's other end).
    stream: Reader,
    inbox: Arc<Inbox>,
    /// This connection's lane in the inbox.
    lane: usize,
    socket: Weak<Shared>,
    endpoint: Arc<str>,
    /// Bytes read and not yet consumed by the state machine.
    input: BytesMut,
    /// The size of the next block `input` takes (see [`FIRST_CHUNK`]).
    block: usize,
    /// Bytes taken out of the connection's outbox and not yet written (see `poll_write`).
    writing: zmtp::Outbox,
    /// The events of one input, handled after the state machine's lock is released; with
    /// direct delivery, those beyond a wake-up's share wait here for the next one.
    events: VecDeque<zmtp::Event>,
    /// The messages of one input, for the inbox.
    batch: Vec<Inbound>,
    /// The routing id the socket gave the peer, once attached.
    peer: PeerId,
    /// Messages received in this run of the driver (see `poll_write`).
    received: usize,
    /// Who takes this connection's messages, if not the inbox (`Router::deliver_to`).
    delivery: Option<Box<dyn Delivery>>,
    /// The peer's CURVE key (on a CURVE server).
    key: Option<Key>,
    /// Whether the handshake completed and the socket took the peer.
    attached: bool,
    /// The state machine's next deadline, or the end of the linger period.
    sleep: Pin<Box<Sleep>>,
    armed: Option<Instant>,
    linger: Duration,
    linger_until: Option<Instant>,
}

impl Drop for Driver {
    /// However the driver ends (its connection closed, or its task dropped with the
    /// runtime), its lane is given back once, and the senders' end of the stream is let go
    /// with its own: the connection closes now, not when the last handle of its link goes.
    fn drop(&mut self) {
        self.inbox.close_lane(self.lane);
        self.release_writer();
    }
}

impl Driver {
    pub(super) fn new(
        link: Arc<Link>,
        stream: Reader,
        inbox: Arc<Inbox>,
        socket: Weak<Shared>,
        endpoint: Arc<str>,
        linger: Duration,
    ) -> Driver {
        let lane = inbox.open_lane();
        Driver {
            link,
            stream,
            lane,
            inbox,
            socket,
            endpoint,
            // No block until the peer has something to read (see `FIRST_CHUNK`).
            input: BytesMut::new(),
            block: FIRST_CHUNK,
            writing: zmtp::Outbox::default(),
            events: VecDeque::new(),
            batch: Vec::new(),
            peer: PeerId::default(),
            received: 0,
            delivery: None,
            key: None,
            attached: false,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: None,
            linger,
            linger_until: None,
        }
    }

    /// Runs the connection until it ends, then takes it out of the socket.
    pub(super) async fn run(mut self) -> (End, bool) {
        let end = std::future::poll_fn(|cx| self.poll_connection(cx)).await;
        self.link.state.lock().closing = true;
        self.release_writer();
        self.link.writable.notify_waiters();
        if self.attached {
            if let Some(socket) = self.socket.upgrade() {
                socket.detach(&self.link, &self.peer.0);
            }
        }
        (end, self.attached)
    }

    /// Takes the senders' end of the stream from the link (no more write-through) and lets
    /// it go.
    fn release_writer(&self) {
        let writer = self.link.state.lock().writer.take();
        if let Some(writer) = writer {
            writer.release();
        }
    }

    fn poll_connection(&mut self, cx: &mut Context<'_>) -> Poll<End> {
        self.link.driver.register(cx.waker());
        // tokio's clock (the system's, unless a test paused it): the timer below fires by
        // it, so the deadlines it is set to must be read by it too.
        let now = tokio::time::Instant::now().into_std();
        self.received = 0;
        let closing = self.link.state.lock().closing;
        if closing && self.linger_until.is_none() {
            self.linger_until = Some(now + self.linger);
            // Nothing more is read: let the receiver go now, not after the linger (it may
            // hold its owner's handlers, and with them all they hold).
            self.delivery = None;
        }
        if !closing {
            if let Poll::Ready(end) = self.poll_read(cx, now) {
                self.flush_last(cx, &end);
                return Poll::Ready(end);
            }
        }
        if let Poll::Ready(end) = self.poll_timers(cx, now) {
            self.flush_last(cx, &end);
            return Poll::Ready(end);
        }
        match self.poll_write(cx) {
            Err(_) => Poll::Ready(End::Lost),
            Ok(true) if closing => Poll::Ready(End::Closed),
            Ok(_) => Poll::Pending,
        }
    }

    fn poll_read(&mut self, cx: &mut Context<'_>, now: Instant) -> Poll<End> {
        let mut budget = DELIVERIES_PER_POLL;
        for _ in 0..READS_PER_POLL {
            // Messages decoded at the last wake-up and not delivered yet go first; nothing
            // more is read until they are.
            if !self.events.is_empty() {
                if let Err(end) = self.dispatch(now, &mut budget) {
                    return Poll::Ready(end);
                }
            }
            // This wake-up's share is handed on (only direct delivery spends it): the rest
            // once the others have run.
            if budget == 0 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            // The mark holds back messages, not handshakes: a new peer is let in (and an
            // attached one's PINGs are still read once there is room).
            if self.attached && !self.inbox.has_room(self.lane, cx.waker()) {
                return Poll::Pending;
            }
            match self.stream.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(End::Lost),
                Poll::Ready(Ok(())) => {}
            }
            let wanted = if self.input.is_empty() {
                0
            } else {
                self.link.state.lock().conn.wanted(&self.input)
            };
            make_room(&mut self.input, wanted, self.block);
            let room = self.input.capacity() - self.input.len();
            match self.stream.poll_read_buf(cx, &mut self.input) {
                // No data despite readiness (kept after a read that filled the room
                // offered, or a spurious event), or the task's budget is spent: the
                // waker is registered, or the task woken to run again.
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(End::Lost),
                Poll::Ready(Ok(read)) => {
                    self.block = next_block(self.block, read, room);
                    if let Err(end) = self.process(now, &mut budget) {
                        return Poll::Ready(end);
                    }
                }
            }
        }
        // A peer that always has more: let the runtime run others, and come back.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// Feeds what was read to the state machine and acts on what it reports.
    fn process(&mut self, now: Instant, budget: &mut usize) -> Result<(), End> {
        let result = {
            let mut state = self.link.state.lock();
            let result = state.conn.handle_input(&mut self.input, now);
            while let Some(event) = state.conn.poll_event() {
                self.events.push_back(event);
            }
            result
        };
        if result.is_err() {
            // What came before the fault is delivered before the connection ends.
            *budget = usize::MAX;
        }
        self.dispatch(now, budget)?;
        result.map_err(End::Failed)
    }

    /// Acts on the events waiting, in order: a peer that is ready is attached, a message
    /// goes to the inbox or, with direct delivery, to the receiver, at most `budget` of
    /// them (the rest wait for the next wake-up: one read can hold a thousand small
    /// messages, and a receiver that starts a task for each must not hold the thread for
    /// all of them while heartbeats wait).
    fn dispatch(&mut self, now: Instant, budget: &mut usize) -> Result<(), End> {
        let mut outcome = Ok(());
        while let Some(event) = self.events.pop_front() {
            match event {
                zmtp::Event::Message(frames) => match &mut self.delivery {
                    Some(_) if *budget == 0 => {
                        self.events.push_front(zmtp::Event::Message(frames));
                        break;
                    }
                    Some(delivery) => {
                        // A receiver that panics ends this connection, as a broken one
                        // ends (the peer sees it drop and the socket forgets it), rather
                        // than the driver's task with the connection still attached.
                        let delivered = std::panic::catch_unwind(AssertUnwindSafe(|| {
                            delivery.deliver(&self.peer, self.key, &frames, now)
                        }));
                        if delivered.is_err() {
                            tracing::error!(peer = %self.peer.short(), "message receiver panicked: connection closed");
                            self.delivery = None;
                            outcome = Err(End::Lost);
                            break;
                        }
                        *budget -= 1;
                        self.received += 1;
                    }
                    None => {
                        self.batch.push(self.inbound(frames));
                        self.received += 1;
                    }
                },
                zmtp::Event::Ready(peer) => {
                    if let Err(end) = self.attach(&peer) {
                        outcome = Err(end);
                        break;
                    }
                }
            }
        }
        if self.attached && !self.batch.is_empty() {
            self.inbox.push(self.lane, &mut self.batch);
        }
        self.batch.clear();
        outcome
    }

    /// A message of this connection, for the inbox.
    fn inbound(&self, frames: Vec<Bytes>) -> Inbound {
        Inbound {
            peer: self.peer.0.clone(),
            key: self.key,
            frames,
        }
    }

    fn attach(&mut self, peer: &zmtp::Peer) -> Result<(), End> {
        let Some(socket) = self.socket.upgrade() else {
            return Err(End::Closed);
        };
        self.key = peer.curve_key.map(Key::from_bytes);
        match socket.attach(&self.link, peer, &self.endpoint) {
            Some(id) => {
                self.peer = PeerId(id);
                self.delivery = socket.delivery();
                self.attached = true;
                Ok(())
            }
            None => Err(End::Duplicate),
        }
    }

    fn poll_timers(&mut self, cx: &mut Context<'_>, now: Instant) -> Poll<End> {
        if self.linger_until.is_some_and(|until| now >= until) {
            return Poll::Ready(End::Closed);
        }
        let next = {
            let mut state = self.link.state.lock();
            if state.conn.poll_timeout().is_some_and(|at| at <= now) {
                if let Err(e) = state.conn.handle_timeout(now) {
                    return Poll::Ready(End::Failed(e));
                }
            }
            state.conn.poll_timeout()
        };
        let next = match (next, self.linger_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = next {
            // The driver is always polled by its one task, so a timer polled since its last
            // reset holds that task's waker: until it fires, polling it again would only
            // register the same waker once more (with 1,000 connections, `Sleep::poll` and
            // waker registrations took up to 1.1 µs a request on a peer's side, `perf`). So
            // it is polled only when reset, outside the task's budget: a poll refused for
            // want of budget would register nothing, and the timer would never wake us.
            // A timer that fired is always reset: it fires at its deadline or after, by
            // the clock `now` is read from, and every deadline that `now` reached was
            // handled above (moved on, or the connection ended), so `at` is later than
            // `now` here. Nor is the timer's own state read (`Sleep::is_elapsed`, a cold
            // line per connection: 0.2-0.3 µs a request spread over 1,000 peers, `perf`).
            if self.armed != Some(at) {
                self.sleep
                    .as_mut()
                    .reset(tokio::time::Instant::from_std(at));
                self.armed = Some(at);
                let mut sleep = tokio::task::unconstrained(self.sleep.as_mut());
                if Pin::new(&mut sleep).poll(cx).is_ready() {
                    self.armed = None;
                    cx.waker().wake_by_ref();
                }
            }
        }
        Poll::Pending
    }

    /// A connection that failed may have a last word queued (an ERROR refusing the
    /// handshake, which tells a libzmq client not to try again): write what the socket
    /// takes now, without waiting.
    fn flush_last(&mut self, cx: &mut Context<'_>, end: &End) {
        if matches!(end, End::Failed(_)) {
            let _ = self.poll_write(cx);
        }
    }

    /// Writes what is queued. `Ok(true)` when everything is written.
    ///
    /// The write runs without the link's lock: the queued bytes are swapped out into
    /// `writing` under it, so a sender on another thread queues behind the system call
    /// instead of waiting for it (a `writev` on loopback also runs the receiver's side of
    /// TCP, several microseconds). What `writing` holds goes out before anything queued
    /// after it. The high-water count is cleared only once both are empty, so it still
    /// counts every message not yet written.
    ///
    /// While `writing` holds bytes, `LinkState::flushing` says so, and no sender writes
    /// through (`link.rs`). Finding nothing left to write, the driver lets the next send
    /// write through, if the connection looks idle: this run wrote nothing and received at
    /// most one message. One message in, one out (a request and its answer) go without
    /// the driver; after a batch of them, or while sends keep the driver writing, every
    /// send queues and a burst goes out in one vectored write here.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> io::Result<bool> {
        let mut wrote = false;
        loop {
            if self.writing.is_empty() {
                let mut state = self.link.state.lock();
                let outbox = state.conn.outbox();
                if outbox.is_empty() {
                    let was_full = state.queued >= self.link.hwm;
                    state.queued = 0;
                    state.flushing = false;
                    state.through = !wrote && self.received <= 1;
                    drop(state);
                    if was_full {
                        // One blocked sender; each that sends wakes the next (`pass_on`).
                        self.link.writable.notify_one();
                    }
                    return Ok(true);
                }
                std::mem::swap(&mut self.writing, outbox);
                state.flushing = true;
            }
            let mut slices = [IoSlice::new(&[]); IOVECS];
            let n = self.writing.io_slices(&mut slices);
            wrote = true;
            match self.stream.try_write_vectored(&slices[..n]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) => self.writing.advance(written),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match self.stream.poll_write_ready(cx) {
                        Poll::Pending => return Ok(false),
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(e)) => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer of one fresh block with `read` bytes read into it.
    fn read_into(read: usize) -> BytesMut {
        let mut input = BytesMut::with_capacity(READ_CHUNK);
        input.extend_from_slice(&vec![7; read]);
        input
    }

    #[test]
    fn an_emptied_block_nobody_holds_is_read_again_from_its_start() {
        let mut input = read_into(300);
        let start = input.as_ptr();
        drop(input.split_to(300));
        make_room(&mut input, 0, READ_CHUNK);
        assert_eq!(input.as_ptr(), start);
        assert_eq!(input.capacity(), READ_CHUNK);
    }

    #[test]
    fn a_block_a_frame_still_holds_is_read_on_into_while_room_is_left() {
        let mut input = read_into(300);
        let end = input.as_ptr().wrapping_add(300);
        let frame = input.split_to(300).freeze();
        make_room(&mut input, 0, READ_CHUNK);
        assert_eq!(input.as_ptr(), end, "the same block, after the frame");
        assert_eq!(input.capacity(), READ_CHUNK - 300);
        assert_eq!(frame.len(), 300);
    }

    #[test]
    fn a_held_block_with_too_little_room_left_gives_way_to_a_new_one() {
        let mut input = read_into(READ_CHUNK - least_room(READ_CHUNK) + 1);
        let frame = input.split_to(input.len()).freeze();
        make_room(&mut input, 0, READ_CHUNK);
        assert!(input.capacity() >= READ_CHUNK);
        assert_eq!(
            frame.len(),
            READ_CHUNK - least_room(READ_CHUNK) + 1,
            "the frame is untouched"
        );
    }

    #[test]
    fn a_connection_starts_with_no_block_then_a_small_one() {
        // A connection that has sent nothing has no block at all.
        let mut input = BytesMut::new();
        assert_eq!(input.capacity(), 0);
        make_room(&mut input, 0, FIRST_CHUNK);
        assert_eq!(input.capacity(), FIRST_CHUNK);
        // A greeting read and consumed: the same small block is read into again.
        input.extend_from_slice(&[7; 64]);
        drop(input.split_to(64));
        make_room(&mut input, 0, FIRST_CHUNK);
        assert_eq!(input.capacity(), FIRST_CHUNK);
        // A larger block size (the peer got busy): a partial command read is kept.
        input.extend_from_slice(&[8; 10]);
        make_room(&mut input, 0, READ_CHUNK);
        assert!(input.capacity() >= READ_CHUNK);
        assert_eq!(&input[..], &[8; 10][..]);
    }

    #[test]
    fn a_read_that_fills_its_room_moves_the_connection_to_full_blocks() {
        // A read that left room: the peer had no more, the size stays.
        assert_eq!(next_block(FIRST_CHUNK, 100, FIRST_CHUNK), FIRST_CHUNK);
        assert_eq!(next_block(FIRST_CHUNK, 100, 200), FIRST_CHUNK);
        // One that filled it: full blocks, for good.
        assert_eq!(next_block(FIRST_CHUNK, 200, 200), READ_CHUNK);
        assert_eq!(next_block(READ_CHUNK, 10, READ_CHUNK), READ_CHUNK);
    }

    #[test]
    fn a_command_larger_than_a_small_block_still_fits() {
        let mut input = BytesMut::new();
        let mut block = FIRST_CHUNK;
        let mut read = 0;
        // A 2,000-byte command read as the room offered allows.
        while read < 2000 {
            make_room(&mut input, 0, block);
            let room = input.capacity() - input.len();
            assert!(room >= least_room(block));
            let n = room.min(2000 - read);
            input.extend_from_slice(&vec![9; n]);
            read += n;
            block = next_block(block, n, room);
        }
        assert_eq!(input.len(), 2000);
    }

    #[test]
    fn a_partial_frame_gets_room_for_what_it_still_needs() {
        // 100 bytes of a frame are in, 200,000 more are wanted.
        let mut input = read_into(100);
        make_room(&mut input, 200_000, READ_CHUNK);
        assert!(input.capacity() - input.len() >= 200_000);
        assert_eq!(&input[..], &[7; 100][..], "the part read is kept");
        // A partial frame with room enough left is read on into in place.
        let mut input = read_into(100);
        let start = input.as_ptr();
        make_room(&mut input, 1000, READ_CHUNK);
        assert_eq!(input.as_ptr(), start);
        assert_eq!(input.capacity(), READ_CHUNK);
    }
}
