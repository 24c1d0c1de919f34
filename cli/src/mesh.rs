//! `zeronode info` and `zeronode ls`, and the walk of a mesh they (and `top`) share: every
//! node describes itself (`Node::describe`, a system request routers forward), so starting
//! from the nodes a short-lived node connected to, the peers each description lists are
//! asked in turn, through the routers, until no new id turns up.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::time::Duration;

use node::{Description, Direction, Node, NodeId};
use tokio::task::JoinSet;

use crate::args::{InfoArgs, LsArgs};
use crate::error::Error;
use crate::output::say;
use crate::peers::{direction_name, format_options};
use crate::send::Session;

/// The most nodes one walk describes: a mesh larger than this is cut, and `ls` says so.
pub(crate) const MAX_NODES: usize = 512;
/// How many descriptions are asked for at once.
const AT_ONCE: usize = 16;
/// How long one description may take in a walk (a node that does not answer in time is
/// listed with the error, the walk goes on).
pub(crate) const ASK_TIMEOUT: Duration = Duration::from_secs(3);

/// One node a walk found: its description, or why there is none.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    /// Its id.
    pub(crate) id: NodeId,
    /// What it said, or why it could not be asked.
    pub(crate) described: Result<Description, String>,
}

/// Describes the nodes reachable from `node`: its joined peers, the peers they list,
/// and so on through routers, at most [`MAX_NODES`]; sorted by id. `node` itself is left
/// out. Returns whether the walk was cut at the bound.
pub(crate) async fn walk(node: &Node) -> (Vec<Found>, bool) {
    let me = node.id().clone();
    let mut seen: HashSet<NodeId> = HashSet::from([me.clone()]);
    let mut queue: VecDeque<NodeId> = VecDeque::new();
    for peer in node.peers().list() {
        if seen.insert(peer.id.clone()) {
            queue.push_back(peer.id);
        }
    }
    let mut found = Vec::new();
    let mut asking = JoinSet::new();
    let mut cut = false;
    loop {
        while asking.len() < AT_ONCE {
            let Some(id) = queue.pop_front() else { break };
            let node = node.clone();
            asking.spawn(async move {
                let described = tokio::time::timeout(ASK_TIMEOUT, node.describe(id.clone()))
                    .await
                    .map_err(|_| "no answer in time".to_owned())
                    .and_then(|r| match r {
                        // Listed by a peer, gone when asked (it left meanwhile: a
                        // short-lived command such as this one): not part of the mesh.
                        Err(e) if e.code() == node::ErrorCode::NodeNotFound => Err(String::new()),
                        r => r.map_err(|e| crate::error::explain(&e)),
                    });
                Found { id, described }
            });
        }
        let Some(done) = asking.join_next().await else {
            break;
        };
        let Ok(done) = done else { continue };
        if done.described.as_ref().is_err_and(String::is_empty) {
            continue;
        }
        if let Ok(described) = &done.described {
            for peer in &described.peers {
                if seen.len() >= MAX_NODES {
                    cut = true;
                    break;
                }
                if seen.insert(peer.id.clone()) {
                    queue.push_back(peer.id.clone());
                }
            }
        }
        found.push(done);
    }
    found.sort_by(|a, b| a.id.cmp(&b.id));
    (found, cut)
}

/// `zeronode info`: one node's description, as text or JSON.
pub(crate) async fn info(args: InfoArgs) -> Result<(), Error> {
    let session = Session::connect(&args.connect).await?;
    let id = match (&args.id, session.connected.first()) {
        (Some(id), _) => NodeId::new(id),
        (None, Some(peer)) if args.connect.connect.len() == 1 => peer.id.clone(),
        _ => {
            session.close().await;
            return Err(Error::Usage(
                "with several --connect addresses, say which node: zeronode info ... ID".into(),
            ));
        }
    };
    let described = tokio::time::timeout(
        Duration::from_millis(args.timeout),
        session.node.describe(id.clone()),
    )
    .await
    .unwrap_or_else(|_| {
        Err(node::Error::Timeout {
            event: "_system:describe".into(),
            timeout: Duration::from_millis(args.timeout),
        })
    });
    let me = session.node.id().clone();
    session.close().await;
    let mut described = described.map_err(|source| Error::Send {
        hint: match &source {
            node::Error::NoHandler { .. } => Some(format!(" ({id} does not describe itself)")),
            _ => None,
        },
        source,
    })?;
    // This command's own node is a peer of the one it asked, for the moment: left out.
    described.peers.retain(|p| p.id != me);
    if args.json {
        match serde_json::to_string(&described) {
            Ok(line) => say(line),
            Err(e) => tracing::error!(cause = %e, "description not printable as JSON"),
        }
    } else {
        for line in info_lines(&described) {
            say(line);
        }
    }
    Ok(())
}

