//! Direct delivery: received messages handed to the one who takes them on the connection's
//! own driver task, instead of through the socket's inbox (native engine only).
//!
//! A socket's messages normally wait in its inbox until a receiver task takes them
//! ([`Router::recv`](crate::Router::recv)): a wake-up of that task per message, or per
//! batch. A receiver that only decodes and hands on (the protocol's dispatch, which never
//! waits) can instead be called by each connection's driver as the messages are read:
//! [`Router::deliver_to`](crate::Router::deliver_to). With many connections, each busy
//! now and then, that is one task fewer touched per message: the wake-up, the inbox's lane,
//! and the receiver task's state, cold in the cache by the time a connection's next message
//! comes (with 1,000 connections a message's cost grows with every distinct thing it
//! touches).
//!
//! A receiver may also leave a message to the inbox ([`Delivered::Queued`]): one that is
//! busy, whose work spreads better over the runtime's threads through a task of its own.
//! That message and the connection's next ones then wait for `recv`, until the receiver
//! has taken every one of them and asks for another (the messages keep their order across
//! the switch); the next message after that is offered to the receiver again. That order
//! holds with one task receiving from the socket (as the protocol's conversation does):
//! with several, one's next receive does not tell that another is done with its message.
//!
//! What stays the same: messages of one connection are delivered in order, one at a time;
//! the high-water mark still bounds what a connection queues to be sent. What changes: the
//! receive high-water mark no longer holds a connection back while the receiver takes its
//! messages, as it takes every message as it comes (it must bound its own work, as the
//! protocol's dispatch does); it does again while they are left to the inbox;
//! messages of different connections may be delivered at the same time on different
//! threads.

use std::time::Instant;

use bytes::Bytes;

use crate::curve::Key;
use crate::ids::PeerId;

/// What a receiver did with a message (see [`Delivery::deliver`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Delivered {
    /// It took the message.
    Taken,
    /// It left the message to the socket's inbox, for `recv`; the connection's next
    /// messages follow it there until the inbox has given all of them out.
    Queued,
}

/// Takes a socket's received messages on its connections' drivers (see the module's docs).
pub trait Deliver: Send + Sync + 'static {
    /// The receiver of one connection, made when its handshake has completed. It lives as
    /// long as the connection, and only that connection's driver calls it.
    fn connection(&self) -> Box<dyn Delivery>;
}

/// One connection's receiver (see [`Deliver`]).
pub trait Delivery: Send + 'static {
    /// One whole message from `peer` (the routing id a Router's `recv` would give, empty on
    /// a Dealer), with the peer's CURVE key on a CURVE server, read at `at`.
    ///
    /// It runs on the connection's driver: it must not block, and it should hand anything
    /// that takes time to a task of its own. A panic here closes the connection (the
    /// peer sees it drop), and the socket goes on.
    ///
    /// [`Delivered::Queued`] leaves the message to the inbox (see the module's docs).
    fn deliver(
        &mut self,
        peer: &PeerId,
        key: Option<Key>,
        frames: &[Bytes],
        at: Instant,
    ) -> Delivered;
}
