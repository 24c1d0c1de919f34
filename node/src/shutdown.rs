//! A program's shutdown in one call: [`Node::run_until_signal`] waits for SIGTERM or
//! Ctrl-C, drains the node within its close grace, stops waiting at a second signal, and
//! reports what was cancelled with the exit code to end with. `zeronode node` runs on it.
//!
//! The first signal is what an orchestrator sends to stop a process (Kubernetes sends
//! SIGTERM, then SIGKILL after `terminationGracePeriodSeconds`); the second is an operator
//! who does not want to wait. The drain itself is [`Node::close`].

use std::process::ExitCode;

use crate::mesh::phase::Closed;
use crate::Node;

/// A signal that stops a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Signal {
    /// SIGINT: Ctrl-C in a terminal.
    Interrupt,
    /// SIGTERM: what an orchestrator sends (Unix only).
    Terminate,
}

impl Signal {
    /// Its name: `SIGINT`, `SIGTERM` (`Ctrl-C` off Unix).
    pub fn as_str(&self) -> &'static str {
        match self {
            Signal::Interrupt if cfg!(unix) => "SIGINT",
            Signal::Interrupt => "Ctrl-C",
            Signal::Terminate => "SIGTERM",
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The signals that stop a node, caught: from [`install`](Self::install) on, SIGINT and
/// SIGTERM no longer kill the process. Install them first thing, so a signal while the
/// program still connects stops it cleanly too.
#[derive(Debug)]
pub struct Signals {
    /// SIGINT.
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    /// SIGTERM.
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    /// Catches SIGINT and SIGTERM (Ctrl-C only off Unix). Must run inside a tokio runtime.
    pub fn install() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Signals {})
        }
    }

    /// Waits for the next signal.
    pub async fn recv(&mut self) -> Signal {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => Signal::Interrupt,
                _ = self.terminate.recv() => Signal::Terminate,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Signal::Interrupt
        }
    }
}

/// How a shutdown went ([`Node::run_until_signal`], [`Node::close_on_signal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shutdown {
    /// The signal that began it.
    pub signal: Signal,
    /// The close's report, or `None` when a second signal stopped the wait (the node is
    /// left mid-close: end the process).
    pub closed: Option<Closed>,
}

impl Shutdown {
    /// The exit code when the close grace ran out with handlers still running.
    pub const EXIT_INCOMPLETE: u8 = 3;
    /// The exit code when a second signal stopped the wait (128 + SIGINT, the shells'
    /// convention for an interrupted program).
    pub const EXIT_INTERRUPTED: u8 = 130;

    /// Whether every request the node took was answered within the grace.
    pub fn is_complete(&self) -> bool {
        self.closed.is_some_and(|closed| closed.is_complete())
    }

    /// How many handlers were stopped when the grace ran out (0 when interrupted: they
    /// were not counted).
    pub fn cancelled(&self) -> usize {
        self.closed.map_or(0, |closed| closed.cancelled)
    }

    /// The code to end the process with: 0 when complete,
    /// [`EXIT_INCOMPLETE`](Self::EXIT_INCOMPLETE) when handlers were stopped,
    /// [`EXIT_INTERRUPTED`](Self::EXIT_INTERRUPTED) when a second signal came.
    pub fn exit_code(&self) -> ExitCode {
        match self.closed {
            Some(closed) if closed.is_complete() => ExitCode::SUCCESS,
            Some(_) => ExitCode::from(Self::EXIT_INCOMPLETE),
            None => ExitCode::from(Self::EXIT_INTERRUPTED),
        }
    }
}

impl std::fmt::Display for Shutdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.closed {
            Some(closed) if closed.is_complete() => {
                write!(f, "stopped at {}: every request answered", self.signal)
            }
            Some(closed) => write!(
                f,
                "stopped at {}: the close grace ran out, {} request(s) stopped before answering",
                self.signal, closed.cancelled
            ),
            None => write!(
                f,
                "stopped at {}: a second signal ended the wait for the drain",
                self.signal
            ),
        }
    }
}

impl Node {
    /// Serves until SIGTERM or Ctrl-C, then closes gracefully: the whole shutdown of a
    /// program in one call, as `zeronode node` does it.
    ///
    /// Marks the node started ([`mark_started`](Self::mark_started)): call it once the
    /// node is set up. At the first signal the node drains ([`close`](Self::close), within
    /// its close grace, [`NodeBuilder::close_grace`](crate::NodeBuilder::close_grace); its
    /// [`health`](Self::health) reads draining at once); a second signal stops the wait.
    /// Returns the report; end `main` with its [`exit_code`](Shutdown::exit_code).
    ///
    /// ```no_run
    /// # #[tokio::main] async fn main() -> std::io::Result<std::process::ExitCode> {
    /// let node = node::Node::builder().bind("tcp://0.0.0.0:5555").build().await.unwrap();
    /// // ... handlers ...
    /// let shutdown = node.run_until_signal().await?;
    /// eprintln!("{shutdown}");
    /// Ok(shutdown.exit_code())
    /// # }
    /// ```
    ///
    /// A program that must catch signals earlier (while it connects) installs
    /// [`Signals`] itself and calls [`close_on_signal`](Self::close_on_signal).
    pub async fn run_until_signal(&self) -> std::io::Result<Shutdown> {
        let mut signals = Signals::install()?;
        self.mark_started();
        let signal = signals.recv().await;
        Ok(self.close_on_signal(signal, &mut signals).await)
    }

    /// The shutdown after `signal` came: closes gracefully; the next signal on `signals`
    /// stops the wait (see [`run_until_signal`](Self::run_until_signal)).
    pub async fn close_on_signal(&self, signal: Signal, signals: &mut Signals) -> Shutdown {
        tracing::info!(node = %self.id(), %signal, "stopping");
        let closed = tokio::select! {
            closed = self.close() => Some(closed),
            second = signals.recv() => {
                tracing::warn!(node = %self.id(), signal = %second, "second signal: not waiting for the drain");
                None
            }
        };
        Shutdown { signal, closed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_says_how_the_close_went() {
        let at = |closed| Shutdown {
            signal: Signal::Terminate,
            closed,
        };
        assert_eq!(at(Some(Closed::default())).exit_code(), ExitCode::SUCCESS);
        assert!(at(Some(Closed::default())).is_complete());
        let stopped = at(Some(Closed { cancelled: 2 }));
        assert_eq!(stopped.exit_code(), ExitCode::from(3));
        assert_eq!(stopped.cancelled(), 2);
        assert_eq!(
            stopped.to_string(),
            "stopped at SIGTERM: the close grace ran out, 2 request(s) stopped before answering"
        );
        assert_eq!(at(None).exit_code(), ExitCode::from(130));
        assert!(!at(None).is_complete());
    }
}
