//! The command line: clap types for every subcommand, and the small parsers behind them
//! (typed `key=value` pairs, ZeroMQ addresses, JSON data).
//!
//! Everything here is pure: parsing never touches the network, so every input error is
//! reported before a socket is opened.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use node::{Filter, Options, Scope, Value};

use crate::error::Error;

/// `zeronode`: a brokerless service mesh over ZeroMQ, from the command line.
#[derive(Debug, Parser)]
#[command(name = "zeronode", version, about, long_about = None)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a node with the built-in handlers `echo`, `ping`, `delay`, `count` (streamed)
    /// and `zeronode:peers` (a `--router` only `zeronode:peers`, unless `--demo`), until
    /// Ctrl-C or SIGTERM.
    Node(NodeArgs),
    /// Send one request and print the reply as one line of JSON.
    Request(RequestArgs),
    /// Send one request for a streamed reply and print each item as a line of JSON as it
    /// arrives (`zeronode node` streams `count`); with --all, from every match.
    Stream(StreamArgs),
    /// Send one tick (fire and forget) and print `sent` or `sent to N nodes`.
    Tick(TickArgs),
    /// List the peers of a running `zeronode node`, with their options.
    Peers(PeersArgs),
    /// Print one node's description: what it handles, its peers, its limits, how its
    /// events fare (the node at --connect, or any node it reaches by id).
    Info(InfoArgs),
    /// List every node reachable from --connect (its peers, and through routers theirs),
    /// one line each.
    Ls(LsArgs),
    /// A live full-screen view of the mesh: one row per node, refreshed every second
    /// (plain lines when stdout is not a terminal).
    Top(TopArgs),
    /// An interactive session: connect, peers, info, request, tick, meta, timeout.
    Shell(ShellArgs),
    /// Write a new CURVE key pair to FILE (private) and its public key to FILE.pub.
    Keygen(KeygenArgs),
    /// Measure each layer beside raw libzmq, or a hub with many peers (`bench scale`): the
    /// benchmark harness. `zeronode bench --help` lists its options.
    #[command(disable_help_flag = true)]
    Bench(BenchArgs),
}

/// `zeronode keygen`.
#[derive(Debug, Args)]
pub(crate) struct KeygenArgs {
    /// Where to write the key pair; the public key goes to the same path plus `.pub`.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
    /// Replace existing files.
    #[arg(long)]
    pub(crate) force: bool,
}

/// CURVE security of a command's connections (see `zeronode keygen`).
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct SecurityArgs {
    /// This node's CURVE key pair, a file written by `zeronode keygen`. A node with a key
    /// serves only CURVE connections (encrypted, authenticated by key).
    #[arg(long, value_name = "FILE")]
    pub(crate) key: Option<PathBuf>,
    /// The CURVE public key of the node(s) --connect reaches (40 characters of Z85, or a
    /// key file): every --connect is then secured, and so is every connection to an
    /// address --discover finds. Without --key, a one-time key pair is
    /// made for the connection. (A Z85 key may start with `-`: taken as the value.)
    #[arg(long, value_name = "KEY|FILE", allow_hyphen_values = true)]
    pub(crate) server_key: Option<String>,
    /// The ZMTP engine of the command's sockets: `native` (ZMTP in Rust) or `libzmq`.
    /// Default: the `ZERONODE_ENGINE` environment variable, else native. Either talks to
    /// nodes on the other.
    #[arg(long, value_name = "ENGINE")]
    pub(crate) engine: Option<node::Engine>,
}

/// `zeronode bench`: everything after it goes to the harness untouched.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// The harness's options (see `zeronode bench --help`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "HARNESS ARGS"
    )]
    pub(crate) args: Vec<std::ffi::OsString>,
}

