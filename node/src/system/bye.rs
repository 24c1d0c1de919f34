//! `_system:bye`, a tick with no payload: the sender is leaving (it sends it after its
//! last answers). The peer is forgotten at once, its pending requests fail with
//! `PeerLeft`, and the leave is `LeaveReason::Stopped`.

use crate::events::LeaveReason;
use crate::inner::Inner;
use crate::peer::{Direction, NodeId};

/// The event name.
pub(crate) use crate::handshake::BYE as EVENT;

/// The peer said goodbye.
pub(crate) fn apply(inner: &Inner, from: &NodeId, direction: Direction) {
    inner.peer_left(from, direction, LeaveReason::Stopped);
}
