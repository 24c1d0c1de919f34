//! What the conversation needs from a socket: a [`Dealer`] (one remote, the server) or a
//! [`Router`] (many remotes, by routing id), behind one small trait.

use std::future::Future;

use bytes::Bytes;
use transport::{Dealer, PeerId, Router};

/// A socket the conversation can drive. Private to the crate.
pub(crate) trait Link: Clone + Send + Sync + 'static {
    /// Sends frames to `peer` (ignored by a Dealer: it has one remote).
    fn send<'a>(
        &'a self,
        peer: &'a PeerId,
        frames: &'a [Bytes],
    ) -> impl Future<Output = transport::Result<()>> + Send + 'a;

    /// Sends without waiting at the high-water mark (`QueueFull` instead).
    fn try_send<'a>(
        &'a self,
        peer: &'a PeerId,
        frames: &'a [Bytes],
    ) -> impl Future<Output = transport::Result<()>> + Send + 'a;

    /// Receives the next message and who sent it (an empty id for a Dealer's remote).
    fn recv(&self) -> impl Future<Output = transport::Result<(PeerId, Vec<Bytes>)>> + Send + '_;

    /// Receives a message if one is already waiting.
    fn try_recv(&self) -> transport::Result<Option<(PeerId, Vec<Bytes>)>>;

    /// Closes the socket.
    fn close(&self) -> impl Future<Output = ()> + Send + '_;
}

impl Link for Dealer {
    fn send<'a>(
        &'a self,
        _peer: &'a PeerId,
        frames: &'a [Bytes],
    ) -> impl Future<Output = transport::Result<()>> + Send + 'a {
        self.send_frames(frames)
    }

    fn try_send<'a>(
        &'a self,
        _peer: &'a PeerId,
        frames: &'a [Bytes],
    ) -> impl Future<Output = transport::Result<()>> + Send + 'a {
        Dealer::try_send(self, frames)
    }

    async fn recv(&self) -> transport::Result<(PeerId, Vec<Bytes>)> {
        Dealer::recv(self)
            .await
            .map(|frames| (PeerId::default(), frames))
    }

    fn try_recv(&self) -> transport::Result<Option<(PeerId, Vec<Bytes>)>> {
        Dealer::try_recv(self).map(|m| m.map(|frames| (PeerId::default(), frames)))
    }

    fn close(&self) -> impl Future<Output = ()> + Send + '_ {
        Dealer::close(self)
    }
}

impl Link for Router {
    fn send<'a>(
        &'a self,
        peer: &'a PeerId,
        frames: &'a [Bytes],
    ) -> impl Future<Output = transport::Result<()>> + Send + 'a {
        self.send_frames(peer, frames)
    }

    fn try_send<'a>(
        &'a self,
        peer: &'a PeerId,
        frames: &'a [Bytes],
    ) -> impl Future<Output = transport::Result<()>> + Send + 'a {
        Router::try_send(self, peer, frames)
    }

    fn recv(&self) -> impl Future<Output = transport::Result<(PeerId, Vec<Bytes>)>> + Send + '_ {
        Router::recv(self)
    }

    fn try_recv(&self) -> transport::Result<Option<(PeerId, Vec<Bytes>)>> {
        Router::try_recv(self)
    }

    fn close(&self) -> impl Future<Output = ()> + Send + '_ {
        Router::close(self)
    }
}