/// `zeronode node`.
#[derive(Debug, Args)]
pub(crate) struct NodeArgs {
    /// This node's id (default: a generated `node-xxxxxxxxxxxx`).
    #[arg(long, value_name = "ID")]
    pub(crate) id: Option<String>,
    /// Address to serve on, e.g. `tcp://127.0.0.1:0` (port 0 picks a free port; the real
    /// address is printed as `listening on ADDR`).
    #[arg(long, value_name = "ADDR", value_parser = parse_bind_address)]
    pub(crate) bind: Option<String>,
    /// Node to connect to; repeat the flag (or separate with commas) for several.
    #[arg(short, long, value_name = "ADDR", value_delimiter = ',', value_parser = parse_connect_address)]
    pub(crate) connect: Vec<String>,
    /// A DNS name to follow: `NAME:PORT` connects to every A and AAAA record of NAME at
    /// PORT, `NAME` to every SRV record `_zeronode._tcp.NAME`; re-resolved by the
    /// records' TTL (1 s to 60 s) and when a connection fails. Repeat it for several.
    #[arg(long, value_name = "NAME[:PORT]")]
    pub(crate) discover: Vec<String>,
    /// The name server --discover asks (`IP:PORT`), instead of the system's
    /// (`/etc/resolv.conf`).
    #[arg(long, value_name = "IP:PORT", requires = "discover")]
    pub(crate) dns_server: Option<std::net::SocketAddr>,
    /// An option this node advertises to its peers (typed: see `KEY=VALUE` below); repeat it.
    #[arg(short = 'o', long = "option", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub(crate) options: Vec<KeyValue>,
    /// Print the number of peers and the requests and ticks handled per second, every
    /// SECONDS (fractions allowed).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub(crate) stats: Option<Duration>,
    /// Heartbeat interval in milliseconds (a silent peer is dropped after 2.5 intervals).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) heartbeat_ms: Option<u64>,
    /// How long each `--connect` waits for the remote node's handshake, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) connect_timeout: u64,
    /// On Ctrl-C or SIGTERM, how long requests in flight may take to finish before the
    /// node closes anyway, in SECONDS (fractions allowed); a second signal stops waiting.
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = parse_seconds)]
    pub(crate) grace: Duration,
    /// Print one line per request and tick received.
    #[arg(short, long)]
    pub(crate) verbose: bool,
    /// Serve the node's metrics in Prometheus text format at `http://ADDR/metrics`, e.g.
    /// `127.0.0.1:9100` (port 0 picks a free port; printed as `metrics on ...`).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) metrics: Option<String>,
    /// Serve the node's health for an orchestrator's probes at `http://ADDR/livez`,
    /// `/readyz` and `/startupz` (200 or 503), e.g. `0.0.0.0:8080` (printed as
    /// `health on ...`). Ready once bound and every --connect joined and each --discover
    /// joined a peer; not ready from the first signal on.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) health: Option<String>,
    /// Run as a router node: forward requests and ticks that its peers cannot deliver
    /// themselves (to ids they are not joined to, or filters nothing near them matches). A
    /// router serves none of the built-in handlers (`echo`, `ping`, `delay`, `count`, the
    /// tick counter), so the nodes behind it answer them, not the router; --demo serves
    /// them too.
    #[arg(long)]
    pub(crate) router: bool,
    /// With --router: serve the built-in handlers too (a node that is no router always
    /// does).
    #[arg(long, requires = "router")]
    pub(crate) demo: bool,
    /// Keys and server key.
    #[command(flatten)]
    pub(crate) security: SecurityArgs,
    /// A client public key this node accepts (needs --key; Z85 or a key file); repeat it.
    /// Without --allow, any node that knows this node's public key may connect. (A Z85
    /// key may start with `-`: taken as the value.)
    #[arg(long, value_name = "KEY|FILE", allow_hyphen_values = true)]
    pub(crate) allow: Vec<String>,
    /// Who may ask this node to describe itself (`info`, `ls`, `top`): any joined node,
    /// only the --allow keys (under CURVE), or nobody.
    #[arg(long, value_enum, value_name = "WHO", default_value_t = DescribeTo::Anyone)]
    pub(crate) describe: DescribeTo,
}

/// `zeronode node --describe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum DescribeTo {
    /// Any joined node.
    Anyone,
    /// The clients whose keys --allow lists.
    Allowed,
    /// Nobody.
    Off,
}

impl NodeArgs {
    /// The `-o` pairs as node options (a later key replaces an earlier one).
    pub(crate) fn options(&self) -> Options {
        self.options
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect()
    }
}

/// How a short-lived command reaches the mesh: the nodes it connects to.
#[derive(Debug, Args)]
pub(crate) struct ConnectArgs {
    /// Node to connect to; repeat the flag (or separate with commas) for several.
    #[arg(short, long, value_name = "ADDR", required = true, value_delimiter = ',', value_parser = parse_connect_address)]
    pub(crate) connect: Vec<String>,
    /// How long each connect waits for the remote node's handshake, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) connect_timeout: u64,
    /// Keys and server key.
    #[command(flatten)]
    pub(crate) security: SecurityArgs,
}

impl ConnectArgs {
    /// The handshake timeout.
    pub(crate) fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout)
    }
}

