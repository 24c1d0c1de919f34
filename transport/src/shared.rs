//! What a [`Router`](crate::Router) and a [`Dealer`](crate::Dealer) both have beside sending
//! and receiving (the connection events, the close, direct delivery), written once: each
//! type's `impl` block takes these methods from `shared_methods!`.

/// The methods, for a type with a `core: Arc<Sock>` field; `$sender` says what a delivered
/// message's sender id is on that socket.
macro_rules! shared_methods {
    ($sender:literal) => {
        /// The connection events (connected or accepted, disconnected, handshake
        /// failed...). Can be taken once.
        pub fn events(&self) -> Result<Events> {
            self.core.events()
        }

        /// Releases every bound endpoint and connection and fails further calls with
        /// [`Error::Closed`](crate::Error::Closed). Binding the same endpoint again (from
        /// another socket) succeeds once this returns.
        pub async fn close(&self) {
            self.core.close().await
        }

        /// Whether [`close`](Self::close) was called.
        pub fn is_closed(&self) -> bool {
            self.core.is_closed()
        }

        /// Hands every message received from now on to `deliver`, on the driver of the
        /// connection it came on, instead of queueing it for [`recv`](Self::recv): one task
        /// wake-up fewer per message (see [`Deliver`](crate::Deliver)).
        #[doc = concat!("A message's sender is ", $sender, ".")]
        /// Connections whose handshake completed before this call go on queueing for
        /// `recv`. `false`, and nothing changes, on the libzmq engine, where messages can
        /// only be received. The socket holds `deliver` until it is closed.
        pub fn deliver_to(&self, deliver: std::sync::Arc<dyn crate::Deliver>) -> bool {
            self.core.deliver_to(deliver)
        }
    };
}

pub(crate) use shared_methods;
