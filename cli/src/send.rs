//! `zeronode request`, `zeronode stream`, `zeronode tick` and `zeronode peers`: a short-lived node (generated
//! id, no bound address) connects, sends one message, prints the outcome and closes
//! gracefully, so the remote side sees it leave with the reason `stopped`.

use std::time::Duration;

use node::{Items, Node, NodeId, PeerInfo, Reply, Scope, Target};

use crate::args::{parse_data, Aim, ConnectArgs, PeersArgs, RequestArgs, StreamArgs, TickArgs};
use crate::error::Error;
use crate::keys::Security;
use crate::output::say;
use crate::peers::{self, format_options, PeerRow};

/// Sends one request and prints the reply as one line of JSON.
pub(crate) async fn request(args: RequestArgs) -> Result<(), Error> {
    // Every input is checked before the network is touched.
    let aim = args.target.aim(false, &args.connect.connect)?;
    let data = parse_data(args.data.as_deref())?;
    let timeout = Duration::from_millis(args.timeout);
    let session = Session::connect(&args.connect).await?;
    let target = session.target(&aim);
    let call = session.node.call(target, &args.event).timeout(timeout);
    let reply = with_meta(call, &args.meta)
        .send::<_, Reply>(&data)
        .await
        .and_then(|reply| Ok((reply.decode::<serde_json::Value>()?, reply)))
        .map_err(|source| session.send_error(&aim, source));
    session.close().await;
    let (value, reply) = reply?;
    for (key, meta) in reply.meta().iter() {
        match meta.as_str() {
            Some(text) => eprintln!("meta {key}={text}"),
            None => eprintln!("meta {key}=({} bytes)", meta.as_bytes().len()),
        }
    }
    say(value);
    Ok(())
}

/// Sends one request for a streamed reply and prints each item as a line of JSON as it
/// arrives. The end prints nothing; an error (the handler's, a timeout, the peer leaving)
/// is the command's error, after the items that came before it.
pub(crate) async fn stream(args: StreamArgs) -> Result<(), Error> {
    let aim = args.target.aim(args.all, &args.connect.connect)?;
    let data = parse_data(args.data.as_deref())?;
    let timeout = Duration::from_millis(args.timeout);
    let idle = args.idle.map(Duration::from_millis);
    let session = Session::connect(&args.connect).await?;
    let target = session.target(&aim);
    let call = with_meta(
        session.node.call(target, &args.event).timeout(timeout),
        &args.meta,
    );
    let printed = if let Aim::All(..) = aim {
        print_all_items(&session.node, &aim, call, &data).await
    } else {
        let mut items = call.stream::<serde_json::Value>(&data).window(args.window);
        if let Some(idle) = idle {
            items = items.idle_timeout(idle);
        }
        print_items(&session.node, &aim, &args.event, items).await
    };
    session.close().await;
    printed
}

/// Opens a stream from every match of `call`'s target and prints each item as a line of
/// JSON, `{"from": ID, "item": ITEM}`, as it arrives. A node whose stream fails ends
/// alone and the others go on; once all ended, the first failure is the error, naming the
/// nodes that failed. Dropping this future drops every stream (their handlers cancelled).
pub(crate) async fn print_all_items(
    node: &Node,
    aim: &Aim,
    call: node::Call<'_>,
    data: &serde_json::Value,
) -> Result<(), Error> {
    use futures::StreamExt;

    let mut items = call
        .stream_all::<serde_json::Value>(data)
        .await
        .map_err(|source| send_error(node, aim, source))?;
    let mut failed: Vec<(NodeId, node::Error)> = Vec::new();
    while let Some((from, item)) = items.next().await {
        match item {
            Ok(item) => say(serde_json::json!({ "from": from.as_str(), "item": item })),
            Err(source) => failed.push((from, source)),
        }
    }
    drop(items);
    let mut failed = failed.into_iter();
    let Some((first, source)) = failed.next() else {
        return Ok(());
    };
    let others: Vec<String> = failed.map(|(id, _)| id.to_string()).collect();
    let hint = if others.is_empty() {
        format!(" (the stream from {first}; the others ended)")
    } else {
        format!(
            " (the stream from {first}; {} failed too; the others ended)",
            others.join(", ")
        )
    };
    Err(Error::Send {
        source,
        hint: Some(hint),
    })
}

