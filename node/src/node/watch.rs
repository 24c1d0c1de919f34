//! What a node's bound socket reports, and what the node does about it: refused handshakes
//! become [`NodeEvent::ConnectionRefused`] (rate-limited), and a listener that cannot accept
//! because the process is out of file descriptors stops listening for a while
//! ([`NodeEvent::AcceptPaused`]).
//!
//! Why pause: libzmq's listener is woken by a pending connection, fails to accept it
//! (EMFILE), and is woken again at once by the same connection, so a node out of
//! descriptors burns a CPU doing nothing (measured: 15.8 s of CPU in a 10 s hold). Closing
//! the listener stops that; the connections already made keep working, and new ones are
//! refused by the kernel until it listens again.

use std::sync::Weak;
use std::time::Duration;

use protocol::Server;
use tokio::time::Instant;
use transport::Event;

use crate::node::inner::Inner;
use crate::observation::events::{ErrorSource, NodeEvent};
use crate::observation::ratelimit::{RateLimit, Verdict};

/// The first pause after accepting failed.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause: the node listens again at least this often.
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(5);

/// errno values of a shortage of descriptors: per process, and system-wide (the same on
/// Linux, the BSDs and macOS).
const EMFILE: u32 = 24;
const ENFILE: u32 = 23;

/// Refused handshakes reported per interval before they are counted instead.
const REFUSALS_BURST: u32 = 10;
const REFUSALS_INTERVAL: Duration = Duration::from_secs(10);
/// Pause warnings logged per interval (each pause is still an event).
const PAUSES_BURST: u32 = 3;
const PAUSES_INTERVAL: Duration = Duration::from_secs(30);

/// How long to stop listening after an accept failed with `errno`, given the pause before
/// it (`None`: no pause since a connection was last accepted): none unless the failure is a
/// shortage of descriptors; then [`FIRST_PAUSE`], doubling while accepting keeps failing,
/// up to [`MAX_PAUSE`].
pub(crate) fn accept_pause(errno: u32, previous: Option<Duration>) -> Option<Duration> {
    if errno != EMFILE && errno != ENFILE {
        return None;
    }
    Some(previous.map_or(FIRST_PAUSE, |before| (before * 2).min(MAX_PAUSE)))
}

/// Watches `server`'s connection events until its socket closes.
pub(crate) async fn watch_server(weak: Weak<Inner>, server: Server, mut events: transport::Events) {
    let mut refusals = RateLimit::new(REFUSALS_BURST, REFUSALS_INTERVAL);
    let mut warnings = RateLimit::new(PAUSES_BURST, PAUSES_INTERVAL);
    // The last pause, until a connection is accepted again.
    let mut previous: Option<Duration> = None;
    // Between a pause and the listener's return: accept failures still queued from before
    // the pause are stale.
    let mut paused = false;
    loop {
        let summary_due = refusals.due();
        let event = tokio::select! {
            event = events.recv() => match event {
                Some(event) => event,
                None => return,
            },
            () = sleep_until(summary_due) => {
                let Some(inner) = weak.upgrade() else { return };
                if let Some(told) = refusals.summary(Instant::now()) {
                    refusals_summary(&inner, server.endpoint(), told);
                }
                continue;
            }
        };
        let Some(inner) = weak.upgrade() else { return };
        match event {
            Event::HandshakeFailed { endpoint, reason } => {
                let Verdict::Report(told) = refusals.check(Instant::now()) else {
                    continue;
                };
                if let Some(told) = told {
                    refusals_summary(&inner, &endpoint, told);
                }
                tracing::info!(node = %inner.id, %endpoint, %reason, "connection refused");
                inner
                    .observers
                    .emit(NodeEvent::ConnectionRefused { endpoint, reason });
            }
            Event::Accepted { .. } => previous = None,
            Event::Listening { .. } => paused = false,
            Event::Failed {
                endpoint,
                event: Event::ACCEPT_FAILED,
                errno,
            } if !paused => {
                let Some(mut pause) = accept_pause(errno, previous) else {
                    tracing::debug!(node = %inner.id, %endpoint, errno, "accept failed");
                    continue;
                };
                previous = Some(pause);
                paused = true;
                pause_warning(&inner, &mut warnings, &endpoint, pause);
                inner.observers.emit(NodeEvent::AcceptPaused {
                    endpoint: endpoint.clone(),
                    retry_in: pause,
                });
                drop(inner);
                if let Err(e) = server.pause().await {
                    // Closed or unbound meanwhile: nothing to listen on again.
                    tracing::debug!(cause = %e, "accept pause: the endpoint is gone");
                    return;
                }
                loop {
                    tokio::time::sleep(pause).await;
                    let Some(inner) = weak.upgrade() else { return };
                    if inner.life.is_stopping() {
                        return;
                    }
                    match server.resume() {
                        Ok(()) => break,
                        Err(protocol::Error::Transport(transport::Error::Closed)) => return,
                        Err(e) => {
                            // Still out of descriptors (the listener needs one), or the port
                            // was taken: wait longer.
                            tracing::debug!(node = %inner.id, cause = %e, "listening again failed");
                            pause = accept_pause(EMFILE, Some(pause)).unwrap_or(MAX_PAUSE);
                            previous = Some(pause);
                            pause_warning(&inner, &mut warnings, &endpoint, pause);
                            inner.observers.emit(NodeEvent::AcceptPaused {
                                endpoint: endpoint.clone(),
                                retry_in: pause,
                            });
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Says how many refusals were not reported one by one.
fn refusals_summary(
    inner: &Inner,
    endpoint: &str,
    told: crate::observation::ratelimit::Suppressed,
) {
    let message = format!("connections refused on {endpoint}: {told}");
    tracing::info!(node = %inner.id, "{message}");
    inner.observers.emit(NodeEvent::Error {
        source: ErrorSource::Handshake,
        message,
    });
}

/// The warning of a pause, rate-limited.
fn pause_warning(inner: &Inner, warnings: &mut RateLimit, endpoint: &str, pause: Duration) {
    let Verdict::Report(told) = warnings.check(Instant::now()) else {
        return;
    };
    if let Some(told) = told {
        tracing::warn!(node = %inner.id, %endpoint, "accept pauses: {told}");
    }
    tracing::warn!(
        node = %inner.id,
        %endpoint,
        retry_in = ?pause,
        "out of file descriptors: not accepting connections for a while"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_shortage_of_descriptors_pauses() {
        assert_eq!(accept_pause(EMFILE, None), Some(FIRST_PAUSE));
        assert_eq!(accept_pause(ENFILE, None), Some(FIRST_PAUSE));
        // ECONNABORTED, ENOBUFS...: libzmq goes on, so do we.
        assert_eq!(accept_pause(103, None), None);
        assert_eq!(accept_pause(105, Some(FIRST_PAUSE)), None);
    }

    #[test]
    fn pauses_double_up_to_the_longest() {
        let mut pause = None;
        let mut seen = Vec::new();
        for _ in 0..10 {
            pause = accept_pause(EMFILE, pause);
            seen.push(pause.unwrap().as_millis());
        }
        assert_eq!(
            seen,
            [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000, 5000]
        );
    }

    #[test]
    fn an_accepted_connection_starts_over() {
        // The watcher forgets the last pause on an accepted connection (`previous = None`).
        let long = accept_pause(EMFILE, Some(Duration::from_secs(3)));
        assert_eq!(long, Some(MAX_PAUSE));
        assert_eq!(accept_pause(EMFILE, None), Some(FIRST_PAUSE));
    }
}
