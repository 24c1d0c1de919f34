//! `zeronode shell`: an interactive session on one short-lived node. Calls take the
//! CLI's targets and order (`request ID EVENT JSON`, `tick --all -f role=api EVENT`,
//! `stream --any count 5`; `args::parse_line_call` reads them with the one-shot commands'
//! flags); replies print as one line of JSON, a stream's items a line each as they come;
//! an error prints as `error: ...` and the session goes on. Ctrl-C during a call stops
//! that call (a stream is cancelled), not the session. A line editor (rustyline)
//! keeps the history (in `$ZERONODE_HISTORY`, else `~/.zeronode_history`) and completes
//! commands, node ids and event names (learnt from the nodes' descriptions).

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use node::{Node, NodeId, Reply};
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};

use crate::args::{parse_data, parse_line_call, split_word, Aim, LineCall, ShellArgs};
use crate::error::{explain, one_line, Error};
use crate::keys::Security;
use crate::mesh;
use crate::output::{complain, say};
use crate::peers::format_options;
use crate::send::{self, send_error, Session};

/// The commands, as completion offers them.
const COMMANDS: [&str; 12] = [
    "connect", "peers", "ls", "info", "request", "tick", "stream", "meta", "timeout", "help",
    "exit", "quit",
];

const HELP: &str = "\
connect ADDR               join the node at ADDR
peers                      the nodes this session is joined to
ls                         every node reachable, one line each
info [ID]                  a node's description (default: the first joined)
request TO EVENT [JSON]    send a request, print the reply as JSON
tick TO EVENT [JSON]       send a tick (to --all: to every match)
stream TO EVENT [JSON]     print a streamed reply's items as they come (Ctrl-C stops it;
                           to --all: from every match, each as {\"from\": ID, \"item\": ...})
meta [KEY=VALUE|clear]     show, add or clear the metadata sent with each call
timeout [MS]               show or set the timeout of each call (a whole stream)
exit                       leave (or Ctrl-D)
TO is a node's ID, or flags as `zeronode request` takes them: --to ID, --any (one match),
--all (every match: tick, stream), -f KEY=VALUE (repeat it), --up, --down.";

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
        let typed: Vec<&str> = before[..start].split_whitespace().collect();
        let words = self.words.lock().unwrap_or_else(|p| p.into_inner());
        let pool: Vec<String> = match typed.split_first() {
            None => COMMANDS.map(String::from).to_vec(),
            Some((&"info", [])) => words.ids.clone(),
            Some((&("request" | "tick" | "stream"), args)) => match call_slot(args) {
                Some(Slot::Id) => words.ids.clone(),
                Some(Slot::Event) => words.events.clone(),
                None => Vec::new(),
            },
            _ => Vec::new(),
        };
        Ok((
            start,
            pool.into_iter().filter(|w| w.starts_with(word)).collect(),
        ))
    }
}

/// What the next word of a call is, for completion.
#[derive(Debug, PartialEq, Eq)]
enum Slot {
    /// A node id (the first word, or `--to`'s value).
    Id,
    /// The event.
    Event,
}

/// The slot of the word after `typed`, the words of a call after its command word (flags
/// and their values skipped); `None` past the event or at a flag's value other than an id.
fn call_slot(typed: &[&str]) -> Option<Slot> {
    let mut words = typed.iter();
    let mut targeted = false;
    let mut positional = 0;
    while let Some(word) = words.next() {
        if word.starts_with('-') && *word != "-" {
            targeted |= matches!(*word, "--any" | "--all") || word.starts_with("--to");
            if crate::args::line_flag_takes_value(word) && words.next().is_none() {
                // The word being completed is this flag's value.
                return (*word == "--to").then_some(Slot::Id);
            }
        } else {
            positional += 1;
        }
    }
    match (targeted, positional) {
        (false, 0) => Some(Slot::Id),
        (true, 0) | (false, 1) => Some(Slot::Event),
        _ => None,
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
        // Ctrl-C while a command runs stops that command (dropped: a stream is cancelled),
        // not the session.
        let done = tokio::select! {
            done = shell.command(line) => done,
            () = interrupted() => {
                say("(interrupted)");
                Ok(())
            }
        };
        if let Err(message) = done {
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

/// Waits for Ctrl-C: what stops a call in the session. (Once a handler is installed,
/// SIGINT no longer ends the process; the line editor reads Ctrl-C as a key anyway.)
async fn interrupted() {
    if tokio::signal::ctrl_c().await.is_err() {
        // No handler could be installed: nothing stops the call but its own bound.
        std::future::pending::<()>().await;
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

    /// Sends one call typed in the session (`command` is `request`, `tick` or `stream`)
    /// and prints its outcome; an error is the message to print.
    async fn call(
        &self,
        command: &str,
        line: &LineCall,
        data: &serde_json::Value,
    ) -> Result<(), String> {
        let aim = &line.aim;
        let failed = |source| send_error(&self.node, aim, source).to_string();
        let mut call = self
            .node
            .call(send::target(aim, None), &line.event)
            .timeout(self.timeout);
        for (key, value) in &self.meta {
            call = call.meta(key, value);
        }
        match (command, aim) {
            ("tick", _) => {
                let sent = call.tick(data).await.map_err(failed)?;
                say(send::sent_line(aim, sent.nodes));
            }
            ("request", Aim::All(..)) => {
                return Err("a request has one reply: --all is for tick and stream".into());
            }
            ("request", _) => {
                let reply: Reply = call.send(data).await.map_err(failed)?;
                let value: serde_json::Value = reply.decode().map_err(failed)?;
                say(value);
            }
            ("stream", Aim::All(..)) => {
                send::print_all_items(&self.node, aim, call, data)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            _ => {
                let items = call.stream::<serde_json::Value>(data);
                // Ctrl-C is `run`'s `select!`: dropping this future drops the stream, which
                // cancels its handler.
                send::print_items(&self.node, aim, &line.event, items)
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// Runs one command line; an error is the message to print.
    async fn command(&mut self, line: &str) -> Result<(), String> {
        let (command, rest) = split_word(line);
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
            "request" | "tick" | "stream" => {
                let usage = |e: String| format!("{e} (usage: {command} TO EVENT [JSON]; help)");
                let line = parse_line_call(rest).map_err(usage)?;
                let data = parse_data(line.data.as_deref()).map_err(|e| e.to_string())?;
                self.call(command, &line, &data).await?;
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
            split_word("request w1 echo {\"a\": 1}"),
            ("request", "w1 echo {\"a\": 1}")
        );
        assert_eq!(split_word("peers"), ("peers", ""));
    }

    #[test]
    fn completion_knows_where_the_id_and_the_event_go() {
        assert_eq!(call_slot(&[]), Some(Slot::Id));
        assert_eq!(call_slot(&["w1"]), Some(Slot::Event));
        assert_eq!(call_slot(&["w1", "echo"]), None);
        assert_eq!(call_slot(&["--to"]), Some(Slot::Id));
        assert_eq!(call_slot(&["--to", "w1"]), Some(Slot::Event));
        assert_eq!(call_slot(&["--any", "-f"]), None);
        assert_eq!(call_slot(&["--any", "-f", "role=api"]), Some(Slot::Event));
        assert_eq!(call_slot(&["--all", "--up"]), Some(Slot::Event));
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
        assert_eq!(
            at("stream --to w"),
            (12, vec!["w1".to_owned(), "w2".to_owned()])
        );
        assert_eq!(at("tick --all -f k=v p"), (18, vec!["ping".to_owned()]));
    }
}
