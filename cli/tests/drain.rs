//! A stopping node loses no reply, across processes, on both engines: `zeronode node`
//! children get SIGTERM (or SIGKILL) with requests in flight, and every caller is
//! accounted for.

mod support;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use node::{Filter, Node};
use support::{NodeProcess, BIN};

const ENGINES: [&str; 2] = ["native", "libzmq"];

/// How the nodes of a test run: an engine, and CURVE or not.
struct Setup {
    engine: &'static str,
    /// Extra flags of the server, and of each caller.
    server: Vec<String>,
    caller: Vec<String>,
}

impl Setup {
    /// Every engine, plaintext and with CURVE (key files written under the system's
    /// temporary directory, in a folder named after `test`).
    fn all(test: &str) -> Vec<Setup> {
        let dir =
            std::env::temp_dir().join(format!("zeronode-drain-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let keygen = |name: &str| {
            let pair = dir.join(name).to_str().expect("a UTF-8 path").to_owned();
            support::zeronode(&["keygen", &pair]).ok();
            pair
        };
        let (server, caller) = (keygen("srv.key"), keygen("caller.key"));
        let mut setups = Vec::new();
        for engine in ENGINES {
            setups.push(Setup {
                engine,
                server: Vec::new(),
                caller: Vec::new(),
            });
            setups.push(Setup {
                engine,
                server: vec!["--key".into(), server.clone()],
                caller: vec![
                    "--key".into(),
                    caller.clone(),
                    "--server-key".into(),
                    format!("{server}.pub"),
                ],
            });
        }
        setups
    }

    fn name(&self) -> String {
        let curve = if self.server.is_empty() {
            ""
        } else {
            " with CURVE"
        };
        format!("{}{curve}", self.engine)
    }

    /// A `zeronode node --id srv` with `--grace SECONDS` that prints every request.
    fn server(&self, grace: &str) -> NodeProcess {
        let mut args = vec![
            "--engine",
            self.engine,
            "--id",
            "srv",
            "--bind",
            "tcp://127.0.0.1:0",
            "--grace",
            grace,
            "--verbose",
        ];
        args.extend(self.server.iter().map(String::as_str));
        let mut srv = NodeProcess::start(&args);
        srv.wait_for("ready", |l| l == "node srv ready");
        srv
    }

    /// `zeronode request --to srv delay MS` against `address`, as a child.
    fn slow_request(&self, address: &str, ms: u64) -> Child {
        Command::new(BIN)
            .args(["request", "--engine", self.engine, "--connect", address])
            .args(&self.caller)
            .args([
                "--to",
                "srv",
                "--timeout",
                "30000",
                "delay",
                &ms.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("a caller")
    }
}

/// What each caller printed: (stdout, stderr), trimmed.
fn outputs(callers: Vec<Child>) -> Vec<(String, String)> {
    callers
        .into_iter()
        .map(|caller| {
            let out = caller.wait_with_output().expect("the caller ends");
            (
                String::from_utf8_lossy(&out.stdout).trim().to_owned(),
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            )
        })
        .collect()
}

/// Three requests whose handlers take 3 s, longer than a peer's dead-peer timeout
/// (2.5 heartbeat intervals of 1 s): SIGTERM one second in, and all three replies arrive,
/// because a draining node goes on beating and says goodbye only after its last answer.
/// Both engines, with and without CURVE.
#[test]
fn a_sigterm_loses_no_reply_of_handlers_that_finish_within_the_grace() {
    for setup in Setup::all("three") {
        let engine = setup.name();
        let mut srv = setup.server("5");
        let callers: Vec<Child> = (0..3)
            .map(|_| setup.slow_request(&srv.address, 3000))
            .collect();
        for i in 0..3 {
            srv.wait_for(&format!("request {i}"), |l| {
                l.starts_with("request delay from")
            });
        }
        std::thread::sleep(Duration::from_secs(1));
        srv.signal("TERM");
        for (stdout, stderr) in outputs(callers) {
            assert_eq!(stdout, "3000", "{engine}: a caller got {stderr:?}; {srv}");
        }
        assert_eq!(srv.wait_exit().code(), Some(0), "{engine}: {srv}");
    }
}

/// 20 requests that finish within the grace and 5 that outlive it: 20 replies, and 5
/// callers told, with a typed error, that the grace ran out while their handler ran; the
/// node's exit code says its drain was not complete. Both engines, with and without CURVE.
#[test]
fn handlers_that_outlive_the_grace_are_stopped_and_their_callers_told() {
    for setup in Setup::all("grace") {
        let engine = setup.name();
        let mut srv = setup.server("3");
        let quick: Vec<Child> = (0..20)
            .map(|_| setup.slow_request(&srv.address, 1500))
            .collect();
        let slow: Vec<Child> = (0..5)
            .map(|_| setup.slow_request(&srv.address, 20_000))
            .collect();
        for i in 0..25 {
            srv.wait_for(&format!("request {i}"), |l| {
                l.starts_with("request delay from")
            });
        }
        srv.signal("TERM");
        for (stdout, stderr) in outputs(quick) {
            assert_eq!(stdout, "1500", "{engine}: a caller got {stderr:?}");
        }
        for (stdout, stderr) in outputs(slow) {
            assert_eq!(stdout, "", "{engine}");
            assert!(
                stderr.contains("stopped the handler: its close grace ran out"),
                "{engine}: {stderr}"
            );
        }
        let status = srv.wait_exit();
        assert_eq!(status.code(), Some(3), "{engine}: {srv}");
        assert!(
            srv.stderr().contains("5 request(s) stopped"),
            "{engine}: {}",
            srv.stderr()
        );
    }
}

/// A gateway (`--router`) and three workers, separate processes; the test keeps 100
/// requests in flight to any worker (by filter) through the gateway.
struct Mesh {
    engine: &'static str,
    gateway: NodeProcess,
    workers: Vec<NodeProcess>,
}

impl Mesh {
    fn start(engine: &'static str) -> Mesh {
        let mut gateway = NodeProcess::start(&[
            "--engine",
            engine,
            "--id",
            "gw",
            "--router",
            "--bind",
            "tcp://127.0.0.1:0",
        ]);
        assert_eq!(gateway.next_line(), "node gw ready");
        let mut mesh = Mesh {
            engine,
            gateway,
            workers: Vec::new(),
        };
        for i in 0..3 {
            let worker = mesh.worker(i);
            mesh.workers.push(worker);
        }
        mesh
    }

    /// Starts worker `i` (id `w{i}`) and waits until the gateway has it.
    fn worker(&mut self, i: usize) -> NodeProcess {
        let id = format!("w{i}");
        let mut worker = NodeProcess::start(&[
            "--engine",
            self.engine,
            "--id",
            &id,
            "--connect",
            &self.gateway.address,
            "-o",
            "role=worker",
        ]);
        let ready = format!("node {id} ready");
        worker.wait_for(&ready, |l| l == ready);
        self.gateway.wait_for(&format!("{id} joined"), |l| {
            l.starts_with(&format!("peer joined {id} "))
        });
        worker
    }
}

/// How the requests of a run ended: "ok" or the error's code, with counts.
type Tally = Arc<Mutex<BTreeMap<String, usize>>>;

/// Keeps 100 `delay` requests (`ms` each in the worker) in flight to any worker through
/// the gateway at `address`, on a runtime of its own, until `stop`.
fn load(address: String, ms: u64, stop: Arc<AtomicBool>) -> (std::thread::JoinHandle<()>, Tally) {
    let tally: Tally = Arc::default();
    let counts = Arc::clone(&tally);
    let driver = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        runtime.block_on(async move {
            let caller = Node::builder().id("caller").build().await.expect("a node");
            caller.connect(&address).await.expect("the gateway");
            let workers = Filter::new().eq("role", "worker");
            let tasks: Vec<_> = (0..100)
                .map(|_| {
                    let (caller, workers, stop, counts) = (
                        caller.clone(),
                        workers.clone(),
                        Arc::clone(&stop),
                        Arc::clone(&counts),
                    );
                    tokio::spawn(async move {
                        while !stop.load(Ordering::Relaxed) {
                            let got: node::Result<u64> =
                                caller.request(&workers, "delay", &ms).await;
                            let key = match got {
                                Ok(n) if n == ms => "ok".to_owned(),
                                Ok(n) => format!("wrong reply {n}"),
                                Err(e @ node::Error::Handler { .. }) => format!("{e}"),
                                Err(e) => format!("{:?}", e.code()),
                            };
                            *counts.lock().expect("tally").entry(key).or_default() += 1;
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("a load task");
            }
            caller.close().await;
        });
    });
    (driver, tally)
}

/// Waits for the load to end: every request it started ends (a reply or a typed error)
/// within the library's default request timeout (10 s) and some slack: none hangs.
fn finish(driver: std::thread::JoinHandle<()>, stop: &AtomicBool) {
    stop.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(15);
    while !driver.is_finished() {
        assert!(
            Instant::now() < deadline,
            "requests still pending after 15 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    driver.join().expect("the load driver");
}

/// A rolling restart: each worker in turn gets SIGTERM and is started again (same id) once
/// it has exited, while 100 requests stay in flight through the gateway. Every request is
/// answered, none fails, with the library's defaults.
#[test]
fn a_rolling_restart_of_workers_behind_a_gateway_fails_no_request() {
    for engine in ENGINES {
        let mut mesh = Mesh::start(engine);
        let stop = Arc::new(AtomicBool::new(false));
        let (driver, tally) = load(mesh.gateway.address.clone(), 20, Arc::clone(&stop));
        std::thread::sleep(Duration::from_millis(500));
        for i in 0..3 {
            mesh.workers[i].signal("TERM");
            let status = mesh.workers[i].wait_exit();
            assert_eq!(
                status.code(),
                Some(0),
                "{engine}: w{i} drained: {}",
                mesh.workers[i]
            );
            // Its goodbye and the new process's handshake reach the gateway on two
            // connections, in either order; started before the gateway has seen the
            // goodbye, the new one is refused as a duplicate id.
            let left = format!("peer left w{i} ");
            mesh.gateway
                .wait_for(&format!("w{i} left"), |l| l.starts_with(&left));
            mesh.workers[i] = mesh.worker(i);
            std::thread::sleep(Duration::from_millis(300));
        }
        std::thread::sleep(Duration::from_millis(500));
        finish(driver, &stop);
        let tally = tally.lock().expect("tally").clone();
        let answered = tally.get("ok").copied().unwrap_or(0);
        assert_eq!(
            tally.len(),
            1,
            "{engine}: every request answered, none failed: {tally:?}"
        );
        // 100 in flight for over two seconds at 20 ms each: thousands (a floor far below).
        assert!(answered > 500, "{engine}: {tally:?}");
    }
}

/// The same mesh, one worker SIGKILLed: its requests in flight fail at once with the typed
/// peer-left error, nothing hangs, and every other request is answered.
#[test]
fn a_killed_worker_fails_only_its_requests_in_flight_and_at_once() {
    for engine in ENGINES {
        let mut mesh = Mesh::start(engine);
        let stop = Arc::new(AtomicBool::new(false));
        // 200 ms in the handler: about a third of the 100 in flight sit in each worker.
        let (driver, tally) = load(mesh.gateway.address.clone(), 200, Arc::clone(&stop));
        std::thread::sleep(Duration::from_millis(800));
        let killed = mesh.workers.remove(1);
        drop(killed); // SIGKILL
        std::thread::sleep(Duration::from_millis(1000));
        finish(driver, &stop);
        let tally = tally.lock().expect("tally").clone();
        let left = tally.get("PeerLeft").copied().unwrap_or(0);
        let answered = tally.get("ok").copied().unwrap_or(0);
        assert!(
            left > 0,
            "{engine}: the killed worker's requests: {tally:?}"
        );
        assert!(
            left <= 100,
            "{engine}: only requests in flight on the killed worker fail: {tally:?}"
        );
        assert_eq!(
            answered + left,
            tally.values().sum::<usize>(),
            "{engine}: no other outcome (no timeout, nothing untyped): {tally:?}"
        );
        assert!(answered > 300, "{engine}: {tally:?}");
    }
}
