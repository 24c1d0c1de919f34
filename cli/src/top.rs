//! `zeronode top`: a live view of a mesh. Every interval the mesh is walked (`mesh::walk`:
//! each node's description, through the routers) and each node becomes a row: requests
//! and errors per second (from the change in its counts since the last walk), handlers in
//! flight, the p50 and p99 of its busiest event, its peers. Sortable, with a drill-down to
//! one node's events.
//!
//! On a terminal it is full-screen (ratatui on crossterm, in the alternate screen, raw
//! mode); whatever ends it (q, Ctrl-C, a signal, an error, a panic) puts the terminal back
//! as it was. When stdout is not a terminal it prints the table as plain lines at each
//! refresh instead (`--count N` stops after N).

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use node::{Description, NodeId};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Paragraph, Row, Table, TableState};
use tokio::sync::{mpsc, watch};

use crate::args::TopArgs;
use crate::error::Error;
use crate::mesh::{self, align, micros, Found};
use crate::output::say;
use crate::send::Session;

/// The columns rows can be sorted by, in the order `s` steps through them.
const COLUMNS: [&str; 7] = ["ID", "REQ/S", "ERR/S", "IN FLIGHT", "P50", "P99", "PEERS"];

/// One node's row.
#[derive(Debug, Clone, Default)]
struct NodeRow {
    id: String,
    router: bool,
    req_s: f64,
    err_s: f64,
    in_flight: u64,
    p50: Option<u64>,
    p99: Option<u64>,
    peers: usize,
    /// Why it could not be described, if it could not.
    error: Option<String>,
}

impl NodeRow {
    fn cells(&self) -> Vec<String> {
        let id = if self.router {
            format!("{} (router)", self.id)
        } else {
            self.id.clone()
        };
        if let Some(e) = &self.error {
            // The reason after the columns, which stay aligned.
            let mut cells = vec![id];
            cells.extend(std::iter::repeat_n("-".to_owned(), COLUMNS.len() - 1));
            cells.push(format!("({e})"));
            return cells;
        }
        let quantile = |q: Option<u64>| q.map_or_else(|| "-".into(), micros);
        vec![
            id,
            format!("{:.1}", self.req_s),
            format!("{:.1}", self.err_s),
            self.in_flight.to_string(),
            quantile(self.p50),
            quantile(self.p99),
            self.peers.to_string(),
        ]
    }
}

/// Per event: requests handled and failed so far.
type EventCounts = BTreeMap<String, (u64, u64)>;

/// The per-node and per-event counts of the previous walk, for rates.
#[derive(Default)]
struct Rates {
    /// By node id and instance (a restarted node starts over): when, and per event
    /// (requests, failed).
    last: HashMap<(NodeId, String), (Instant, EventCounts)>,
    /// The rates of the latest walk: per node, per event (requests/s, errors/s).
    now: HashMap<NodeId, BTreeMap<String, (f64, f64)>>,
}

impl Rates {
    /// Takes in a walk made at `at`.
    fn update(&mut self, found: &[Found], at: Instant) {
        let mut last = HashMap::new();
        self.now.clear();
        for f in found {
            let Ok(d) = &f.described else { continue };
            let counts: EventCounts = d
                .events
                .iter()
                .map(|e| (e.event.clone(), (e.requests.total(), e.requests.failed())))
                .collect();
            let key = (d.id.clone(), d.instance.clone());
            if let Some((then, before)) = self.last.get(&key) {
                let secs = at.saturating_duration_since(*then).as_secs_f64().max(1e-3);
                let rates = counts
                    .iter()
                    .map(|(event, (total, failed))| {
                        let (t0, f0) = before.get(event).copied().unwrap_or_default();
                        let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
                        (event.clone(), (per(*total, t0), per(*failed, f0)))
                    })
                    .collect();
                self.now.insert(d.id.clone(), rates);
            }
            last.insert(key, (at, counts));
        }
        self.last = last;
    }

    fn rows(&self, found: &[Found], me: &NodeId) -> Vec<NodeRow> {
        found
            .iter()
            .map(|f| match &f.described {
                Ok(d) => self.row(d, me),
                Err(e) => NodeRow {
                    id: f.id.to_string(),
                    error: Some(e.clone()),
                    ..NodeRow::default()
                },
            })
            .collect()
    }

