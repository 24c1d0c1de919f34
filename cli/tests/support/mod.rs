//! Running the `zeronode` binary from tests: one-shot commands with a bounded wait, and
//! long-lived `zeronode node` children behind a guard that kills them however the test ends.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_zeronode");

/// The longest any one command or wait may take: no test hangs past it.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// What a one-shot command did.
#[derive(Debug)]
pub struct Run {
    /// Its exit status.
    pub status: ExitStatus,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

impl Run {
    /// Asserts success and returns stdout without the final line break.
    pub fn ok(&self) -> &str {
        assert!(self.status.success(), "expected success, got {self:?}");
        self.stdout.trim_end()
    }

    /// Asserts the failure a user should see: a non-zero exit, one `error: ...` line on
    /// stderr, no panic. Returns that line.
    pub fn failed(&self) -> &str {
        assert!(!self.status.success(), "expected a failure, got {self:?}");
        assert!(self.status.code().is_some(), "killed by a signal: {self:?}");
        assert!(!self.stderr.contains("panicked"), "panicked: {self:?}");
        let line = self.stderr.trim_end();
        assert!(line.starts_with("error: "), "not an error line: {self:?}");
        assert_eq!(line.lines().count(), 1, "not one line: {self:?}");
        line
    }
}

/// Runs `zeronode ARGS` to completion (killed after [`PATIENCE`]).
pub fn zeronode(args: &[&str]) -> Run {
    let output = assert_cmd::Command::new(BIN)
        .args(args)
        .timeout(PATIENCE)
        .output()
        .unwrap_or_else(|e| panic!("cannot run zeronode {args:?}: {e}"));
    Run {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A running `zeronode node`; killed when dropped.
pub struct NodeProcess {
    /// The child.
    child: Child,
    /// Kept open: a closed stdin must not matter to the node, but keep it like a terminal.
    _stdin: Option<ChildStdin>,
    /// Its stdout lines, as they come.
    lines: Receiver<String>,
    /// Every stdout line so far, for failure messages.
    seen: Vec<String>,
    /// Its stderr so far, for failure messages.
    stderr: Arc<Mutex<String>>,
    /// The address it printed in `listening on ADDR`, if bound.
    pub address: String,
}

impl NodeProcess {
    /// Starts `zeronode node ARGS`; when `--bind` is among them, waits for `listening on`
    /// and keeps the address.
    pub fn start(args: &[&str]) -> NodeProcess {
        NodeProcess::start_in(None, args)
    }

    /// [`start`](Self::start) inside a network namespace (`ip netns exec`; needs root).
    pub fn start_in(namespace: Option<&str>, args: &[&str]) -> NodeProcess {
        let mut command = match namespace {
            Some(namespace) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", namespace, BIN]);
                c
            }
            None => Command::new(BIN),
        };
        let mut child = command
            .arg("node")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start zeronode node {args:?}: {e}"));
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped stdout");
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("piped stderr");
        let sink = Arc::clone(&stderr);
        thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                sink.lock().expect("stderr lock").push_str(&text);
            }
        });
        let mut node = NodeProcess {
            _stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            stderr,
            address: String::new(),
        };
        if args.contains(&"--bind") {
            let first = node.next_line();
            node.address = first
                .strip_prefix("listening on ")
                .unwrap_or_else(|| panic!("first line is not `listening on`: {first:?}"))
                .to_owned();
        }
        node
    }

    /// The next stdout line (fails the test after [`PATIENCE`]).
    pub fn next_line(&mut self) -> String {
        match self.lines.recv_timeout(PATIENCE) {
            Ok(line) => {
                self.seen.push(line.clone());
                line
            }
            Err(RecvTimeoutError::Timeout) => panic!("no line within {PATIENCE:?}: {self}"),
            Err(RecvTimeoutError::Disconnected) => panic!("stdout closed: {self}"),
        }
    }

    /// Reads lines until one satisfies `want`; returns it.
    pub fn wait_for(&mut self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if want(&line) {
                        return line;
                    }
                }
                Err(_) => panic!("never saw {what}: {self}"),
            }
        }
    }

    /// Sends a signal (`INT`, `TERM`) with `kill(1)`.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill(1) runs");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits for the process to exit (fails the test after [`PATIENCE`]).
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() > deadline {
                panic!("did not exit within {PATIENCE:?}: {self}");
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every stdout line after the ones already read, until stdout closes (after the exit).
    pub fn rest(&mut self) -> Vec<String> {
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(line);
        }
        self.seen.clone()
    }

    /// Every stdout line read so far.
    pub fn rest_so_far(&self) -> Vec<String> {
        self.seen.clone()
    }

    /// Its process id (to read what `/proc` says of it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }
}

impl std::fmt::Display for NodeProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stdout so far: {:?}; stderr: {:?}",
            self.seen,
            self.stderr()
        )
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        // SIGKILL, then reap: both return at once, so a failing test never hangs here.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET http://ADDRESS{path}` over a plain socket (what a probe does): the status and the
/// body. Bounded by [`PATIENCE`].
pub fn http_get(address: &str, path: &str) -> (u16, String) {
    use std::io::Write;
    use std::net::TcpStream;
    let addr: std::net::SocketAddr = address.parse().unwrap_or_else(|e| panic!("{address}: {e}"));
    let mut stream = TcpStream::connect_timeout(&addr, PATIENCE)
        .unwrap_or_else(|e| panic!("cannot connect to {address}: {e}"));
    stream.set_read_timeout(Some(PATIENCE)).expect("a timeout");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n").expect("sent");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The `HOST:PORT` of a `health on http://HOST:PORT/readyz` line the node prints.
pub fn health_address(node: &mut NodeProcess) -> String {
    let line = node.wait_for("health on", |l| l.starts_with("health on "));
    line.trim_start_matches("health on http://")
        .trim_end_matches("/readyz")
        .to_owned()
}
