//! Helper processes of the peers' rows (`nats-server`, `node`), tied to the life of the role
//! process that starts them.
//!
//! A helper's stdin is a pipe whose only writer is this process (Rust opens it close-on-exec,
//! so no other child inherits it). When this process ends, however it ends (killed by pid
//! included), or when the [`Helper`] is dropped, the pipe closes and the helper sees end of
//! file on stdin: the node scripts exit then, and `nats-server` runs under an `sh` watcher
//! that stops it then. So the orchestrator's kill by pid reaches the helpers too.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::thread;

use tokio::sync::oneshot;

use super::PeerError;

/// `sh` script that runs `"$0" "$@"` (the program and its arguments) in the background and
/// stops it (SIGTERM) when the script's stdin reaches end of file; the script itself ends
/// with the program's status.
///
/// The watcher reads the pipe through a copy on descriptor 3 because a background command of
/// a non-interactive shell gets `/dev/null` as its stdin.
const WATCHER: &str = r#"exec 3<&0
"$0" "$@" </dev/null 3<&- &
program=$!
(cat <&3 >/dev/null; kill "$program" 2>/dev/null) &
exec 3<&-
wait "$program""#;

/// A running helper process.
#[derive(Debug)]
pub(super) struct Helper {
    /// What it is, for messages.
    pub(super) what: &'static str,
    /// This process's end of the helper's stdin: dropping it stops the helper.
    stdin: Option<ChildStdin>,
    /// The helper's stdout, when it was piped and not taken yet.
    stdout: Option<ChildStdout>,
    /// Its exit status, sent by the thread that waits for it.
    exited: oneshot::Receiver<ExitStatus>,
}

impl Helper {
    /// Starts `command` with stdin piped to this process; stdout and stderr as `command`
    /// sets them.
    pub(super) fn spawn(mut command: Command, what: &'static str) -> Result<Helper, PeerError> {
        let mut child = command
            .stdin(Stdio::piped())
            .spawn()
            .map_err(|source| PeerError::Spawn { what, source })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let (tx, exited) = oneshot::channel();
        // The waiting thread reaps the helper; the receiver learns its status.
        thread::spawn(move || {
            if let Ok(status) = child.wait() {
                let _ = tx.send(status);
            }
        });
        Ok(Helper {
            what,
            stdin,
            stdout,
            exited,
        })
    }

    /// The command that runs `program` with `args` under the [`WATCHER`] script, for
    /// programs that do not watch their stdin themselves; start it with [`Helper::spawn`].
    pub(super) fn watched<S: AsRef<OsStr>>(program: &Path, args: &[S]) -> Command {
        let mut command = Command::new("sh");
        command.arg("-c").arg(WATCHER).arg(program).args(args);
        command
    }

    /// The helper's stdout (once), if it was piped.
    pub(super) fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.stdout.take()
    }

    /// `Ok` while the helper runs; its [`PeerError::Exited`] once it has ended.
    pub(super) fn check_running(&mut self) -> Result<(), PeerError> {
        match self.exited.try_recv() {
            Err(oneshot::error::TryRecvError::Empty) => Ok(()),
            Ok(status) => Err(self.exited_error(Some(status))),
            Err(oneshot::error::TryRecvError::Closed) => Err(self.exited_error(None)),
        }
    }

    /// The error for this helper having ended with `status`.
    pub(super) fn exited_error(&self, status: Option<ExitStatus>) -> PeerError {
        PeerError::Exited {
            what: self.what,
            status,
        }
    }

    /// Waits (blocking this thread) until the helper ends; its status when known.
    pub(super) fn wait_blocking(mut self) -> Option<ExitStatus> {
        // A stand-in that is never sent on: `self` is dropped (stdin with it) after the wait.
        let (_, stand_in) = oneshot::channel();
        std::mem::replace(&mut self.exited, stand_in)
            .blocking_recv()
            .ok()
    }

    /// Waits until the helper ends; its status when known.
    pub(super) async fn exited(&mut self) -> Option<ExitStatus> {
        (&mut self.exited).await.ok()
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        // End of file on the helper's stdin: it stops (see the module docs).
        drop(self.stdin.take());
    }
}

/// `name` in the directories of `PATH`, then in `extra` (system directories a user's `PATH`
/// may lack, such as `/usr/sbin` where Debian puts `nats-server`).
pub(super) fn find_program(name: &str, extra: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}
