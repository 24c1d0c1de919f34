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
    fn deliver(&mut self, peer: &PeerId, key: Option<Key>, frames: &[Bytes], at: Instant);
}
