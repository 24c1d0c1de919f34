//! The node crate stays in parts, and its parts in order.
//!
//! - node/src is in rooms (a folder with a `mod.rs`, or a file at the root of `src/`), in
//!   one order from the vocabulary at the bottom to the calling side at the top ([`ORDER`]):
//!   a room names only the rooms below it. An arrow up the order fails the test, naming the
//!   file and the path, unless it is one of the few listed with a reason
//!   ([`KNOWN_UPWARD`]); that list only shrinks: an arrow listed there that is gone fails
//!   the test too, until it is taken off the list.
//! - No circle of modules importing each other is larger than a handful of files
//!   (`scripts/modgraph.py` prints the whole graph). A module here is a top-level file of
//!   `src/` with its children (`peer/tests.rs` counts as `peer`), or a file of a room; an
//!   edge is a `crate::module..` path, or a name the crate root re-exports (`crate::Node`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The largest circle allowed: a few files that belong together (a part and its
/// pure core), never the whole crate.
const MAX_CIRCLE: usize = 5;

/// The rooms of node/src, bottom to top: each may use the rooms before it, never one after
/// it (ARCHITECTURE.md, "The node's parts", says what each owns).
const ORDER: &[&str] = &[
    // The vocabulary: codes on the wire, the error, what nodes advertise and how to select
    // them, a request's context (deadline, trace).
    "codes",
    "error",
    "options",
    "filter",
    "context",
    // Membership: ids, the registry, the handshake's decisions, links, the node's life.
    "mesh",
    // The sources of addresses.
    "discovery",
    // Events, hooks, metrics, spans, rate-limited reports, the description's parts.
    "observation",
    "config",
    "startup",
    // The serving side, then router nodes (which run as a serving task and send as callers).
    "serving",
    "routing",
    // The node: its handle, its parts composed (`Inner`), where each message enters it and
    // the protocol's own messages (`node/system/`), its tasks and its readings.
    "node",
    // The calling side: built on the node's handle.
    "calling",
    "shutdown",
    "wire_vectors",
];

/// Arrows up [`ORDER`] not turned yet: (file under `src/`, the path after `crate::`, why).
/// Only ever shrinks.
const KNOWN_UPWARD: &[(&str, &str, &str)] = &[];

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The text without `//` comments (doc links name modules without importing them).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `room::module` for a path that starts in a room, else the path's first identifier.
fn room_path(path: &str, rooms: &BTreeSet<String>) -> String {
    let first = first_ident(path);
    if rooms.contains(&first) {
        if let Some(rest) = path[first.len()..].strip_prefix("::") {
            let second = first_ident(rest);
            if !second.is_empty() {
                return format!("{first}::{second}");
            }
        }
    }
    first
}