/// `zeronode ls`: every node reachable, one line each (or one JSON object each).
pub(crate) async fn ls(args: LsArgs) -> Result<(), Error> {
    let session = Session::connect(&args.connect).await?;
    let (found, cut) = walk(&session.node).await;
    let me = session.node.id().clone();
    session.close().await;
    if args.json {
        for f in &found {
            let value = match &f.described {
                Ok(d) => serde_json::to_value(without(d, &me)),
                Err(e) => Ok(serde_json::json!({"id": f.id.as_str(), "error": e})),
            };
            match value.and_then(|v| serde_json::to_string(&v)) {
                Ok(line) => say(line),
                Err(e) => tracing::error!(cause = %e, id = %f.id, "node not printable as JSON"),
            }
        }
    } else {
        for line in ls_lines(&found, &me) {
            say(line);
        }
    }
    if cut {
        crate::output::complain(format_args!(
            "(stopped at {MAX_NODES} nodes: the mesh has more)"
        ));
    }
    Ok(())
}

/// A description without `me` among its peers.
fn without(described: &Description, me: &NodeId) -> Description {
    let mut d = described.clone();
    d.peers.retain(|p| &p.id != me);
    d
}

/// The `ls` table: a header, then a line per node.
///
/// ```text
/// ID   KIND    ENGINE  CURVE  PEERS  UPTIME  HANDLES          ADDRESS
/// hub  router  native  off    2      1m05s   -                tcp://127.0.0.1:5000
/// w1   node    native  off    1      58s     delay,echo,ping  -
/// ```
pub(crate) fn ls_lines(found: &[Found], me: &NodeId) -> Vec<String> {
    let mut rows = vec![[
        "ID", "KIND", "ENGINE", "CURVE", "PEERS", "UPTIME", "HANDLES", "ADDRESS",
    ]
    .map(String::from)
    .to_vec()];
    for f in found {
        rows.push(match &f.described {
            Ok(d) => vec![
                d.id.to_string(),
                if d.router { "router" } else { "node" }.into(),
                d.engine.clone(),
                on_off(d.curve).into(),
                d.peers.iter().filter(|p| &p.id != me).count().to_string(),
                uptime(d.uptime_ms),
                list_or_dash(&handled(d)),
                d.address.clone().unwrap_or_else(|| "-".into()),
            ],
            Err(e) => vec![f.id.to_string(), "?".into(), format!("({e})")],
        });
    }
    align(&rows)
}

/// `zeronode info`'s text.
pub(crate) fn info_lines(d: &Description) -> Vec<String> {
    let mut lines = vec![
        format!(
            "node {}{} (zeronode {}, protocol {}, {} engine, CURVE {})",
            d.id,
            if d.router { ", a router" } else { "" },
            d.version,
            d.protocol,
            d.engine,
            on_off(d.curve)
        ),
        format!("instance  {}", d.instance),
        format!("address   {}", d.address.as_deref().unwrap_or("-")),
        format!(
            "uptime    {}{}",
            uptime(d.uptime_ms),
            if d.closing { " (closing)" } else { "" }
        ),
        format!("options   {}", format_options(&d.options)),
        format!("requests  {}", list_or_dash(&d.requests)),
        format!("streams   {}", list_or_dash(&d.streams)),
        format!("uploads   {}", list_or_dash(&d.uploads)),
        format!("ticks     {}", list_or_dash(&d.ticks)),
    ];
    let l = &d.limits;
    lines.push(format!(
        "limits    payload {} B, handlers {} ({} per peer), waiting {} ({} per peer), \
         timeout {} ms, heartbeat {} ms, hops {}",
        l.max_payload,
        l.max_concurrent_handlers,
        l.max_handlers_per_peer,
        l.max_queued,
        l.max_queued_per_peer,
        l.request_timeout_ms,
        l.heartbeat_ms,
        l.hop_limit
    ));
    let t = &d.totals;
    lines.push(format!(
        "totals    handled {}, sent {}, timeouts {}, busy {}, running {} (waiting {})",
        t.requests_handled,
        t.requests_sent,
        t.timeouts,
        t.busy_refused,
        t.handlers_active,
        t.handlers_queued
    ));
    if let Some(r) = &d.routing {
        lines.push(format!(
            "routing   forwarded {}, failed {}, looped {}, expired {}",
            r.forwarded, r.failed, r.looped, r.expired
        ));
        // Where it went: one entry per next hop.
        let hops: Vec<String> = (r.hops.iter())
            .map(|h| format!("{} {}/{}", h.to, h.forwarded, h.failed))
            .collect();
        lines.push(format!(
            "  to      {} (forwarded/failed)",
            list_or_dash(&hops)
        ));
    }
    lines.push(format!("peers     {}", d.peers.len()));
    let mut peers = vec![["ID", "DIRECTION", "KIND", "IN FLIGHT"]
        .map(String::from)
        .to_vec()];
    for p in &d.peers {
        peers.push(vec![
            p.id.to_string(),
            direction_name(p.direction).into(),
            match (p.router, p.draining) {
                (_, true) => "draining",
                (true, false) => "router",
                (false, false) => "node",
            }
            .into(),
            p.in_flight.to_string(),
        ]);
    }
    if !d.peers.is_empty() {
        lines.extend(align(&peers).into_iter().map(|l| format!("  {l}")));
    }
    lines.push(format!("events    {}", d.events.len()));
    if !d.events.is_empty() {
        lines.extend(
            align(&event_rows(d, None))
                .into_iter()
                .map(|l| format!("  {l}")),
        );
    }
    lines
}