    fn row(&self, d: &Description, me: &NodeId) -> NodeRow {
        let rates = self.now.get(&d.id);
        let (req_s, err_s) = rates
            .map(|r| r.values().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y)))
            .unwrap_or_default();
        // The busiest event's latency stands for the node's (quantiles do not add up).
        let busiest = d
            .events
            .iter()
            .filter_map(|e| e.latency)
            .max_by_key(|l| l.count);
        NodeRow {
            id: d.id.to_string(),
            router: d.router,
            req_s,
            err_s,
            in_flight: d.totals.handlers_active,
            p50: busiest.map(|l| l.p50_us),
            p99: busiest.map(|l| l.p99_us),
            peers: d.peers.iter().filter(|p| &p.id != me).count(),
            error: None,
        }
    }
}

/// Sorts rows by column `by` (an index into [`COLUMNS`]), busiest first for numbers.
fn sort(rows: &mut [NodeRow], by: usize, reverse: bool) {
    let key = |r: &NodeRow| -> f64 {
        match by {
            1 => r.req_s,
            2 => r.err_s,
            3 => r.in_flight as f64,
            4 => r.p50.unwrap_or(0) as f64,
            5 => r.p99.unwrap_or(0) as f64,
            6 => r.peers as f64,
            _ => 0.0,
        }
    };
    rows.sort_by(|a, b| {
        let order = if by == 0 {
            a.id.cmp(&b.id)
        } else {
            key(b).total_cmp(&key(a)).then_with(|| a.id.cmp(&b.id))
        };
        if reverse {
            order.reverse()
        } else {
            order
        }
    });
}

/// One walk of the mesh, and when it was made.
#[derive(Clone, Default)]
struct Walk {
    found: Vec<Found>,
    at: Option<Instant>,
}

/// `zeronode top`.
pub(crate) async fn run(args: TopArgs) -> Result<(), Error> {
    let session = Session::connect(&args.connect).await?;
    let interval = Duration::from_millis(args.interval);
    // Walks run apart from the screen, so keys are answered while a slow node is asked.
    let (tx, walks) = watch::channel(Walk::default());
    let node = session.node.clone();
    let walker = tokio::spawn(async move {
        loop {
            let started = tokio::time::Instant::now();
            let (found, _) = mesh::walk(&node).await;
            if tx
                .send(Walk {
                    found,
                    at: Some(Instant::now()),
                })
                .is_err()
            {
                return;
            }
            tokio::time::sleep_until(started + interval).await;
        }
    });
    let me = session.node.id().clone();
    let result = if std::io::stdout().is_terminal() {
        full_screen(walks, &me, args.count).await
    } else {
        plain(walks, &me, args.count).await
    };
    walker.abort();
    session.close().await;
    result
}

