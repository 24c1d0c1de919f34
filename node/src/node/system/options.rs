//! `_system:options`, a tick: the sender's options changed; its payload is the new options
//! (a MessagePack map). The peer's entry takes them (filters see them at once) and
//! `NodeEvent::PeerOptionsChanged` says so; a payload that does not decode is reported.

use protocol::Incoming;

use crate::mesh::peer::{Direction, NodeId};
use crate::node::inner::Inner;
use crate::observation::events::{ErrorSource, NodeEvent};
use crate::options::Options;

/// The event name.
pub(crate) use crate::mesh::handshake::OPTIONS as EVENT;

/// The options a peer sent.
pub(crate) fn apply(inner: &Inner, from: &NodeId, direction: Direction, incoming: &Incoming) {
    match incoming.decode::<Options>() {
        Ok(options) => {
            inner
                .state
                .lock()
                .registry
                .set_options(from, direction, options.clone());
            inner.observers.emit(NodeEvent::PeerOptionsChanged {
                id: from.clone(),
                options,
            });
        }
        Err(e) => inner
            .observers
            .report(ErrorSource::Peer, format!("bad options from {from}: {e}")),
    }
}
