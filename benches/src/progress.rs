//! A progress bar for a harness run: which point runs, how many are done, the time left.
//! Drawn on stderr only when stderr is a terminal; otherwise (CI, a pipe, a file) the run
//! prints the plain lines it always did, and no bar.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// The bar of one run, or nothing when stderr is not a terminal.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar over `steps` steps (hidden off a terminal).
    pub(crate) fn new(steps: usize) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None };
        }
        let bar = ProgressBar::new(steps as u64);
        // A template of our own is a constant: it parses, else the default style stays.
        if let Ok(style) = ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} {msg} (about {eta} left)",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        // Redrawn while a point runs, so the clock moves between points.
        bar.enable_steady_tick(Duration::from_millis(250));
        Progress { bar: Some(bar) }
    }

    /// Says what runs now.
    pub(crate) fn running(&self, what: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(what.to_owned());
        }
    }

    /// A step ended with `line` (printed above the bar, or plain off a terminal).
    pub(crate) fn done(&self, line: &str) {
        match &self.bar {
            Some(bar) => {
                bar.println(line);
                bar.inc(1);
            }
            None => eprintln!("{line}"),
        }
    }

    /// A plain line, above the bar if there is one.
    pub(crate) fn say(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
