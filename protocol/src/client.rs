//! The client side of a conversation, over a Dealer.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;
use transport::{Dealer, Event, HandshakeFailure, Options, PeerId};

use crate::conversation::{Conversation, Rejected, ReplyStream, Stats, StreamOptions};
use crate::envelope::{check_system_event, check_user_event, Envelope};
use crate::error::{Error, Result};
use crate::handler::{RequestHandler, TickHandler};

/// Default largest payload accepted: 16 MiB.
pub const DEFAULT_MAX_PAYLOAD: usize = 16 * 1024 * 1024;

/// The state of a Client's connection to its server.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Connection {
    /// Connecting (or reconnecting): messages queue up, requests are refused.
    Connecting,
    /// The ZMTP handshake with the server completed: requests flow.
    Connected,
    /// The server refused the connection's handshake (wrong protocol or credentials).
    Refused(HandshakeFailure),
    /// The client was closed.
    Closed,
}

/// A client: connects to one [`Server`](crate::Server), sends requests and ticks to it, and
/// answers the requests and ticks the server sends back.
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
/// let reply = client.request("echo", Bytes::from_static(b"hi"), Duration::from_secs(1)).await?;
/// assert_eq!(reply.payload(), &Bytes::from_static(b"hi"));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    conversation: Arc<Conversation<Dealer>>,
    state: watch::Receiver<Connection>,
    /// The state as requests check it: [`LinkState::of`] of the latest state sent on the watch
    /// (read with one atomic load, where borrowing the watch takes its lock).
    link: Arc<AtomicU8>,
    endpoint: Arc<str>,
}

/// A request's view of the connection.
#[derive(Clone, Copy)]
#[repr(u8)]
enum LinkState {
    Down = 0,
    Up = 1,
    Closed = 2,
}

impl LinkState {
    fn of(state: &Connection) -> LinkState {
        match state {
            Connection::Connected => LinkState::Up,
            Connection::Closed => LinkState::Closed,
            _ => LinkState::Down,
        }
    }
}

/// How long after a lost connection a Client waits for libzmq to say it reconnects before
/// it connects again itself. libzmq says so within microseconds (the reconnection is
/// scheduled on its I/O thread right after the drop); half a second leaves room for a
/// loaded machine, and a reconnection we make needlessly only replaces libzmq's.
const REVIVE_AFTER: Duration = Duration::from_millis(500);

/// Sleeps until `at`, or forever when there is no `at`.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Connects the dealer to `endpoint` again, replacing whatever libzmq kept of the old
/// connection (a disconnect first, so that there is never a second connection to the same
/// server: a dealer would share its messages between them).
fn reconnect(dealer: &Dealer, endpoint: &str) -> transport::Result<()> {
    tracing::debug!(endpoint, "connection given up by libzmq; connecting again");
    match dealer.disconnect(endpoint) {
        Ok(()) | Err(transport::Error::NotConnected { .. }) => {}
        Err(e) => tracing::debug!(endpoint, cause = %e, "disconnect before reconnecting"),
    }
    dealer.connect(endpoint)
}

/// The server, as seen from a Client's Dealer: the only remote.
fn server() -> &'static PeerId {
    static SERVER: PeerId = PeerId(Bytes::new());
    &SERVER
}

impl Client {
    /// Connects to `endpoint` with default options and waits (up to `timeout`) until the
    /// connection is up.
    pub async fn connect(endpoint: &str, timeout: Duration) -> Result<Client> {
        Client::connect_with(endpoint, Options::default(), DEFAULT_MAX_PAYLOAD, timeout).await
    }

