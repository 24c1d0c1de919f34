//! `zeronode shell`: an interactive session on one short-lived node. Commands take the
//! CLI's argument order (`request ID EVENT JSON`); replies print as one line of JSON;
//! an error prints as `error: ...` and the session goes on. A line editor (rustyline)
//! keeps the history (in `$ZERONODE_HISTORY`, else `~/.zeronode_history`) and completes
//! commands, node ids and event names (learnt from the nodes' descriptions).

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use node::{Node, NodeId, Reply, Target};
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};

use crate::args::{parse_data, ShellArgs};
use crate::error::{explain, one_line, Error};
use crate::keys::Security;
use crate::mesh;
use crate::output::{complain, say};
use crate::peers::format_options;
use crate::send::Session;

/// The commands, as completion offers them.
const COMMANDS: [&str; 11] = [
    "connect", "peers", "ls", "info", "request", "tick", "meta", "timeout", "help", "exit", "quit",
];

const HELP: &str = "\
connect ADDR              join the node at ADDR
peers                     the nodes this session is joined to
ls                        every node reachable, one line each
info [ID]                 a node's description (default: the first joined)
request ID EVENT [JSON]   send a request, print the reply as JSON
tick ID EVENT [JSON]      send a tick
meta [KEY=VALUE|clear]    show, add or clear the metadata sent with each call
timeout [MS]              show or set the request timeout
exit                      leave (or Ctrl-D)";

/// What completion offers besides the commands: node ids and event names seen so far.
#[derive(Default)]
struct Words {
    ids: Vec<String>,
    events: Vec<String>,
}

impl Words {
    /// Learns the ids and exact event names of descriptions.
    fn learn<'a>(&mut self, described: impl IntoIterator<Item = &'a node::Description>) {
        for d in described {
            add(&mut self.ids, d.id.as_str());
            for p in &d.peers {
                add(&mut self.ids, p.id.as_str());
            }
            // A pattern (`/regex/`) is no name to complete.
            for e in crate::mesh::handled(d).iter().chain(&d.ticks) {
                if !e.starts_with('/') {
                    add(&mut self.events, e);
                }
            }
        }
    }
}

fn add(list: &mut Vec<String>, word: &str) {
    if !list.iter().any(|w| w == word) {
        list.push(word.to_owned());
        list.sort();
    }
}

/// The line editor's helper: completion only.
struct Complete {
    words: Arc<Mutex<Words>>,
}

impl Completer for Complete {
    type Candidate = String;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<String>)> {
        let before = &line[..pos];
        let start = before.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        let word = &before[start..];
        let index = before[..start].split_whitespace().count();
        let command = before.split_whitespace().next().unwrap_or("");
        let words = self.words.lock().unwrap_or_else(|p| p.into_inner());
        let pool: Vec<String> = match (index, command) {
            (0, _) => COMMANDS.map(String::from).to_vec(),
            (1, "request" | "tick" | "info") => words.ids.clone(),
            (2, "request" | "tick") => words.events.clone(),
            _ => Vec::new(),
        };
        Ok((
            start,
            pool.into_iter().filter(|w| w.starts_with(word)).collect(),
        ))
    }
}

impl Hinter for Complete {
    type Hint = String;
}
impl Highlighter for Complete {
    fn highlight<'l>(&self, line: &'l str, _pos: usize) -> Cow<'l, str> {
        Cow::Borrowed(line)
    }
}
impl Validator for Complete {}
impl Helper for Complete {}

/// The session: its node, how it connects, what each call carries.
struct Shell {
    node: Node,
    security: Security,
    connect_timeout: Duration,
    meta: Vec<(String, String)>,
    timeout: Duration,
    words: Arc<Mutex<Words>>,
}

/// `zeronode shell`.
pub(crate) async fn run(args: ShellArgs) -> Result<(), Error> {
    let security = Security::load(&args.security, true)?;
    let connect_timeout = Duration::from_millis(args.connect_timeout);
    let session = Session::open(&args.connect, connect_timeout, &security).await?;
    let words = Arc::new(Mutex::new(Words::default()));
    let mut shell = Shell {
        node: session.node.clone(),
        security,
        connect_timeout,
        meta: Vec::new(),
        timeout: Duration::from_secs(10),
        words: Arc::clone(&words),
    };
    for peer in &session.connected {
        say(format_args!("joined {}", peer.id));
    }
    shell.learn().await;
    let mut editor: Editor<Complete, DefaultHistory> =
        Editor::new().map_err(|e| Error::Terminal(std::io::Error::other(e)))?;
    editor.set_helper(Some(Complete { words }));
    let history = history_file();
    if let Some(file) = &history {
        // No history yet is no error.
        let _ = editor.load_history(file);
    }
    loop {
        let line = tokio::task::block_in_place(|| editor.readline("zeronode> "));
        let line = match line {
            Ok(line) => line,
            // Ctrl-C drops the line being typed, as a shell does.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                complain(format_args!("error: {e}"));
                break;
            }
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(line);
        if matches!(line, "exit" | "quit") {
            break;
        }
        if let Err(message) = shell.command(line).await {
            complain(format_args!("error: {}", one_line(&message)));
        }
    }
    if let Some(file) = &history {
        if let Err(e) = editor.save_history(file) {
            complain(format_args!(
                "(history not saved to {}: {e})",
                file.display()
            ));
        }
    }
    session.close().await;
    Ok(())
}

/// Where the history is kept.
fn history_file() -> Option<PathBuf> {
    std::env::var_os("ZERONODE_HISTORY")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".zeronode_history"))
        })
}

