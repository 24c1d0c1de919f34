//! The conversation's driver task: the pending table's timer, the close, and (on a socket
//! that receives from its inbox: a Client's, or any on the libzmq engine) the receive side.

use super::*;

impl<L: Link> Conversation<L> {
    /// The driver. When `receives` (the socket's messages come through its inbox, not
    /// `direct.rs`), it is the only task that receives from the socket: it decodes,
    /// completes waiting requests and hands each request and tick to its handler, which
    /// returns at once (handler work runs as tasks of its own, see `handler.rs`): nothing a
    /// handler does holds up the socket.
    pub(super) async fn drive(self: Arc<Self>, receives: bool) {
        let mut closing = false;
        // Every message is received into this one buffer (no allocation per message).
        let mut frames = Vec::with_capacity(4);
        // One timer for all deadlines. It is moved only when a deadline earlier than its own
        // appears (see `Pending::armed`).
        let timer = tokio::time::sleep(Duration::from_secs(3600));
        tokio::pin!(timer);
        let mut receiver = Arc::new(Receiver::default());
        let mut receiver_seen = u64::MAX;
        loop {
            let armed = {
                let mut pending = self.pending.lock();
                let next = pending.table.next_deadline();
                if let Some(next) = next {
                    if pending.armed.is_none_or(|armed| next < armed) {
                        timer.as_mut().reset(Instant::from_std(next));
                        pending.armed = Some(next);
                    }
                }
                pending.armed.is_some()
            };
            // Registered before the count is read: a release in between is not missed.
            let idle = self.idle.notified();
            if closing
                && (self.responders.load(Ordering::Acquire) == 0 || self.aborted.is_cancelled())
            {
                break;
            }
            tokio::select! {
                biased;
                received = self.link.recv_into(&mut frames), if receives => match received {
                    Ok((peer, key)) => {
                        self.heard.store(elapsed_nanos(), Ordering::Relaxed);
                        self.refresh_receiver(&mut receiver, &mut receiver_seen);
                        let mut answered = Answered::default();
                        let mut dispatched = self.on_message(&receiver, peer, key, &frames, closing, &mut answered);
                        // An answer woke its caller, which usually sends its next request
                        // at once: let it (and whoever else is ready) run before looking for
                        // more. Its send then comes before the look that finds the socket
                        // empty, so this driver parks straight after it, instead of parking,
                        // being woken by that send (the transport's rule for a send after a
                        // receiver parked) and looking again: one `poll(2)` in libzmq fewer
                        // per round trip with one request in flight; with many, the callers'
                        // next requests go out before the rest of the batch is read (A/B,
                        // protocol 500-1000 B window 100: +4-6%). Once per batch, not per
                        // answer: per answer measured 28% slower.
                        // A caller that is no task (the runtime's `block_on` future, as
                        // `#[tokio::main]` runs) is polled, on a current-thread runtime,
                        // only once the run queue is empty or the I/O driver was polled: a
                        // self-wake would put this driver back in the queue ahead of it and
                        // read on, so it yields to the runtime instead (an `epoll_wait` more
                        // per batch, only then; on a multi-thread runtime `block_on` has a
                        // thread of its own and the yield costs only that).
                        // Native node, 100 B, window 100: `block_on` +10%; with every
                        // caller a task this way instead, -25%.
                        if answered.outside_tasks {
                            tokio::task::yield_now().await;
                        } else if answered.any {
                            run_others_first().await;
                        }
                        // Take what else is already waiting: one wake-up, many messages.
                        for _ in 0..BATCH {
                            match self.link.try_recv_into(&mut frames) {
                                Ok(Some((peer, key))) => {
                                    dispatched |= self.on_message(&receiver, peer, key, &frames, closing, &mut Answered::default());
                                }
                                _ => break,
                            }
                        }
                        // Nothing kept alive by the buffer while the driver waits.
                        frames.clear();
                        // Handler tasks started by this batch run before the driver looks
                        // at the socket again: their answers go out while it is awake (the
                        // same reasoning as for `answered` above: a send after the driver
                        // parked would wake it for a look that finds nothing).
                        if dispatched {
                            run_others_first().await;
                        }
                    }
                    Err(transport::Error::Closed) => break,
                    Err(e) => {
                        tracing::warn!(cause = %e, "receive failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                },
                () = &mut timer, if armed => {
                    self.pending.lock().armed = None;
                    self.expire();
                }
                () = self.timer_reset.notified() => {}
                () = self.closing.cancelled(), if !closing => closing = true,
                () = self.lost.notified() => {
                    // What arrived before the connection dropped is still in the socket:
                    // replies (and a goodbye) are read first, only what is left unanswered
                    // fails.
                    self.refresh_receiver(&mut receiver, &mut receiver_seen);
                    // Bounded: what arrived before the drop is at most a queue's worth; a
                    // peer that keeps sending on the new connection must not hold the
                    // driver here.
                    // (Nothing to read on a socket whose connections dispatch their own.)
                    let drain = if receives { LOST_DRAIN } else { 0 };
                    for _ in 0..drain {
                        match self.link.try_recv_into(&mut frames) {
                            Ok(Some((peer, key))) => {
                                self.on_message(&receiver, peer, key, &frames, closing, &mut Answered::default());
                            }
                            _ => break,
                        }
                    }
                    frames.clear();
                    let failed = self.fail_all(|| Error::ConnectionLost);
                    tracing::debug!(failed, "connection lost; pending requests failed");
                }
                () = idle, if closing => {}
            }
        }
        if !self.aborted.is_cancelled() {
            // Let the answers still owed go out (only reached when the socket died: a
            // graceful close leaves the loop at zero), unless an abort comes meanwhile.
            loop {
                let idle = self.idle.notified();
                if self.responders.load(Ordering::Acquire) == 0 {
                    break;
                }
                tokio::select! {
                    () = idle => {}
                    () = self.aborted.cancelled() => break,
                }
            }
        }
        self.closing.cancel();
        self.fail_all(|| Error::Closed);
        self.link.close().await;
        // Nothing more arrives: let the handlers go (they often hold what holds this
        // conversation) and end whoever listens for rejected messages.
        self.change_receiver(|receiver| *receiver = Receiver::default());
        self.rejected.lock().take();
        self.finished.cancel();
        tracing::debug!("conversation finished");
    }

    /// Fires the timeouts that are due.
    fn expire(&self) {
        let now = Instant::now().into_std();
        let count = self.finish(
            |table, ended| table.expire(now, ended),
            || Outcome::TimedOut,
        );
        if count > 0 {
            tracing::debug!(count, "requests timed out");
        }
        self.counters
            .timeouts
            .fetch_add(count as u64, Ordering::Relaxed);
    }
}
