//! Text that reports share: mdadm-style "Key : value" blocks, times as `ctime(3)` shows
//! them, yes/no.

/// A block of "Key : value" lines with right-aligned keys, as mdadm prints them. Blank
/// lines separate groups.
#[derive(Debug, Default)]
pub struct KvBlock {
    lines: Vec<Option<(String, String)>>,
}

impl KvBlock {
    pub fn new() -> KvBlock {
        KvBlock::default()
    }

    pub fn add(&mut self, key: &str, value: impl Into<String>) {
        self.lines.push(Some((key.to_string(), value.into())));
    }

    pub fn blank(&mut self) {
        self.lines.push(None);
    }

    /// Renders with keys right-aligned to `width` (or the longest key), each line ending in
    /// a newline; consecutive and trailing blank lines collapse.
    pub fn render(&self, width: usize) -> String {
        let width = self
            .lines
            .iter()
            .flatten()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0)
            .max(width);
        let mut out = String::new();
        let mut last_blank = true;
        for line in &self.lines {
            match line {
                Some((k, v)) => {
                    out.push_str(&format!("{k:>width$} : {v}\n"));
                    last_blank = false;
                }
                None if !last_blank => {
                    out.push('\n');
                    last_blank = true;
                }
                None => {}
            }
        }
        if last_blank && out.ends_with("\n\n") {
            out.pop();
        }
        out
    }
}

/// Calendar fields of a point in time, as `ctime(3)` shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    /// 1..=12
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Sunday
    pub weekday: u32,
}

/// `ctime(3)` without the newline: `Sun Nov 22 13:54:59 2026`.
pub fn ctime_text(c: &Civil) -> String {
    const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let day = DAYS.get(c.weekday as usize).unwrap_or(&"???");
    let month = MONTHS
        .get((c.month as usize).wrapping_sub(1))
        .unwrap_or(&"???");
    format!(
        "{day} {month} {:2} {:02}:{:02}:{:02} {}",
        c.day, c.hour, c.minute, c.second, c.year
    )
}

/// UTC calendar fields of `secs` since the epoch.
pub fn civil_utc(secs: u64) -> Civil {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    Civil {
        year,
        month,
        day,
        hour: (rem / 3600) as u32,
        minute: (rem / 60 % 60) as u32,
        second: (rem % 60) as u32,
        weekday: ((days + 4) % 7) as u32,
    }
}

/// Local calendar fields (the TZ environment applies, as for mdadm); UTC if the C library
/// cannot convert.
pub fn civil_local(secs: u64) -> Civil {
    let Ok(t) = libc::time_t::try_from(secs) else {
        return civil_utc(secs);
    };
    // SAFETY: `tm` is plain data; localtime_r only writes into it and reads `t`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is the thread-safe variant.
    let r = unsafe { libc::localtime_r(&t, &mut tm) };
    if r.is_null() {
        return civil_utc(secs);
    }
    Civil {
        year: i64::from(tm.tm_year) + 1900,
        month: u32::try_from(tm.tm_mon + 1).unwrap_or(0),
        day: u32::try_from(tm.tm_mday).unwrap_or(0),
        hour: u32::try_from(tm.tm_hour).unwrap_or(0),
        minute: u32::try_from(tm.tm_min).unwrap_or(0),
        second: u32::try_from(tm.tm_sec).unwrap_or(0),
        weekday: u32::try_from(tm.tm_wday).unwrap_or(0),
    }
}

/// md's packed time (40 bits seconds) as local `ctime` text.
pub fn md_time_text(md_time: u64) -> String {
    let (secs, _) = raidd_md::Superblock::split_time(md_time);
    ctime_text(&civil_local(secs))
}

/// "yes" / "no".
pub fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_block_aligns_keys_and_collapses_blanks() {
        let mut b = KvBlock::new();
        b.blank();
        b.add("Magic", "a92b4efc");
        b.add("Raid Level", "raid5");
        b.blank();
        b.blank();
        b.add("State", "clean");
        b.blank();
        assert_eq!(
            b.render(0),
            "     Magic : a92b4efc\nRaid Level : raid5\n\n     State : clean\n"
        );
        assert!(b.render(12).starts_with("       Magic : "));
    }

    #[test]
    fn ctime_like_the_c_library() {
        // 2023-11-14 22:13:20 UTC, a Tuesday.
        assert_eq!(
            ctime_text(&civil_utc(1_700_000_000)),
            "Tue Nov 14 22:13:20 2023"
        );
        assert_eq!(ctime_text(&civil_utc(0)), "Thu Jan  1 00:00:00 1970");
        // Leap day.
        assert_eq!(
            ctime_text(&civil_utc(951_782_400)),
            "Tue Feb 29 00:00:00 2000"
        );
        let odd = Civil {
            year: 1,
            month: 13,
            day: 1,
            hour: 0,
            minute: 0,
            second: 0,
            weekday: 9,
        };
        assert_eq!(ctime_text(&odd), "??? ???  1 00:00:00 1");
    }

    #[test]
    fn local_time_is_utc_under_tz_utc_or_close() {
        // Whatever the zone, local and UTC agree on minutes and seconds for whole-hour
        // offsets and never panic at the extremes.
        let l = civil_local(1_700_000_000);
        assert_eq!(l.second, 20);
        let _ = civil_local(u64::MAX);
        let _ = md_time_text(u64::MAX);
    }
}
