//! Child processes of the harness, killed by pid whatever happens.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// A child process that is killed (by its pid) and reaped when dropped, however the point
/// ended.
pub(crate) struct Process {
    /// The child.
    pub(crate) child: Child,
    /// What it is, for messages.
    pub(crate) what: String,
}

impl Process {
    /// Starts `command` (program and arguments already set) with stdin and stdout piped,
    /// stderr shared with ours.
    pub(crate) fn start(mut command: Command, what: String) -> Result<Process> {
        let child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        Ok(Process { child, what })
    }

    /// Waits until the process exits, at most `limit`; returns everything it printed on
    /// stdout. Killed and an error on timeout, an error on a failure status.
    pub(crate) fn finish_within(&mut self, limit: Duration) -> Result<String> {
        let stdout = self.child.stdout.take();
        let (tx, rx) = mpsc::channel();
        // Read stdout in a thread so a chatty child never blocks on a full pipe.
        thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut stdout) = stdout {
                let _ = stdout.read_to_string(&mut text);
            }
            let _ = tx.send(text);
        });
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                self.kill();
                return Err(Error::ChildTimeout {
                    what: self.what.clone(),
                    waited: limit,
                });
            }
            thread::sleep(Duration::from_millis(10));
        };
        if !status.success() {
            return Err(Error::ChildFailed {
                what: self.what.clone(),
                status,
            });
        }
        // The pipe closes with the process; grandchildren would keep it open, so bounded.
        Ok(rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default())
    }

    /// Reads the first stdout line, waiting at most `limit`.
    pub(crate) fn first_line_within(&mut self, limit: Duration) -> Option<String> {
        self.first_line().recv_timeout(limit).ok().flatten()
    }

    /// Starts reading the first stdout line in a thread: the receiver gets it (trimmed, `None`
    /// when the child closed stdout without printing one).
    pub(crate) fn first_line(&mut self) -> mpsc::Receiver<Option<String>> {
        let (tx, rx) = mpsc::channel();
        let Some(stdout) = self.child.stdout.take() else {
            let _ = tx.send(None);
            return rx;
        };
        // The thread ends at the first line, or at end of file when the child is killed.
        thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let line = line.trim().to_owned();
            let _ = tx.send((!line.is_empty()).then_some(line));
        });
        rx
    }

    /// The failure to report for a child that printed nothing in time: its exit status if
    /// it exited, otherwise `silent`.
    pub(crate) fn no_line_error(&mut self, silent: Error) -> Error {
        match self.child.try_wait() {
            Ok(Some(status)) => Error::ChildFailed {
                what: self.what.clone(),
                status,
            },
            Ok(None) => silent,
            Err(e) => Error::Io(e),
        }
    }

    /// SIGKILL by pid, then reap. Errors mean it had already exited and been reaped.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}
