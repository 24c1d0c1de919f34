//! The node crate stays in parts: no circle of modules importing each other larger than
//! a handful of files (`scripts/modgraph.py` prints the whole graph). A module here is a
//! top-level file of `src/` with its children (`peer/tests.rs` counts as `peer`); an edge
//! is a `crate::module..` path, or a name the crate root re-exports (`crate::Node`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The largest circle allowed: a few files that belong together (a part and its
/// pure core), never the whole crate.
const MAX_CIRCLE: usize = 5;

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

/// The module each path after `crate::` names (each one of a `crate::{..}` group): its first
/// identifier, or `room::module` for a path into a room.
fn crate_paths(code: &str, rooms: &BTreeSet<String>) -> Vec<String> {
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
                    found.push(room_path(item.trim(), rooms));
                    item.clear();
                    if depth == 0 {
                        break;
                    }
                } else {
                    item.push(c);
                }
            }
        } else {
            found.push(room_path(rest, rooms));
        }
    }
    found.retain(|name| !name.is_empty());
    found
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
            } else {
                exported.get(&name).cloned()
            };
            if let Some(target) = target.filter(|t| *t != here) {
                graph.get_mut(&here).unwrap().insert(target);
            }
        }
    }
    graph
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
