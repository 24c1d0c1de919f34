//! Writing to stdout without ever panicking.
//!
//! `println!` panics when stdout is gone (`zeronode node | head -1` closes the pipe after
//! one line). A node must keep serving whoever reads its output or not, so every line goes
//! through [`say`], which writes the line whole and ignores a closed stdout.

use std::fmt::Display;
use std::io::Write;

/// Prints one line on stdout and flushes it at once (tests and scripts read lines as they
/// come). A write error (closed pipe) is ignored: the output is informative, the work goes on.
pub(crate) fn say(line: impl Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Prints one line on stderr, ignoring a closed stderr.
pub(crate) fn complain(line: impl Display) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
    let _ = err.flush();
}
