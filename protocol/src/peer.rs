//! One remote end of a conversation: [`Peer`], the one way to send it each kind of message.
//!
//! A [`Client`](crate::Client) has one remote, its server ([`Client::peer`](crate::Client::peer));
//! a [`Server`](crate::Server) has one per connected client, by routing id
//! ([`Server::peer`](crate::Server::peer)). Either way the peer sends the same things the
//! same way: requests, ticks, streamed replies, streams both ways and uploads; and either
//! way a handle for the `_system:` namespace ([`Peer::system`]) sends them as system events
//! instead of twin `system_*` methods.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use transport::PeerId;

use crate::conversation::{Conversation, ReplyStream, StreamOptions};
use crate::envelope::{check_system_event, check_user_event, Envelope};
use crate::error::{Error, Result};
use crate::link::Socket;

/// A Client's connection as its sends check it: [`Gate::of`] of the latest state (one atomic
/// load, where borrowing the state's watch takes its lock).
pub(crate) type Gate = Arc<AtomicU8>;

/// A send's view of a Client's connection.
#[derive(Clone, Copy)]
#[repr(u8)]
pub(crate) enum LinkState {
    Down = 0,
    Up = 1,
    Closed = 2,
}

impl LinkState {
    /// The state a send sees for the Client's `state`.
    pub(crate) fn of(state: &crate::Connection) -> LinkState {
        match state {
            crate::Connection::Connected => LinkState::Up,
            crate::Connection::Closed => LinkState::Closed,
            _ => LinkState::Down,
        }
    }
}

/// The conversation with one remote end: a Client's server, or one client of a Server.
/// Cheap to clone; clones share the conversation.
///
/// ```
/// # #[tokio::main] async fn main() -> protocol::Result<()> {
/// use std::time::Duration;
/// use bytes::Bytes;
/// use protocol::{request_fn, Client, Server};
///
/// let server = Server::bind("tcp://127.0.0.1:0").await?;
/// server.on_request("echo", request_fn(|req| async move { Ok(req.payload().clone()) }));
/// let client = Client::connect(server.endpoint(), Duration::from_secs(5)).await?;
/// let peer = client.peer();
/// let reply = peer.request("echo", Bytes::from_static(b"hi"), Duration::from_secs(1)).await?;
/// assert_eq!(reply.payload(), &Bytes::from_static(b"hi"));
/// // The `_system:` namespace is refused here, and taken by `peer.system()`.
/// assert!(peer.tick("_system:ping", Bytes::new()).await.is_err());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Peer {
    conversation: Arc<Conversation<Socket>>,
    /// The routing id of the remote's connection (empty for a Client's server, its only
    /// remote).
    route: PeerId,
    /// A Client's connection: user messages are refused while it is down (they would
    /// wait in a queue for a server that may never come back); `None` on a Server, whose
    /// peers are the connections it has.
    gate: Option<Gate>,
    /// Sends `_system:` events (and refuses the others) instead of user events.
    system: bool,
}

impl Peer {
    pub(crate) fn new(
        conversation: Arc<Conversation<Socket>>,
        route: PeerId,
        gate: Option<Gate>,
    ) -> Peer {
        Peer {
            conversation,
            route,
            gate,
            system: false,
        }
    }

    /// The routing id of the remote's connection (empty for a Client's server).
    pub fn route(&self) -> &PeerId {
        &self.route
    }

    /// This peer for events in the reserved `_system:` namespace (the node layer's
    /// handshake, heartbeats and forwarding), which the plain handle refuses; a system
    /// handle refuses every other event. A Client's system requests and ticks are sent
    /// while its connection is down too (they queue until it is up).
    pub fn system(&self) -> Peer {
        Peer {
            system: true,
            ..self.clone()
        }
    }

    /// Whether this handle sends `_system:` events (see [`system`](Self::system)).
    pub fn is_system(&self) -> bool {
        self.system
    }

    /// Whether `other` talks to the same remote through the same conversation.
    pub fn same_as(&self, other: &Peer) -> bool {
        Arc::ptr_eq(&self.conversation, &other.conversation) && self.route == other.route
    }

