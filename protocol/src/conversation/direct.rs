//! The conversation's dispatch run by each connection's driver (the native engine's direct
//! delivery, `transport::Deliver`), instead of by the conversation's own driver task after
//! the socket's inbox: per message one task wake-up, one inbox lane and one task's state
//! fewer. With 1,000 peers each of those is cold in the cache when a peer's next message
//! comes, and a message's cost grows with everything it touches.
//!
//! What a message does is the same either way (`Conversation::on_message`): an answer
//! completes its request, a request or tick goes to its handler, which returns at once.
//!
//! A Client with more than [`BUSY`] requests of its own waiting leaves its messages to the
//! inbox and the driver task (`Link::BUSY_TO_INBOX`; the transport keeps their order
//! across the switch, and comes back once the inbox has given out all of them).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use transport::{Deliver, Delivered, Delivery, Key, PeerId};

use super::helpers::nanos_at;
use super::{Answered, Conversation};
use crate::handler::Handlers;
use crate::link::Link;

/// Requests of its own pending (sent, not yet answered) above which a Client's messages go
/// through the inbox (the transport's `Delivered::Queued`). Its messages are then mostly
/// those replies, each waking a caller: on the connection's driver, the callers and the
/// driver woke each other on one worker thread while the other had little to do (100 in
/// flight, always direct: 0.76 of the inbox's rate, `benches/ab.sh`); through the inbox the
/// driver, the conversation's task and the callers spread over both threads. Measured with
/// 4: one at a time 1.12 with a `block_on` caller, but 0.81 with 4 in flight; with 1, one
/// at a time 1.18-1.19 and level at 2, 4 and 100 in flight (PERFORMANCE.md, "Why the code
/// is as it is").
pub(super) const BUSY: usize = 1;

/// What the socket holds: it makes each connection's receiver.
pub(super) struct Direct<L: Link>(pub(super) Arc<Conversation<L>>);

impl<L: Link> Deliver for Direct<L> {
    fn connection(&self) -> Box<dyn Delivery> {
        Box::new(OnConnection {
            conversation: Arc::clone(&self.0),
            handlers: Arc::new(Handlers::default()),
            seen: u64::MAX,
        })
    }
}

/// One connection's receiver: it keeps its own view of the handlers, as the driver task
/// does, so a message costs no lock to find its handler.
struct OnConnection<L: Link> {
    conversation: Arc<Conversation<L>>,
    handlers: Arc<Handlers>,
    seen: u64,
}

impl<L: Link> Delivery for OnConnection<L> {
    fn deliver(
        &mut self,
        peer: &PeerId,
        key: Option<Key>,
        frames: &[Bytes],
        at: Instant,
    ) -> Delivered {
        let conversation = &self.conversation;
        if L::BUSY_TO_INBOX && conversation.waiting.load(Ordering::Relaxed) > BUSY {
            return Delivered::Queued;
        }
        conversation
            .heard
            .store(nanos_at(at), std::sync::atomic::Ordering::Relaxed);
        conversation.refresh_handlers(&mut self.handlers, &mut self.seen);
        conversation.on_message(
            &self.handlers,
            peer.clone(),
            key,
            frames,
            conversation.is_closing(),
            &mut Answered::default(),
        );
        Delivered::Taken
    }
}
