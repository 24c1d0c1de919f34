//! The deployment files in deploy/ run as written. CI has no container engine, so each
//! test reads a file (the Kubernetes manifest, the compose file) and starts every
//! container's command as a local process with the file's own arguments: each container
//! gets a loopback address of its own (where the file binds 0.0.0.0), the keys the file
//! mounts are made with `zeronode keygen`, and the names the gateway discovers are answered
//! by a real name server on loopback. Then a client connected to the gateway only sends
//! requests by filter and by id and gets every answer, and a worker stopped (SIGTERM) and
//! started again loses none. The probes the files declare are read as the orchestrator
//! would. A flag the files pass that the binary does not take fails the test. The
//! Dockerfiles' instructions are checked (not built: no container engine).

mod support;

#[path = "../../node/tests/support/dns.rs"]
mod dns;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dns::TestDns;
use node::{ConnectOptions, Filter, Key, KeyPair, Node};
use support::{http_get, zeronode, NodeProcess, PATIENCE};
use yaml_rust2::{Yaml, YamlLoader};

fn deploy(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml(file: &str) -> Vec<Yaml> {
    YamlLoader::load_from_str(&deploy(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// The strings of a YAML list.
fn strings(list: &Yaml) -> Vec<String> {
    list.as_vec()
        .unwrap_or_else(|| panic!("not a list: {list:?}"))
        .iter()
        .map(|item| match item {
            Yaml::String(s) => s.clone(),
            Yaml::Integer(i) => i.to_string(),
            other => panic!("not a string: {other:?}"),
        })
        .collect()
}

/// The value after `flag` in a command line.
fn after<'a>(args: &'a [String], flag: &str) -> &'a str {
    let at = args
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("no {flag} in {args:?}"));
    &args[at + 1]
}

/// Every `--flag` of `args` (a `zeronode` command line) is one `zeronode node` accepts.
fn flags_exist(args: &[String]) {
    assert_eq!(args[0], "node", "{args:?}");
    let help = zeronode(&["node", "--help"]);
    let help = help.ok();
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(help.contains(flag.as_str()), "zeronode node has no {flag}");
    }
}

/// One container of a file.
#[derive(Debug, Clone)]
struct Container {
    /// Its `zeronode` command line as the file gives it, variables expanded.
    args: Vec<String>,
    /// Where its readiness probe asks: the path and the port, when the file has one.
    ready: Option<(String, u16)>,
    /// Where the file mounts the keys in the container.
    mount: String,
}

/// A container's command line as this host runs it (without the leading `node`): bound
/// to `ip` where the file binds 0.0.0.0, the mounted key files read from `keys`, the
/// name server `dns` for its discovery.
fn localize(container: &Container, ip: Ipv4Addr, keys: &Path, dns: SocketAddr) -> Vec<String> {
    flags_exist(&container.args);
    let mounted = format!("{}/", container.mount);
    let mut args: Vec<String> = container.args[1..]
        .iter()
        .map(|arg| {
            if let Some(port) = arg.strip_prefix("tcp://0.0.0.0:") {
                format!("tcp://{ip}:{port}")
            } else if let Some(port) = arg.strip_prefix("0.0.0.0:") {
                format!("{ip}:{port}")
            } else if let Some(file) = arg.strip_prefix(&mounted) {
                keys.join(file).display().to_string()
            } else {
                assert!(!arg.contains("$("), "not expanded: {arg}");
                arg.clone()
            }
        })
        .collect();
    // In a container the system's resolver (resolv.conf) answers; here, the test's.
    if args.iter().any(|a| a == "--discover") {
        args.extend(["--dns-server".to_owned(), dns.to_string()]);
    }
    args
}

/// A container running here.
struct Running {
    args: Vec<String>,
    process: NodeProcess,
    /// Where its readiness probe asks (`HOST:PORT`, path).
    probe: (String, String),
}

