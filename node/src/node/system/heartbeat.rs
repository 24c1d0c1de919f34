//! `_system:heartbeat`, a tick with no payload: a sign of life, sent every heartbeat
//! interval on every link (`crate::node::heartbeat` runs the timer). Receiving it has no effect
//! of its own: any message from a joined peer counts as life when the connection is looked
//! up. From a connection that is not joined (we declared it dead, or restarted), it is
//! answered with `_system:rejoin` (`rejoin.rs`).

use std::sync::Arc;

use bytes::Bytes;
use protocol::Incoming;

use crate::node::inner::Inner;

/// The event name.
pub(crate) use crate::mesh::handshake::HEARTBEAT as EVENT;

/// A heartbeat from a connection that has not joined: the peer still believes it is; tell
/// it to handshake again, without waiting on its queue (the driver never waits).
pub(crate) fn from_unjoined(inner: &Arc<Inner>, incoming: Incoming) {
    inner
        .observers
        .unjoined
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Some(server) = inner.server() {
        tokio::spawn(async move {
            let _ = server
                .peer(&incoming.from)
                .system()
                .try_tick(super::rejoin::EVENT, Bytes::new())
                .await;
        });
    }
}
