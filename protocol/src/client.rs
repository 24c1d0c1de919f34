//! The client side of a conversation, over a Dealer.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use transport::{Dealer, Event, HandshakeFailure, Options, PeerId};

use crate::conversation::Conversation;
use crate::error::{Error, Result};
use crate::link::Socket;
use crate::local::local_end;
use crate::peer::{Gate, LinkState, Peer};

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

/// A client: connects to one [`Server`](crate::Server), sends requests and ticks to it
/// through its [`peer`](Self::peer), and answers the requests and ticks the server sends
/// back.
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
/// let reply = client.peer().request("echo", Bytes::from_static(b"hi"), Duration::from_secs(1)).await?;
/// assert_eq!(reply.payload(), &Bytes::from_static(b"hi"));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    conversation: Arc<Conversation<Socket>>,
    state: watch::Receiver<Connection>,
    /// The state as sends check it: [`LinkState::of`] of the latest state sent on the watch
    /// (read with one atomic load, where borrowing the watch takes its lock).
    link: Gate,
    endpoint: Arc<str>,
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
            Conversation::start(Socket::Dealer(dealer.clone()), max_payload, |_| {
                dealer.connect(endpoint)
            })
            .await?;
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
                        // Through the conversation, not a handle of our own: this task
                        // must not keep the socket alive.
                        let Some(conversation) = watched.upgrade() else { break };
                        let Socket::Dealer(dealer) = &conversation.link else { break };
                        match reconnect(dealer, &address) {
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

    /// The server, the one remote: what sends it requests, ticks and streams.
    pub fn peer(&self) -> Peer {
        Peer::new(
            Arc::clone(&self.conversation),
            PeerId::default(),
            Some(Arc::clone(&self.link)),
        )
    }

    /// Whether `other` is a handle of this same client (not merely one to the same
    /// endpoint).
    pub fn same_as(&self, other: &Client) -> bool {
        Arc::ptr_eq(&self.conversation, &other.conversation)
    }

    /// When this client last received anything from its server (a reply, a request, a
    /// tick), if it ever did: a sign of life of the server.
    pub fn last_heard(&self) -> Option<std::time::Instant> {
        self.conversation.last_heard()
    }

    /// Graceful close: new requests are refused, handlers in progress answer, requests still
    /// waiting fail with [`Error::Closed`], then the socket closes.
    pub async fn close(&self) {
        self.conversation.close().await
    }

    local_end!("client");
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoint", &self.endpoint)
            .field("connection", &self.connection())
            .finish()
    }
}
