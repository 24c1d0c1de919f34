//! The documents say what the code does: the stream window they state is
//! [`node::DEFAULT_WINDOW`], README.md has one section per subject, and no doc comment
//! names a calling method the API no longer has. A figure changed in one place and not the
//! others fails here, with the file and the words.

use std::path::{Path, PathBuf};

use regex::Regex;

/// The workspace's root (this crate is `node/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("node/ has a parent")
        .to_path_buf()
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A document's prose in one line: comment markers (`//!`, `///`, `//`) dropped, runs of
/// whitespace made one space, so a sentence broken across lines reads whole.
fn prose(text: &str) -> String {
    let lines = text.lines().map(|line| {
        let line = line.trim_start();
        ["//!", "///", "//"]
            .iter()
            .find_map(|marker| line.strip_prefix(marker))
            .unwrap_or(line)
    });
    lines
        .collect::<Vec<_>>()
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The figures `text` gives as a stream window's default: a number written next to "by
/// default" or after "default", in a sentence that speaks of a window.
fn stated_windows(text: &str) -> Vec<(u64, String)> {
    let figure = Regex::new(
        r"(?i)(?:\b(\d[\d,]*) (?:items )?by default|\bdefault(?: window)?:? (\d[\d,]*)\b)",
    )
    .expect("a valid pattern");
    let prose = prose(text);
    prose
        .split(". ")
        .filter(|sentence| sentence.to_lowercase().contains("window"))
        .flat_map(|sentence| {
            figure
                .captures_iter(sentence)
                .filter_map(|c| c.get(1).or(c.get(2)))
                .map(|m| {
                    let n = m.as_str().replace(',', "").parse().expect("digits");
                    (n, sentence.to_owned())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_document_states_the_window_the_code_has() {
    let files = [
        "README.md",
        "ARCHITECTURE.md",
        "node/src/lib.rs",
        "node/src/calling/stream.rs",
    ];
    for file in files {
        let stated = stated_windows(&read(file));
        assert!(
            !stated.is_empty(),
            "{file} no longer states the default window in words this test reads \
             (\"N items by default\"): say it, or drop the file from this list"
        );
        for (n, sentence) in stated {
            assert_eq!(
                n,
                u64::from(node::DEFAULT_WINDOW),
                "{file} states a window of {n} by default: {sentence:?}"
            );
        }
    }
}

#[test]
fn the_window_reader_finds_a_figure_that_disagrees() {
    // The reader must see a wrong figure, wherever the line breaks.
    let stated =
        stated_windows("//! the receiver holds at most its window\n//! (256 items by default).");
    assert_eq!(stated.len(), 1);
    assert_eq!(stated[0].0, 256);
    let stated = stated_windows("Items held at most (its credit window; default 32, fewer ...).");
    assert_eq!(stated[0].0, 32);
}

#[test]
fn the_readme_has_one_section_per_subject() {
    let readme = read("README.md");
    let mut headings: Vec<&str> = readme.lines().filter(|l| l.starts_with("## ")).collect();
    let all = headings.len();
    headings.sort_unstable();
    headings.dedup();
    assert_eq!(headings.len(), all, "a `## ` heading twice in README.md");
}

/// The calling methods removed in favour of the call builder (CHANGELOG.md, "Removed");
/// `request_timeout` is left out: `NodeBuilder` still has it (the node's default timeout),
/// and `send_raw` too: `Sink` has it.
const REMOVED: [&str; 11] = [
    "request_raw",
    "request_any",
    "request_all",
    "tick_any",
    "tick_all",
    "tick_raw",
    "connect_secure",
    "send_reply",
    "send_raw_reply",
    "gather_raw",
    "Call::send_raw",
];

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

#[test]
fn no_doc_comment_names_a_removed_calling_method() {
    let mut files = Vec::new();
    for crate_dir in ["node/src", "protocol/src", "cli/src", "examples/src"] {
        rust_files(&root().join(crate_dir), &mut files);
    }
    let names = REMOVED.map(regex::escape).join("|");
    let removed = Regex::new(&format!(r"\b(?:{names})\b")).expect("a valid pattern");
    let mut found = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("readable");
        for (i, line) in text.lines().enumerate() {
            let line = line.trim_start();
            if line.starts_with("//") && removed.is_match(line) {
                found.push(format!("{}:{}: {line}", path.display(), i + 1));
            }
        }
    }
    for doc in ["README.md", "ARCHITECTURE.md"] {
        for (i, line) in read(doc).lines().enumerate() {
            for name in REMOVED {
                if line.contains(&format!("`{name}`")) || line.contains(&format!("{name}(")) {
                    found.push(format!("{doc}:{}: {line}", i + 1));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "removed names still in the docs:\n{}",
        found.join("\n")
    );
}