/// Prints a stream's items as JSON lines as they arrive, until it ends or fails (the
/// error, after the items before it). The stream is dropped before this returns, and with
/// this future if it is dropped (the shell's Ctrl-C): one ended early cancels its handler
/// at once.
pub(crate) async fn print_items(
    node: &Node,
    aim: &Aim,
    event: &str,
    mut items: Items<'_, serde_json::Value>,
) -> Result<(), Error> {
    use futures::StreamExt;

    let mut failed = None;
    while let Some(item) = items.next().await {
        match item {
            Ok(value) => say(value),
            Err(source) => {
                failed = Some(source);
                break;
            }
        }
    }
    let received = items.received();
    drop(items);
    let Some(source) = failed else {
        return Ok(());
    };
    let (after, idle) = match &source {
        node::Error::Timeout { timeout, .. } => (*timeout, false),
        node::Error::IdleTimeout { idle, .. } => (*idle, true),
        _ => return Err(send_error(node, aim, source)),
    };
    Err(Error::StreamTimeout {
        event: event.to_owned(),
        after,
        idle,
        received,
    })
}

/// The call with the `--meta` entries.
fn with_meta<'a>(mut call: node::Call<'a>, meta: &[(String, String)]) -> node::Call<'a> {
    for (key, value) in meta {
        call = call.meta(key, value);
    }
    call
}

/// Sends one tick and prints `sent` (or `sent to N nodes` with `--all`).
pub(crate) async fn tick(args: TickArgs) -> Result<(), Error> {
    let aim = args.target.aim(args.all, &args.connect.connect)?;
    let data = parse_data(args.data.as_deref())?;
    let session = Session::connect(&args.connect).await?;
    let to = session.target(&aim);
    let sent = with_meta(session.node.call(to, &args.event), &args.meta)
        .tick(&data)
        .await
        .map(|sent| sent.nodes)
        .map_err(|source| session.send_error(&aim, source));
    // A graceful close flushes the tick before the connection goes.
    session.close().await;
    say(sent_line(&aim, sent?));
    Ok(())
}

/// What a tick prints: `sent`, or to every match `sent to N nodes`.
pub(crate) fn sent_line(aim: &Aim, sent: usize) -> String {
    match aim {
        Aim::All(..) => format!("sent to {sent} node{}", if sent == 1 { "" } else { "s" }),
        _ => "sent".to_owned(),
    }
}

/// Asks a `zeronode node` for its peers and prints them (a table, or JSON lines).
pub(crate) async fn peers(args: PeersArgs) -> Result<(), Error> {
    let addresses = [args.connect.clone()];
    let security = Security::load(&args.security, true)?;
    let session = Session::open(
        &addresses,
        Duration::from_millis(args.connect_timeout),
        &security,
    )
    .await?;
    let aim = Aim::Connected;
    let reply = session
        .node
        .call(session.target(&aim), peers::EVENT)
        .timeout(Duration::from_millis(args.timeout))
        .send::<_, Vec<PeerRow>>(&())
        .await;
    let me = session.node.id().to_string();
    let reply = reply.map_err(|source| match source.code() {
        node::ErrorCode::Serialization => Error::BadPeersReply(source),
        node::ErrorCode::NoHandler => Error::Send {
            source,
            hint: Some(" (is it a `zeronode node`?)".into()),
        },
        _ => session.send_error(&aim, source),
    });
    session.close().await;
    // This command's own node is a peer of the remote one for the moment: leave it out.
    let rows: Vec<PeerRow> = reply?.into_iter().filter(|row| row.id != me).collect();
    if args.json {
        for row in &rows {
            match serde_json::to_string(row) {
                Ok(line) => say(line),
                Err(e) => tracing::error!(cause = %e, id = %row.id, "peer not printable as JSON"),
            }
        }
    } else {
        for line in peers::table(&rows) {
            say(line);
        }
    }
    Ok(())
}

