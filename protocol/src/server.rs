//! The server side of a conversation, over a Router.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use transport::{Events, Key, Options, PeerId, Router};

use crate::client::DEFAULT_MAX_PAYLOAD;
use crate::conversation::{Conversation, Rejected, ReplyStream, Stats, StreamOptions};
use crate::envelope::{check_system_event, check_user_event, Envelope};
use crate::error::{Error, Result};
use crate::handler::{RequestHandler, TickHandler};

/// A server: binds an endpoint, answers the requests and ticks of the Clients that connect,
/// and can send requests and ticks to any of them by routing id.
#[derive(Clone)]
pub struct Server {
    conversation: Arc<Conversation<Router>>,
    endpoint: Arc<str>,
}

impl Server {
    /// Binds `endpoint` with default options (`tcp://127.0.0.1:0` picks a free port; see
    /// [`endpoint`](Self::endpoint)).
    pub async fn bind(endpoint: &str) -> Result<Server> {
        Server::bind_with(endpoint, Options::default(), DEFAULT_MAX_PAYLOAD)
            .await
            .map(|(server, _)| server)
    }

    /// Binds with transport options and a payload limit; also returns the socket's
    /// connection events.
    pub async fn bind_with(
        endpoint: &str,
        options: Options,
        max_payload: usize,
    ) -> Result<(Server, Events)> {
        let router = Router::with_options(options)?;
        let events = router.events()?;
        let (conversation, bound) =
            Conversation::start(router, max_payload, |router| router.bind(endpoint)).await?;
        Ok((
            Server {
                conversation,
                endpoint: Arc::from(bound.as_str()),
            },
            events,
        ))
    }

