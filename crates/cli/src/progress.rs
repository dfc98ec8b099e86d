//! Progress of long operations (the initial resync) on stderr: a redrawn bar on a terminal,
//! plain lines every few seconds otherwise (logs, CI).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use raidd_admin::progress::progress_line;

/// Redraw interval on a terminal.
const TTY_EVERY: Duration = Duration::from_millis(200);
/// Line interval when stderr is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// Draws progress for one operation.
#[derive(Debug)]
pub struct Progress {
    what: String,
    start: Instant,
    last: Option<Instant>,
    tty: bool,
    quiet: bool,
}

impl Progress {
    pub fn new(what: &str) -> Progress {
        Progress {
            what: what.to_string(),
            start: Instant::now(),
            last: None,
            tty: std::io::stderr().is_terminal(),
            quiet: false,
        }
    }

    pub fn update(&mut self, done: u64, total: u64) {
        if self.quiet {
            return;
        }
        let now = Instant::now();
        let every = if self.tty { TTY_EVERY } else { PLAIN_EVERY };
        let finished = done >= total;
        let due = self.last.is_none_or(|l| now.duration_since(l) >= every);
        if !due && !finished {
            return;
        }
        self.last = Some(now);
        let line = progress_line(&self.what, done, total, now - self.start, self.tty);
        let mut err = std::io::stderr().lock();
        // Progress is best effort: a closed stderr must not fail the operation.
        let _ = if self.tty {
            let end = if finished { "\n" } else { "" };
            write!(err, "\r\x1b[K{line}{end}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
        if finished {
            self.quiet = true; // print the final line once
        }
    }
}
