//! `zeronode top` and `zeronode shell` in a real terminal: tmux runs a shell, `send-keys`
//! types, `capture-pane` reads the screen. The tmux server is this test's own (its own
//! socket name), killed when the test ends. CI installs tmux (`.ci/run`); without it these
//! tests fail saying so.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use support::{zeronode, NodeProcess, BIN, PATIENCE};

/// A tmux server of our own with one window running a plain bash.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(name: &str) -> Tmux {
        let socket = format!("zeronode-test-{}-{name}", std::process::id());
        let tmux = Tmux { socket };
        let status = Command::new("tmux")
            .args(["-L", &tmux.socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", "150", "-y", "40"])
            .args([
                "env",
                "PS1=$ ",
                "TERM=xterm-256color",
                "bash",
                "--norc",
                "--noprofile",
            ])
            .status()
            .unwrap_or_else(|e| panic!("tmux is needed for this test (apt-get install tmux): {e}"));
        assert!(status.success(), "tmux new-session failed");
        tmux.wait_for("the bash prompt", |s| s.trim_end().ends_with('$'));
        tmux
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux runs");
        assert!(out.status.success(), "tmux {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Types `text` as it is, then Enter.
    fn type_line(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "0", "-l", text]);
        self.key("Enter");
    }

    /// Types `text` as it is.
    fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "0", "-l", text]);
    }

    /// Presses a key by tmux's name for it (`Enter`, `Escape`, `C-c`, `Tab`, `Down`).
    fn key(&self, key: &str) {
        self.tmux(&["send-keys", "-t", "0", key]);
    }

    /// What the pane shows now.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "0"])
    }

    /// What the pane shows now, with its styles as escape sequences (`\x1b[7m`: reversed).
    fn styled_screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-e", "-t", "0"])
    }

    /// Whether the pane is in the alternate screen (a full-screen program's).
    fn alternate(&self) -> bool {
        self.tmux(&["display-message", "-p", "-t", "0", "#{alternate_on}"])
            .trim()
            == "1"
    }

    /// Waits until the screen satisfies `want` (fails the test after [`PATIENCE`]).
    fn wait_for(&self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let screen = self.screen();
            if want(&screen) {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("never saw {what}; the screen:\n{screen}");
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

/// A router `hub` and a worker `w1` (`role=worker`) behind it, with a few requests answered.
fn mesh() -> (NodeProcess, NodeProcess) {
    let mut hub = NodeProcess::start(&["--id", "hub", "--router", "--bind", "tcp://127.0.0.1:0"]);
    assert_eq!(hub.next_line(), "node hub ready");
    let worker = worker(&mut hub, "w1");
    for _ in 0..3 {
        zeronode(&[
            "request",
            "--connect",
            &hub.address,
            "--to",
            "w1",
            "echo",
            "1",
        ])
        .ok();
    }
    (hub, worker)
}

/// Starts a worker `id` (`role=worker`) joined to `hub` and waits until the hub has it.
fn worker(hub: &mut NodeProcess, id: &str) -> NodeProcess {
    let mut worker =
        NodeProcess::start(&["--id", id, "--connect", &hub.address, "-o", "role=worker"]);
    let ready = format!("node {id} ready");
    worker.wait_for(&ready, |l| l == ready);
    let joined = format!("peer joined {id}");
    hub.wait_for(&joined, |l| l.starts_with(&joined));
    worker
}

/// A command the test runs in the background, killed when dropped.
struct Background(std::process::Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The ids of `top`'s rows, top to bottom (the first word of each line under the header).
fn row_ids(screen: &str) -> Vec<String> {
    screen
        .lines()
        .skip_while(|l| !l.starts_with("ID "))
        .skip(1)
        .map_while(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// The id of `top`'s highlighted (reversed) row in a styled capture.
fn highlighted(styled: &str) -> Option<String> {
    let line = styled.lines().find(|l| l.contains("\x1b[7m"))?;
    // The text without its escape sequences (`ESC [ ... m`).
    let mut text = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            chars.by_ref().find(|c| c.is_ascii_alphabetic());
        } else {
            text.push(c);
        }
    }
    text.split_whitespace().next().map(str::to_owned)
}

/// Where a test leaves what it saw, for the README's screenshot.
fn keep(name: &str, screen: &str) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let _ = std::fs::write(dir.join(name), screen);
}

#[test]
fn top_shows_rows_drills_down_and_gives_the_terminal_back_on_ctrl_c() {
    let (hub, _worker) = mesh();
    let tmux = Tmux::start("top");
    tmux.type_line(&format!(
        "{BIN} top --connect {} --interval 300",
        hub.address
    ));
    let screen = tmux.wait_for("a row per node", |s| {
        s.contains("zeronode top: 2 nodes") && s.contains("hub (router)") && s.contains("\nw1 ")
    });
    assert!(tmux.alternate(), "full screen:\n{screen}");
    assert!(screen.contains("REQ/S"), "{screen}");
    keep("top.txt", &screen);

    // Sorted by id (the sort steps through the six other columns), the second row is w1.
    for _ in 0..6 {
        tmux.key("s");
    }
    tmux.wait_for("sorted by id", |s| s.contains("sorted by ID"));
    tmux.key("Down");
    tmux.key("Enter");
    let events = tmux.wait_for("w1's events", |s| {
        s.contains("node w1, events") && s.lines().any(|l| l.starts_with("echo "))
    });
    let echo: Vec<&str> = events
        .lines()
        .find(|l| l.starts_with("echo "))
        .unwrap()
        .split_whitespace()
        .collect();
    // EVENT REQ/S ERR/S OK ...: the three requests answered.
    assert_eq!(echo[3], "3", "{events}");
    keep("top-events.txt", &events);
    tmux.key("Escape");
    tmux.wait_for("the node list again", |s| {
        s.contains("zeronode top: 2 nodes")
    });

    tmux.key("C-c");
    let after = tmux.wait_for("the shell back", |s| {
        !s.contains("zeronode top:") && s.trim_end().ends_with('$')
    });
    assert!(!tmux.alternate(), "still in the alternate screen:\n{after}");
    assert!(
        after.contains(" top --connect "),
        "the command line is back: {after}"
    );
    // The terminal is cooked again: line editing and echo on.
    tmux.type_line("stty -a | tr -s ' ;' '\\n' | grep -x -e icanon -e echo | sort | tr '\\n' ,");
    tmux.wait_for("stty's answer", |s| s.contains("echo,icanon,"));
}

/// Rows re-sort at every refresh; the highlight stays on the node the user chose, and Enter
/// opens that node, not the one now at its old position.
#[test]
fn top_keeps_the_highlight_on_its_node_while_rows_re_sort() {
    let (mut hub, _w1) = mesh();
    let _w2 = worker(&mut hub, "w2");
    let tmux = Tmux::start("top-follow");
    tmux.type_line(&format!(
        "{BIN} top --connect {} --interval 300",
        hub.address
    ));
    tmux.wait_for("three rows", |s| s.contains("zeronode top: 3 nodes"));
    // Sorted by IN FLIGHT (two steps from REQ/S): nothing in flight, so by id.
    tmux.key("s");
    tmux.key("s");
    tmux.wait_for("sorted by in flight, then id", |s| {
        s.contains("sorted by IN FLIGHT") && row_ids(s) == ["hub", "w1", "w2"]
    });
    tmux.key("Down");
    let deadline = Instant::now() + PATIENCE;
    while highlighted(&tmux.styled_screen()).as_deref() != Some("w1") {
        assert!(
            Instant::now() < deadline,
            "w1 never highlighted:\n{}",
            tmux.styled_screen()
        );
        thread::sleep(Duration::from_millis(100));
    }

    // A request held in flight on w2 (`delay`) puts w2 above w1: w1's row moves down (the
    // request's own short-lived node is a row too, idle, above w1 by its id).
    let slow = Command::new(BIN)
        .args([
            "request",
            "--connect",
            &hub.address,
            "--to",
            "w2",
            "delay",
            "60000",
        ])
        .args(["--timeout", "60000"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("zeronode request starts");
    let _slow = Background(slow);
    let screen = tmux.wait_for("w2 above w1", |s| {
        let ids = row_ids(s);
        let at = |id: &str| ids.iter().position(|i| i == id);
        matches!((at("w2"), at("w1")), (Some(w2), Some(w1)) if w2 < w1 && w1 > 1)
    });
    // Several refreshes later the highlight is still on w1, at its new place.
    thread::sleep(Duration::from_millis(1000));
    let styled = tmux.styled_screen();
    assert_eq!(highlighted(&styled).as_deref(), Some("w1"), "{styled}");
    let ids = row_ids(&tmux.screen());
    assert!(ids.iter().position(|i| i == "w1") > Some(1), "{screen}");
    tmux.key("Enter");
    tmux.wait_for("w1's events", |s| s.contains("node w1, events"));
    tmux.key("q");
    tmux.wait_for("the shell back", |s| s.trim_end().ends_with('$'));
}

/// The shell's calls take the one-shot commands' targets: a filter, every match (a tick, a
/// stream), and a stream that prints its items as they come and stops at Ctrl-C, the
/// session going on.
#[test]
fn the_shell_calls_any_match_ticks_every_match_and_streams_until_ctrl_c() {
    let (hub, _worker) = mesh();
    let tmux = Tmux::start("shell-targets");
    tmux.type_line(&format!(
        "ZERONODE_HISTORY=/dev/null {BIN} shell --connect {}",
        hub.address
    ));
    tmux.wait_for("the prompt", |s| {
        s.contains("joined hub") && s.trim_end().ends_with("zeronode>")
    });

    // w1 is behind the router: reached by its option, through it.
    tmux.type_line(r#"request --any -f role=worker echo {"by": "filter"}"#);
    tmux.wait_for("the reply", |s| {
        s.lines().any(|l| l == r#"{"by":"filter"}"#)
    });
    tmux.type_line("tick --all -f role=worker news 1");
    tmux.wait_for("the count", |s| s.lines().any(|l| l == "sent to 1 node"));
    tmux.type_line("request -f role=worker ping");
    tmux.wait_for("the flag error", |s| {
        s.lines()
            .any(|l| l.starts_with("error: ") && l.contains("needs --any"))
    });

    tmux.type_line("stream w1 count 3");
    tmux.wait_for("three items", |s| {
        s.contains("zeronode> stream w1 count 3\n1\n2\n3\nzeronode>")
    });
    // From every match (w1, behind the router), each item with its node.
    tmux.type_line("stream --all -f role=worker count 2");
    tmux.wait_for("two tagged items", |s| {
        s.contains("count 2\n{\"from\":\"w1\",\"item\":1}\n{\"from\":\"w1\",\"item\":2}\nzeronode>")
    });
    // A slow stream: items as they come, until Ctrl-C.
    tmux.type_line(r#"stream --any -f role=worker count {"n": 1000, "every_ms": 100}"#);
    tmux.wait_for("the first items", |s| {
        s.contains("\"every_ms\": 100}\n1\n2\n3\n")
    });
    tmux.key("C-c");
    tmux.wait_for("the prompt after the interruption", |s| {
        s.contains("(interrupted)\nzeronode>")
    });
    // The session goes on, and w1 counts the stream as cancelled.
    tmux.type_line("request w1 ping");
    tmux.wait_for("pong", |s| s.lines().any(|l| l == "\"pong\""));
    tmux.type_line("info w1");
    let screen = tmux.wait_for("w1's count row", |s| {
        s.lines().any(|l| l.trim_start().starts_with("count "))
    });
    let count: Vec<&str> = screen
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("count "))
        .unwrap()
        .split_whitespace()
        .collect();
    // EVENT OK ERROR REFUSED TIMEOUT CANCELLED: two streams ended, the third stopped.
    assert_eq!(count[1..6], ["2", "0", "0", "0", "1"], "{screen}");
    keep("shell-stream.txt", &screen);
    tmux.type_line("exit");
    tmux.wait_for("bash again", |s| s.trim_end().ends_with('$'));
}

#[test]
fn a_request_typed_in_the_shell_prints_its_reply_and_a_bad_one_its_error() {
    let (hub, _worker) = mesh();
    let history = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("shell-history-{}", std::process::id()));
    let _ = std::fs::remove_file(&history);
    let tmux = Tmux::start("shell");
    tmux.type_line(&format!(
        "ZERONODE_HISTORY={} {BIN} shell --connect {}",
        history.display(),
        hub.address
    ));
    tmux.wait_for("the prompt", |s| {
        s.contains("joined hub") && s.trim_end().ends_with("zeronode>")
    });

    tmux.type_line(r#"request w1 echo {"a": [1, 2]}"#);
    tmux.wait_for("the reply", |s| s.lines().any(|l| l == r#"{"a":[1,2]}"#));

    tmux.type_line("request w1 nosuch 1");
    tmux.wait_for("the error", |s| {
        s.lines()
            .any(|l| l.starts_with("error: ") && l.contains("nosuch"))
    });
    tmux.type_line("request w1 echo {bad");
    tmux.wait_for("the JSON error", |s| {
        s.lines().any(|l| l.starts_with("error: invalid JSON"))
    });

    // Completion: the command, the id, the event (learnt from the descriptions).
    tmux.type_text("req");
    tmux.key("Tab");
    tmux.type_text(" w");
    tmux.key("Tab");
    tmux.type_text(" ec");
    tmux.key("Tab");
    tmux.type_line(" 5");
    let screen = tmux.wait_for("the completed request's reply", |s| {
        s.contains("zeronode> request w1 echo 5\n5\n")
    });
    keep("shell.txt", &screen);

    tmux.type_line("exit");
    tmux.wait_for("bash again", |s| s.trim_end().ends_with('$'));
    let saved = std::fs::read_to_string(&history).expect("the history is saved");
    assert!(saved.contains("request w1 echo 5"), "{saved}");
}
