//! What a node reports as it runs.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::mesh::peer::{Direction, LeaveReason, NodeId};
use crate::options::Options;

/// Where an error event comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorSource {
    /// A handshake was refused or failed.
    Handshake,
    /// A peer sent something invalid (not an envelope, a message before joining, ...).
    Peer,
    /// Sending a heartbeat or a system message failed.
    Send,
    /// A middleware refused a tick: the tick's sender is not told (a tick has no answer);
    /// counted in [`NodeStats::ticks_refused`](crate::NodeStats::ticks_refused). The message
    /// names the event, the sender and the middleware's error.
    TickRefused,
}

/// Something that happened to a node.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum NodeEvent {
    /// A peer completed its handshake with us.
    PeerJoined {
        /// Its id.
        id: NodeId,
        /// How it is joined.
        direction: Direction,
        /// The options it advertised.
        options: Options,
    },
    /// A joined peer changed its options.
    PeerOptionsChanged {
        /// Its id.
        id: NodeId,
        /// Its new options.
        options: Options,
    },
    /// A joined peer said it is stopping: it finishes the requests it has (and those on
    /// their way to it), and is no longer picked for `any`, `all` or group calls. Its
    /// [`PeerLeft`](NodeEvent::PeerLeft) (reason [`Stopped`](LeaveReason::Stopped)) follows
    /// once its last answer is sent.
    PeerDraining {
        /// Its id.
        id: NodeId,
        /// How it is joined.
        direction: Direction,
    },
    /// A peer left.
    PeerLeft {
        /// Its id.
        id: NodeId,
        /// How it was joined.
        direction: Direction,
        /// Why it left.
        reason: LeaveReason,
    },
    /// Our bound address refused a connection during the security handshake (CURVE): a key
    /// not on the allow-list, a plaintext client, or a client that has another server key;
    /// or, on any node, a connection that did not finish its handshake. Nothing it sent
    /// reached a handler.
    ///
    /// Rate-limited, so that a flood of hostile connections cannot flood the event stream:
    /// the first 10 of every 10 s come one by one, the rest as one [`NodeEvent::Error`]
    /// (source [`ErrorSource::Handshake`]) saying "suppressed K more in the last S s".
    ConnectionRefused {
        /// Our endpoint that refused it.
        endpoint: String,
        /// What libzmq reported.
        reason: transport::HandshakeFailure,
    },
    /// Something went wrong that no caller is waiting for.
    ///
    /// Rate-limited per source: the first 20 of every 10 s come one by one, then one event
    /// says how many more there were ("suppressed K more in the last S s"). The counters
    /// ([`Node::stats`](crate::Node::stats)) count every one.
    Error {
        /// Where.
        source: ErrorSource,
        /// What, as text (the typed error went to whoever could act on it).
        message: String,
    },
    /// Our bound address cannot accept connections because the process (or the system) is
    /// out of file descriptors, so the node stopped listening on it for `retry_in`, then
    /// listens again; the pause doubles, from 100 ms up to 5 s, while accepting keeps
    /// failing. Connections already made are not affected; new ones are refused by the
    /// system meanwhile and should retry (a node's `connect` does).
    ///
    /// Without the pause, libzmq's listener would be woken again and again by the
    /// connection it cannot take, spinning a CPU.
    AcceptPaused {
        /// Our endpoint.
        endpoint: String,
        /// How long until it listens again.
        retry_in: std::time::Duration,
    },
    /// A discovery source answered with a change, nothing, or a failure, or its set is
    /// past the cap ([`Node::discover`](crate::Node::discover)).
    Discovery(crate::discovery::discover::DiscoveryEvent),
    /// This node began a graceful close: its peers were told to stop picking it, and it
    /// finishes the requests it has within the close grace.
    /// [`Stopped`](NodeEvent::Stopped) follows.
    Draining,
    /// The node closed.
    Stopped,
    /// This stream fell behind: `missed` events were dropped before it read them (the
    /// node keeps the last 1,024 for each stream). What follows is current again.
    Lagged {
        /// How many events this stream lost.
        missed: u64,
    },
}

/// How many events a stream may fall behind before it is told it lagged.
pub(crate) const EVENT_BACKLOG: usize = 1024;

/// A node's event channel, made at the first [`subscribe`](Self::subscribe): until then an
/// event has nobody to reach and costs nothing. The channel keeps its whole backlog from
/// the start (`EVENT_BACKLOG` slots, 72 KiB), which was most of an idle node's memory when
/// every node made one (a node measured 175 KiB resident with it, in a process of 100 peer
/// nodes and their hub). Cloning shares the same channel.
#[derive(Debug, Clone, Default)]
pub(crate) struct EventChannel {
    sender: Arc<OnceLock<broadcast::Sender<NodeEvent>>>,
}