/// Each path after `crate::` in `code` (each item of a `crate::{..}` group on its own), as
/// far as it is a path: `node::inner::Inner`, `mesh::peer` (of `crate::mesh::peer::{..}`).
fn crate_items(code: &str) -> Vec<String> {
    let path_of = |text: &str| -> String {
        text.trim()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect::<String>()
            .trim_end_matches(':')
            .to_owned()
    };
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::` or a longer name ending in `crate`
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 || (depth == 1 && c == ',') {
                    found.push(path_of(&item));
                    item.clear();
                    if depth == 0 {
                        break;
                    }
                } else {
                    item.push(c);
                }
            }
        } else {
            found.push(path_of(rest));
        }
    }
    found.retain(|path| !path.is_empty());
    found
}

/// The module each path after `crate::` names (each one of a `crate::{..}` group): its first
/// identifier, or `room::module` for a path into a room.
fn crate_paths(code: &str, rooms: &BTreeSet<String>) -> Vec<String> {
    crate_items(code)
        .iter()
        .map(|path| room_path(path, rooms))
        .collect()
}

fn first_ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Strongly connected components (Tarjan), each a sorted list of modules.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.graph[v] {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut circle = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    circle.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                circle.sort();
                self.out.push(circle);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.out
}

/// The import graph of `src/`: module -> the modules it names.
fn import_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    // A folder with a `mod.rs` is a room of modules: each of its files (with its children)
    // is a module `room::file`, as a top-level file of `src/` is one.
    let rooms: BTreeSet<String> = std::fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("mod.rs").is_file())
        .filter_map(|p| Some(p.file_name()?.to_str()?.to_owned()))
        .collect();
    let module_of = |path: &Path| -> Option<String> {
        let relative = path.strip_prefix(src).ok()?;
        let mut parts = relative
            .components()
            .map(|c| c.as_os_str().to_str().unwrap_or(""));
        let first = parts.next()?;
        let name = first.strip_suffix(".rs").unwrap_or(first);
        if rooms.contains(name) {
            let second = parts.next()?;
            let inner = second.strip_suffix(".rs").unwrap_or(second);
            return Some(match inner {
                "mod" => name.to_owned(),
                inner => format!("{name}::{inner}"),
            });
        }
        (name != "lib").then(|| name.to_owned())
    };
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(f)).collect();
    // What the crate root re-exports, by name: `pub use module::{A, B};`.
    let root = code_of(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut exported = BTreeMap::new();
    for statement in root.split(';') {
        let Some(used) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let path = room_path(used, &rooms);
        let module = path.clone();
        if !modules.contains(&module) {
            continue;
        }
        let names = used[path.len()..].trim_start_matches("::");
        for name in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = name.trim().rsplit("::").next().unwrap_or("").trim();
            if !name.is_empty() {
                exported.insert(name.to_owned(), module.clone());
            }
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for file in &files {
        let Some(here) = module_of(file) else {
            continue;
        };
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for name in crate_paths(&code, &rooms) {
            let target = if modules.contains(&name) {
                Some(name)
            } else if let Some(module) = exported.get(&name) {
                Some(module.clone())
            } else {
                // A name a room's `mod.rs` re-exports (`crate::node::Node`): the room.
                Some(first_ident(&name))
                    .filter(|room| name.contains("::") && modules.contains(room))
            };
            if let Some(target) = target.filter(|t| *t != here) {
                graph.get_mut(&here).unwrap().insert(target);
            }
        }
    }
    graph
}

/// The room of a file under `src/`: its first component (`mesh/peer.rs`: `mesh`, `filter/
/// compare.rs` and `filter.rs`: `filter`); none for the crate root, which re-exports.
fn room_of(relative: &str) -> Option<String> {
    let first = relative.split('/').next()?;
    let room = first.strip_suffix(".rs").unwrap_or(first);
    (room != "lib").then(|| room.to_owned())
}

/// What the crate root re-exports, by name, and the room it comes from (`Node`: `node`).
fn exported_rooms(lib_rs: &str) -> BTreeMap<String, String> {
    let mut exported = BTreeMap::new();
    for statement in code_of(lib_rs).split(';') {
        let Some(used) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let room = first_ident(used);
        let names = used.rsplit_once("::{").map_or(used, |(_, names)| names);
        for name in names.trim_end_matches('}').split(',') {
            let name = name.trim().rsplit("::").next().unwrap_or("").trim();
            if !name.is_empty() {
                exported.insert(name.to_owned(), room.clone());
            }
        }
    }
    exported
}

/// The arrows up `order` in `files` (path under `src/`, text): each file and the path it
/// names after `crate::` in a room above its own. A path's room is its first identifier, or
/// for a name the crate root re-exports (`crate::Node`), the room it comes from.
fn upward_arrows(
    files: &[(String, String)],
    order: &[&str],
    exported: &BTreeMap<String, String>,
) -> BTreeSet<(String, String)> {
    let rank = |room: &str| order.iter().position(|r| *r == room);
    let mut up = BTreeSet::new();
    for (file, text) in files {
        let Some(here) = room_of(file).and_then(|room| rank(&room)) else {
            continue;
        };
        for path in crate_items(&code_of(text)) {
            let first = first_ident(&path);
            let room = if rank(&first).is_some() {
                Some(first)
            } else {
                exported.get(&first).cloned()
            };
            if room
                .and_then(|room| rank(&room))
                .is_some_and(|there| there > here)
            {
                up.insert((file.clone(), path));
            }
        }
    }
    up
}

#[test]
fn arrows_between_the_rooms_of_node_src_go_down_one_order() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|path| {
            let relative = path.strip_prefix(&src).unwrap();
            let relative = relative
                .components()
                .map(|c| c.as_os_str().to_str().unwrap())
                .collect::<Vec<_>>()
                .join("/");
            (relative, std::fs::read_to_string(path).unwrap())
        })
        .collect();
    // Every room has its place, and every place is a room: a new room is put in the order.
    let rooms: BTreeSet<String> = files.iter().filter_map(|(f, _)| room_of(f)).collect();
    let ordered: BTreeSet<String> = ORDER.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        rooms, ordered,
        "the rooms of {src:?} and those of ORDER differ: put a new room in the order"
    );
    let exported = exported_rooms(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    assert!(exported.len() > 50, "the crate root's re-exports were read");
    let up = upward_arrows(&files, ORDER, &exported);
    let known: BTreeSet<(String, String)> = KNOWN_UPWARD
        .iter()
        .map(|(file, path, why)| {
            assert!(
                !why.trim().is_empty(),
                "{file} -> {path}: say why it is allowed"
            );
            (file.to_string(), path.to_string())
        })
        .collect();
    let new: Vec<String> = up
        .difference(&known)
        .map(|(file, path)| format!("src/{file} names crate::{path}"))
        .collect();
    assert!(
        new.is_empty(),
        "arrows up the order of rooms (a room names only those below it in ORDER, \
         node/tests/layers.rs): {new:#?}"
    );
    let gone: Vec<String> = known
        .difference(&up)
        .map(|(file, path)| format!("src/{file} -> crate::{path}"))
        .collect();
    assert!(
        gone.is_empty(),
        "arrows listed in KNOWN_UPWARD that are gone: take them off the list: {gone:#?}"
    );
}

