//! `_system:draining`, a request with no payload: the sender is closing and finishes what
//! it has; stop picking it by filter (`Inner::peer_draining`, `NodeEvent::PeerDraining`).
//! The answer, empty, tells the sender we have marked it, so it knows no new pick is on
//! its way before it stops taking requests (`crate::node::drain`).

use bytes::Bytes;
use protocol::{Answer, RemoteError};

use crate::mesh::peer::{Direction, NodeId};
use crate::node::inner::Inner;

/// The event name.
pub(crate) use crate::mesh::handshake::DRAINING as EVENT;

/// The peer said it is draining: marked, and the answer that says so.
pub(crate) fn answer(
    inner: &Inner,
    from: &NodeId,
    direction: Direction,
) -> Result<Answer, RemoteError> {
    inner.peer_draining(from, direction);
    Ok(Answer::from(Bytes::new()))
}