/// Who a request or tick goes to. Without `--to`, `--any` or `--all`, it goes to the node
/// at `--connect` (which must then be a single address).
#[derive(Debug, Args)]
pub(crate) struct TargetArgs {
    /// The id of the node to send to.
    #[arg(long, value_name = "ID", conflicts_with = "any")]
    pub(crate) to: Option<String>,
    /// Send to one node matching the `-f` conditions (every joined node without `-f`).
    #[arg(long)]
    pub(crate) any: bool,
    /// An exact-match condition on the peers' options (typed like `-o`); repeat it: all
    /// must hold. Needs `--any` (or `--all` for a tick or a stream).
    #[arg(short = 'f', long = "filter", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub(crate) filter: Vec<KeyValue>,
    /// Only consider the nodes this one connected to (with `--any` / `--all`).
    #[arg(long, conflicts_with = "down")]
    pub(crate) up: bool,
    /// Only consider the nodes connected to this one (with `--any` / `--all`).
    #[arg(long)]
    pub(crate) down: bool,
}

/// Where a message goes, once the flags are checked.
#[derive(Debug, Clone)]
pub(crate) enum Aim {
    /// The node at the only `--connect` address, whatever its id.
    Connected,
    /// The node with this id.
    Id(String),
    /// One node matching the filter.
    Any(Conditions, Scope),
    /// Every node matching the filter (a tick, or a stream from each).
    All(Conditions, Scope),
}

impl TargetArgs {
    /// Checks the flags together and says where the message goes. `all` is `--all` (a tick,
    /// a stream).
    pub(crate) fn aim(&self, all: bool, connect: &[String]) -> Result<Aim, Error> {
        let broadcast = self.any || all;
        if !broadcast {
            if !self.filter.is_empty() {
                return Err(Error::Usage(
                    "-f/--filter needs --any (or --all for a tick or a stream)".into(),
                ));
            }
            if self.up || self.down {
                return Err(Error::Usage(
                    "--up/--down need --any (or --all for a tick or a stream)".into(),
                ));
            }
        }
        let conditions = Conditions(self.filter.clone());
        let scope = match (self.up, self.down) {
            (true, _) => Scope::Up,
            (_, true) => Scope::Down,
            _ => Scope::Both,
        };
        Ok(match (&self.to, self.any, all) {
            (Some(id), _, _) => Aim::Id(id.clone()),
            (None, true, _) => Aim::Any(conditions, scope),
            (None, false, true) => Aim::All(conditions, scope),
            (None, false, false) if connect.len() == 1 => Aim::Connected,
            (None, false, false) => {
                return Err(Error::Usage(
                    "with several --connect addresses, say which node: --to ID or --any".into(),
                ))
            }
        })
    }
}

/// The target flags of a call typed in `zeronode shell`: the one-shot commands' own
/// ([`TargetArgs`], and `tick`'s `--all`), so both read them alike.
#[derive(Debug, Parser)]
#[command(name = "call", no_binary_name = true, disable_help_flag = true)]
struct LineFlags {
    /// Who answers.
    #[command(flatten)]
    target: TargetArgs,
    /// Every node matching the `-f` conditions (a tick, or a stream from each).
    #[arg(long, conflicts_with_all = ["to", "any"])]
    all: bool,
}

/// A call typed in `zeronode shell`, once read: `[FLAGS] [ID] EVENT [JSON]`.
#[derive(Debug)]
pub(crate) struct LineCall {
    /// Where it goes: the ID, or what the flags say.
    pub(crate) aim: Aim,
    /// The event name.
    pub(crate) event: String,
    /// The data, the rest of the line as typed (`None` when there is none).
    pub(crate) data: Option<String>,
}

/// Reads a call typed in the shell after its command word: target flags first (`--to ID`,
/// `--any`, `--all`, `-f KEY=VALUE`, `--up`, `--down`, as `request`, `tick` and `stream`
/// take them), else the id as the first word; then the event; the rest of the line is the
/// JSON data, spaces and all. An error is the message to print.
pub(crate) fn parse_line_call(line: &str) -> Result<LineCall, String> {
    use clap::CommandFactory;
    let flags_command = LineFlags::command();
    let mut flags = Vec::new();
    let mut rest = line.trim();
    loop {
        let (word, after) = split_word(rest);
        if !word.starts_with('-') || word == "-" {
            break;
        }
        flags.push(word);
        rest = after;
        if takes_value(&flags_command, word) {
            let (value, after) = split_word(rest);
            if value.is_empty() {
                break;
            }
            flags.push(value);
            rest = after;
        }
    }
    let mut parsed = LineFlags::try_parse_from(&flags).map_err(|e| clap_message(&e))?;
    let target = &mut parsed.target;
    if target.to.is_none() && !target.any && !parsed.all {
        let (id, after) = split_word(rest);
        if id.is_empty() {
            return Err("say who: an ID, --to ID, --any or --all".into());
        }
        target.to = Some(id.to_owned());
        rest = after;
    }
    let aim = parsed
        .target
        .aim(parsed.all, &[])
        .map_err(|e| e.to_string())?;
    let (event, data) = split_word(rest);
    if event.is_empty() {
        return Err("the EVENT is missing".into());
    }
    if event.starts_with('-') {
        return Err(format!(
            "{event}: flags go first, before the ID and the EVENT"
        ));
    }
    Ok(LineCall {
        aim,
        event: event.to_owned(),
        data: (!data.is_empty()).then(|| data.to_owned()),
    })
}

