//! Progress and state as one line of text: a pass's percentage, bar, rate and ETA (`raidd
//! status`, `detail`, and the CLI's progress on stderr), and the write journal's state.

use std::time::Duration;

use crate::size;

/// Bar width in characters.
const BAR: usize = 30;

/// One line of progress text (without bar when `bar` is false).
///
/// `elapsed` is the time since the start; the rate and ETA come from it.
pub fn progress_line(what: &str, done: u64, total: u64, elapsed: Duration, bar: bool) -> String {
    let fraction = if total == 0 {
        1.0
    } else {
        done.min(total) as f64 / total as f64
    };
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    let eta = if done >= total {
        "done".to_string()
    } else if rate > 0.0 {
        let left = ((total - done) as f64 / rate).ceil() as u64;
        format!("ETA {}", clock(left))
    } else {
        "ETA --:--".to_string()
    };
    let mib_s = rate / (1024.0 * 1024.0);
    let head = format!("{what} {:5.1}%", fraction * 100.0);
    let tail = format!(
        "{} of {}, {mib_s:.1} MiB/s, {eta}",
        size::short(done),
        size::short(total)
    );
    if bar {
        let filled = ((fraction * BAR as f64).round() as usize).min(BAR);
        format!(
            "{head} [{}{}] {tail}",
            "#".repeat(filled),
            "-".repeat(BAR - filled)
        )
    } else {
        format!("{head} {tail}")
    }
}

/// A running recovery, resync or scrub in one line, as `raidd status` and `detail` show it:
/// `recovery of img3  42.0% [#####-----] 1.2 GiB of 3.0 GiB, 95.0 MiB/s, ETA 0:19`.
pub fn sync_line(s: &raidd_engine::SyncStatus) -> String {
    let what = match &s.member {
        Some(m) => format!("{} of {m}", s.kind),
        None => s.kind.to_string(),
    };
    let fraction = s.percent / 100.0;
    let filled = ((fraction * 20.0).round() as usize).min(20);
    let eta = match s.eta_s {
        Some(e) => format!("ETA {}", clock(e)),
        None => "ETA --:--".to_string(),
    };
    let mut line = format!(
        "{what} {:5.1}% [{}{}] {} of {}, {:.1} MiB/s, {eta}",
        s.percent,
        "#".repeat(filled),
        "-".repeat(20 - filled),
        size::short(s.done_bytes),
        size::short(s.total_bytes),
        s.speed_bytes_s as f64 / (1024.0 * 1024.0),
    );
    if matches!(
        s.kind,
        raidd_engine::SyncKind::Check | raidd_engine::SyncKind::Repair
    ) {
        line.push_str(&format!(", {} mismatched sectors", s.mismatch_sectors));
    }
    line
}

/// `m:ss` or `h:mm:ss`.
pub fn clock(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// The write journal on one line: its member and state, and what a journal that is not
/// working means for the array.
pub fn journal_line(j: &raidd_engine::JournalStatus) -> String {
    use raidd_engine::JournalState;
    let member = j.member.as_deref().unwrap_or("(none)");
    match j.state {
        JournalState::Active => match (j.log_bytes, j.used_bytes) {
            (Some(log), Some(used)) => {
                let cache = match j.mode {
                    raidd_engine::JournalMode::WriteBack => format!(
                        ", cache {} KiB of {} KiB",
                        j.cached_bytes >> 10,
                        j.cache_limit_bytes >> 10
                    ),
                    raidd_engine::JournalMode::WriteThrough => String::new(),
                };
                format!(
                    "Write journal: {member} (active, {}; log {} MiB, {} KiB in use{cache})",
                    j.mode,
                    log >> 20,
                    used >> 10
                )
            }
            _ => format!("Write journal: {member} (active)"),
        },
        JournalState::Faulty => {
            format!("Write journal: {member} (faulty: the array is read-only until a new journal is attached)")
        }
        JournalState::Missing => {
            "Write journal: missing (the array is read-only until a journal is attached)".into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_show_percent_rate_and_eta() {
        let l = progress_line("resync", 50 << 20, 100 << 20, Duration::from_secs(5), false);
        assert_eq!(
            l,
            "resync  50.0% 50.00 MiB of 100.00 MiB, 10.0 MiB/s, ETA 0:05"
        );
        let b = progress_line("resync", 1, 4, Duration::from_secs(1), true);
        assert!(b.contains("[########----------------------]"), "{b}");
        assert!(b.contains(" 25.0%"), "{b}");
        let done = progress_line("resync", 4, 4, Duration::ZERO, true);
        assert!(done.contains("100.0%") && done.ends_with("done"), "{done}");
        let start = progress_line("resync", 0, 4, Duration::ZERO, false);
        assert!(start.ends_with("ETA --:--"), "{start}");
        let empty = progress_line("x", 0, 0, Duration::ZERO, true);
        assert!(empty.contains("100.0%"), "{empty}");
    }

    #[test]
    fn clock_format() {
        assert_eq!(clock(5), "0:05");
        assert_eq!(clock(65), "1:05");
        assert_eq!(clock(3 * 3600 + 61), "3:01:01");
    }
}
