//! What can go wrong in a `zeronode` command, as one clear line for a person.
//!
//! Each variant says what the command was doing; [`explain`] turns the node's typed errors
//! into words. `main` prints `error: <message>` on stderr and exits with [`Error::exit_code`].

use std::process::ExitCode;
use std::time::Duration;

use node::ErrorCode;

/// The system code of a stream refused because the receiver has its most streams open.
const TOO_MANY_STREAMS: &str = "TOO_MANY_STREAMS";
/// The system code of a stream asked of a handler that answers once (or the reverse).
const NOT_STREAMED: &str = "NOT_STREAMED";

/// Everything a command can fail with.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// Flags that do not fit together (clap checks the rest).
    #[error("{0}")]
    Usage(String),
    /// A key or key file given on the command line is unusable.
    #[error("key {what}: {reason}")]
    Key {
        /// The file or text given.
        what: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The data argument is not JSON.
    #[error("invalid JSON data: {0}")]
    InvalidJson(serde_json::Error),
    /// The runtime or the signal handlers could not start.
    #[error("cannot start: {0}")]
    Start(std::io::Error),
    /// The node could not be created.
    #[error("cannot create the node: {}", explain(.0))]
    Build(node::Error),
    /// Binding the node's address failed.
    #[error("{}", bind_message(address, source))]
    Bind {
        /// The address asked for.
        address: String,
        /// Why.
        source: node::Error,
    },
    /// Connecting (or its handshake) failed.
    #[error("{}", connect_message(address, *timeout, source))]
    Connect {
        /// The address.
        address: String,
        /// The handshake timeout it was given.
        timeout: Duration,
        /// Why.
        source: node::Error,
    },
    /// Sending the request or tick, or its reply, failed.
    #[error("{}{}", explain(source), hint.as_deref().unwrap_or(""))]
    Send {
        /// Why.
        source: node::Error,
        /// What the user may want to know besides (the peers there are, ...), starting
        /// with a space.
        hint: Option<String>,
    },
    /// A stream's deadline (`--timeout`) or idle bound (`--idle`) ran out.
    #[error("{}", stream_timeout_message(event, *after, *idle, *received))]
    StreamTimeout {
        /// The stream's event.
        event: String,
        /// The bound that ran out.
        after: Duration,
        /// Whether it was the wait for one item (`--idle`) rather than the whole stream.
        idle: bool,
        /// Items printed before it ran out.
        received: u64,
    },
    /// The reply of `zeronode:peers` is not a list of peers.
    #[error("the node's answer to zeronode:peers is not a list of peers: {0}")]
    BadPeersReply(node::Error),
    /// The terminal could not be set up or drawn on (`zeronode top`, `zeronode shell`).
    #[error("terminal: {0}")]
    Terminal(std::io::Error),
    /// A second Ctrl-C or SIGTERM arrived while the node was closing.
    #[error("interrupted again while closing: stopped without waiting")]
    Interrupted,
    /// The close grace (`--grace`) ran out with handlers still running: they were stopped
    /// and their callers told so.
    #[error("the close grace ran out: {cancelled} request(s) stopped before answering")]
    DrainIncomplete {
        /// How many handlers were stopped.
        cancelled: usize,
    },
}

impl Error {
    /// The process exit code: 2 for input the user must fix (as clap does), 3 for a
    /// node whose close grace ran out with work stopped, 130 for a forced stop (a second
    /// signal), 1 for the rest.
    pub(crate) fn exit_code(&self) -> ExitCode {
        match self {
            Error::Usage(_) | Error::InvalidJson(_) | Error::Key { .. } => ExitCode::from(2),
            Error::DrainIncomplete { .. } => ExitCode::from(node::Shutdown::EXIT_INCOMPLETE),
            Error::Interrupted => ExitCode::from(node::Shutdown::EXIT_INTERRUPTED),
            _ => ExitCode::FAILURE,
        }
    }
}

/// The message for a failed bind, naming the address once.
fn bind_message(address: &str, source: &node::Error) -> String {
    let cause = explain(source);
    // The transport's own message already reads `cannot bind ADDR: why`.
    if cause.starts_with("cannot bind") {
        cause
    } else {
        format!("cannot bind {address}: {cause}")
    }
}

/// The message for a failed connect: an unreachable node reads as such.
fn connect_message(address: &str, timeout: Duration, source: &node::Error) -> String {
    match source {
        node::Error::HandshakeTimeout { .. } => format!(
            "cannot reach {address}: no node answered within {} ms (is a zeronode node \
             listening there? --connect-timeout sets the wait)",
            timeout.as_millis()
        ),
        other => format!("cannot connect to {address}: {}", explain(other)),
    }
}

/// The message for a stream that ran out of time, naming the flag that sets the bound.
fn stream_timeout_message(event: &str, after: Duration, idle: bool, received: u64) -> String {
    let ms = after.as_millis();
    if idle {
        format!("stream {event:?} stalled: no item within {ms} ms after {received} item(s) (--idle sets the wait)")
    } else {
        format!("stream {event:?} timed out: not finished within {ms} ms, {received} item(s) received (--timeout sets the bound)")
    }
}

