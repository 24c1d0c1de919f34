//! The deployment files in deploy/ parse, and say what their comments say: the Kubernetes
//! manifest has a headless Service whose port is named for the SRV records, workers behind
//! it, and a gateway that discovers them by the Service's name; the compose file has
//! replicas and a gateway that follows their service name; the Dockerfile builds the
//! `zeronode` command and runs it unprivileged. Every flag the files give `zeronode node`
//! is one it accepts. (Not run here: CI has no container runtime.)

mod support;

use std::path::PathBuf;

use support::zeronode;
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

#[test]
fn the_kubernetes_manifest_has_a_headless_service_workers_and_a_gateway_following_it() {
    let docs = yaml("kubernetes.yaml");
    let kind = |doc: &Yaml, kind: &str, name: &str| {
        doc["kind"].as_str() == Some(kind) && doc["metadata"]["name"].as_str() == Some(name)
    };
    let service = docs
        .iter()
        .find(|d| kind(d, "Service", "zeronode-workers"))
        .expect("the workers' Service");
    assert_eq!(
        service["spec"]["clusterIP"].as_str(),
        Some("None"),
        "headless"
    );
    let port = &service["spec"]["ports"][0];
    // Named `zeronode` over TCP: the SRV records are `_zeronode._tcp.NAME`.
    assert_eq!(port["name"].as_str(), Some("zeronode"));
    assert_eq!(port["protocol"].as_str(), Some("TCP"));
    let worker_port = port["port"].as_i64().expect("a port");
    let selector = service["spec"]["selector"]["app"]
        .as_str()
        .expect("a selector");

    let workers = docs
        .iter()
        .find(|d| kind(d, "Deployment", "zeronode-workers"))
        .expect("the workers' Deployment");
    let template = &workers["spec"]["template"];
    assert_eq!(
        template["metadata"]["labels"]["app"].as_str(),
        Some(selector)
    );
    assert!(workers["spec"]["replicas"].as_i64().unwrap_or(0) > 1);
    let args = strings(&template["spec"]["containers"][0]["args"]);
    flags_exist(&args);
    assert_eq!(
        after(&args, "--bind"),
        format!("tcp://0.0.0.0:{worker_port}")
    );

    let gateway = docs
        .iter()
        .find(|d| kind(d, "Deployment", "zeronode-gateway"))
        .expect("the gateway's Deployment");
    let args = strings(&gateway["spec"]["template"]["spec"]["containers"][0]["args"]);
    flags_exist(&args);
    let followed = after(&args, "--discover");
    assert!(
        followed.starts_with("zeronode-workers.")
            && followed.ends_with(&format!(".svc.cluster.local:{worker_port}")),
        "the gateway follows the Service: {followed}"
    );
}

#[test]
fn the_compose_file_has_replicas_and_a_gateway_following_them() {
    let docs = yaml("compose.yaml");
    let services = &docs[0]["services"];
    let worker = &services["worker"];
    assert!(worker["deploy"]["replicas"].as_i64().unwrap_or(0) > 1);
    let args = strings(&worker["command"]);
    flags_exist(&args);
    let bind = after(&args, "--bind");
    let port = bind.rsplit(':').next().expect("a port");
    let gateway = &services["gateway"];
    let args = strings(&gateway["command"]);
    flags_exist(&args);
    assert_eq!(after(&args, "--discover"), format!("worker:{port}"));
    assert_eq!(
        worker["build"]["dockerfile"].as_str(),
        Some("deploy/Dockerfile")
    );
}

#[test]
fn the_dockerfile_builds_the_command_and_runs_it_unprivileged() {
    let text = deploy("Dockerfile");
    // Instructions, with comments and blank lines dropped (no line continuations here).
    let instructions: Vec<(String, String)> = text
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
        assert!(KNOWN.contains(&word.as_str()), "unknown instruction {word}");
    }
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
}
