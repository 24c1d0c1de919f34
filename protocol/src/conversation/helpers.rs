//! The driver's small helpers: turning an error reply into the caller's error, the
//! timestamps of what it heard, the random start of ids, and letting others run first.

use crate::envelope::Envelope;
use crate::error::{Error, RemoteError};

/// Turns an error reply into the caller's error.
pub(super) fn remote_error(envelope: &Envelope, event: &str) -> Error {
    match envelope.decode_payload::<RemoteError>() {
        Ok(error) if error.is_system(RemoteError::NO_HANDLER) => Error::NoHandler {
            event: event.to_owned(),
        },
        Ok(error) => Error::Remote(error),
        Err(_) => Error::Remote(RemoteError::handler("malformed error reply")),
    }
}

/// The origin of `heard` timestamps.
pub(super) static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Nanoseconds since [`EPOCH`] (at least 1: 0 means "never").
pub(super) fn elapsed_nanos() -> u64 {
    nanos_at(std::time::Instant::now())
}

/// [`elapsed_nanos`] at `at` rather than now (a time the caller already read).
pub(super) fn nanos_at(at: std::time::Instant) -> u64 {
    let epoch = *EPOCH.get_or_init(std::time::Instant::now);
    u64::try_from(at.saturating_duration_since(epoch).as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// A starting point for request ids that differs between runs.
pub(super) fn rand_start() -> u64 {
    // Keep far from wrapping: 2^62 ids remain in any case.
    rand::random::<u64>() >> 2
}

/// Lets every other task that is ready run before the caller goes on: the task wakes itself
/// and returns `Pending` once. Unlike `tokio::task::yield_now`, which defers the task until
/// the runtime has polled its I/O driver (an `epoll_wait` per call), this only puts the task
/// at the back of the run queue.
pub(super) async fn run_others_first() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            std::task::Poll::Ready(())
        } else {
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        }
    })
    .await;
}
