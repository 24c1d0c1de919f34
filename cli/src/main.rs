//! # zeronode: a brokerless service mesh over ZeroMQ, from the command line
//!
//! Runs a node with built-in handlers, sends one request or tick to a mesh, or lists a
//! node's peers. Every command is a thin layer over the `node` crate's [`node::Node`].
//!
//! ```text
//! # a node serving echo, ping, delay and zeronode:peers, advertising two options
//! zeronode node --id api-1 --bind tcp://127.0.0.1:5000 -o role=api -o tags=eu,gpu
//! # a second node joining it (prints "peer joined"/"peer left" lines and stats)
//! zeronode node --id w1 --connect tcp://127.0.0.1:5000 -o role=worker --stats 5
//!
//! zeronode request --connect tcp://127.0.0.1:5000 echo '{"a":[1,2,"x"]}'   # {"a":[1,2,"x"]}
//! zeronode request --connect tcp://127.0.0.1:5000 --to api-1 ping            # "pong"
//! zeronode request --connect tcp://127.0.0.1:5000 --any -f role=api ping     # "pong"
//! zeronode request --connect tcp://127.0.0.1:5000 delay 2000 --timeout 200   # error: ... timed out
//! zeronode stream --connect tcp://127.0.0.1:5000 count 3                  # 1, 2, 3: a line each
//! zeronode stream --connect tcp://127.0.0.1:5000 --all -f role=api count 2 # {"from":"api-1","item":1} ...
//! zeronode tick --connect tcp://127.0.0.1:5000 --all -f role=api news '"hi"' # sent to 1 node
//! zeronode peers --connect tcp://127.0.0.1:5000                              # a table
//! zeronode peers --connect tcp://127.0.0.1:5000 --json                       # JSON lines
//!
//! # operating a mesh: what each node is, serves and does
//! zeronode ls --connect tcp://127.0.0.1:5000          # every node reachable, one line each
//! zeronode info --connect tcp://127.0.0.1:5000 w1     # one node's description (--json)
//! zeronode top --connect tcp://127.0.0.1:5000         # live: requests/s, errors/s, p50/p99
//! zeronode shell --connect tcp://127.0.0.1:5000       # > stream --any -f role=api count 3
//!
//! # secured with CURVE: a key pair per node, clients name the server's public key
//! zeronode keygen api.key && zeronode keygen w1.key   # api.key + api.key.pub, w1.key + ...
//! zeronode node --id api-1 --bind tcp://127.0.0.1:5001 --key api.key --allow w1.key.pub
//! zeronode request --connect tcp://127.0.0.1:5001 --key w1.key --server-key api.key.pub ping
//!
//! # the benchmark harness (every layer beside raw libzmq, two processes per point)
//! zeronode bench --sizes 100 --windows 1,100     # zeronode bench --help lists its options
//! zeronode bench scale --peers 100,1000           # a hub with many peer nodes
//! ```
//!
//! A short-lived command reaches the nodes it connects to (`--to ID` and `--any` pick among
//! them), and through a `zeronode node --router` among them, that router's peers. A node
//! declares a silent peer dead after 2.5 heartbeat intervals (`--heartbeat-ms`): its own, or
//! the peer's when the peer said in its handshake that it beats less often.
//!
//! Output: results on stdout (a reply is one line of JSON, a streamed reply a line per
//! item); errors as one line
//! `error: ...` on stderr. Exit codes: 0 success, 1 failure (unreachable node, timeout,
//! remote error, ...), 2 bad input (unknown flag or subcommand, missing or rejected
//! argument, invalid JSON), 3 a node whose close grace (`--grace`) ran out with requests
//! still being handled (they were stopped, their callers told), 130 a second signal while
//! a node was closing (it stops without waiting); `--help` and
//! `--version` print clap's own text and exit 0. Logs go to stderr, filtered by `RUST_LOG`
//! (default: `warn` for `zeronode node`, nothing for the other commands).
//!
//! ## Layout
//! - `args.rs`: the clap types, typed `key=value` values, address and JSON checks;
//! - `serve.rs`: `zeronode node` (handlers, event log, stats, signals);
//! - `send.rs`: `request`, `stream`, `tick` and `peers` through a short-lived node;
//! - `peers.rs`: the `zeronode:peers` reply and its table;
//! - `mesh.rs`: `info` and `ls`, and the walk of a mesh through its routers that `top`
//!   shares; `top.rs`: the live view; `shell.rs`: the interactive session;
//! - `keys.rs`: CURVE key files (`keygen`, `--key`, `--server-key`, `--allow`);
//! - `error.rs`: errors as one clear line, and exit codes; `output.rs`: panic-free stdout.