impl EventChannel {
    /// Sends `event` to every stream (none yet: dropped, as a channel without receivers
    /// would).
    pub(crate) fn send(&self, event: NodeEvent) {
        if let Some(sender) = self.sender.get() {
            // No receiver left is fine.
            let _ = sender.send(event);
        }
    }

    /// A receiver of every event from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<NodeEvent> {
        self.sender
            .get_or_init(|| broadcast::channel(EVENT_BACKLOG).0)
            .subscribe()
    }
}

/// The events of a node, as a [`Stream`](futures::Stream) ([`Node::events`](crate::Node::events)).
/// Each stream sees the events from its creation on; one that falls behind gets a
/// [`NodeEvent::Lagged`] item saying how many it lost, never a silent gap. Ends after
/// [`NodeEvent::Stopped`] once the node is gone.
pub struct EventStream {
    inner: futures::stream::BoxStream<'static, NodeEvent>,
}

impl EventStream {
    pub(crate) fn new(receiver: broadcast::Receiver<NodeEvent>) -> EventStream {
        use tokio::sync::broadcast::error::RecvError;
        let inner = futures::stream::unfold(receiver, |mut receiver| async move {
            match receiver.recv().await {
                Ok(event) => Some((event, receiver)),
                Err(RecvError::Lagged(missed)) => Some((NodeEvent::Lagged { missed }, receiver)),
                Err(RecvError::Closed) => None,
            }
        });
        EventStream {
            inner: Box::pin(inner),
        }
    }

    /// The next event; `None` once the node is gone and every event was read.
    pub async fn recv(&mut self) -> Option<NodeEvent> {
        futures::StreamExt::next(self).await
    }

    /// The first event from now on for which `matches` is true, skipping the others; a
    /// [`WaitError`] when none comes within `timeout` or the node is gone first.
    ///
    /// ```
    /// # async fn demo(node: &node::Node) -> Result<(), node::WaitError> {
    /// use std::time::Duration;
    /// use node::NodeEvent;
    ///
    /// let mut events = node.events();
    /// let joined = events
    ///     .wait_for(|e| matches!(e, NodeEvent::PeerJoined { .. }), Duration::from_secs(5))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait_for(
        &mut self,
        mut matches: impl FnMut(&NodeEvent) -> bool,
        timeout: Duration,
    ) -> Result<NodeEvent, WaitError> {
        let found = async {
            while let Some(event) = self.recv().await {
                if matches(&event) {
                    return Ok(event);
                }
            }
            Err(WaitError::Ended)
        };
        tokio::time::timeout(timeout, found)
            .await
            .unwrap_or(Err(WaitError::TimedOut(timeout)))
    }
}

/// Why [`EventStream::wait_for`] returned without the event it waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WaitError {
    /// No matching event came within this time.
    #[error("no matching event within {0:?}")]
    TimedOut(Duration),
    /// The node is gone and every event was read: none matched.
    #[error("the node is gone: no matching event came")]
    Ended,
}

impl futures::Stream for EventStream {
    type Item = NodeEvent;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<NodeEvent>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_stream_that_falls_behind_is_told_how_much_it_lost() {
        let (tx, rx) = tokio::sync::broadcast::channel(4);
        let mut events = EventStream::new(rx);
        for _ in 0..10 {
            tx.send(NodeEvent::Stopped).unwrap();
        }
        assert_eq!(events.recv().await, Some(NodeEvent::Lagged { missed: 6 }));
        for _ in 0..4 {
            assert_eq!(events.recv().await, Some(NodeEvent::Stopped));
        }
        drop(tx);
        assert_eq!(events.recv().await, None, "ends when the node is gone");
    }

    #[tokio::test(start_paused = true)]
    async fn wait_for_returns_the_first_match_or_says_why_not() {
        let (tx, rx) = tokio::sync::broadcast::channel(16);
        let mut events = EventStream::new(rx);
        tx.send(NodeEvent::Draining).unwrap();
        tx.send(NodeEvent::Lagged { missed: 3 }).unwrap();
        tx.send(NodeEvent::Stopped).unwrap();
        let second = Duration::from_secs(1);
        let lagged = events
            .wait_for(|e| matches!(e, NodeEvent::Lagged { .. }), second)
            .await;
        assert_eq!(lagged, Ok(NodeEvent::Lagged { missed: 3 }));
        // Nothing more matches: the timeout, at its time (simulated clock).
        let start = tokio::time::Instant::now();
        let none = events.wait_for(|e| *e == NodeEvent::Draining, second).await;
        assert_eq!(none, Err(WaitError::TimedOut(second)));
        assert_eq!(start.elapsed(), second);
        assert_eq!(none.unwrap_err().to_string(), "no matching event within 1s");
        drop(tx);
        let ended = events.wait_for(|_| true, second).await;
        assert_eq!(ended, Err(WaitError::Ended), "the node went first");
    }
}