#[test]
fn the_order_finds_an_arrow_up_and_nothing_else() {
    let order = ["codes", "mesh", "node"];
    let exported: BTreeMap<String, String> = [("Node".to_owned(), "node".to_owned())].into();
    let files = [
        (
            "mesh/link.rs",
            "use crate::codes::X;\nuse crate::{node::inner::Inner, mesh::peer};\n\
             // crate::node::Node in a comment\nfn f() { crate::Node::new(); }",
        ),
        ("node/inner.rs", "use crate::mesh::peer::{A, B};"),
        ("codes.rs", "use crate::Unknown;"),
        ("lib.rs", "pub use node::Node;"),
    ]
    .map(|(f, t)| (f.to_owned(), t.to_owned()));
    let up: Vec<(String, String)> = upward_arrows(&files, &order, &exported)
        .into_iter()
        .collect();
    assert_eq!(
        up,
        [
            ("mesh/link.rs".to_owned(), "Node::new".to_owned()),
            ("mesh/link.rs".to_owned(), "node::inner::Inner".to_owned()),
        ]
    );
    assert_eq!(room_of("filter/compare.rs").as_deref(), Some("filter"));
    assert_eq!(room_of("lib.rs"), None);
    let read = exported_rooms("pub use calling::call::{Call, Raw};\npub use node::health;");
    assert_eq!(read.get("Raw").map(String::as_str), Some("calling"));
    assert_eq!(read.get("health").map(String::as_str), Some("node"));
}

#[test]
fn no_circle_of_imports_in_node_src_is_larger_than_a_few_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = import_graph(&src);
    assert!(graph.len() > 20, "the modules of {src:?} were found");
    assert!(
        graph.values().map(BTreeSet::len).sum::<usize>() > 50,
        "their imports were found"
    );
    let too_large: Vec<Vec<String>> = circles(&graph)
        .into_iter()
        .filter(|circle| circle.len() > MAX_CIRCLE)
        .collect();
    assert!(
        too_large.is_empty(),
        "modules of node/src that import each other in a circle of more than {MAX_CIRCLE} \
         (see scripts/modgraph.py node/src --edges): {too_large:?}"
    );
}

#[test]
fn the_circle_finder_finds_a_circle_and_nothing_else() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a", "d"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    let mut found = circles(&graph);
    found.sort();
    assert_eq!(found, [vec!["a", "b", "c"], vec!["d"]]);
    let no_rooms = BTreeSet::new();
    assert_eq!(
        crate_paths(
            "use crate::{a::X, b, c::{D, E}}; let x = crate::d::f(); $crate::e",
            &no_rooms
        ),
        ["a", "b", "c", "d"]
    );
    // A path into a room names the module inside it.
    let rooms: BTreeSet<String> = ["r".to_owned()].into();
    assert_eq!(
        crate_paths("use crate::r::m::X; use crate::{r::n, a::Y};", &rooms),
        ["r::m", "r::n", "a"]
    );
}
