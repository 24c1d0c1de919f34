//! What a [`Client`](crate::Client) and a [`Server`](crate::Server) both have as the local
//! end of their conversation (its handlers, limits, counters and close), written once for
//! both: each type's `impl` block takes these methods from `local_end!`.

/// The local end's methods, for a type with a `conversation` field; `$side` names the type
/// in the docs ("client" or "server").
macro_rules! local_end {
    ($side:literal) => {
        /// Handles requests for `event` sent by the remote end(s), in this
        #[doc = concat!($side, "'s own table of handlers (one given to [`serve`](Self::serve) before")]
        /// is replaced by a new table with this handler alone).
        pub fn on_request(&self, event: &str, handler: $crate::RequestHandler) {
            self.conversation
                .change_receiver(|receiver| receiver.table().set_request(event, Some(handler)));
        }

        /// Removes the request handler for `event`.
        pub fn off_request(&self, event: &str) {
            self.conversation
                .change_receiver(|receiver| receiver.table().set_request(event, None));
        }

        /// Handles ticks for `event` sent by the remote end(s) (see
        /// [`on_request`](Self::on_request)).
        pub fn on_tick(&self, event: &str, handler: $crate::TickHandler) {
            self.conversation
                .change_receiver(|receiver| receiver.table().set_tick(event, Some(handler)));
        }

        /// Removes the tick handler for `event`.
        pub fn off_tick(&self, event: &str) {
            self.conversation
                .change_receiver(|receiver| receiver.table().set_tick(event, None));
        }

        #[doc = concat!("Hands every request and tick this ", $side, " receives to `receiver`, in place")]
        /// of its table of named handlers ([`on_request`](Self::on_request),
        /// [`on_tick`](Self::on_tick)), which it drops: a layer with its own handlers (the
        /// node's) looks them up once, and refuses what none takes itself
        /// ([`Responder::no_handler`](crate::Responder::no_handler)).
        pub fn serve(&self, receiver: std::sync::Arc<dyn $crate::Serve>) {
            self.conversation
                .change_receiver(|current| *current = $crate::serve::Receiver::Serve(receiver));
        }

        /// Reports each received message that was dropped as invalid.
        pub fn rejected(&self) -> tokio::sync::mpsc::UnboundedReceiver<$crate::Rejected> {
            self.conversation.report_rejected()
        }

        #[doc = concat!("Sets the window this ", $side, " grants for the streamed bodies it")]
        /// receives, and the most streamed requests it keeps open at once (new ones over it
        /// are refused with
        /// [`RemoteError::TOO_MANY_STREAMS`](crate::RemoteError::TOO_MANY_STREAMS)).
        pub fn set_stream_limits(&self, window: u32, max_streams: usize) {
            self.conversation.set_stream_limits(window, max_streams);
        }

        #[doc = concat!("Streamed requests this ", $side, " answers that are open now.")]
        pub fn open_streams(&self) -> usize {
            self.conversation.open_streams()
        }

        /// Requests waiting for their reply.
        pub fn in_flight(&self) -> usize {
            self.conversation.in_flight()
        }

        /// Counters.
        pub fn stats(&self) -> $crate::Stats {
            self.conversation.stats()
        }

        /// Immediate close: handlers in progress are dropped without answering, pending
        /// requests fail with [`Error::Closed`](crate::Error::Closed), the socket closes at
        /// once.
        pub async fn abort(&self) {
            self.conversation.abort().await
        }
    };
}

pub(crate) use local_end;
