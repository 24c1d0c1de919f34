//! What a conversation counts: the counters its driver and handles update, and the
//! snapshot a user reads ([`Stats`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters a user or an operator reads to see what the conversation has been through.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) requests_sent: AtomicU64,
    pub(crate) requests_handled: AtomicU64,
    pub(crate) ticks_sent: AtomicU64,
    pub(crate) ticks_handled: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) invalid_envelopes: AtomicU64,
    pub(crate) unmatched_replies: AtomicU64,
    pub(crate) no_handler: AtomicU64,
    pub(crate) handler_panics: AtomicU64,
    pub(crate) replies_dropped: AtomicU64,
}

/// A snapshot of a Client's or Server's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests sent.
    pub requests_sent: u64,
    /// Requests received and answered.
    pub requests_handled: u64,
    /// Ticks sent.
    pub ticks_sent: u64,
    /// Ticks received and handled.
    pub ticks_handled: u64,
    /// Requests that ended with a timeout.
    pub timeouts: u64,
    /// Received messages that were not valid envelopes (dropped, counted).
    pub invalid_envelopes: u64,
    /// Replies that matched no pending request (late, duplicate, or spoofed) and were dropped.
    pub unmatched_replies: u64,
    /// Requests answered with "no handler".
    pub no_handler: u64,
    /// Handlers that panicked (answered with an error reply; the driver kept going).
    pub handler_panics: u64,
    /// Answers not delivered because the requester's queue was full (it is not reading) or it
    /// was gone; the requester sees its own timeout.
    pub replies_dropped: u64,
}

impl Counters {
    /// The counters as they are now.
    pub(crate) fn snapshot(&self) -> Stats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            requests_sent: get(&self.requests_sent),
            requests_handled: get(&self.requests_handled),
            ticks_sent: get(&self.ticks_sent),
            ticks_handled: get(&self.ticks_handled),
            timeouts: get(&self.timeouts),
            invalid_envelopes: get(&self.invalid_envelopes),
            unmatched_replies: get(&self.unmatched_replies),
            no_handler: get(&self.no_handler),
            handler_panics: get(&self.handler_panics),
            replies_dropped: get(&self.replies_dropped),
        }
    }
}