/// Says in words what a node error means to the person who typed the command.
pub(crate) fn explain(error: &node::Error) -> String {
    use node::Error as E;
    match error {
        E::NodeNotFound { id } => format!("no connected node has the id {id:?}"),
        E::NoNodesMatchFilter => "no connected node matches the filter".into(),
        E::Timeout { event, timeout } => format!(
            "request {event:?} timed out: no reply within {} ms",
            timeout.as_millis()
        ),
        E::Handler { code, message } if code.as_str() == TOO_MANY_STREAMS => format!(
            "the remote node has as many streams open as it allows ({code}: {message}): try \
             again when some have ended"
        ),
        E::Handler { code, message } if code.as_str() == NOT_STREAMED => {
            format!("{message} ({code}: `zeronode stream` for a streamed reply, `zeronode request` for one reply)")
        }
        E::Handler { code, message }
            if *code == node::Code::FailedPrecondition && message.contains("stream") =>
        {
            format!("{message} ({code}: `zeronode stream` for a streamed reply)")
        }
        E::Handler { code, message } => format!("the remote handler failed: {code}: {message}"),
        E::NoHandler { event } => {
            format!("the remote node has no handler for {event:?} (NO_HANDLER)")
        }
        E::PeerLeft { peer, hop } => {
            let who = if peer.is_empty() {
                "the node".to_owned()
            } else {
                format!("node {peer:?}")
            };
            match hop {
                Some(hop) => format!("{who} left before answering (router {hop:?} saw it go)"),
                None => format!("{who} left before answering"),
            }
        }
        E::HopFailed { hop, peer, message } => format!(
            "router {} could not pass the message on to {}: {message} (it may have arrived)",
            hop.as_deref().unwrap_or("?"),
            peer.as_deref()
                .map_or("the next node".to_owned(), |p| format!("{p:?}")),
        ),
        E::ShuttingDown => "the remote node is stopping and took no new request (nothing ran; \
             send it again elsewhere)"
            .into(),
        E::Cancelled => "the remote node stopped the handler: its close grace ran out (it may \
             have had effects)"
            .into(),
        E::HandlerPanicked => {
            "the remote handler panicked (it may have had effects before it did)".into()
        }
        E::DeadlineExceeded => {
            "the remote node stopped the handler at the request's deadline (it may have had \
             effects)"
                .into()
        }
        E::NotConnected => "the connection to the node is gone".into(),
        E::Closed => "the node is closing".into(),
        E::DuplicateId { id } => {
            format!("the id {id:?} is already used by another node of the mesh")
        }
        E::VersionMismatch { ours, theirs } => {
            format!("the remote node speaks node protocol version {theirs}, this one {ours}")
        }
        E::HandshakeTimeout { endpoint } => {
            format!("no node answered at {endpoint} (is a zeronode node listening there?)")
        }
        E::HandshakeRefused { reason } => format!("the remote node refused us: {reason}"),
        E::Refused { reason, .. } => format!(
            "the remote node refused the connection: {reason} (a secured node needs \
             --server-key with its public key, and --key with a key pair it allows)"
        ),
        E::InvalidFilter { reason } => format!("invalid filter: {reason}"),
        E::InvalidTarget { reason } => format!("invalid target: {reason}"),
        E::Busy { bound, .. } => match bound {
            Some(b) if b.per_peer => format!(
                "the remote node is busy: this caller already has {} handlers running there \
                 (nothing ran; send it again later)",
                b.max
            ),
            Some(b) => format!(
                "the remote node is busy: all its {} handler slots are taken (nothing ran; \
                 send it again later)",
                b.max
            ),
            None => "the remote node is busy (nothing ran; send it again later)".into(),
        },
        E::PayloadTooLarge { size, max } => format!(
            "the data is {size} bytes, over the receiver's limit of {max} (nothing was sent)"
        ),
        E::RouteLoop { reason, hop } => match hop {
            Some(hop) => {
                format!("the routers passed the message in a loop (refused at {hop:?}): {reason}")
            }
            None => format!("the routers passed the message in a loop: {reason}"),
        },
        other => match other.code() {
            ErrorCode::Serialization => {
                format!("the data cannot travel as MessagePack or come back as JSON: {other}")
            }
            ErrorCode::InvalidEvent => {
                format!("{other} (an event is 1 to 1024 bytes, outside `_system:`)")
            }
            ErrorCode::InvalidEnvelope => format!("the remote sent an invalid message: {other}"),
            // A stream ended by its other end: the handler's node dropped it or left.
            ErrorCode::Cancelled => {
                format!("the remote node ended the stream before its end ({other})")
            }
            _ => other.to_string(),
        },
    }
}

