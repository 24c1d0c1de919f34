//! `_system:bye`, a tick with no payload: the sender is leaving (it sends it after its
//! last answers). The peer is forgotten at once, its pending requests fail with
//! `PeerLeft`, and the leave is `LeaveReason::Stopped`.

use crate::mesh::peer::{Direction, LeaveReason, NodeId};
use crate::node::inner::Inner;

/// The event name.
pub(crate) use crate::mesh::handshake::BYE as EVENT;

/// The peer said goodbye.
pub(crate) fn apply(inner: &Inner, from: &NodeId, direction: Direction) {
    inner.peer_left(from, direction, LeaveReason::Stopped);
}