    /// Connects with transport options and a payload limit.
    pub async fn connect_with(
        endpoint: &str,
        options: Options,
        max_payload: usize,
        timeout: Duration,
    ) -> Result<Client> {
        let dealer = Dealer::with_options(options)?;
        let mut events = dealer.events()?;
        let (conversation, ()) =
            Conversation::start(dealer, max_payload, |dealer| dealer.connect(endpoint)).await?;
        let (state_tx, mut state) = watch::channel(Connection::Connecting);
        let link = Arc::new(AtomicU8::new(LinkState::Down as u8));
        let link_tx = Arc::clone(&link);
        // Follow the connection: requests pending when it drops can never be answered
        // (the server's reply would go to a connection that no longer exists), so once
        // what had arrived is read they fail at once instead of waiting for their timeout.
        let watched = Arc::downgrade(&conversation);
        let address = endpoint.to_owned();
        tokio::spawn(async move {
            // Set after a drop that libzmq may not follow with a reconnection (see
            // `REVIVE_AFTER`): when to connect again ourselves.
            let mut revive: Option<tokio::time::Instant> = None;
            loop {
                let event = tokio::select! {
                    event = events.recv() => match event {
                        Some(event) => event,
                        None => break,
                    },
                    () = sleep_until(revive) => {
                        revive = None;
                        let Some(conversation) = watched.upgrade() else { break };
                        match reconnect(&conversation.link, &address) {
                            Ok(()) => {}
                            Err(transport::Error::Closed) => break,
                            Err(e) => {
                                tracing::warn!(endpoint = %address, cause = %e, "reconnect failed");
                                revive = Some(tokio::time::Instant::now() + REVIVE_AFTER);
                            }
                        }
                        continue;
                    }
                };
                let Some(conversation) = watched.upgrade() else {
                    break;
                };
                let next = match event {
                    Event::HandshakeSucceeded { .. } => {
                        revive = None;
                        Connection::Connected
                    }
                    Event::HandshakeFailed { reason, .. } => Connection::Refused(reason),
                    // libzmq is connecting again: nothing for us to do.
                    Event::ConnectRetried { .. }
                    | Event::ConnectDelayed { .. }
                    | Event::Connected { .. } => {
                        revive = None;
                        continue;
                    }
                    Event::Disconnected { .. } => {
                        // Through the driver: the replies that arrived before the drop are
                        // read before the rest fail.
                        conversation.connection_lost();
                        // A refused connection is closed right after the refusal: the state
                        // stays Refused (until a later handshake succeeds) so that whoever
                        // waits sees why.
                        if matches!(*state_tx.borrow(), Connection::Refused(_)) {
                            continue;
                        }
                        // libzmq announces its reconnection at once (CONNECT_RETRIED) after
                        // a lost connection; after a protocol error (a message over
                        // ZMQ_MAXMSGSIZE, a malformed frame) it gives the endpoint up for
                        // good (session_base.cpp `engine_error`): then we connect again.
                        revive = Some(tokio::time::Instant::now() + REVIVE_AFTER);
                        Connection::Connecting
                    }
                    _ => continue,
                };
                link_tx.store(LinkState::of(&next) as u8, Ordering::Release);
                if state_tx.send(next).is_err() {
                    break;
                }
            }
            link_tx.store(LinkState::Closed as u8, Ordering::Release);
            let _ = state_tx.send(Connection::Closed);
        });
        let waited = tokio::time::timeout(timeout, async {
            loop {
                match &*state.borrow_and_update() {
                    Connection::Connected => return Ok(()),
                    Connection::Closed => return Err(Error::Closed),
                    Connection::Refused(reason) => {
                        return Err(Error::Refused {
                            endpoint: endpoint.to_owned(),
                            reason: *reason,
                        })
                    }
                    Connection::Connecting => {}
                }
                if state.changed().await.is_err() {
                    return Err(Error::Closed);
                }
            }
        })
        .await;
        let client = Client {
            conversation,
            state,
            link,
            endpoint: Arc::from(endpoint),
        };
        match waited {
            Ok(Ok(())) => Ok(client),
            Ok(Err(e)) => {
                client.close().await;
                Err(e)
            }
            Err(_) => {
                client.close().await;
                Err(Error::ConnectTimeout {
                    endpoint: endpoint.to_owned(),
                })
            }
        }
    }

    /// The endpoint this client connects to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The connection's current state.
    pub fn connection(&self) -> Connection {
        self.state.borrow().clone()
    }

