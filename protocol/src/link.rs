//! What the conversation needs from a socket: a [`Dealer`] (one remote, the server) or a
//! [`Router`] (many remotes, by routing id), behind one small trait.

use std::future::Future;

use bytes::Bytes;
use transport::{Dealer, Key, PeerId, Router};

/// One received message: who sent it, the sender's CURVE public key when the socket is a
/// CURVE server (libzmq authenticated it during the handshake), and the frames.
pub(crate) type Received = (PeerId, Option<Key>, Vec<Bytes>);

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

    /// Receives the next message and who sent it (an empty id for a Dealer's remote).
    fn recv(&self) -> impl Future<Output = transport::Result<Received>> + Send + '_;

    /// Receives a message if one is already waiting.
    fn try_recv(&self) -> transport::Result<Option<Received>>;

    /// Closes the socket.
    fn close(&self) -> impl Future<Output = ()> + Send + '_;
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

    async fn recv(&self) -> transport::Result<Received> {
        Dealer::recv(self)
            .await
            .map(|frames| (PeerId::default(), None, frames))
    }

    fn try_recv(&self) -> transport::Result<Option<Received>> {
        Dealer::try_recv(self).map(|m| m.map(|frames| (PeerId::default(), None, frames)))
    }

    fn close(&self) -> impl Future<Output = ()> + Send + '_ {
        Dealer::close(self)
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
    fn recv(&self) -> impl Future<Output = transport::Result<Received>> + Send + '_ {
        self.recv_with_key()
    }

    fn try_recv(&self) -> transport::Result<Option<Received>> {
        self.try_recv_with_key()
    }

    fn close(&self) -> impl Future<Output = ()> + Send + '_ {
        Router::close(self)
    }
}
