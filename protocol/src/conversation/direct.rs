//! The conversation's dispatch run by each connection's driver (the native engine's direct
//! delivery, `transport::Deliver`), instead of by the conversation's own driver task after
//! the socket's inbox: per message one task wake-up, one inbox lane and one task's state
//! fewer. With 1,000 peers each of those is cold in the cache when a peer's next message
//! comes, and a message's cost grows with everything it touches.
//!
//! What a message does is the same either way (`Conversation::on_message`): an answer
//! completes its request, a request or tick goes to its handler, which returns at once.
//!
//! A Server's socket (a Router) takes its messages here on the native engine; a Client's
//! (a Dealer), and any on libzmq, which cannot, through the socket's inbox and the driver
//! task (`Link::deliver_to` says why a Client's does).
//!
//! What the driver task does after a batch that the connection's driver need not: yield so
//! that a woken caller sends before the receiver parks (`drive.rs`). Here the receiver is
//! the connection's driver, which parks on the socket's readiness anyway and is woken by
//! the caller's send to write it. Nothing is drained after a lost connection either: the
//! driver delivers what it read before it reports the loss.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use transport::{Deliver, Delivery, Key, PeerId};

use super::helpers::nanos_at;
use super::{Answered, Conversation};
use crate::link::Link;
use crate::serve::Receiver;

/// What the socket holds: it makes each connection's receiver.
pub(super) struct Direct<L: Link>(pub(super) Arc<Conversation<L>>);

impl<L: Link> Deliver for Direct<L> {
    fn connection(&self) -> Box<dyn Delivery> {
        Box::new(OnConnection {
            conversation: Arc::clone(&self.0),
            receiver: Arc::new(Receiver::default()),
            seen: u64::MAX,
        })
    }
}

/// One connection's receiver: it keeps its own view of the receiver, as the driver task
/// does, so a message costs no lock to find its handler.
struct OnConnection<L: Link> {
    conversation: Arc<Conversation<L>>,
    receiver: Arc<Receiver>,
    seen: u64,
}

impl<L: Link> Delivery for OnConnection<L> {
    fn deliver(&mut self, peer: &PeerId, key: Option<Key>, frames: &[Bytes], at: Instant) {
        let conversation = &self.conversation;
        conversation.heard.store(nanos_at(at), Ordering::Relaxed);
        conversation.refresh_receiver(&mut self.receiver, &mut self.seen);
        conversation.on_message(
            &self.receiver,
            peer.clone(),
            key,
            frames,
            conversation.is_closing(),
            &mut Answered::default(),
        );
    }
}
