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
    pub(crate) streams_opened: AtomicU64,
    pub(crate) streams_accepted: AtomicU64,
    pub(crate) stream_items_sent: AtomicU64,
    pub(crate) stream_items_received: AtomicU64,
    pub(crate) stream_items_dropped: AtomicU64,
    pub(crate) stream_violations: AtomicU64,
    pub(crate) streams_cancelled: AtomicU64,
    pub(crate) streams_refused: AtomicU64,
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
    /// Streams this end opened as a caller (a streamed reply, a streamed body or both).
    pub streams_opened: u64,
    /// Streamed requests this end accepted as a callee (handed to a handler).
    pub streams_accepted: u64,
    /// Stream items sent (either direction).
    pub stream_items_sent: u64,
    /// Stream items received and queued for a reader.
    pub stream_items_received: u64,
    /// Stream items, credit and cancels for an unknown or finished stream (dropped).
    pub stream_items_dropped: u64,
    /// Streams ended because their peer broke the rules (credit, window, size, ids).
    pub stream_violations: u64,
    /// Streams ended early: cancelled by their caller, a peer that left, or an idle timeout.
    pub streams_cancelled: u64,
    /// Streamed requests refused over the limit of open streams.
    pub streams_refused: u64,
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
            streams_opened: get(&self.streams_opened),
            streams_accepted: get(&self.streams_accepted),
            stream_items_sent: get(&self.stream_items_sent),
            stream_items_received: get(&self.stream_items_received),
            stream_items_dropped: get(&self.stream_items_dropped),
            stream_violations: get(&self.stream_violations),
            streams_cancelled: get(&self.streams_cancelled),
            streams_refused: get(&self.streams_refused),
        }
    }
}
