//! Discovery across hosts: three workers in network namespaces of their own (each its own
//! address, joined to this namespace by a veth pair), one DNS name for all three, and a
//! gateway here that follows the name. One host is cut off (its link goes down, as a
//! crashed machine's would): it leaves, and its record goes; it comes back with its
//! record: it rejoins through the name. Needs root and `ip` (iproute2), like the
//! network-cut test in node/tests/faults.rs; skips, saying so, without them.

mod support;

#[path = "../../node/tests/support/dns.rs"]
mod dns;

use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};

use dns::TestDns;
use support::NodeProcess;

/// Runs a command quietly; whether it succeeded.
fn run(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Three namespaces, each with a veth pair to this one; removed on drop.
struct Hosts {
    namespaces: Vec<String>,
    /// Our end of each host's link.
    links: Vec<String>,
    /// Each host's address.
    addresses: Vec<Ipv4Addr>,
}

impl Hosts {
    fn create() -> Hosts {
        let tag = std::process::id() % 100_000;
        let base = (tag % 80) as u8 * 3;
        let mut hosts = Hosts {
            namespaces: Vec::new(),
            links: Vec::new(),
            addresses: Vec::new(),
        };
        for n in 0..3u8 {
            let namespace = format!("zn-d{n}-{tag}");
            let (ours, theirs) = (format!("znd{n}h{tag}"), format!("znd{n}n{tag}"));
            let subnet = format!("10.234.{}", base + n);
            let ok = run(&["ip", "netns", "add", &namespace])
                && run(&[
                    "ip", "link", "add", &ours, "type", "veth", "peer", "name", &theirs,
                ])
                && run(&["ip", "link", "set", &theirs, "netns", &namespace])
                && run(&["ip", "addr", "add", &format!("{subnet}.1/24"), "dev", &ours])
                && run(&[
                    "ip",
                    "-n",
                    &namespace,
                    "addr",
                    "add",
                    &format!("{subnet}.2/24"),
                    "dev",
                    &theirs,
                ])
                && run(&["ip", "link", "set", &ours, "up"])
                && run(&["ip", "-n", &namespace, "link", "set", &theirs, "up"])
                && run(&["ip", "-n", &namespace, "link", "set", "lo", "up"]);
            hosts.namespaces.push(namespace);
            hosts.links.push(ours);
            hosts.addresses.push(Ipv4Addr::new(10, 234, base + n, 2));
            assert!(ok, "could not set up the network namespaces");
        }
        hosts
    }

    /// Takes host `n`'s link down (`false`) or up.
    fn link(&self, n: usize, up: bool) {
        let state = if up { "up" } else { "down" };
        assert!(run(&["ip", "link", "set", &self.links[n], state]));
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for link in &self.links {
            run(&["ip", "link", "del", link]);
        }
        for namespace in &self.namespaces {
            run(&["ip", "netns", "del", namespace]);
        }
    }
}

#[test]
fn a_host_cut_off_leaves_and_rejoins_through_the_name() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if !root || !run(&["ip", "-V"]) {
        eprintln!("skipped: needs root and ip (iproute2); .ci/run installs it");
        return;
    }
    let hosts = Hosts::create();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dns = runtime.block_on(TestDns::start());
    let ips: Vec<IpAddr> = hosts.addresses.iter().map(|a| IpAddr::V4(*a)).collect();
    let ttl = 1;
    runtime.block_on(dns.set("workers", &ips, ttl));

    let port = 7100 + (std::process::id() % 500) as u16;
    let mut workers: Vec<NodeProcess> = Vec::new();
    for (n, address) in hosts.addresses.iter().enumerate() {
        let bind = format!("tcp://{address}:{port}");
        let id = format!("host-{n}");
        let args = ["--id", &id, "--bind", &bind, "--heartbeat-ms", "200"];
        workers.push(NodeProcess::start_in(Some(&hosts.namespaces[n]), &args));
    }
    let name = format!("workers.{}:{port}", dns::ZONE);
    let server = dns.address.to_string();
    let mut gateway = NodeProcess::start(&[
        "--id",
        "gateway",
        "--discover",
        &name,
        "--dns-server",
        &server,
        "--heartbeat-ms",
        "200",
    ]);
    let mut joined = std::collections::BTreeSet::new();
    while joined.len() < 3 {
        let line = gateway.wait_for("each host joined", |l| l.starts_with("peer joined host-"));
        joined.insert(line);
    }

    // Host 1 is cut off: its heartbeats stop, it leaves.
    hosts.link(1, false);
    gateway.wait_for("host 1 left", |l| {
        l.starts_with("peer left host-1 (upstream")
    });
    // Its record goes (the orchestrator saw it die): the name no longer lists it.
    runtime.block_on(dns.set("workers", &[ips[0], ips[2]], ttl));
    gateway.wait_for("the name without host 1", |l| {
        l.starts_with(&format!("discovered {name}: 2 listed"))
    });
    // It comes back, and so does its record: it rejoins through the name.
    hosts.link(1, true);
    runtime.block_on(dns.set("workers", &ips, ttl));
    gateway.wait_for("host 1 rejoined", |l| {
        l.starts_with("peer joined host-1 (upstream)")
    });
    let rest: Vec<String> = gateway.rest_so_far();
    assert!(
        !rest
            .iter()
            .any(|l| l.starts_with("peer left host-0") || l.starts_with("peer left host-2")),
        "the other hosts stayed: {rest:?}"
    );
}
