//! The receivers' turn on a socket: which receiver may wait on its ZMQ_FD (see
//! `socket.rs`, "Waking up").

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// The receivers' turn: one at a time, taken without a future when free (the common case:
/// one task receives). A `tokio::sync::Mutex` did the same for about 110 instructions per
/// message more (its semaphore takes a lock of its own on every release; callgrind,
/// transport echo).
///
/// Like that mutex, a release hands the turn to a waiting receiver rather than freeing it,
/// so a receiver that comes straight back cannot take every turn from the others.
#[derive(Default)]
pub(crate) struct Turn {
    /// [`FREE`], [`TAKEN`] or [`HANDED`].
    state: std::sync::atomic::AtomicU8,
    /// Receivers waiting for the turn, so that a release only notifies when someone waits.
    waiting: AtomicUsize,
    /// One notification per hand-over (or per "look again" after a release that freed the
    /// turn while a receiver was counting itself in).
    free: Notify,
}

/// Nobody has the turn.
const FREE: u8 = 0;
/// A receiver has it.
const TAKEN: u8 = 1;
/// Released to a waiting receiver, which takes it when its notification arrives (whoever
/// receives that notification: a dropped waiter's passes on to the next, or stays as a
/// permit for the next to wait).
const HANDED: u8 = 2;

/// Holds the turn; gives it back on drop.
pub(crate) struct TurnGuard<'a>(&'a Turn);

impl Turn {
    /// The turn, if nobody has it and it is not handed to a waiter.
    pub(crate) fn try_take(&self) -> Option<TurnGuard<'_>> {
        self.state
            .compare_exchange(FREE, TAKEN, Ordering::SeqCst, Ordering::SeqCst)
            .ok()
            .map(|_| TurnGuard(self))
    }

    /// The turn, waiting for it if needed.
    pub(crate) async fn take(&self) -> TurnGuard<'_> {
        loop {
            if let Some(turn) = self.try_take() {
                return turn;
            }
            let notified = self.free.notified();
            tokio::pin!(notified);
            // Registered before counting ourselves and looking again: a release that sees
            // the count notifies this waiter (or leaves it a permit).
            notified.as_mut().enable();
            let _waiting = Waiting::new(&self.waiting);
            if let Some(turn) = self.try_take() {
                return turn;
            }
            notified.await;
            // A hand-over is ours; any other wake-up means look again.
            if self
                .state
                .compare_exchange(HANDED, TAKEN, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return TurnGuard(self);
            }
        }
    }
}

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        let turn = self.0;
        if turn.waiting.load(Ordering::SeqCst) > 0 {
            // Someone waits (registered before it counted itself): hand the turn over.
            turn.state.store(HANDED, Ordering::SeqCst);
            turn.free.notify_one();
        } else {
            turn.state.store(FREE, Ordering::SeqCst);
            // SeqCst with the waiter's count-then-look: a receiver that counted itself
            // after our first look either sees the turn free or is seen here, and looks
            // again.
            if turn.waiting.load(Ordering::SeqCst) > 0 {
                turn.free.notify_one();
            }
        }
    }
}

/// Counts a waiting receiver for as long as it waits (its future may be dropped).
pub(crate) struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    pub(crate) fn new(count: &'a AtomicUsize) -> Waiting<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_turn_goes_to_one_receiver_at_a_time_and_is_handed_on() {
        let turn = std::sync::Arc::new(Turn::default());
        let first = turn.try_take().expect("free at first");
        assert!(turn.try_take().is_none(), "taken");
        // A waiter given up on must not swallow the hand-over.
        let mut dropped = Box::pin(turn.take());
        assert!(futures_poll_once(dropped.as_mut()).is_none());
        let waiter = spawn_taker(&turn);
        tokio::task::yield_now().await;
        drop(first);
        drop(dropped);
        ends(waiter).await;
        assert!(turn.try_take().is_some(), "free again");
    }

    #[tokio::test]
    async fn a_released_turn_goes_to_the_waiter_not_back_to_the_releaser() {
        let turn = std::sync::Arc::new(Turn::default());
        let first = turn.try_take().expect("free at first");
        let waiter = spawn_taker(&turn);
        tokio::task::yield_now().await;
        drop(first);
        assert!(turn.try_take().is_none(), "handed to the waiter");
        ends(waiter).await;
        assert!(turn.try_take().is_some(), "free once the waiter is done");
    }

    /// A task that takes the turn and gives it back.
    fn spawn_taker(turn: &std::sync::Arc<Turn>) -> tokio::task::JoinHandle<()> {
        let turn = std::sync::Arc::clone(turn);
        tokio::spawn(async move {
            let _turn = turn.take().await;
        })
    }

    /// Awaits a task, failing the test if it does not end.
    async fn ends(task: tokio::task::JoinHandle<()>) {
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the task got the turn")
            .expect("no panic");
    }

    /// Polls a future once with a no-op waker.
    fn futures_poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
        let mut future = future;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::pin::Pin::new(&mut future).poll(&mut cx) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        }
    }
}