/// Plain lines: the table at each refresh, a blank line between refreshes.
async fn plain(
    mut walks: watch::Receiver<Walk>,
    me: &NodeId,
    count: Option<u64>,
) -> Result<(), Error> {
    let mut rates = Rates::default();
    let mut printed = 0u64;
    loop {
        tokio::select! {
            changed = walks.changed() => if changed.is_err() { return Ok(()) },
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        let walk = walks.borrow_and_update().clone();
        let Some(at) = walk.at else { continue };
        rates.update(&walk.found, at);
        let mut rows = rates.rows(&walk.found, me);
        sort(&mut rows, 1, false);
        let mut table = vec![COLUMNS.map(String::from).to_vec()];
        table.extend(rows.iter().map(NodeRow::cells));
        if printed > 0 {
            say("");
        }
        for line in align(&table) {
            say(line);
        }
        printed += 1;
        if count.is_some_and(|n| printed >= n) {
            return Ok(());
        }
    }
}

/// Puts the terminal back however `top` ends (dropped on return, on error, on unwind).
struct Restore;

impl Restore {
    fn enter() -> std::io::Result<Restore> {
        crossterm::terminal::enable_raw_mode()?;
        let restore = Restore;
        crossterm::execute!(
            std::io::stdout(),
            crossterm::terminal::EnterAlternateScreen,
            crossterm::cursor::Hide
        )?;
        Ok(restore)
    }

    fn leave() {
        let _ = crossterm::execute!(
            std::io::stdout(),
            crossterm::terminal::LeaveAlternateScreen,
            crossterm::cursor::Show
        );
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        Restore::leave();
    }
}

/// What the screen shows.
struct Screen {
    rows: Vec<NodeRow>,
    sort_by: usize,
    reverse: bool,
    /// The highlighted row's position, derived from `selected` whenever rows change.
    table: TableState,
    /// The highlighted node, by id: rows re-sort at every refresh, and the highlight (and
    /// what Enter opens) stays on the node the user chose, not on a position.
    selected: Option<String>,
    /// The node whose events are shown, when drilled down.
    open: Option<String>,
    walk: Walk,
    rates: Rates,
}

impl Screen {
    fn new() -> Screen {
        Screen {
            rows: Vec::new(),
            sort_by: 1,
            reverse: false,
            table: TableState::default(),
            selected: None,
            open: None,
            walk: Walk::default(),
            rates: Rates::default(),
        }
    }

    /// Takes in a refresh's rows: sorted, the highlight on the same node.
    fn refresh(&mut self, rows: Vec<NodeRow>) {
        self.rows = rows;
        self.resort();
    }

    /// Sorts the rows and puts the highlight on the selected node; a node that is gone
    /// leaves it at the same position (the first row when nothing was selected).
    fn resort(&mut self) {
        sort(&mut self.rows, self.sort_by, self.reverse);
        let found = self
            .selected
            .as_ref()
            .and_then(|id| self.rows.iter().position(|r| &r.id == id));
        let last = self.rows.len().checked_sub(1);
        let at = found.or_else(|| Some(self.table.selected().unwrap_or(0).min(last?)));
        self.select(at);
    }

    /// Highlights the row at `at` (none when there are no rows) and remembers its node.
    fn select(&mut self, at: Option<usize>) {
        self.table.select(at);
        self.selected = at.and_then(|i| self.rows.get(i)).map(|r| r.id.clone());
    }

    /// Moves the highlight one row down (`down`) or up, within the rows.
    fn step(&mut self, down: bool) {
        let Some(last) = self.rows.len().checked_sub(1) else {
            return;
        };
        let now = self.table.selected().unwrap_or(0);
        let next = if down {
            (now + 1).min(last)
        } else {
            now.saturating_sub(1)
        };
        self.select(Some(next));
    }

    /// Handles a key; `false` to quit.
    fn key(&mut self, key: KeyEvent) -> bool {
        if key.kind == KeyEventKind::Release {
            return true;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Char('c') if ctrl => return false,
            KeyCode::Char('q') => return false,
            KeyCode::Esc | KeyCode::Backspace | KeyCode::Left if self.open.is_some() => {
                self.open = None
            }
            KeyCode::Esc => return false,
            KeyCode::Enter | KeyCode::Right if self.open.is_none() => {
                self.open = self.selected.clone()
            }
            KeyCode::Down | KeyCode::Char('j') => self.step(true),
            KeyCode::Up | KeyCode::Char('k') => self.step(false),
            KeyCode::Char('s') | KeyCode::Tab => {
                self.sort_by = (self.sort_by + 1) % COLUMNS.len();
                self.resort();
            }
            KeyCode::Char('r') => {
                self.reverse = !self.reverse;
                self.resort();
            }
            _ => {}
        }
        true
    }

    fn draw(&mut self, frame: &mut ratatui::Frame<'_>) {
        let [title, body] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(frame.area());
        let bold = Style::default().add_modifier(Modifier::BOLD);
        let found = self.walk.found.iter();
        let opened = self.open.as_ref().and_then(|id| {
            found
                .filter_map(|f| f.described.as_ref().ok())
                .find(|d| d.id.as_str() == id)
        });
        match (&self.open, opened) {
            (Some(id), described) => {
                frame.render_widget(
                    Paragraph::new(format!(
                        "zeronode top: node {id}, events (Esc: back, q: quit)"
                    )),
                    title,
                );
                let Some(described) = described else {
                    frame.render_widget(Paragraph::new(format!("{id} is gone")), body);
                    return;
                };
                let rates = self.rates.now.get(&described.id);
                let mut rows =
                    mesh::event_rows(described, Some(&rates.cloned().unwrap_or_default()));
                let header = rows.remove(0);
                frame.render_widget(grid(header, rows, bold), body);
            }
            (None, _) => {
                let direction = if self.reverse {
                    "ascending"
                } else {
                    "descending"
                };
                frame.render_widget(
                    Paragraph::new(format!(
                        "zeronode top: {} nodes, sorted by {} {} (s: sort, r: reverse, \
                         Enter: events, q: quit)",
                        self.rows.len(),
                        COLUMNS[self.sort_by],
                        if self.sort_by == 0 { "" } else { direction },
                    )),
                    title,
                );
                let header: Vec<String> = COLUMNS.map(String::from).to_vec();
                let rows = self.rows.iter().map(NodeRow::cells).collect();
                frame.render_stateful_widget(grid(header, rows, bold), body, &mut self.table);
            }
        }
    }
}

/// A table whose columns are as wide as their widest cell.
fn grid(header: Vec<String>, rows: Vec<Vec<String>>, bold: Style) -> Table<'static> {
    let widths: Vec<Constraint> = (0..header.len())
        .map(|c| {
            let widest = std::iter::once(&header)
                .chain(&rows)
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(1);
            Constraint::Length(widest as u16)
        })
        .collect();
    Table::new(rows.into_iter().map(Row::new), widths)
        .header(Row::new(header).style(bold))
        .column_spacing(2)
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
}