/// A clap error (unknown flag or subcommand, missing argument, rejected value) as one
/// line: clap's message, whatever follows it on indented lines (the missing arguments)
/// joined after it, a "did you mean" when clap has one, and where to read the usage. The
/// rest of clap's output (tips, the usage, "For more information") is dropped.
pub(crate) fn usage_line(error: &clap::Error, command: &str) -> String {
    use clap::error::{ContextKind, ContextValue};
    let text = error.render().to_string();
    let mut paragraph = text.lines().take_while(|line| !line.trim().is_empty());
    let mut line = paragraph
        .next()
        .map_or_else(|| "error: invalid arguments".to_owned(), one_line);
    let more: Vec<String> = paragraph.map(one_line).collect();
    if !more.is_empty() {
        line.push(' ');
        line.push_str(&more.join(", "));
    }
    let suggested = [
        ContextKind::SuggestedSubcommand,
        ContextKind::SuggestedArg,
        ContextKind::SuggestedValue,
    ]
    .into_iter()
    .find_map(|kind| match error.get(kind) {
        Some(ContextValue::String(one)) => Some(one.clone()),
        Some(ContextValue::Strings(many)) => many.first().cloned(),
        _ => None,
    });
    match suggested {
        Some(name) => format!("{line} (did you mean '{name}'? see {command} --help)"),
        None => format!("{line} (see {command} --help)"),
    }
}

/// Makes a message fit on one line (a cause from the layers below may hold line breaks).
pub(crate) fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_reads_as_such() {
        let e = Error::Connect {
            address: "tcp://127.0.0.1:9".into(),
            timeout: Duration::from_millis(300),
            source: node::Error::HandshakeTimeout {
                endpoint: "tcp://127.0.0.1:9".into(),
            },
        };
        let text = e.to_string();
        assert!(text.starts_with("cannot reach tcp://127.0.0.1:9: no node answered within 300 ms"));
    }

    #[test]
    fn remote_errors_carry_code_and_message() {
        let e = Error::Send {
            source: node::Error::Handler {
                code: "BAD_REQUEST".into(),
                message: "nope".into(),
            },
            hint: None,
        };
        assert_eq!(
            e.to_string(),
            "the remote handler failed: BAD_REQUEST: nope"
        );
        let e = Error::Send {
            source: node::Error::NoHandler { event: "x".into() },
            hint: None,
        };
        assert!(e.to_string().contains("NO_HANDLER"));
    }

    #[test]
    fn hints_follow_the_cause() {
        let e = Error::Send {
            source: node::Error::HandlerPanicked,
            hint: None,
        };
        assert!(e.to_string().contains("panicked"), "{e}");
        let e = Error::Send {
            source: node::Error::PayloadTooLarge {
                size: 2_000_000,
                max: 1_048_576,
            },
            hint: None,
        };
        assert!(e
            .to_string()
            .contains("2000000 bytes, over the receiver's limit of 1048576"));
        let e = Error::Send {
            source: node::Error::NoNodesMatchFilter,
            hint: Some(" role=x (connected: a)".into()),
        };
        assert_eq!(
            e.to_string(),
            "no connected node matches the filter role=x (connected: a)"
        );
    }

    #[test]
    fn stream_errors_name_the_bound_and_the_right_command() {
        let stalled = Error::StreamTimeout {
            event: "count".into(),
            after: Duration::from_millis(300),
            idle: true,
            received: 2,
        };
        assert_eq!(
            stalled.to_string(),
            "stream \"count\" stalled: no item within 300 ms after 2 item(s) (--idle sets the wait)"
        );
        let full = Error::Send {
            source: node::Error::Handler {
                code: node::Code::from("TOO_MANY_STREAMS".to_owned()),
                message: "1024 open".into(),
            },
            hint: None,
        };
        assert!(
            full.to_string()
                .contains("as many streams open as it allows"),
            "{full}"
        );
        let once = Error::Send {
            source: node::Error::Handler {
                code: node::Code::from("NOT_STREAMED".to_owned()),
                message: "this event takes a streamed body: call it as an upload".into(),
            },
            hint: None,
        };
        assert!(
            once.to_string()
                .contains("`zeronode request` for one reply"),
            "{once}"
        );
    }

    #[test]
    fn bind_errors_name_the_address_once() {
        let e = Error::Bind {
            address: "tcp://x:1".into(),
            source: node::Error::Bind("this node is already bound"),
        };
        assert_eq!(
            e.to_string(),
            "cannot bind tcp://x:1: this node is already bound"
        );
    }

    #[test]
    fn exit_codes() {
        assert_eq!(Error::Usage("x".into()).exit_code(), ExitCode::from(2));
        assert_eq!(Error::Interrupted.exit_code(), ExitCode::from(130));
        assert_eq!(
            Error::DrainIncomplete { cancelled: 1 }.exit_code(),
            ExitCode::from(3)
        );
        assert_eq!(
            Error::Send {
                source: node::Error::Closed,
                hint: None
            }
            .exit_code(),
            ExitCode::FAILURE
        );
    }

    #[test]
    fn one_line_joins_lines() {
        assert_eq!(one_line("a\nb  c\r\n"), "a b c");
    }
}