/// Whether `word`, a target flag of a shell call, takes the next word as its value (`-f`,
/// `--to`), for completion.
pub(crate) fn line_flag_takes_value(word: &str) -> bool {
    use clap::CommandFactory;
    takes_value(&LineFlags::command(), word)
}

/// Whether `word`, a flag of `command`, takes the next word as its value (`-f`, `--to`; not
/// `--filter=k=v`, whose value is attached).
fn takes_value(command: &clap::Command, word: &str) -> bool {
    let takes = |arg: &clap::Arg| arg.get_action().takes_values();
    if let Some(long) = word.strip_prefix("--") {
        return !long.contains('=')
            && command
                .get_arguments()
                .any(|arg| arg.get_long() == Some(long) && takes(arg));
    }
    let mut short = word.trim_start_matches('-').chars();
    match (short.next(), short.next()) {
        (Some(c), None) => command
            .get_arguments()
            .any(|arg| arg.get_short() == Some(c) && takes(arg)),
        _ => false,
    }
}

/// A clap error in the shell: its first line, without clap's `error: ` (the shell adds its
/// own).
fn clap_message(error: &clap::Error) -> String {
    let text = error.render().to_string();
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    first.trim_start_matches("error: ").trim().to_owned()
}

/// The first word of `line` and the rest, trimmed.
pub(crate) fn split_word(line: &str) -> (&str, &str) {
    let line = line.trim_start();
    match line.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim_start()),
        None => (line, ""),
    }
}

/// `zeronode request`.
#[derive(Debug, Args)]
pub(crate) struct RequestArgs {
    /// Where to connect.
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    /// Who answers.
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// The event name, e.g. `echo`, `ping`, `delay`.
    #[arg(value_name = "EVENT")]
    pub(crate) event: String,
    /// The request's data as JSON (sent as MessagePack); `null` when absent.
    #[arg(value_name = "JSON")]
    pub(crate) data: Option<String>,
    /// A metadata entry sent with the request (text); repeat it. The reply's metadata is
    /// printed on stderr, one `meta KEY=VALUE` line each (`zeronode node`'s `echo` sends the
    /// request's back).
    #[arg(short = 'm', long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta)]
    pub(crate) meta: Vec<(String, String)>,
    /// How long to wait for the reply, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) timeout: u64,
}

