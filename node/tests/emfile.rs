//! A node out of file descriptors stops listening for a while instead of spinning.
//!
//! This lowers the process's limit on open files, so it is the only test of its binary.
//! The connections that exhaust the node come from a child process (this same test
//! binary, run as the connector), so that they do not spend the node's descriptors on
//! their own ends.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use node::{NodeEvent, Request};
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
use support::*;

/// The node's limit on open files: a few dozen for libzmq and the runtime, the rest for
/// connections.
const NODE_LIMIT: u64 = 256;
/// Connections the connector makes: well past what the node can accept.
const CONNECTIONS: usize = 400;
/// The connector's line that says how many connections it made.
const MADE: &str = "connections made: ";
/// Set in the connector's environment: the port to connect to.
const CONNECTOR: &str = "ZERONODE_EMFILE_CONNECTOR";

/// The process's CPU time so far (all threads).
fn cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The connector: opens up to `CONNECTIONS` silent connections to the port, says how
/// many on stdout, holds them until stdin closes.
fn connector(port: u16) {
    // Undo the node's low limit, inherited (the hard limit is unchanged).
    let limit = getrlimit(Resource::Nofile);
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: limit.maximum.map(|hard| hard.min(4096)).or(Some(4096)),
            maximum: limit.maximum,
        },
    );
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut held = Vec::new();
    let mut failed_in_a_row = 0;
    while held.len() < CONNECTIONS && failed_in_a_row < 5 {
        // Once the node stops accepting, the listen backlog fills and a connect waits for
        // SYN retries: give up on each quickly.
        match TcpStream::connect_timeout(&address, Duration::from_millis(300)) {
            Ok(stream) => {
                held.push(stream);
                failed_in_a_row = 0;
            }
            Err(_) => failed_in_a_row += 1,
        }
    }
    println!("{MADE}{}", held.len());
    let _ = std::io::stdout().flush();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

/// With its descriptors exhausted, a node reports `AcceptPaused`, does not burn CPU while
/// it cannot accept, and serves a real node once the extra connections are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_out_of_descriptors_pauses_instead_of_spinning() {
    if let Some(port) = std::env::var(CONNECTOR).ok().and_then(|p| p.parse().ok()) {
        connector(port);
        return;
    }
    let limit = getrlimit(Resource::Nofile);
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(NODE_LIMIT),
            maximum: limit.maximum,
        },
    )
    .expect("lower RLIMIT_NOFILE");

    let srv = server("srv").await;
    srv.on_request("ping", |_req: Request| async move {
        Ok::<_, node::HandlerError>("pong".to_owned())
    });
    let mut events = srv.events();
    let port = address(&srv)
        .rsplit(':')
        .next()
        .and_then(|p| p.parse::<u16>().ok())
        .expect("a tcp port");

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_node_out_of_descriptors_pauses_instead_of_spinning",
        ])
        .args(["--nocapture", "--quiet"])
        .env(CONNECTOR, port.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the connector");
    let paused = wait_for(&mut events, "the node pauses accepting", |e| match e {
        NodeEvent::AcceptPaused { retry_in, .. } => Some(*retry_in),
        _ => None,
    })
    .await;
    assert!(paused >= Duration::from_millis(100), "{paused:?}");

    // Hold: the connector keeps its connections; the node cannot accept more. Spinning,
    // libzmq's listener took more than a CPU (15.8 s of CPU in a 10 s hold); paused, the
    // node wakes a few times a second at most. 1 s in 2 s leaves room for a slow debug
    // build on a busy CI machine and is still half of what one spinning thread costs.
    let before = cpu_time();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spent = cpu_time() - before;
    println!("CPU over a 2 s hold at the limit: {spent:?}");
    assert!(
        spent < Duration::from_secs(1),
        "CPU {spent:?} in a 2 s hold"
    );

    // The extra connections go.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let made: usize = loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "no count from the connector"
        );
        if let Some(count) = line.trim().strip_prefix(MADE) {
            break count.parse().expect("the connector's count");
        }
    };
    assert!(made > 0, "the connector made no connection");
    drop(child.stdin.take());
    // Its test harness's last words, then its exit.
    let _ = stdout.read_to_end(&mut Vec::new());
    assert!(child.wait().unwrap().success());

    // A real node gets in (its connect retries while the listener is paused).
    let client = client("client").await;
    within(
        "a real node joins once descriptors are back",
        client.connect_with(
            &address(&srv),
            node::ConnectOptions::new().timeout(Duration::from_secs(12)),
        ),
    )
    .await
    .unwrap();
    let reply: String = within(
        "its request is answered",
        client.request("srv", "ping", &()),
    )
    .await
    .unwrap();
    assert_eq!(reply, "pong");
}