impl Running {
    /// Starts it and waits until its readiness probe passes.
    fn start(container: &Container, args: Vec<String>) -> Running {
        let health = after(&args, "--health").to_owned();
        let (path, port) = container.ready.clone().unwrap_or(("/readyz".into(), 0));
        if port != 0 {
            // A probe on a port the node does not serve would never pass.
            assert!(
                health.ends_with(&format!(":{port}")),
                "probe port {port}, --health {health}"
            );
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut process = NodeProcess::start(&refs);
        // Listening once it says so (a probe before that is refused, and retried).
        assert_eq!(support::health_address(&mut process), health);
        let mut running = Running {
            process,
            args,
            probe: (health, path),
        };
        running.wait_ready();
        running
    }

    fn id(&self) -> &str {
        after(&self.args, "--id")
    }

    /// Polls the readiness probe until it passes (what keeps an orchestrator's traffic
    /// and DNS record away until then).
    fn wait_ready(&mut self) {
        let (health, path) = &self.probe;
        let deadline = Instant::now() + PATIENCE;
        loop {
            let (status, body) = http_get(health, path);
            if status == 200 {
                return;
            }
            if Instant::now() > deadline {
                let lines = self.process.rest();
                panic!(
                    "{} not ready after {PATIENCE:?}: {body}; {lines:?}; {}",
                    self.id(),
                    self.process.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The loopback addresses of one file's containers: 127.B.F.N, B from the process id (so
/// that two runs of this test on one host do not meet), F per file.
fn loopback(file: u8, n: u8) -> Ipv4Addr {
    let b = 100 + (std::process::id() % 100) as u8;
    Ipv4Addr::new(127, b, file, n)
}

/// Makes the key files the files mount: `worker`, `gateway` and their `.pub`.
fn keys(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("zeronode-deploy-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp dir");
    for name in ["worker", "gateway"] {
        zeronode(&["keygen", &dir.join(name).display().to_string()]).ok();
    }
    dir
}

/// The public key in a `.pub` file.
fn public_key(path: &Path) -> Key {
    let text = std::fs::read_to_string(path).expect("a key file");
    let z85 = text
        .lines()
        .find_map(|l| l.strip_prefix("public-key = "))
        .expect("a public-key line");
    Key::from_z85(z85.trim()).expect("a key")
}

/// Runs a file's workers and gateway here, then checks what a user would: a client joined
/// to the gateway only reaches every worker by filter (its shard) and by its stable id,
/// and keeps getting answers while a worker is stopped and started again.
fn run_mesh(tag: &str, file: u8, workers: &[Container], gateway: &Container) {
    let keys = keys(tag);
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let followed = after(&gateway.args, "--discover").to_owned();
    let (name, _port) = followed.rsplit_once(':').expect("NAME:PORT");
    // The zone the name is in: its last two labels (a one-label name is a zone itself).
    let labels: Vec<&str> = name.split('.').collect();
    let zone = format!("{}.", labels[labels.len().saturating_sub(2)..].join("."));
    let dns = runtime.block_on(TestDns::start_zone(&zone));
    let ips: Vec<IpAddr> = (0..workers.len())
        .map(|n| IpAddr::V4(loopback(file, n as u8 + 1)))
        .collect();
    runtime.block_on(dns.set_name(name, &ips, 1));

    let mut running: Vec<Running> = workers
        .iter()
        .enumerate()
        .map(|(n, w)| {
            Running::start(
                w,
                localize(w, loopback(file, n as u8 + 1), &keys, dns.address),
            )
        })
        .collect();
    let gateway_args = localize(gateway, loopback(file, 100), &keys, dns.address);
    // A gateway that never gets ready: the workers' lines say why (refused connections).
    let start = std::panic::AssertUnwindSafe(|| Running::start(gateway, gateway_args));
    let gateway_run = match std::panic::catch_unwind(start) {
        Ok(gateway) => gateway,
        Err(panic) => {
            for worker in &mut running {
                let lines = worker.process.rest();
                eprintln!("{}: {lines:?} {}", worker.id(), worker.process.stderr());
            }
            std::panic::resume_unwind(panic)
        }
    };
    let client = runtime.block_on(async {
        let client = Node::builder()
            .id("client")
            .curve(KeyPair::generate().expect("a key pair"))
            .build()
            .await
            .expect("a node");
        let options = ConnectOptions::new().server_key(public_key(&keys.join("gateway.pub")));
        client
            .connect_with(&gateway_run.process.address, options)
            .await
            .expect("the client joins the gateway");
        client
    });
    let ids: Vec<String> = running.iter().map(|r| r.id().to_owned()).collect();
    wait_joined(&runtime, &client, &ids);

    // Every shard by filter, every worker by its id: through the gateway only.
    for worker in &running {
        let shard = shard_of(&worker.args);
        let by_filter = Filter::new().eq("shard", shard).eq("role", "worker");
        let reply: node::Result<String> = runtime.block_on(client.request(&by_filter, "ping", &()));
        assert_eq!(reply.expect("answered by filter"), "pong", "shard {shard}");
        let reply: node::Result<String> =
            runtime.block_on(client.request(worker.id(), "ping", &()));
        assert_eq!(reply.expect("answered by id"), "pong", "{}", worker.id());
    }

    // Requests to any worker go on while worker 1 is stopped and started again.
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (client, stop) = (client.clone(), Arc::clone(&stop));
            runtime.spawn(async move {
                let (mut answered, mut failed) = (0u32, Vec::new());
                let any = Filter::new().eq("role", "worker");
                while !stop.load(Ordering::Relaxed) {
                    match client.request::<_, u64>(&any, "delay", &20u64).await {
                        Ok(20) => answered += 1,
                        other => failed.push(format!("{other:?}")),
                    }
                }
                (answered, failed)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let restarted = running.remove(1);
    restarted.process.signal("TERM");
    // Not ready from the signal on: the orchestrator's DNS drops its address, as a
    // headless Service does for a pod that is not ready.
    let others: Vec<IpAddr> = ips.iter().copied().filter(|ip| *ip != ips[1]).collect();
    runtime.block_on(dns.set_name(name, &others, 1));
    let Running {
        args, mut process, ..
    } = restarted;
    assert!(process.wait_exit().success(), "{process}");
    drop(process);
    let again = Running::start(&workers[1], args);
    // Ready again: listed again, and the gateway joins it.
    runtime.block_on(dns.set_name(name, &ips, 1));
    wait_joined(&runtime, &client, &ids);
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let (mut answered, mut failed) = (0, Vec::new());
    for task in load {
        let (a, f) = runtime
            .block_on(async { tokio::time::timeout(PATIENCE, task).await })
            .expect("the load ends")
            .expect("the task ran");
        answered += a;
        failed.extend(f);
    }
    assert!(
        failed.is_empty(),
        "lost {} of {}: {failed:?}",
        failed.len(),
        answered as usize + failed.len()
    );
    assert!(answered > 0);
    eprintln!("{tag}: {answered} requests answered while a worker restarted");
    // The restarted worker serves its shard again, under its own id.
    let by_filter = Filter::new().eq("shard", shard_of(&again.args));
    let reply: node::Result<String> = runtime.block_on(client.request(&by_filter, "ping", &()));
    assert_eq!(reply.expect("the restarted shard answers"), "pong");

    runtime.block_on(client.close());
    drop(gateway_run);
    let _ = std::fs::remove_dir_all(&keys);
}

/// The shard a worker's `-o shard=N` gives it.
fn shard_of(args: &[String]) -> i64 {
    args.iter()
        .find_map(|a| a.strip_prefix("shard="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no -o shard=N in {args:?}"))
}

/// Waits until the gateway lists every id in `ids` among its peers.
fn wait_joined(runtime: &tokio::runtime::Runtime, client: &Node, ids: &[String]) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let rows: node::Result<Vec<serde_json::Value>> =
            runtime.block_on(client.request("gateway", "zeronode:peers", &()));
        let rows = rows.expect("the gateway lists its peers");
        let joined: Vec<&str> = rows.iter().filter_map(|r| r["id"].as_str()).collect();
        if ids.iter().all(|id| joined.contains(&id.as_str())) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway has {joined:?}, not all of {ids:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A duration in Kubernetes' or compose's words: seconds, or `30s`.
fn seconds(value: &Yaml) -> f64 {
    match value {
        Yaml::Integer(n) => *n as f64,
        Yaml::String(s) => s.trim_end_matches('s').parse().expect("seconds"),
        other => panic!("not a duration: {other:?}"),
    }
}

/// The readiness probe of a Kubernetes container: its path and port.
fn probe(container: &Yaml, which: &str) -> (String, u16) {
    let get = &container[which]["httpGet"];
    let path = get["path"]
        .as_str()
        .unwrap_or_else(|| panic!("no {which} httpGet"))
        .to_owned();
    let port = get["port"].as_i64().expect("a port") as u16;
    (path, port)
}

#[test]
fn the_kubernetes_manifest_runs_as_written() {
    let docs = yaml("kubernetes.yaml");
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| {
                d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name)
            })
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let service = find("Service", "zeronode-workers");
    assert_eq!(
        service["spec"]["clusterIP"].as_str(),
        Some("None"),
        "headless"
    );
    // Named `zeronode` over TCP: the SRV records are `_zeronode._tcp.NAME`.
    assert_eq!(
        service["spec"]["ports"][0]["name"].as_str(),
        Some("zeronode")
    );
    let set = find("StatefulSet", "zeronode-workers");
    assert_eq!(
        set["spec"]["serviceName"].as_str(),
        Some("zeronode-workers")
    );
    let replicas = set["spec"]["replicas"].as_i64().expect("replicas");
    assert!(replicas > 1);
    let pod = &set["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let mount = |pod: &Yaml, container: &Yaml| {
        let volume = container["volumeMounts"][0]["name"]
            .as_str()
            .expect("a mount");
        let secret = pod["volumes"]
            .as_vec()
            .expect("volumes")
            .iter()
            .find(|v| v["name"].as_str() == Some(volume))
            .expect("the mounted volume");
        assert_eq!(
            secret["secret"]["secretName"].as_str(),
            Some("zeronode-keys")
        );
        container["volumeMounts"][0]["mountPath"]
            .as_str()
            .expect("a path")
            .to_owned()
    };
    // Each pod as Kubernetes makes it: its name and ordinal through the downward API.
    let workers: Vec<Container> = (0..replicas)
        .map(|ordinal| {
            let name = format!("zeronode-workers-{ordinal}");
            let mut env = Vec::new();
            for var in container["env"].as_vec().map(Vec::as_slice).unwrap_or(&[]) {
                let value = match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                    Some("metadata.name") => name.clone(),
                    Some("metadata.labels['apps.kubernetes.io/pod-index']") => ordinal.to_string(),
                    Some(other) => panic!("a field this test does not know: {other}"),
                    None => var["value"].as_str().expect("a value").to_owned(),
                };
                env.push((var["name"].as_str().expect("a name").to_owned(), value));
            }
            let args = strings(&container["args"])
                .into_iter()
                .map(|mut arg| {
                    for (var, value) in &env {
                        arg = arg.replace(&format!("$({var})"), value);
                    }
                    arg
                })
                .collect();
            Container {
                args,
                ready: Some(probe(container, "readinessProbe")),
                mount: mount(pod, container),
            }
        })
        .collect();
    let grace = |pod: &Yaml, args: &[String]| {
        let node: f64 = after(args, "--grace").parse().expect("seconds");
        assert!(
            seconds(&pod["terminationGracePeriodSeconds"]) > node,
            "the drain fits"
        );
    };
    grace(pod, &workers[0].args);
    assert_eq!(probe(container, "livenessProbe").0, "/livez");

    let gateway_pod = &find("Deployment", "zeronode-gateway")["spec"]["template"]["spec"];
    let gateway_container = &gateway_pod["containers"][0];
    let gateway = Container {
        args: strings(&gateway_container["args"]),
        ready: Some(probe(gateway_container, "readinessProbe")),
        mount: mount(gateway_pod, gateway_container),
    };
    grace(gateway_pod, &gateway.args);
    assert_eq!(probe(gateway_container, "startupProbe").0, "/startupz");
    assert!(gateway.args.contains(&"--router".to_owned()));
    let followed = after(&gateway.args, "--discover");
    assert!(
        followed.starts_with("zeronode-workers.") && followed.ends_with(".svc.cluster.local:5555"),
        "the gateway follows the workers' Service: {followed}"
    );
    run_mesh("k8s", 1, &workers, &gateway);
}

#[test]
fn the_compose_file_runs_as_written() {
    let docs = yaml("compose.yaml");
    let services = docs[0]["services"].as_hash().expect("services");
    let secrets = &docs[0]["secrets"];
    let container = |service: &Yaml| {
        // Each secret is mounted at /run/secrets/NAME from ./keys/NAME.
        for name in strings(&service["secrets"]) {
            assert_eq!(
                secrets[name.as_str()]["file"].as_str(),
                Some(format!("./keys/{name}").as_str())
            );
        }
        assert_eq!(
            service["build"]["dockerfile"].as_str(),
            Some("deploy/Dockerfile")
        );
        let args = strings(&service["command"]);
        let node: f64 = after(&args, "--grace").parse().expect("seconds");
        assert!(
            seconds(&service["stop_grace_period"]) > node,
            "the drain fits"
        );
        Container {
            args,
            ready: None,
            mount: "/run/secrets".into(),
        }
    };
    let mut workers = Vec::new();
    let mut gateway = None;
    for (name, service) in services {
        let name = name.as_str().expect("a name");
        if name.starts_with("worker-") {
            let aliases = strings(&service["networks"]["mesh"]["aliases"]);
            assert_eq!(aliases, ["workers"]);
            let c = container(service);
            assert_eq!(after(&c.args, "--id"), name, "a stable id");
            workers.push(c);
        } else {
            assert_eq!(name, "gateway");
            gateway = Some(container(service));
        }
    }
    assert!(workers.len() > 1);
    let gateway = gateway.expect("a gateway");
    assert!(gateway.args.contains(&"--router".to_owned()));
    assert_eq!(after(&gateway.args, "--discover"), "workers:5555");
    run_mesh("compose", 2, &workers, &gateway);
}

/// A Dockerfile's instructions, with comments and blank lines dropped (no line
/// continuations in these files); each is a word this test knows.
fn instructions(file: &str) -> Vec<(String, String)> {
    let instructions: Vec<(String, String)> = deploy(file)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (word, rest) = l.split_once(' ').unwrap_or((l, ""));
            (word.to_owned(), rest.trim().to_owned())
        })
        .collect();
    const KNOWN: [&str; 10] = [
        "FROM",
        "WORKDIR",
        "COPY",
        "RUN",
        "USER",
        "EXPOSE",
        "ENTRYPOINT",
        "CMD",
        "ENV",
        "ARG",
    ];
    for (word, _) in &instructions {
        assert!(
            KNOWN.contains(&word.as_str()),
            "{file}: unknown instruction {word}"
        );
    }
    instructions
}

#[test]
fn the_service_dockerfile_builds_a_program_of_the_library_and_runs_it_unprivileged() {
    let instructions = instructions("Dockerfile.service");
    let has = |word: &str, text: &str| instructions.iter().any(|(w, r)| w == word && r == text);
    assert!(has(
        "RUN",
        "cargo build --release --locked -p examples --bin service"
    ));
    assert!(has(
        "COPY",
        "--from=build /src/target/release/service /usr/local/bin/service"
    ));
    assert!(has("ENTRYPOINT", r#"["service"]"#));
    assert!(has("USER", "10001"));
    // The program's defaults are what the image exposes.
    assert!(has(
        "ENV",
        "ZERONODE_BIND=tcp://0.0.0.0:5555 ZERONODE_HEALTH=0.0.0.0:8080"
    ));
    assert!(has("EXPOSE", "5555 8080"));
    let program = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/src/bin/service.rs"),
    )
    .expect("the program");
    assert!(program.contains("run_until_signal"));
}

#[test]
fn the_dockerfile_builds_the_command_and_runs_it_unprivileged() {
    let instructions = instructions("Dockerfile");
    let froms: Vec<&String> = instructions
        .iter()
        .filter(|(w, _)| w == "FROM")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(froms.len(), 2, "a build stage and a runtime stage");
    assert!(froms[0].ends_with(" AS build"), "{froms:?}");
    let run = |needle: &str| {
        instructions
            .iter()
            .any(|(w, r)| w == "RUN" && r.contains(needle))
    };
    assert!(run("cargo build --release --locked -p cli --bin zeronode"));
    assert!(instructions.iter().any(|(w, r)| w == "COPY"
        && r == "--from=build /src/target/release/zeronode /usr/local/bin/zeronode"));
    let user = instructions
        .iter()
        .rev()
        .find(|(w, _)| w == "USER")
        .map(|(_, r)| r.as_str());
    assert!(
        user.is_some_and(|u| u != "root" && u != "0"),
        "runs unprivileged"
    );
    let exec = |word: &str| -> Vec<String> {
        let (_, json) = instructions
            .iter()
            .find(|(w, _)| w == word)
            .unwrap_or_else(|| panic!("no {word}"));
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{word} in exec form: {e}"))
    };
    assert_eq!(exec("ENTRYPOINT"), ["zeronode"]);
    let cmd = exec("CMD");
    flags_exist(&cmd);
    let port = after(&cmd, "--bind").rsplit(':').next().unwrap().to_owned();
    assert!(instructions
        .iter()
        .any(|(w, r)| w == "EXPOSE" && *r == port));
    // The build context is the workspace: the Dockerfile copies it whole, the
    // .dockerignore keeps target/ out.
    let ignore =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.dockerignore"))
            .expect(".dockerignore");
    assert!(ignore.lines().any(|l| l.trim() == "target/"));
    // The key files the deployment README makes stay out of every image.
    assert!(ignore.lines().any(|l| l.trim() == "deploy/keys/"));
}