/// `zeronode stream`: `zeronode request`'s arguments, and the stream's own bounds.
#[derive(Debug, Args)]
pub(crate) struct StreamArgs {
    /// Where to connect.
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    /// Who streams.
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Stream from every node matching the `-f` conditions (every joined node without
    /// `-f`), here and through routers: each item is printed as `{"from": ID, "item":
    /// ITEM}`; a node that fails ends alone, the others go on.
    #[arg(long, conflicts_with_all = ["to", "any"])]
    pub(crate) all: bool,
    /// The event name, e.g. `count` (a `zeronode node` streams `count N`: 1 to N).
    #[arg(value_name = "EVENT")]
    pub(crate) event: String,
    /// The request's data as JSON (sent as MessagePack); `null` when absent.
    #[arg(value_name = "JSON")]
    pub(crate) data: Option<String>,
    /// A metadata entry sent with the request (text); repeat it.
    #[arg(short = 'm', long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta)]
    pub(crate) meta: Vec<(String, String)>,
    /// How long the whole stream may last, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) timeout: u64,
    /// How long to wait for each next item, in milliseconds (default: only --timeout). Not
    /// with --all.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "all")]
    pub(crate) idle: Option<u64>,
    /// Items the stream holds at most before the sender waits (its credit window; the
    /// library's default, fewer granted while items are large, about 2 MiB at most). With
    /// --all each node's stream has the library's default.
    #[arg(long, value_name = "N", default_value_t = node::DEFAULT_WINDOW, value_parser = clap::value_parser!(u32).range(1..=1_048_576), conflicts_with = "all")]
    pub(crate) window: u32,
}

/// `zeronode tick`.
#[derive(Debug, Args)]
pub(crate) struct TickArgs {
    /// Where to connect.
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    /// Who receives it.
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Send to every node matching the `-f` conditions (every joined node without `-f`).
    #[arg(long, conflicts_with_all = ["to", "any"])]
    pub(crate) all: bool,
    /// The event name.
    #[arg(value_name = "EVENT")]
    pub(crate) event: String,
    /// The tick's data as JSON (sent as MessagePack); `null` when absent.
    #[arg(value_name = "JSON")]
    pub(crate) data: Option<String>,
    /// A metadata entry sent with the tick (text); repeat it.
    #[arg(short = 'm', long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta)]
    pub(crate) meta: Vec<(String, String)>,
}

/// `zeronode peers`.
#[derive(Debug, Args)]
pub(crate) struct PeersArgs {
    /// The `zeronode node` to ask.
    #[arg(short, long, value_name = "ADDR", value_parser = parse_connect_address)]
    pub(crate) connect: String,
    /// How long the connect waits for the remote node's handshake, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) connect_timeout: u64,
    /// How long to wait for the answer, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) timeout: u64,
    /// Print one JSON object per peer (`{"id":..,"direction":..,"options":{..}}`) instead
    /// of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Keys and server key.
    #[command(flatten)]
    pub(crate) security: SecurityArgs,
}

/// `zeronode info`.
#[derive(Debug, Args)]
pub(crate) struct InfoArgs {
    /// Where to connect.
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    /// The node to describe (default: the node at --connect); through a router, any node
    /// it reaches.
    #[arg(value_name = "ID")]
    pub(crate) id: Option<String>,
    /// Print the description as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    /// How long to wait for the answer, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) timeout: u64,
}

/// `zeronode ls`.
#[derive(Debug, Args)]
pub(crate) struct LsArgs {
    /// Where to connect.
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    /// Print one JSON object per node instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `zeronode top`.
#[derive(Debug, Args)]
pub(crate) struct TopArgs {
    /// Where to connect.
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
    /// How often to refresh, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(100..))]
    pub(crate) interval: u64,
    /// Stop after N refreshes (default: until q or Ctrl-C).
    #[arg(long, value_name = "N")]
    pub(crate) count: Option<u64>,
}

/// `zeronode shell`.
#[derive(Debug, Args)]
pub(crate) struct ShellArgs {
    /// Node(s) to connect to at the start (`connect ADDR` in the session adds more).
    #[arg(short, long, value_name = "ADDR", value_delimiter = ',', value_parser = parse_connect_address)]
    pub(crate) connect: Vec<String>,
    /// How long each connect waits for the remote node's handshake, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) connect_timeout: u64,
    /// Keys and server key.
    #[command(flatten)]
    pub(crate) security: SecurityArgs,
}

/// One typed `key=value` pair, from `-o` or `-f`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KeyValue {
    /// The option's name.
    pub(crate) key: String,
    /// Its typed value.
    pub(crate) value: Value,
}

/// The `-f` conditions of a command: exact matches, all ANDed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Conditions(pub(crate) Vec<KeyValue>);

impl Conditions {
    /// The node filter: one exact-match condition per pair (none: every peer).
    pub(crate) fn filter(&self) -> Filter {
        self.0.iter().fold(Filter::new(), |f, kv| {
            f.eq(kv.key.clone(), kv.value.clone())
        })
    }
}

/// Shows the conditions as they were typed: `role=api tier=1` (nothing when there is none).
impl std::fmt::Display for Conditions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, kv) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{}={}", kv.key, format_value(&kv.value))?;
        }
        Ok(())
    }
}

/// Parses `key=value`. The value is typed:
///
/// - `true` / `false`: a bool;
/// - a whole number (`42`, `-3`): an integer; a decimal (`2.5`, `1e3`): a float;
/// - anything with a comma: a list of such values (`tags=a,b`; a trailing comma makes a
///   one-element list, `tags=a,`; a lone comma an empty one);
/// - `"..."` (quotes included, as the shell passes them: `'k="007"'`): that string as is;
/// - anything else: a string.
pub(crate) fn parse_key_value(arg: &str) -> Result<KeyValue, String> {
    let (key, raw) = arg
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got {arg:?}"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("the key is empty in {arg:?}"));
    }
    Ok(KeyValue {
        key: key.to_owned(),
        value: parse_value(raw),
    })
}