/// The node API's target for an aim; `connected` is the node `Aim::Connected` means.
pub(crate) fn target(aim: &Aim, connected: Option<&NodeId>) -> Target {
    match aim {
        Aim::Connected => Target::Id(connected.cloned().unwrap_or_else(|| NodeId::new(""))),
        Aim::Id(id) => Target::Id(NodeId::new(id)),
        Aim::Any(conditions, scope) => Target::any(conditions.filter()).scope(*scope),
        Aim::All(conditions, scope) => Target::all(conditions.filter()).scope(*scope),
    }
}

/// Wraps a send error of `node`'s, adding what helps fix it: the nodes there are.
pub(crate) fn send_error(node: &Node, aim: &Aim, source: node::Error) -> Error {
    let hint = match (&source, aim) {
        (node::Error::NodeNotFound { .. }, _) => Some(format!(" ({})", known(node))),
        (node::Error::NoNodesMatchFilter, Aim::Any(c, scope) | Aim::All(c, scope)) => {
            let among = match scope {
                Scope::Up => " among upstream nodes",
                Scope::Down => " among downstream nodes",
                Scope::Both => "",
            };
            let conditions = if c.0.is_empty() {
                String::new()
            } else {
                format!(" {c}")
            };
            Some(format!("{conditions}{among} ({})", known(node)))
        }
        _ => None,
    };
    Error::Send { source, hint }
}

/// The joined peers with their options, for error messages.
fn known(node: &Node) -> String {
    let peers = node.peers().list();
    if peers.is_empty() {
        return "no node is connected".into();
    }
    let listed: Vec<String> = peers
        .iter()
        .map(|p| match p.options.is_empty() {
            true => p.id.to_string(),
            false => format!("{} {}", p.id, format_options(&p.options)),
        })
        .collect();
    format!("connected: {}", listed.join("; "))
}

/// How long a short-lived command waits after closing its node before exiting, so libzmq
/// gets the last messages out (see [`Session::close`]).
const FLUSH_PAUSE: Duration = Duration::from_millis(50);

/// A short-lived node and the peers it connected to.
pub(crate) struct Session {
    /// The node (generated id, not bound).
    pub(crate) node: Node,
    /// The peer behind each `--connect` address, in order.
    pub(crate) connected: Vec<PeerInfo>,
}

impl Session {
    /// Loads the keys `args` name and opens a session to its `--connect` addresses.
    pub(crate) async fn connect(args: &ConnectArgs) -> Result<Session, Error> {
        let security = Security::load(&args.security, true)?;
        Session::open(&args.connect, args.connect_timeout(), &security).await
    }

    /// Builds the node and connects to every address; on failure the node is closed.
    pub(crate) async fn open(
        addresses: &[String],
        connect_timeout: Duration,
        security: &Security,
    ) -> Result<Session, Error> {
        let builder = Node::builder()
            .handshake_timeout(connect_timeout)
            // Nothing is served: nothing to wait for when closing.
            .close_grace(Duration::from_secs(1));
        let node = security
            .apply(builder)
            .build()
            .await
            .map_err(Error::Build)?;
        let mut connected = Vec::with_capacity(addresses.len());
        for address in addresses {
            match security.connect(&node, address).await {
                Ok(peer) => connected.push(peer),
                Err(source) => {
                    node.close().await;
                    return Err(Error::Connect {
                        address: address.clone(),
                        timeout: connect_timeout,
                        source,
                    });
                }
            }
        }
        Ok(Session { node, connected })
    }

    /// The node API's target for an aim.
    fn target(&self, aim: &Aim) -> Target {
        // `aim` allows `Connected` only with exactly one address, and `open` joined it.
        let connected = self.connected.first().map(|peer| &peer.id);
        target(aim, connected)
    }

    /// Wraps a send error, adding what helps fix it: the nodes there are.
    fn send_error(&self, aim: &Aim, source: node::Error) -> Error {
        send_error(&self.node, aim, source)
    }

    /// Closes the node gracefully: the remote side sees it leave as `stopped`.
    pub(crate) async fn close(self) {
        self.node.close().await;
        // libzmq writes queued messages (our tick, our goodbye) from its own I/O thread,
        // after `close` returns; the transport's process-wide context is never terminated,
        // so nothing waits for that at exit. A short pause lets the queue drain.
        tokio::time::sleep(FLUSH_PAUSE).await;
    }
}