    /// The endpoint actually bound.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends a request to the client `peer` and waits for its reply.
    pub async fn request(
        &self,
        peer: &PeerId,
        event: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Envelope> {
        self.request_with(peer, event, &[], payload, timeout).await
    }

    /// [`request`](Self::request) with metadata.
    pub async fn request_with(
        &self,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Envelope> {
        check_user_event(event)?;
        self.conversation
            .request(peer, event, metadata, payload, timeout)
            .await
    }

    /// Sends a tick to the client `peer`.
    pub async fn tick(&self, peer: &PeerId, event: &str, payload: Bytes) -> Result<()> {
        self.tick_with(peer, event, &[], payload).await
    }

    /// [`tick`](Self::tick) with metadata.
    pub async fn tick_with(
        &self,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
    ) -> Result<()> {
        check_user_event(event)?;
        self.conversation.tick(peer, event, metadata, payload).await
    }

    /// Sends a system request to `peer` (event in the `_system:` namespace).
    pub async fn system_request(
        &self,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Envelope> {
        check_system_event(event)?;
        self.conversation
            .request(peer, event, metadata, payload, timeout)
            .await
    }

    /// Sends a system tick to `peer` (event in the `_system:` namespace).
    pub async fn system_tick(&self, peer: &PeerId, event: &str, payload: Bytes) -> Result<()> {
        check_system_event(event)?;
        self.conversation.tick(peer, event, &[], payload).await
    }

    /// Sends a system tick to `peer` without waiting: a peer whose queue is full (it is not
    /// reading) gets [`Error::Transport`] with `QueueFull` instead of holding us up.
    pub async fn try_system_tick(&self, peer: &PeerId, event: &str, payload: Bytes) -> Result<()> {
        check_system_event(event)?;
        self.conversation.try_tick(peer, event, payload).await
    }

    /// Handles requests for `event`.
    pub fn on_request(&self, event: &str, handler: RequestHandler) {
        self.conversation
            .set_request_handler(Some(event.to_owned()), Some(handler));
    }

    /// Removes the request handler for `event`.
    pub fn off_request(&self, event: &str) {
        self.conversation
            .set_request_handler(Some(event.to_owned()), None);
    }

    /// Handles ticks for `event`.
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

    /// Fails at once every request pending on `peer` (it left) with `error`.
    pub fn fail_pending(&self, peer: &PeerId, error: impl Fn() -> Error) -> usize {
        self.conversation.fail_pending(peer, error)
    }

    /// The clients whose replies answered one of our requests since the last call, each
    /// with when the last one arrived: signs of life beside their own messages (a client
    /// busy answering us may send its heartbeats late). Drained by the call, so what the
    /// server keeps is at most one entry per client it had a request pending with; a
    /// liveness check calls it periodically.
    pub fn take_answered(&self) -> Vec<(PeerId, std::time::Instant)> {
        self.conversation.take_answered()
    }

    /// Sends the client `peer` a request whose reply comes as a stream of items (see
    /// [`ReplyStream`]).
    pub async fn request_stream(
        &self,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        options: StreamOptions,
    ) -> Result<ReplyStream> {
        check_user_event(event)?;
        self.conversation
            .request_stream(peer, event, metadata, payload, options)
            .await
    }

    /// A stream both ways with the client `peer` (see
    /// [`Client::request_bidi`](crate::Client::request_bidi)).
    pub async fn request_bidi(
        &self,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        items: impl futures::Stream<Item = Bytes> + Send + 'static,
        options: StreamOptions,
    ) -> Result<ReplyStream> {
        check_user_event(event)?;
        self.conversation
            .request_bidi(peer, event, metadata, payload, items, options)
            .await
    }

    /// [`request_bidi`](Self::request_bidi) for a system event (`_system:` namespace; for
    /// the node layer's forwarding).
    pub async fn system_request_bidi(
        &self,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        items: impl futures::Stream<Item = Bytes> + Send + 'static,
        options: StreamOptions,
    ) -> Result<ReplyStream> {
        check_system_event(event)?;
        self.conversation
            .request_bidi(peer, event, metadata, payload, items, options)
            .await
    }

    /// [`request_stream`](Self::request_stream) for a system event (`_system:` namespace; for
    /// the node layer's forwarding).
    pub async fn system_request_stream(
        &self,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        options: StreamOptions,
    ) -> Result<ReplyStream> {
        check_system_event(event)?;
        self.conversation
            .request_stream(peer, event, metadata, payload, options)
            .await
    }

    /// Sends the client `peer` a request whose body is `items` (an upload) and waits for
    /// the one reply (see [`Client::upload`](crate::Client::upload)).
    pub async fn upload(
        &self,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        items: impl futures::Stream<Item = Bytes> + Send,
        options: StreamOptions,
    ) -> Result<Envelope> {
        check_user_event(event)?;
        self.conversation
            .upload(peer, event, metadata, payload, items, options)
            .await
    }

    /// [`upload`](Self::upload) for a system event (`_system:` namespace; for the node
    /// layer's forwarding).
    pub async fn system_upload(
        &self,
        peer: &PeerId,
        event: &str,
        metadata: &[u8],
        payload: Bytes,
        items: impl futures::Stream<Item = Bytes> + Send,
        options: StreamOptions,
    ) -> Result<Envelope> {
        check_system_event(event)?;
        self.conversation
            .upload(peer, event, metadata, payload, items, options)
            .await
    }

    /// Sets the window this server grants for the streamed bodies it receives, and the
    /// most streamed requests it keeps open at once over all its clients (new ones over it
    /// are refused with [`RemoteError::TOO_MANY_STREAMS`](crate::RemoteError::TOO_MANY_STREAMS)).
    pub fn set_stream_limits(&self, window: u32, max_streams: usize) {
        self.conversation.set_stream_limits(window, max_streams);
    }

    /// Streamed requests this server answers that are open now.
    pub fn open_streams(&self) -> usize {
        self.conversation.open_streams()
    }

    /// Requests waiting for their reply.
    pub fn in_flight(&self) -> usize {
        self.conversation.in_flight()
    }

    /// CURVE servers only: from now on accept exactly these client keys (see
    /// [`Router::allow_keys`]; handshakes already done are not undone).
    pub fn allow_keys(&self, keys: impl IntoIterator<Item = Key>) -> Result<()> {
        Ok(self.conversation.link.allow_keys(keys)?)
    }

    /// CURVE servers only: add one key to the allow-list (starting one if there was none).
    pub fn allow_key(&self, key: Key) -> Result<()> {
        Ok(self.conversation.link.allow_key(key)?)
    }

    /// CURVE servers only: take a key off the allow-list; whether it was on it.
    pub fn revoke_key(&self, key: &Key) -> Result<bool> {
        Ok(self.conversation.link.revoke_key(key)?)
    }

    /// CURVE servers only: drop the allow-list (any client that knows our key may connect).
    pub fn allow_any_key(&self) -> Result<()> {
        Ok(self.conversation.link.allow_any_key()?)
    }

    /// CURVE servers only: the keys on the allow-list, `None` when there is no list.
    pub fn allowed_keys(&self) -> Result<Option<Vec<Key>>> {
        Ok(self.conversation.link.allowed_keys()?)
    }

    /// Stops listening on [`endpoint`](Self::endpoint): no new connection is accepted, the
    /// ones made stay and keep talking. For a server that cannot accept for now (out of
    /// file descriptors: libzmq's listener would be woken again and again by the connection
    /// it cannot take). [`resume`](Self::resume) listens again on the same endpoint.
    pub async fn pause(&self) -> Result<()> {
        Ok(self.conversation.link.unbind(&self.endpoint).await?)
    }

    /// Listens again on [`endpoint`](Self::endpoint) after [`pause`](Self::pause). Fails
    /// like a bind: the port may have been taken meanwhile, or descriptors may still be
    /// short.
    pub fn resume(&self) -> Result<()> {
        self.conversation.link.bind(&self.endpoint)?;
        Ok(())
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.conversation.stats()
    }

    /// Graceful close: new requests are answered with a `SHUTTING_DOWN` error, handlers in
    /// progress answer, then the port is released.
    pub async fn close(&self) {
        self.conversation.close().await
    }

    /// Immediate close: handlers in progress are dropped without answering, pending requests
    /// fail with [`Error::Closed`], the socket closes at once.
    pub async fn abort(&self) {
        self.conversation.abort().await
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}
