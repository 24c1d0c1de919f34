//! The server side of a conversation, over a Router.

use std::sync::Arc;

use transport::{Events, Key, Options, PeerId, Router};

use crate::client::DEFAULT_MAX_PAYLOAD;
use crate::conversation::Conversation;
use crate::error::Result;
use crate::link::Socket;
use crate::local::local_end;
use crate::peer::Peer;

/// A server: binds an endpoint, answers the requests and ticks of the Clients that connect,
/// and can send requests and ticks to any of them through its [`peer`](Self::peer), by
/// routing id.
#[derive(Clone)]
pub struct Server {
    conversation: Arc<Conversation<Socket>>,
    /// The socket itself, for what only a Router has (CURVE keys, pausing).
    router: Router,
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
            Conversation::start(Socket::Router(router.clone()), max_payload, |_| {
                router.bind(endpoint)
            })
            .await?;
        Ok((
            Server {
                conversation,
                router,
                endpoint: Arc::from(bound.as_str()),
            },
            events,
        ))
    }

    /// The endpoint actually bound.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The client whose connection has the routing id `route` (as a handler's
    /// [`Incoming::from`](crate::Incoming::from) gives it): what sends it requests, ticks
    /// and streams. Sending to a client that is not connected fails with
    /// [`transport::Error::UnknownPeer`].
    pub fn peer(&self, route: &PeerId) -> Peer {
        Peer::new(Arc::clone(&self.conversation), route.clone(), None)
    }

    /// The clients whose replies answered one of our requests since the last call, each
    /// with when the last one arrived: signs of life beside their own messages (a client
    /// busy answering us may send its heartbeats late). Drained by the call, so what the
    /// server keeps is at most one entry per client it had a request pending with; a
    /// liveness check calls it periodically.
    pub fn take_answered(&self) -> Vec<(PeerId, std::time::Instant)> {
        self.conversation.take_answered()
    }

    /// CURVE servers only: from now on accept exactly these client keys (see
    /// [`Router::allow_keys`]; handshakes already done are not undone).
    pub fn allow_keys(&self, keys: impl IntoIterator<Item = Key>) -> Result<()> {
        Ok(self.router.allow_keys(keys)?)
    }

    /// CURVE servers only: add one key to the allow-list (starting one if there was none).
    pub fn allow_key(&self, key: Key) -> Result<()> {
        Ok(self.router.allow_key(key)?)
    }

    /// CURVE servers only: take a key off the allow-list; whether it was on it.
    pub fn revoke_key(&self, key: &Key) -> Result<bool> {
        Ok(self.router.revoke_key(key)?)
    }

    /// CURVE servers only: drop the allow-list (any client that knows our key may connect).
    pub fn allow_any_key(&self) -> Result<()> {
        Ok(self.router.allow_any_key()?)
    }

    /// CURVE servers only: the keys on the allow-list, `None` when there is no list.
    pub fn allowed_keys(&self) -> Result<Option<Vec<Key>>> {
        Ok(self.router.allowed_keys()?)
    }

    /// Stops listening on [`endpoint`](Self::endpoint): no new connection is accepted, the
    /// ones made stay and keep talking. For a server that cannot accept for now (out of
    /// file descriptors: libzmq's listener would be woken again and again by the connection
    /// it cannot take). [`resume`](Self::resume) listens again on the same endpoint.
    pub async fn pause(&self) -> Result<()> {
        Ok(self.router.unbind(&self.endpoint).await?)
    }

    /// Listens again on [`endpoint`](Self::endpoint) after [`pause`](Self::pause). Fails
    /// like a bind: the port may have been taken meanwhile, or descriptors may still be
    /// short.
    pub fn resume(&self) -> Result<()> {
        self.router.bind(&self.endpoint)?;
        Ok(())
    }

    /// Graceful close: new requests are answered with a `SHUTTING_DOWN` error, handlers in
    /// progress answer, then the port is released.
    pub async fn close(&self) {
        self.conversation.close().await
    }

    local_end!("server");
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}
