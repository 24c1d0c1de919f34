//! `_system:rejoin`, a tick with no payload, sent by a server to a connection it does not
//! know (it declared the peer dead, or restarted): the peer should handshake again on that
//! connection. Only an upstream link acts on it (its supervisor joins again, and the peer
//! counts as left only if that fails); one that crossed our own new handshake changes
//! nothing.

use crate::mesh::peer::{Direction, NodeId};
use crate::node::inner::Inner;

/// The event name.
pub(crate) use crate::mesh::handshake::REJOIN as EVENT;

/// The server `from` asked us to join again.
pub(crate) fn apply(inner: &Inner, from: &NodeId, direction: Direction) {
    if direction != Direction::Upstream {
        return;
    }
    let state = inner.state.lock();
    let link = state.registry.get_link(from, Direction::Upstream);
    if let Some(left) = link.and_then(|link| link.left()) {
        left.ask_rejoin();
    }
}
