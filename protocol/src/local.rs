//! What a [`Client`](crate::Client) and a [`Server`](crate::Server) both have as the local
//! end of their conversation (its handlers, limits, counters and close), written once for
//! both: each type's `impl` block takes these methods from `local_end!`.

/// The local end's methods, for a type with a `conversation` field; `$side` names the type
/// in the docs ("client" or "server").
macro_rules! local_end {
    ($side:literal) => {
        /// Handles requests for `event` sent by the remote end(s).
        pub fn on_request(&self, event: &str, handler: $crate::RequestHandler) {
            self.conversation
                .set_request_handler(Some(event.to_owned()), Some(handler));
        }

        /// Removes the request handler for `event`.
        pub fn off_request(&self, event: &str) {
            self.conversation
                .set_request_handler(Some(event.to_owned()), None);
        }

        /// Handles ticks for `event` sent by the remote end(s).
        pub fn on_tick(&self, event: &str, handler: $crate::TickHandler) {
            self.conversation
                .set_tick_handler(Some(event.to_owned()), Some(handler));
        }

        /// Removes the tick handler for `event`.
        pub fn off_tick(&self, event: &str) {
            self.conversation
                .set_tick_handler(Some(event.to_owned()), None);
        }

        /// Handles every request that has no handler of its own (the node layer's
        /// dispatcher).
        pub fn on_any_request(&self, handler: Option<$crate::RequestHandler>) {
            self.conversation.set_request_handler(None, handler);
        }

        /// Handles every tick that has no handler of its own.
        pub fn on_any_tick(&self, handler: Option<$crate::TickHandler>) {
            self.conversation.set_tick_handler(None, handler);
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