    /// A receiver that sees every change of the connection's state.
    pub fn watch_connection(&self) -> watch::Receiver<Connection> {
        self.state.clone()
    }

    fn check_connected(&self) -> Result<()> {
        match self.link.load(Ordering::Acquire) {
            x if x == LinkState::Up as u8 => Ok(()),
            x if x == LinkState::Closed as u8 => Err(Error::Closed),
            _ => Err(Error::NotConnected),
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
        check_user_event(event)?;
        self.check_connected()?;
        self.conversation
            .request(server(), event, &[], payload, timeout)
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
        check_user_event(event)?;
        self.check_connected()?;
        self.conversation
            .request(server(), event, metadata, payload, timeout)
            .await
    }

    /// Sends a tick (fire and forget).
    pub async fn tick(&self, event: &str, payload: Bytes) -> Result<()> {
        self.tick_with(event, &[], payload).await
    }

    /// [`tick`](Self::tick) with metadata.
    pub async fn tick_with(&self, event: &str, metadata: &[u8], payload: Bytes) -> Result<()> {
        check_user_event(event)?;
        self.check_connected()?;
        self.conversation
            .tick(server(), event, metadata, payload)
            .await
    }

    /// Sends a system request (event in the `_system:` namespace; for the node layer).
    pub async fn system_request(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Envelope> {
        check_system_event(event)?;
        self.conversation
            .request(server(), event, metadata, payload, timeout)
            .await
    }

    /// Sends a system tick (event in the `_system:` namespace; for the node layer).
    pub async fn system_tick(&self, event: &str, payload: Bytes) -> Result<()> {
        check_system_event(event)?;
        self.conversation.tick(server(), event, &[], payload).await
    }

    /// Whether `other` is a handle of this same client (not merely one to the same
    /// endpoint).
    pub fn same_as(&self, other: &Client) -> bool {
        Arc::ptr_eq(&self.conversation, &other.conversation)
    }

    /// Sends a system tick without waiting: a server whose queue is full (it is not reading)
    /// gets [`Error::Transport`] with `QueueFull` instead of holding us up.
    pub async fn try_system_tick(&self, event: &str, payload: Bytes) -> Result<()> {
        check_system_event(event)?;
        self.conversation.try_tick(server(), event, payload).await
    }

    /// Handles requests for `event` sent by the server.
    pub fn on_request(&self, event: &str, handler: RequestHandler) {
        self.conversation
            .set_request_handler(Some(event.to_owned()), Some(handler));
    }

    /// Removes the request handler for `event`.
    pub fn off_request(&self, event: &str) {
        self.conversation
            .set_request_handler(Some(event.to_owned()), None);
    }

    /// Handles ticks for `event` sent by the server.
    pub fn on_tick(&self, event: &str, handler: TickHandler) {
        self.conversation
            .set_tick_handler(Some(event.to_owned()), Some(handler));
    }

    /// Removes the tick handler for `event`.
    pub fn off_tick(&self, event: &str) {
        self.conversation
            .set_tick_handler(Some(event.to_owned()), None);
    }

    /// Handles every request that has no handler of its own (the node layer's dispatcher).
    pub fn on_any_request(&self, handler: Option<RequestHandler>) {
        self.conversation.set_request_handler(None, handler);
    }

    /// Handles every tick that has no handler of its own.
    pub fn on_any_tick(&self, handler: Option<TickHandler>) {
        self.conversation.set_tick_handler(None, handler);
    }

    /// Reports each received message that was dropped as invalid.
    pub fn rejected(&self) -> tokio::sync::mpsc::UnboundedReceiver<Rejected> {
        self.conversation.report_rejected()
    }

    /// Fails every pending request at once with `error` (the node layer calls this when its
    /// heartbeats say the server is gone).
    pub fn fail_pending(&self, error: impl Fn() -> Error) -> usize {
        self.conversation.fail_all(error)
    }

    /// Sends a request whose reply comes as a stream of items (see [`ReplyStream`]): the
    /// server's handler sends them through its [`ItemSink`](crate::ItemSink), at most
    /// `options.window` ahead of this reader.
    pub async fn request_stream(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        options: StreamOptions,
    ) -> Result<ReplyStream> {
        check_user_event(event)?;
        self.check_connected()?;
        self.conversation
            .request_stream(server(), event, metadata, payload, options)
            .await
    }

    /// A stream both ways: `items` go to the server as the request's body (each as it
    /// grants credit) while its reply comes back as a stream; the body is sent as the
    /// returned stream is polled. The server's handler takes both the sink and the body.
    pub async fn request_bidi(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        items: impl futures::Stream<Item = Bytes> + Send + 'static,
        options: StreamOptions,
    ) -> Result<ReplyStream> {
        check_user_event(event)?;
        self.check_connected()?;
        self.conversation
            .request_bidi(server(), event, metadata, payload, items, options)
            .await
    }

    /// [`request_bidi`](Self::request_bidi) for a system event (`_system:` namespace; for
    /// the node layer's forwarding).
    pub async fn system_request_bidi(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        items: impl futures::Stream<Item = Bytes> + Send + 'static,
        options: StreamOptions,
    ) -> Result<ReplyStream> {
        check_system_event(event)?;
        self.check_connected()?;
        self.conversation
            .request_bidi(server(), event, metadata, payload, items, options)
            .await
    }

    /// [`request_stream`](Self::request_stream) for a system event (`_system:` namespace; for
    /// the node layer's forwarding).
    pub async fn system_request_stream(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        options: StreamOptions,
    ) -> Result<ReplyStream> {
        check_system_event(event)?;
        self.check_connected()?;
        self.conversation
            .request_stream(server(), event, metadata, payload, options)
            .await
    }

    /// Sends a request whose body is `items` (an upload), each as the server grants
    /// credit for it, and waits for the one reply. `options.window` is unused (the server
    /// sets the window of what it receives).
    pub async fn upload(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        items: impl futures::Stream<Item = Bytes> + Send,
        options: StreamOptions,
    ) -> Result<Envelope> {
        check_user_event(event)?;
        self.check_connected()?;
        self.conversation
            .upload(server(), event, metadata, payload, items, options)
            .await
    }

    /// [`upload`](Self::upload) for a system event (`_system:` namespace; for the node
    /// layer's forwarding).
    pub async fn system_upload(
        &self,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        items: impl futures::Stream<Item = Bytes> + Send,
        options: StreamOptions,
    ) -> Result<Envelope> {
        check_system_event(event)?;
        self.check_connected()?;
        self.conversation
            .upload(server(), event, metadata, payload, items, options)
            .await
    }

    /// Sets the window this client grants for the streamed bodies it receives, and the
    /// most streamed requests it keeps open at once (new ones over it are refused with
    /// [`RemoteError::TOO_MANY_STREAMS`](crate::RemoteError::TOO_MANY_STREAMS)).
    pub fn set_stream_limits(&self, window: u32, max_streams: usize) {
        self.conversation.set_stream_limits(window, max_streams);
    }

    /// Streamed requests this client answers that are open now.
    pub fn open_streams(&self) -> usize {
        self.conversation.open_streams()
    }

    /// Requests waiting for their reply.
    pub fn in_flight(&self) -> usize {
        self.conversation.in_flight()
    }

    /// When this client last received anything from its server (a reply, a request, a
    /// tick), if it ever did: a sign of life of the server.
    pub fn last_heard(&self) -> Option<std::time::Instant> {
        self.conversation.last_heard()
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.conversation.stats()
    }

    /// Graceful close: new requests are refused, handlers in progress answer, requests still
    /// waiting fail with [`Error::Closed`], then the socket closes.
    pub async fn close(&self) {
        self.conversation.close().await
    }

    /// Immediate close: handlers in progress are dropped without answering, pending requests
    /// fail with [`Error::Closed`], the socket closes at once.
    pub async fn abort(&self) {
        self.conversation.abort().await
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .field("connection", &self.connection())
            .finish()
    }
}