/// The per-event table of a description: counts by outcome, in flight, quantiles; with
/// `rates` (the per-second requests and errors of each event, by name) two more columns.
pub(crate) fn event_rows(
    d: &Description,
    rates: Option<&BTreeMap<String, (f64, f64)>>,
) -> Vec<Vec<String>> {
    let mut header = vec!["EVENT"];
    if rates.is_some() {
        header.extend(["REQ/S", "ERR/S"]);
    }
    header.extend([
        "OK",
        "ERROR",
        "REFUSED",
        "TIMEOUT",
        "CANCELLED",
        "TICKS",
        "IN FLIGHT",
        "P50",
        "P90",
        "P99",
        "MAX",
    ]);
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    for e in &d.events {
        let mut row = vec![e.event.clone()];
        if let Some(rates) = rates {
            let (req, err) = rates.get(&e.event).copied().unwrap_or_default();
            row.extend([format!("{req:.1}"), format!("{err:.1}")]);
        }
        let c = &e.requests;
        row.extend(
            [
                c.ok,
                // A panic is the handler's failure too.
                c.error + c.panicked,
                c.refused,
                c.timeout,
                c.cancelled,
                e.ticks.total(),
                e.in_flight,
            ]
            .map(|n| n.to_string()),
        );
        match &e.latency {
            Some(l) => row.extend([l.p50_us, l.p90_us, l.p99_us, l.max_us].map(micros)),
            None => row.extend(["-", "-", "-", "-"].map(String::from)),
        }
        rows.push(row);
    }
    rows
}

/// Columns padded to their widest cell, two spaces apart, trailing spaces trimmed.
pub(crate) fn align(rows: &[Vec<String>]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            row.iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_owned()
        })
        .collect()
}

/// Microseconds as a person reads them: `850µs`, `12.5ms`, `1.20s`.
pub(crate) fn micros(us: u64) -> String {
    match us {
        0..=999 => format!("{us}µs"),
        1_000..=999_999 => format!("{:.1}ms", us as f64 / 1e3),
        _ => format!("{:.2}s", us as f64 / 1e6),
    }
}

/// An uptime: `42s`, `3m07s`, `5h02m`, `2d03h`.
fn uptime(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// Every request event a node answers: with one reply, a stream, or to an upload.
pub(crate) fn handled(d: &Description) -> Vec<String> {
    let all = d.requests.iter().chain(&d.streams).chain(&d.uploads);
    all.cloned().collect()
}

fn list_or_dash(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

/// Which way a peer is joined, as the CLI prints it (re-exported for `shell`).
pub(crate) fn direction(direction: Direction) -> &'static str {
    direction_name(direction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_would() {
        assert_eq!(micros(850), "850µs");
        assert_eq!(micros(12_500), "12.5ms");
        assert_eq!(micros(1_200_000), "1.20s");
        assert_eq!(uptime(42_000), "42s");
        assert_eq!(uptime(187_000), "3m07s");
        assert_eq!(uptime(5 * 3_600_000 + 120_000), "5h02m");
    }

    #[test]
    fn columns_align_and_trailing_space_goes() {
        let rows = vec![
            vec!["ID".to_owned(), "X".to_owned()],
            vec!["longer".to_owned(), String::new()],
        ];
        assert_eq!(align(&rows), ["ID      X", "longer"]);
    }
}