#![forbid(unsafe_code)]

mod args;
mod error;
mod keys;
mod mesh;
mod metrics;
mod output;
mod peers;
mod send;
mod serve;
mod shell;
mod top;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::error::{one_line, usage_line, Error};
use crate::output::complain;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_failure(e),
    };
    if let Command::Bench(args) = cli.command {
        return bench(args.args);
    }
    init_tracing(&cli.command);
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            complain(format_args!("error: {}", one_line(&e.to_string())));
            e.exit_code()
        }
    }
}

/// `zeronode bench ARGS`: the `benches` harness, which re-executes this binary as
/// `zeronode bench serve|client|... ARGS` for its roles. Runs outside any tokio runtime: the
/// roles build their own.
fn bench(args: Vec<std::ffi::OsString>) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            complain(format_args!("error: cannot find this executable: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let argv = std::iter::once("zeronode bench".into()).chain(args);
    benches::run(argv, benches::Reexec::new(exe, ["bench"]))
}

/// Runs one command on a multi-threaded tokio runtime.
fn run(command: Command) -> Result<(), Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Error::Start)?;
    let result = runtime.block_on(async move {
        match command {
            Command::Node(args) => serve::run(args).await,
            Command::Request(args) => send::request(args).await,
            Command::Stream(args) => send::stream(args).await,
            Command::Tick(args) => send::tick(args).await,
            Command::Peers(args) => send::peers(args).await,
            Command::Info(args) => mesh::info(args).await,
            Command::Ls(args) => mesh::ls(args).await,
            Command::Top(args) => top::run(args).await,
            Command::Shell(args) => shell::run(args).await,
            Command::Keygen(args) => keygen(&args),
            // Run by `main` before any runtime exists (the harness's roles build their own).
            Command::Bench(_) => Ok(()),
        }
    });
    // Whatever a closed node left behind (a timer, a socket thread) must not hold the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

/// `zeronode keygen FILE`: writes the pair and says where the public key is.
fn keygen(args: &args::KeygenArgs) -> Result<(), Error> {
    let (keys, public) = keys::keygen(&args.file, args.force)?;
    output::say(format_args!("public key {}", keys.public));
    output::say(format_args!(
        "wrote {} (private) and {}",
        args.file.display(),
        public.display()
    ));
    Ok(())
}

/// Reports a command-line error. `--help` and `--version` (and a bare `zeronode`, which
/// shows the help) are clap's own output; every other error is one line on stderr, exit 2:
/// `error: unexpected argument '--bogus' found (see zeronode request --help)`.
fn clap_failure(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        _ => {
            complain(usage_line(&e, &help_command()));
            ExitCode::from(2)
        }
    }
}

/// The command whose `--help` a usage error points to: `zeronode SUBCOMMAND` when the first
/// argument names one, else `zeronode`.
fn help_command() -> String {
    use clap::CommandFactory;
    let cli = Cli::command();
    let first = std::env::args_os().nth(1);
    let sub = first
        .as_deref()
        .and_then(|arg| arg.to_str())
        .and_then(|arg| cli.get_subcommands().find(|s| s.get_name() == arg));
    match sub {
        Some(sub) => format!("{} {}", cli.get_name(), sub.get_name()),
        None => cli.get_name().to_owned(),
    }
}

/// Sends logs to stderr, filtered by `RUST_LOG`, or by default `warn` for a node and nothing
/// for the short-lived commands (their errors are the one `error:` line).
fn init_tracing(command: &Command) {
    use tracing_subscriber::EnvFilter;
    let default = match command {
        Command::Node(_) => "warn",
        _ => "off",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
