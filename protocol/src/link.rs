//! What the conversation needs from a socket: a [`Dealer`] (one remote, the server) or a
//! [`Router`] (many remotes, by routing id), behind one small trait.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use transport::{Dealer, Deliver, Key, PeerId, Router};

/// One received message: who sent it, the sender's CURVE public key when the socket is a
/// CURVE server (libzmq authenticated it during the handshake), and the frames.
/// Who sent a message received into a caller's buffer, and the CURVE key it came with.
pub(crate) type Sender = (PeerId, Option<Key>);

/// One outbound frame as the pieces it is made of (see `envelope::Encoded`).
pub(crate) type Pieces<'a> = &'a [&'a [u8]];

/// A socket the conversation can drive. Private to the crate.
pub(crate) trait Link: Clone + Send + Sync + 'static {
    /// Sends frames to `peer` (ignored by a Dealer: it has one remote).
    fn send<'a>(
        &'a self,
        peer: &'a PeerId,
        frames: &'a [Pieces<'a>],
    ) -> impl Future<Output = transport::Result<()>> + Send + 'a;

    /// Sends without waiting at the high-water mark (`QueueFull` instead).
    fn try_send<'a>(
        &'a self,
        peer: &'a PeerId,
        frames: &'a [Pieces<'a>],
    ) -> impl Future<Output = transport::Result<()>> + Send + 'a;

    /// Sends now or not at all (`QueueFull` at the high-water mark), without a future.
    fn send_now(&self, peer: &PeerId, frames: &[Pieces<'_>]) -> transport::Result<()>;

    /// Receives the next message into `frames` (cleared first, so one buffer serves every
    /// message) and says who sent it (an empty id for a Dealer's remote).
    fn recv_into<'a>(
        &'a self,
        frames: &'a mut Vec<Bytes>,
    ) -> impl Future<Output = transport::Result<Sender>> + Send + 'a;

    /// Like `recv_into` if a message is already there, `None` otherwise.
    fn try_recv_into(&self, frames: &mut Vec<Bytes>) -> transport::Result<Option<Sender>>;

    /// Closes the socket.
    fn close(&self) -> impl Future<Output = ()> + Send + '_;

    /// Has the connections' drivers hand received messages to `deliver`, if this socket
    /// takes them that way: `false` when it takes them from its inbox (`recv_into`). One
    /// path per socket, chosen here once.
    fn deliver_to(&self, deliver: Arc<dyn Deliver>) -> bool;
}

impl Link for Dealer {
    fn send<'a>(
        &'a self,
        _peer: &'a PeerId,
        frames: &'a [Pieces<'a>],
    ) -> impl Future<Output = transport::Result<()>> + Send + 'a {
        self.send_frames(frames)
    }

    fn try_send<'a>(
        &'a self,
        _peer: &'a PeerId,
        frames: &'a [Pieces<'a>],
    ) -> impl Future<Output = transport::Result<()>> + Send + 'a {
        Dealer::try_send(self, frames)
    }

    fn send_now(&self, _peer: &PeerId, frames: &[Pieces<'_>]) -> transport::Result<()> {
        Dealer::send_now(self, frames)
    }

    async fn recv_into<'a>(&'a self, frames: &'a mut Vec<Bytes>) -> transport::Result<Sender> {
        Dealer::recv_into(self, frames).await?;
        Ok((PeerId::default(), None))
    }

    fn try_recv_into(&self, frames: &mut Vec<Bytes>) -> transport::Result<Option<Sender>> {
        Ok(Dealer::try_recv_into(self, frames)?.then(|| (PeerId::default(), None)))
    }

    fn close(&self) -> impl Future<Output = ()> + Send + '_ {
        Dealer::close(self)
    }

    /// Never: a Client's messages (mostly replies, each waking a caller) come through the
    /// socket's inbox and the conversation's driver task, on both engines. Taken on the
    /// connection's driver instead, as a Server's are (`conversation/direct.rs`), a reply
    /// costs a task hand-off less and both processes' CPU per request fell 2% one at a
    /// time and 6% with 100 in flight (`benches/cpu.sh`), but with 100 in flight the rate
    /// fell to 0.90 (`LAYER=node-native benches/ab.sh`, 3 rounds, 0.88-0.90, idle 2-core
    /// machine; one at a time 1.02): reading and completing replies then run on one task,
    /// where the inbox lets a second thread complete them while the driver reads on.
    fn deliver_to(&self, _deliver: Arc<dyn Deliver>) -> bool {
        false
    }
}