/// The full-screen view, until q, Ctrl-C or a signal.
async fn full_screen(
    mut walks: watch::Receiver<Walk>,
    me: &NodeId,
    count: Option<u64>,
) -> Result<(), Error> {
    // A panic must not leave the terminal raw: restore first, then report as usual.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        Restore::leave();
        report(info);
    }));
    let _restore = Restore::enter().map_err(Error::Terminal)?;
    let mut terminal =
        ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout()))
            .map_err(Error::Terminal)?;
    // Keys come from a thread of their own (crossterm's read blocks).
    let (key_tx, mut keys) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while let Ok(event) = crossterm::event::read() {
            if key_tx.send(event).is_err() {
                return;
            }
        }
    });
    let mut screen = Screen::new();
    let mut refreshed = 0u64;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(Error::Start)?;
    loop {
        terminal
            .draw(|frame| screen.draw(frame))
            .map_err(Error::Terminal)?;
        tokio::select! {
            changed = walks.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                let walk = walks.borrow_and_update().clone();
                if let Some(at) = walk.at {
                    screen.rates.update(&walk.found, at);
                    let rows = screen.rates.rows(&walk.found, me);
                    screen.walk = walk;
                    screen.refresh(rows);
                    refreshed += 1;
                    if count.is_some_and(|n| refreshed > n) {
                        return Ok(());
                    }
                }
            }
            event = keys.recv() => match event {
                Some(Event::Key(key)) => {
                    if !screen.key(key) {
                        return Ok(());
                    }
                }
                Some(_) => {}
                None => return Ok(()),
            },
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, req_s: f64) -> NodeRow {
        NodeRow {
            id: id.into(),
            req_s,
            ..NodeRow::default()
        }
    }

    fn key(screen: &mut Screen, code: KeyCode) {
        assert!(screen.key(KeyEvent::new(code, KeyModifiers::NONE)));
    }

    fn order(screen: &Screen) -> Vec<&str> {
        screen.rows.iter().map(|r| r.id.as_str()).collect()
    }

    /// Rows re-sort at every refresh: the highlight, and what Enter opens, stay on the
    /// node chosen, wherever its row goes.
    #[test]
    fn the_highlight_follows_the_node_when_rows_re_sort() {
        let mut screen = Screen::new();
        screen.refresh(vec![row("a", 1.0), row("b", 5.0), row("c", 3.0)]);
        assert_eq!(order(&screen), ["b", "c", "a"]);
        assert_eq!(screen.selected.as_deref(), Some("b"));
        key(&mut screen, KeyCode::Down);
        assert_eq!(screen.selected.as_deref(), Some("c"));

        // c becomes the busiest: its row moves to the top, the highlight with it.
        screen.refresh(vec![row("a", 1.0), row("b", 5.0), row("c", 9.0)]);
        assert_eq!(order(&screen), ["c", "b", "a"]);
        assert_eq!(screen.table.selected(), Some(0));
        key(&mut screen, KeyCode::Enter);
        assert_eq!(screen.open.as_deref(), Some("c"));
        key(&mut screen, KeyCode::Esc);

        // Sorting by another column keeps it too; the highlight stops at the last row.
        key(&mut screen, KeyCode::Char('r'));
        assert_eq!(order(&screen), ["a", "b", "c"]);
        assert_eq!(screen.table.selected(), Some(2));
        key(&mut screen, KeyCode::Down);
        assert_eq!(screen.selected.as_deref(), Some("c"));

        // The node gone: the highlight stays where it was (within the rows), on the row
        // there now.
        screen.refresh(vec![row("a", 1.0), row("b", 5.0)]);
        assert_eq!(screen.selected.as_deref(), Some("b"));
        screen.refresh(Vec::new());
        assert_eq!(
            (screen.selected.as_deref(), screen.table.selected()),
            (None, None)
        );
    }

    #[test]
    fn rows_sort_busiest_first_or_by_id() {
        let mut rows = vec![row("a", 1.0), row("b", 5.0), row("c", 3.0)];
        sort(&mut rows, 1, false);
        let ids: Vec<_> = rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["b", "c", "a"]);
        sort(&mut rows, 0, false);
        let ids: Vec<_> = rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        sort(&mut rows, 1, true);
        let ids: Vec<_> = rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["a", "c", "b"]);
    }
}
