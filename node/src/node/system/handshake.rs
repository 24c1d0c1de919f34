//! `_system:handshake`, a request: a connection asks to join. Its payload is the sender's
//! `Hello` (`crate::mesh::handshake`, where the decision to admit is, pure); the answer is ours.
//! A closing node admits nobody (a peer would join and be dropped at once).

use std::sync::Arc;

use protocol::{Answer, Incoming, RemoteError};

use crate::codes::system::SHUTTING_DOWN;
use crate::node::inner::Inner;
use crate::node::join::handshake_downstream;

/// The event name.
pub(crate) use crate::mesh::handshake::HANDSHAKE as EVENT;

/// A connection's handshake at our bound server: admitted (our hello back) or refused.
/// Runs on the socket's driver: nothing here waits.
pub(crate) fn answer(inner: &Arc<Inner>, incoming: &Incoming) -> Result<Answer, RemoteError> {
    let bound = inner.server();
    match bound {
        Some(server) if !inner.life.is_stopping() => handshake_downstream(inner, &server, incoming),
        _ => Err(RemoteError::system_error(
            SHUTTING_DOWN,
            "the node is closing",
        )),
    }
}