impl Link for Router {
    fn send<'a>(
        &'a self,
        peer: &'a PeerId,
        frames: &'a [Pieces<'a>],
    ) -> impl Future<Output = transport::Result<()>> + Send + 'a {
        self.send_frames(peer, frames)
    }

    fn try_send<'a>(
        &'a self,
        peer: &'a PeerId,
        frames: &'a [Pieces<'a>],
    ) -> impl Future<Output = transport::Result<()>> + Send + 'a {
        Router::try_send(self, peer, frames)
    }

    fn send_now(&self, peer: &PeerId, frames: &[Pieces<'_>]) -> transport::Result<()> {
        Router::send_now(self, peer, frames)
    }

    // `recv_with_key` reads the key only on a CURVE server; elsewhere it is `recv`.
    fn recv_into<'a>(
        &'a self,
        frames: &'a mut Vec<Bytes>,
    ) -> impl Future<Output = transport::Result<Sender>> + Send + 'a {
        self.recv_with_key_into(frames)
    }

    fn try_recv_into(&self, frames: &mut Vec<Bytes>) -> transport::Result<Option<Sender>> {
        self.try_recv_with_key_into(frames)
    }

    fn close(&self) -> impl Future<Output = ()> + Send + '_ {
        Router::close(self)
    }

    /// On the native engine, the connections' drivers (`conversation/direct.rs`): a
    /// Server's messages are mostly requests, whose handlers run on tasks of their own; on
    /// libzmq, which cannot, the inbox.
    fn deliver_to(&self, deliver: Arc<dyn Deliver>) -> bool {
        Router::deliver_to(self, deliver)
    }
}

/// Either socket, for the one conversation type that [`Peer`](crate::Peer) holds: a
/// Client's Dealer or a Server's Router. A send costs one branch more than on the socket
/// itself.
#[derive(Clone)]
pub(crate) enum Socket {
    /// A Client's.
    Dealer(Dealer),
    /// A Server's.
    Router(Router),
}

impl Link for Socket {
    async fn send<'a>(
        &'a self,
        peer: &'a PeerId,
        frames: &'a [Pieces<'a>],
    ) -> transport::Result<()> {
        match self {
            Socket::Dealer(dealer) => Link::send(dealer, peer, frames).await,
            Socket::Router(router) => Link::send(router, peer, frames).await,
        }
    }

    async fn try_send<'a>(
        &'a self,
        peer: &'a PeerId,
        frames: &'a [Pieces<'a>],
    ) -> transport::Result<()> {
        match self {
            Socket::Dealer(dealer) => Link::try_send(dealer, peer, frames).await,
            Socket::Router(router) => Link::try_send(router, peer, frames).await,
        }
    }

    fn send_now(&self, peer: &PeerId, frames: &[Pieces<'_>]) -> transport::Result<()> {
        match self {
            Socket::Dealer(dealer) => Link::send_now(dealer, peer, frames),
            Socket::Router(router) => Link::send_now(router, peer, frames),
        }
    }

    async fn recv_into<'a>(&'a self, frames: &'a mut Vec<Bytes>) -> transport::Result<Sender> {
        match self {
            Socket::Dealer(dealer) => Link::recv_into(dealer, frames).await,
            Socket::Router(router) => Link::recv_into(router, frames).await,
        }
    }

    fn try_recv_into(&self, frames: &mut Vec<Bytes>) -> transport::Result<Option<Sender>> {
        match self {
            Socket::Dealer(dealer) => Link::try_recv_into(dealer, frames),
            Socket::Router(router) => Link::try_recv_into(router, frames),
        }
    }

    async fn close(&self) {
        match self {
            Socket::Dealer(dealer) => dealer.close().await,
            Socket::Router(router) => router.close().await,
        }
    }

    fn deliver_to(&self, deliver: Arc<dyn Deliver>) -> bool {
        match self {
            Socket::Dealer(dealer) => Link::deliver_to(dealer, deliver),
            Socket::Router(router) => Link::deliver_to(router, deliver),
        }
    }
}