    /// The event is in this handle's namespace, and (on a Client) the connection is up:
    /// for a user message always, for a system one only when `streamed` (a stream needs
    /// its credit to come back, a queued request or tick does not).
    fn check(&self, event: &str, streamed: bool) -> Result<()> {
        if self.system {
            check_system_event(event)?;
        } else {
            check_user_event(event)?;
        }
        match &self.gate {
            Some(gate) if streamed || !self.system => match gate.load(Ordering::Acquire) {
                x if x == LinkState::Up as u8 => Ok(()),
                x if x == LinkState::Closed as u8 => Err(Error::Closed),
                _ => Err(Error::NotConnected),
            },
            _ => Ok(()),
        }
    }

    /// Sends a request and waits for the reply, an error reply, or `timeout`.
    pub async fn request(
        &self,
        event: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Envelope> {
        // Not through `request_with`: each async layer keeps its own copy of the arguments
        // in the future, which the caller moves (and often boxes) per request.
        self.check(event, false)?;
        self.conversation
            .request(&self.route, event, &[], payload, timeout)
            .await
    }

    /// [`request`](Self::request) with metadata.
    pub async fn request_with(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Envelope> {
        self.check(event, false)?;
        self.conversation
            .request(&self.route, event, metadata, payload, timeout)
            .await
    }

    /// Sends a tick (fire and forget).
    pub async fn tick(&self, event: &str, payload: Bytes) -> Result<()> {
        self.tick_with(event, &[], payload).await
    }

    /// [`tick`](Self::tick) with metadata.
    pub async fn tick_with(&self, event: &str, metadata: &[u8], payload: Bytes) -> Result<()> {
        self.check(event, false)?;
        self.conversation
            .tick(&self.route, event, metadata, payload)
            .await
    }

    /// Sends a tick without waiting: a remote whose queue is full (it is not reading) gets
    /// [`Error::Transport`] with `QueueFull` instead of holding us up (heartbeats: a peer
    /// that does not read must not hold up the others').
    pub async fn try_tick(&self, event: &str, payload: Bytes) -> Result<()> {
        self.check(event, false)?;
        self.conversation
            .try_tick(&self.route, event, payload)
            .await
    }

    /// Sends a request whose reply comes as a stream of items (see [`ReplyStream`]): the
    /// remote's handler sends them through its [`ItemSink`](crate::ItemSink), at most
    /// `options.window` ahead of this reader.
    pub async fn request_stream(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        options: StreamOptions,
    ) -> Result<ReplyStream> {
        self.check(event, true)?;
        self.conversation
            .request_stream(&self.route, event, metadata, payload, options)
            .await
    }

    /// A stream both ways: `items` go to the remote as the request's body (each as it
    /// grants credit) while its reply comes back as a stream; the body is sent as the
    /// returned stream is polled. The remote's handler takes both the sink and the body.
    pub async fn request_bidi(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        items: impl futures::Stream<Item = Bytes> + Send + 'static,
        options: StreamOptions,
    ) -> Result<ReplyStream> {
        self.check(event, true)?;
        self.conversation
            .request_bidi(&self.route, event, metadata, payload, items, options)
            .await
    }

    /// Sends a request whose body is `items` (an upload), each as the remote grants
    /// credit for it, and waits for the one reply. `options.window` is unused (the remote
    /// sets the window of what it receives).
    pub async fn upload(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        items: impl futures::Stream<Item = Bytes> + Send,
        options: StreamOptions,
    ) -> Result<Envelope> {
        self.check(event, true)?;
        self.conversation
            .upload(&self.route, event, metadata, payload, items, options)
            .await
    }

    /// Fails at once, with `error`, every request waiting on this remote, and stops the
    /// streams this end answers for it (the node layer calls this when its heartbeats say
    /// the remote is gone); how many requests failed.
    pub fn fail_pending(&self, error: impl Fn() -> Error) -> usize {
        self.conversation.fail_pending(&self.route, error)
    }
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("route", &self.route)
            .field("system", &self.system)
            .finish()
    }
}