/// The first word of `line` and the rest, trimmed.
fn split(line: &str) -> (&str, &str) {
    match line.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim_start()),
        None => (line, ""),
    }
}

impl Shell {
    /// Learns the ids and events of the mesh, for completion (quietly: a node that does
    /// not answer is no error here).
    async fn learn(&self) {
        let (found, _) = mesh::walk(&self.node).await;
        let described: Vec<_> = found
            .iter()
            .filter_map(|f| f.described.as_ref().ok())
            .collect();
        let mut words = self.words.lock().unwrap_or_else(|p| p.into_inner());
        words.learn(described);
        for peer in self.node.peers().list() {
            add(&mut words.ids, peer.id.as_str());
        }
    }

    /// Runs one command line; an error is the message to print.
    async fn command(&mut self, line: &str) -> Result<(), String> {
        let (command, rest) = split(line);
        match command {
            "help" => HELP.lines().for_each(say),
            "connect" => {
                let address = crate::args::parse_connect_address(rest)?;
                let peer = self
                    .security
                    .connect(&self.node, &address)
                    .await
                    .map_err(|source| {
                        Error::Connect {
                            address: address.clone(),
                            timeout: self.connect_timeout,
                            source,
                        }
                        .to_string()
                    })?;
                say(format_args!("joined {}", peer.id));
                self.learn().await;
            }
            "peers" => {
                let peers = self.node.peers().list();
                if peers.is_empty() {
                    say("no node is joined (connect ADDR)");
                }
                let mut rows = vec![["ID", "DIRECTION", "OPTIONS"].map(String::from).to_vec()];
                rows.extend(peers.iter().map(|p| {
                    vec![
                        p.id.to_string(),
                        mesh::direction(p.direction).into(),
                        format_options(&p.options),
                    ]
                }));
                if !peers.is_empty() {
                    mesh::align(&rows).into_iter().for_each(say);
                }
            }
            "ls" => {
                let (found, _) = mesh::walk(&self.node).await;
                let described: Vec<_> = found
                    .iter()
                    .filter_map(|f| f.described.as_ref().ok())
                    .collect();
                self.words
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .learn(described);
                mesh::ls_lines(&found, self.node.id())
                    .into_iter()
                    .for_each(say);
            }
            "info" => {
                let id = match rest {
                    "" => self
                        .node
                        .peers()
                        .list()
                        .first()
                        .map(|p| p.id.clone())
                        .ok_or("no node is joined (connect ADDR)")?,
                    id => NodeId::new(id),
                };
                let mut described = self.node.describe(id).await.map_err(|e| explain(&e))?;
                described.peers.retain(|p| &p.id != self.node.id());
                self.words
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .learn([&described]);
                mesh::info_lines(&described).into_iter().for_each(say);
            }
            "request" | "tick" => {
                let (id, rest) = split(rest);
                let (event, data) = split(rest);
                if id.is_empty() || event.is_empty() {
                    return Err(format!("usage: {command} ID EVENT [JSON]"));
                }
                let data =
                    parse_data((!data.is_empty()).then_some(data)).map_err(|e| e.to_string())?;
                let mut call = self
                    .node
                    .call(Target::Id(NodeId::new(id)), event)
                    .timeout(self.timeout);
                for (key, value) in &self.meta {
                    call = call.meta(key, value);
                }
                if command == "tick" {
                    call.tick(&data).await.map_err(|e| explain(&e))?;
                    say("sent");
                } else {
                    let reply: Reply = call.send(&data).await.map_err(|e| explain(&e))?;
                    let value: serde_json::Value = reply.decode().map_err(|e| explain(&e))?;
                    say(value);
                }
            }
            "meta" => match rest {
                "" => {
                    if self.meta.is_empty() {
                        say("no metadata");
                    }
                    for (key, value) in &self.meta {
                        say(format_args!("{key}={value}"));
                    }
                }
                "clear" => self.meta.clear(),
                entry => {
                    let (key, value) = crate::args::parse_meta(entry)?;
                    self.meta.retain(|(k, _)| k != &key);
                    self.meta.push((key, value));
                }
            },
            "timeout" => match rest {
                "" => say(format_args!("{} ms", self.timeout.as_millis())),
                ms => match ms.parse::<u64>() {
                    Ok(ms) if ms > 0 => self.timeout = Duration::from_millis(ms),
                    _ => return Err(format!("timeout: {ms:?} is not a number of milliseconds")),
                },
            },
            other => return Err(format!("unknown command {other:?} (help lists them)")),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_splits_into_a_word_and_the_rest() {
        assert_eq!(
            split("request w1 echo {\"a\": 1}"),
            ("request", "w1 echo {\"a\": 1}")
        );
        assert_eq!(split("peers"), ("peers", ""));
    }

    #[test]
    fn completion_offers_commands_ids_then_events() {
        let words = Arc::new(Mutex::new(Words {
            ids: vec!["w1".into(), "w2".into(), "hub".into()],
            events: vec!["echo".into(), "ping".into()],
        }));
        let complete = Complete { words };
        let history = DefaultHistory::new();
        let ctx = Context::new(&history);
        let at = |line: &str| complete.complete(line, line.len(), &ctx).unwrap();
        assert_eq!(at("req"), (0, vec!["request".to_owned()]));
        assert_eq!(at("request w"), (8, vec!["w1".to_owned(), "w2".to_owned()]));
        assert_eq!(at("request w1 e"), (11, vec!["echo".to_owned()]));
        assert_eq!(at("request w1 echo {"), (16, vec![]));
    }
}
