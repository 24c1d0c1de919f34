//! The `zeronode:peers` conversation: what a running node answers, and how `zeronode peers`
//! prints it.
//!
//! The reply is a list of [`PeerRow`] encoded as MessagePack like any reply, so any
//! zeronode node (in Rust or elsewhere) can answer it with the same shape:
//! `[{"id": "w1", "direction": "downstream", "options": {"role": "worker"}}, ...]`.

use node::{Direction, Options, PeerInfo};
use serde::{Deserialize, Serialize};

use crate::args::format_value;

/// The event a `zeronode node` answers with its peers.
pub(crate) const EVENT: &str = "zeronode:peers";

/// One peer as the remote node sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PeerRow {
    /// The peer's id.
    pub(crate) id: String,
    /// `upstream` (the remote node connected to it) or `downstream` (it connected to the
    /// remote node).
    pub(crate) direction: String,
    /// The options it advertises.
    pub(crate) options: Options,
}

impl From<PeerInfo> for PeerRow {
    fn from(peer: PeerInfo) -> PeerRow {
        PeerRow {
            id: peer.id.to_string(),
            direction: direction_name(peer.direction).to_owned(),
            options: peer.options,
        }
    }
}

/// A direction as the CLI prints it.
pub(crate) fn direction_name(direction: Direction) -> &'static str {
    match direction {
        Direction::Upstream => "upstream",
        Direction::Downstream => "downstream",
    }
}

/// Options as `key=value` pairs separated by spaces, in the syntax `-o` accepts (`-` for
/// none).
pub(crate) fn format_options(options: &Options) -> String {
    if options.is_empty() {
        return "-".to_owned();
    }
    options
        .iter()
        .map(|(key, value)| format!("{key}={}", format_value(value)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The peers as an aligned table with a header line, sorted by id then direction:
///
/// ```text
/// ID      DIRECTION   OPTIONS
/// worker  downstream  role=worker tags=a,b
/// ```
pub(crate) fn table(rows: &[PeerRow]) -> Vec<String> {
    let mut rows: Vec<&PeerRow> = rows.iter().collect();
    rows.sort_by(|a, b| (&a.id, &a.direction).cmp(&(&b.id, &b.direction)));
    let id_width = rows
        .iter()
        .map(|r| r.id.len())
        .chain([2])
        .max()
        .unwrap_or(2);
    let direction_width = "downstream".len();
    let line = |id: &str, direction: &str, options: &str| {
        format!("{id:<id_width$}  {direction:<direction_width$}  {options}")
            .trim_end()
            .to_owned()
    };
    std::iter::once(line("ID", "DIRECTION", "OPTIONS"))
        .chain(
            rows.iter()
                .map(|r| line(&r.id, &r.direction, &format_options(&r.options))),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use node::Value;

    use super::*;

    fn row(id: &str, direction: &str, options: &[(&str, Value)]) -> PeerRow {
        PeerRow {
            id: id.into(),
            direction: direction.into(),
            options: options
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        }
    }

    #[test]
    fn table_is_aligned_and_sorted() {
        let rows = [
            row(
                "worker-1",
                "downstream",
                &[
                    ("role", Value::from("worker")),
                    ("tags", Value::from(vec!["a", "b"])),
                ],
            ),
            row("api", "upstream", &[]),
        ];
        assert_eq!(
            table(&rows),
            vec![
                "ID        DIRECTION   OPTIONS",
                "api       upstream    -",
                "worker-1  downstream  role=worker tags=a,b",
            ]
        );
    }

    #[test]
    fn an_empty_list_is_a_header() {
        assert_eq!(table(&[]), vec!["ID  DIRECTION   OPTIONS"]);
    }

    #[test]
    fn rows_travel_as_plain_json_shapes() {
        let r = row("w", "downstream", &[("load", Value::Float(0.5))]);
        let json = serde_json::to_string(&r).ok();
        assert_eq!(
            json.as_deref(),
            Some(r#"{"id":"w","direction":"downstream","options":{"load":0.5}}"#)
        );
    }
}