/// A `--meta KEY=VALUE`: the value is text, taken as it is.
pub(crate) fn parse_meta(arg: &str) -> Result<(String, String), String> {
    let (key, value) = arg
        .split_once('=')
        .ok_or_else(|| format!("expected KEY=VALUE, got {arg:?}"))?;
    if key.is_empty() || key.starts_with(':') || key.len() > 255 {
        return Err(format!(
            "a metadata key is 1 to 255 bytes and does not start with ':', got {key:?}"
        ));
    }
    Ok((key.to_owned(), value.to_owned()))
}

/// Types one value as [`parse_key_value`] describes.
pub(crate) fn parse_value(raw: &str) -> Value {
    if let Some(quoted) = raw
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    {
        return Value::String(quoted.to_owned());
    }
    if raw.contains(',') {
        return Value::List(
            raw.split(',')
                .filter(|item| !item.is_empty())
                .map(parse_scalar)
                .collect(),
        );
    }
    parse_scalar(raw)
}

/// Types one list element or plain value: bool, integer, float or string.
fn parse_scalar(raw: &str) -> Value {
    match raw {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    if let Ok(i) = raw.parse::<i64>() {
        return Value::Int(i);
    }
    // `f64::from_str` also takes `inf`, `NaN` and `infinity`: those stay strings.
    let numeric = !raw.is_empty()
        && raw
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'));
    if numeric {
        if let Ok(x) = raw.parse::<f64>() {
            if x.is_finite() {
                return Value::Float(x);
            }
        }
    }
    Value::String(raw.to_owned())
}

/// Shows a value in the syntax `-o` accepts, so what `peers` prints can be typed back:
/// lists as `a,b` (`a,` for one element, `,` for none).
pub(crate) fn format_value(value: &Value) -> String {
    match value {
        Value::List(items) => match items.len() {
            0 => ",".to_owned(),
            1 => format!("{},", format_value(&items[0])),
            _ => items.iter().map(format_value).collect::<Vec<_>>().join(","),
        },
        other => other.to_string(),
    }
}

/// The transports a CLI node can use (`inproc://` only works inside one process).
const SCHEMES: &str = "tcp://HOST:PORT or ipc://PATH";

/// Checks an address to connect to: `tcp://HOST:PORT` (port 1 to 65535) or `ipc://PATH`.
pub(crate) fn parse_connect_address(arg: &str) -> Result<String, String> {
    check_address(arg, false).map(|()| arg.to_owned())
}

/// Checks an address to bind: `tcp://HOST:PORT` (port 0 or `*` picks one; host `*` is every
/// interface) or `ipc://PATH`.
pub(crate) fn parse_bind_address(arg: &str) -> Result<String, String> {
    check_address(arg, true).map(|()| arg.to_owned())
}

/// The syntax check behind both address parsers; libzmq checks the rest (host names, paths).
fn check_address(arg: &str, bind: bool) -> Result<(), String> {
    let expected = || format!("expected {SCHEMES}");
    let (scheme, rest) = arg.split_once("://").ok_or_else(expected)?;
    match scheme {
        "ipc" if !rest.is_empty() => Ok(()),
        "tcp" => {
            let (host, port) = rest.rsplit_once(':').ok_or_else(expected)?;
            if host.is_empty() {
                return Err(format!("missing host, {}", expected()));
            }
            if bind && port == "*" {
                return Ok(());
            }
            match port.parse::<u16>() {
                Ok(0) if !bind => Err("port 0 can only be bound, not connected to".into()),
                Ok(_) => Ok(()),
                Err(_) => Err(format!("invalid port {port:?}, {}", expected())),
            }
        }
        _ => Err(expected()),
    }
}

/// Parses a positive number of seconds, fractions allowed (`--stats 0.5`).
fn parse_seconds(arg: &str) -> Result<Duration, String> {
    let seconds: f64 = arg
        .parse()
        .map_err(|_| format!("expected a number of seconds, got {arg:?}"))?;
    if !(seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0) {
        return Err("expected a number of seconds above 0 and at most 86400".into());
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses the optional JSON data of a request or tick (`null` when absent).
pub(crate) fn parse_data(data: Option<&str>) -> Result<serde_json::Value, Error> {
    match data {
        None => Ok(serde_json::Value::Null),
        Some(text) => serde_json::from_str(text).map_err(Error::InvalidJson),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(arg: &str) -> Value {
        match parse_key_value(arg) {
            Ok(kv) => kv.value,
            Err(e) => panic!("{arg}: {e}"),
        }
    }

    /// A Z85 key may start with `-` (one key in 85): it is the option's value, not a flag.
    #[test]
    fn a_key_that_starts_with_a_dash_is_a_value() {
        use clap::Parser;
        let key = "-i0Ao5A:rmEr4Av4PzL[b.(tBzH-NT$2i[w!z]x!";
        let cli = Cli::try_parse_from([
            "zeronode",
            "request",
            "--connect",
            "tcp://127.0.0.1:1",
            "--server-key",
            key,
            "ping",
        ])
        .expect("parsed");
        let Command::Request(args) = cli.command else {
            panic!("a request");
        };
        assert_eq!(args.connect.security.server_key.as_deref(), Some(key));
        assert_eq!(args.event, "ping");
    }

    #[test]
    fn values_are_typed() {
        assert_eq!(kv("a=true"), Value::Bool(true));
        assert_eq!(kv("a=false"), Value::Bool(false));
        assert_eq!(kv("a=42"), Value::Int(42));
        assert_eq!(kv("a=-3"), Value::Int(-3));
        assert_eq!(kv("a=2.5"), Value::Float(2.5));
        assert_eq!(kv("a=1e3"), Value::Float(1000.0));
        assert_eq!(kv("a=api"), Value::from("api"));
        assert_eq!(kv("a="), Value::from(""));
        assert_eq!(kv("a=True"), Value::from("True"));
    }

    #[test]
    fn non_finite_and_odd_numbers_stay_strings() {
        assert_eq!(kv("a=inf"), Value::from("inf"));
        assert_eq!(kv("a=NaN"), Value::from("NaN"));
        assert_eq!(kv("a=1e999"), Value::from("1e999"));
        assert_eq!(kv("a=1.2.3"), Value::from("1.2.3"));
        assert_eq!(kv("a=-"), Value::from("-"));
    }

    #[test]
    fn commas_make_lists_of_typed_values() {
        assert_eq!(kv("tags=a,b"), Value::from(vec!["a", "b"]));
        assert_eq!(
            kv("mix=a,1,2.5,true"),
            Value::List(vec![
                Value::from("a"),
                Value::Int(1),
                Value::Float(2.5),
                Value::Bool(true)
            ])
        );
        assert_eq!(kv("one=a,"), Value::from(vec!["a"]));
        assert_eq!(kv("none=,"), Value::List(vec![]));
    }

    #[test]
    fn quotes_force_a_string() {
        assert_eq!(kv(r#"zip="007""#), Value::from("007"));
        assert_eq!(kv(r#"s="a,b""#), Value::from("a,b"));
        assert_eq!(kv(r#"s="true""#), Value::from("true"));
    }

    #[test]
    fn value_may_hold_an_equals_sign() {
        assert_eq!(kv("expr=a=b"), Value::from("a=b"));
    }

    #[test]
    fn malformed_pairs_are_refused() {
        assert!(parse_key_value("role").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_key_value("=api")
            .unwrap_err()
            .contains("key is empty"));
    }

    #[test]
    fn format_value_reads_back_the_same() {
        for arg in [
            "a=x", "a=1", "a=2.5", "a=true", "a=x,y", "a=x,", "a=,", "a=1,b",
        ] {
            let value = kv(arg);
            let back = kv(&format!("a={}", format_value(&value)));
            assert_eq!(back, value, "{arg}");
        }
        assert_eq!(format_value(&Value::Float(5.0)), "5.0");
    }

    #[test]
    fn connect_addresses() {
        assert!(parse_connect_address("tcp://127.0.0.1:5000").is_ok());
        assert!(parse_connect_address("tcp://[::1]:5000").is_ok());
        assert!(parse_connect_address("tcp://example.com:1").is_ok());
        assert!(parse_connect_address("ipc:///tmp/zn.sock").is_ok());
        for bad in [
            "nonsense",
            "tcp://",
            "tcp://127.0.0.1",
            "tcp://:5000",
            "tcp://127.0.0.1:0",
            "tcp://127.0.0.1:*",
            "tcp://127.0.0.1:70000",
            "udp://127.0.0.1:5000",
            "ipc://",
        ] {
            assert!(parse_connect_address(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bind_addresses() {
        assert!(parse_bind_address("tcp://127.0.0.1:0").is_ok());
        assert!(parse_bind_address("tcp://*:5000").is_ok());
        assert!(parse_bind_address("tcp://0.0.0.0:*").is_ok());
        assert!(parse_bind_address("nonsense").is_err());
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_seconds("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_seconds("0").is_err());
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("x").is_err());
    }

    #[test]
    fn data_defaults_to_null_and_rejects_bad_json() {
        assert_eq!(parse_data(None).ok(), Some(serde_json::Value::Null));
        assert_eq!(
            parse_data(Some(r#"{"a":[1,2,"x"]}"#)).ok(),
            Some(serde_json::json!({"a": [1, 2, "x"]}))
        );
        assert!(matches!(
            parse_data(Some("{a:")),
            Err(Error::InvalidJson(_))
        ));
    }

    fn target(args: &[&str]) -> TargetArgs {
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            t: TargetArgs,
        }
        let argv = std::iter::once("t").chain(args.iter().copied());
        match T::try_parse_from(argv) {
            Ok(t) => t.t,
            Err(e) => panic!("{args:?}: {e}"),
        }
    }

    #[test]
    fn aim_follows_the_flags() {
        let one = vec!["tcp://127.0.0.1:1".to_owned()];
        let two = vec![one[0].clone(), "tcp://127.0.0.1:2".to_owned()];
        assert!(matches!(target(&[]).aim(false, &one), Ok(Aim::Connected)));
        assert!(matches!(target(&[]).aim(false, &two), Err(Error::Usage(_))));
        assert!(matches!(
            target(&["--to", "srv"]).aim(false, &two),
            Ok(Aim::Id(id)) if id == "srv"
        ));
        assert!(matches!(
            target(&["--any", "-f", "role=api", "--up"]).aim(false, &one),
            Ok(Aim::Any(c, Scope::Up)) if c.to_string() == "role=api"
        ));
        assert!(matches!(
            target(&["-f", "k=v"]).aim(true, &one),
            Ok(Aim::All(_, Scope::Both))
        ));
        assert!(matches!(
            target(&["-f", "role=api"]).aim(false, &one),
            Err(Error::Usage(_))
        ));
        assert!(matches!(
            target(&["--down"]).aim(false, &one),
            Err(Error::Usage(_))
        ));
    }

    fn line(text: &str) -> LineCall {
        parse_line_call(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// The shell reads a call's target with the one-shot commands' flags.
    #[test]
    fn a_shell_line_takes_the_targets_of_the_commands() {
        let call = line(r#"w1 echo {"a": [1, 2]}"#);
        assert!(matches!(&call.aim, Aim::Id(id) if id == "w1"));
        assert_eq!(call.event, "echo");
        assert_eq!(call.data.as_deref(), Some(r#"{"a": [1, 2]}"#));

        let call = line("--to w2 ping");
        assert!(matches!(&call.aim, Aim::Id(id) if id == "w2"));
        assert_eq!((call.event.as_str(), call.data), ("ping", None));

        let call = line("--any -f role=api --filter=tier=1 --up count 3");
        assert!(matches!(
            &call.aim,
            Aim::Any(c, Scope::Up) if c.to_string() == "role=api tier=1"
        ));
        assert_eq!(
            (call.event.as_str(), call.data.as_deref()),
            ("count", Some("3"))
        );

        let call = line("--all -f role=api news \"hi\"");
        assert!(matches!(&call.aim, Aim::All(c, Scope::Both) if c.to_string() == "role=api"));
        // A negative number after the event is data, not a flag.
        assert_eq!(line("w1 delay -1").data.as_deref(), Some("-1"));
    }

    #[test]
    fn a_shell_line_refuses_what_the_commands_refuse() {
        let refused = |text: &str| match parse_line_call(text) {
            Ok(call) => panic!("{text}: accepted as {call:?}"),
            Err(e) => e,
        };
        assert!(refused("w1 -f role=api ping").contains("flags go first"));
        assert!(refused("w1").contains("EVENT"));
        assert!(refused("").contains("--any"));
        assert!(refused("-f role=api w1 ping").contains("needs --any"));
        assert!(refused("--to w1 --any ping").contains("--any"));
        assert!(refused("--bogus w1 ping").contains("--bogus"));
        assert!(refused("--any -f").contains("-f"));
        assert!(refused("--any -f role ping").contains("KEY=VALUE"));
    }

    #[test]
    fn conditions_make_exact_filters() {
        let conditions = Conditions(vec![
            KeyValue {
                key: "role".into(),
                value: Value::from("api"),
            },
            KeyValue {
                key: "tier".into(),
                value: Value::Int(1),
            },
        ]);
        let filter = conditions.filter();
        let peer: Options = [
            ("role".to_owned(), Value::from("api")),
            ("tier".to_owned(), Value::Float(1.0)),
        ]
        .into_iter()
        .collect();
        assert!(filter.matches(&peer));
        assert!(!Conditions(vec![KeyValue {
            key: "role".into(),
            value: Value::from("db"),
        }])
        .filter()
        .matches(&peer));
        assert_eq!(conditions.to_string(), "role=api tier=1");
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
