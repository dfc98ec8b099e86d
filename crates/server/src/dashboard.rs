//! The dashboard at `/`: the status report as an HTML page, rendered here and complete
//! without JavaScript (a banner for degraded or failed arrays, each array's members with
//! their state, I/O and errors, a progress bar with speed and ETA for every running pass,
//! the exports). `assets/dashboard.js` then keeps it live from `/api/v1/status` every
//! second and draws the graphs (IOPS, MB/s, p99 latency, cache hits) with uPlot, served
//! from the binary: the page asks nothing of any other host, and its Content-Security-Policy
//! (`default-src 'self'`) would refuse it anyway. Pure: a report in, a page out.

use std::fmt::Write;

use raidd_admin::size;
use raidd_admin::status::{ServedArray, StatusReport};
use raidd_engine::array::{ArrayState, ArrayStatus, SlotState};
use raidd_engine::SyncKind;

/// The files the page loads, served under `/assets/` (name, content type, bytes).
pub const ASSETS: [(&str, &str, &[u8]); 4] = [
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_bytes!("../assets/uPlot.min.css"),
    ),
    (
        "dashboard.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/dashboard.js"),
    ),
    (
        "dashboard.css",
        "text/css; charset=utf-8",
        include_bytes!("../assets/dashboard.css"),
    ),
];

/// An asset by name.
pub fn asset(name: &str) -> Option<(&'static str, &'static [u8])> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|&(_, ct, b)| (ct, b))
}

/// Text made safe inside HTML elements and quoted attributes.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn state_word(s: ArrayState) -> &'static str {
    match s {
        ArrayState::Clean => "clean",
        ArrayState::Active => "active",
        ArrayState::Degraded => "degraded",
        ArrayState::Failed => "failed",
    }
}

fn slot_word(s: SlotState) -> &'static str {
    match s {
        SlotState::InSync => "in sync",
        SlotState::Recovering => "recovering",
        SlotState::Faulty => "failed",
        SlotState::Missing => "missing",
    }
}

fn kind_word(k: SyncKind) -> &'static str {
    match k {
        SyncKind::Recovery => "rebuild",
        SyncKind::Resync => "resync",
        SyncKind::Check => "check",
        SyncKind::Repair => "repair",
        SyncKind::Replace => "replace",
    }
}

/// "1 h 2 min", "3 min 4 s", "5 s".
pub fn duration_text(s: u64) -> String {
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

/// What the viewer may do on the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ui<'a> {
    /// Look only: no token is configured, so there are no actions.
    Look,
    /// Actions exist, after logging in with the token: the page links to the login form.
    LogIn,
    /// Logged in: each array gets its forms, carrying this CSRF value.
    Act { csrf: &'a str },
}

/// The whole page. Without JavaScript it reloads itself every 5 s, unless it shows forms
/// (a reload would wipe what is being typed into them): then it links to itself instead.
pub fn page(r: &StatusReport, ui: Ui<'_>) -> String {
    let mut h = String::with_capacity(16 << 10);
    let forms = matches!(ui, Ui::Act { .. });
    let _ = writeln!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>raidd</title>\
         <link rel=\"stylesheet\" href=\"/assets/uPlot.min.css\">\
         <link rel=\"stylesheet\" href=\"/assets/dashboard.css\">{}\
         </head><body>\n<header><h1>raidd</h1><span class=\"meta\">version {} · {} threads · \
         {} of {} connections · buffers {} of {}</span>{}</header>",
        if forms {
            ""
        } else {
            "<noscript><meta http-equiv=\"refresh\" content=\"5\"></noscript>"
        },
        esc(&r.version),
        r.threads,
        r.connections,
        r.max_connections,
        size::short(r.buffer_memory_used_bytes),
        size::short(r.buffer_memory_bytes),
        if ui == Ui::LogIn {
            " <a class=\"login\" href=\"/login\">Log in for actions</a>"
        } else {
            ""
        },
    );
    banner(&mut h, r);
    h.push_str(if forms {
        "<section class=\"graphs\"><h2>Load</h2>\
         <noscript><p>The graphs need JavaScript; everything else here does not (<a \
         href=\"/\">reload</a> for the state now: this page does not reload by itself while \
         it shows forms).</p></noscript>"
    } else {
        "<section class=\"graphs\"><h2>Load</h2>\
         <noscript><p>The graphs need JavaScript; everything else here does not (this page \
         reloads every 5 s).</p></noscript>"
    });
    h.push_str(
        "<div class=\"graph\" id=\"g-iops\" data-title=\"IOPS\"></div>\
         <div class=\"graph\" id=\"g-mbs\" data-title=\"MB/s\"></div>\
         <div class=\"graph\" id=\"g-p99\" data-title=\"p99 latency (ms)\"></div>\
         <div class=\"graph\" id=\"g-hits\" data-title=\"cache hits/s\"></div>\
         </section>\n",
    );
    for a in &r.arrays {
        array(&mut h, a);
        if let Ui::Act { csrf } = ui {
            actions(&mut h, a, csrf);
        }
    }
    for n in &r.not_started {
        let _ = writeln!(
            h,
            "<section class=\"array\"><h2>{} <span class=\"badge failed\">not started</span>\
             </h2><p>{}</p></section>",
            esc(&n.name),
            esc(&n.error)
        );
    }
    h.push_str(
        "<script src=\"/assets/uPlot.iife.min.js\"></script>\
                <script src=\"/assets/dashboard.js\"></script>\n</body></html>\n",
    );
    h
}

/// The array's actions as forms (they work without JavaScript): check, repair and stop a
/// pass, fail a member, add one. Each posts to `/api/v1/arrays/NAME/actions` with the CSRF
/// value; the answer sends the browser back here.
fn actions(h: &mut String, a: &ServedArray, csrf: &str) {
    debug_assert!(!csrf.is_empty(), "forms carry a CSRF value");
    let target = format!("/api/v1/arrays/{}/actions", percent_encode(&a.name));
    let form = |h: &mut String, inner: &str| {
        let _ = write!(
            h,
            "<form class=\"action\" method=\"post\" action=\"{}\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">{inner}</form>",
            esc(&target),
            esc(csrf)
        );
    };
    let _ = write!(
        h,
        "<section class=\"actions\" data-actions=\"{}\"><h3>Actions on {}</h3>",
        esc(&a.name),
        esc(&a.name)
    );
    form(
        h,
        "<button name=\"action\" value=\"check\">Check</button>\
         <button name=\"action\" value=\"repair\">Repair</button>\
         <button name=\"action\" value=\"idle\">Stop check or repair</button>",
    );
    let members: String = a
        .status
        .slots
        .iter()
        .filter_map(|s| s.member.as_deref())
        .map(|m| format!("<option>{}</option>", esc(m)))
        .collect();
    if !members.is_empty() {
        form(
            h,
            &format!(
                "<input type=\"hidden\" name=\"action\" value=\"fail\">\
                 <select name=\"member\">{members}</select><button>Fail member</button>"
            ),
        );
    }
    form(
        h,
        "<input type=\"hidden\" name=\"action\" value=\"add\">\
         <input name=\"member\" placeholder=\"/dev/disk/by-id/...\" required>\
         <button>Add member</button>",
    );
    h.push_str("</section>\n");
}

/// A path segment with everything but unreserved characters escaped.
fn percent_encode(s: &str) -> String {
    let out: String = s
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    debug_assert!(out.is_ascii(), "an encoded segment is ASCII");
    out
}

/// The login form: the token, once, for a session cookie; `message` says why it is shown
/// again.
pub fn login_page(message: Option<&str>) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>raidd: log in</title>\
         <link rel=\"stylesheet\" href=\"/assets/dashboard.css\"></head><body>\
         <header><h1>raidd</h1></header>{}\
         <form class=\"login\" method=\"post\" action=\"/login\">\
         <label>Token <input type=\"password\" name=\"token\" autocomplete=\"current-password\" \
         required></label> <button>Log in</button></form></body></html>\n",
        message.map_or(String::new(), |m| format!(
            "<div class=\"banner bad\" role=\"alert\">{}</div>",
            esc(m)
        ))
    )
}

/// What is wrong, arrays first: one line per degraded, failed or unstarted array, and per
/// array that is read-only for want of a working write journal.
fn banner(h: &mut String, r: &StatusReport) {
    let mut lines = Vec::new();
    for a in &r.arrays {
        for st in std::iter::once(&a.status).chain(&a.inner) {
            let bad = st
                .slots
                .iter()
                .filter(|s| s.state != SlotState::InSync)
                .count();
            match st.state {
                ArrayState::Failed => lines.push(format!(
                    "{} has FAILED: too many members lost to serve every sector",
                    esc(&st.name)
                )),
                ArrayState::Degraded => lines.push(format!(
                    "{} is degraded: {bad} of {} members not in sync{}",
                    esc(&st.name),
                    st.slots.len(),
                    st.sync
                        .as_ref()
                        .filter(|p| p.kind == SyncKind::Recovery)
                        .map_or(String::new(), |p| format!(
                            ", rebuild {:.1} % done",
                            p.percent
                        ))
                )),
                _ => {}
            }
            if let Some(j) = st.journal.as_ref().filter(|j| !j.state.allows_writes()) {
                lines.push(format!(
                    "{} is read-only: its write journal is {}",
                    esc(&st.name),
                    journal_word(j.state)
                ));
            }
        }
    }
    for n in &r.not_started {
        lines.push(format!("{} was not started", esc(&n.name)));
    }
    if lines.is_empty() {
        h.push_str("<div id=\"banner\" class=\"banner ok\">All arrays healthy</div>\n");
        return;
    }
    h.push_str("<div id=\"banner\" class=\"banner bad\" role=\"alert\">");
    h.push_str(&lines.join("<br>"));
    h.push_str("</div>\n");
}

fn array(h: &mut String, a: &ServedArray) {
    for st in std::iter::once(&a.status).chain(&a.inner) {
        array_status(h, st);
    }
    if !a.exports.is_empty() {
        h.push_str(
            "<table class=\"exports\"><tr><th>export</th><th>connections</th><th>requests</th>\
             </tr>",
        );
        for e in &a.exports {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&e.name),
                e.connections,
                e.requests
            );
        }
        h.push_str("</table>\n");
    }
}

/// The journal's mode, and in write-back what its cache holds (as the script writes it).
fn journal_mode(j: &raidd_engine::JournalStatus) -> String {
    match j.mode {
        raidd_engine::JournalMode::WriteBack => format!(
            "{}, {} of {} held",
            j.mode,
            size::short(j.cached_bytes),
            size::short(j.cache_limit_bytes)
        ),
        raidd_engine::JournalMode::WriteThrough => j.mode.to_string(),
    }
}

/// The write journal's state as the page says it (the JSON's word).
fn journal_word(s: raidd_engine::JournalState) -> &'static str {
    match s {
        raidd_engine::JournalState::Active => "active",
        raidd_engine::JournalState::Faulty => "faulty",
        raidd_engine::JournalState::Missing => "missing",
    }
}

/// " · checksums crc32c", and how much of the tags are being re-derived.
fn checksums_text(st: &ArrayStatus) -> String {
    let Some(c) = st.checksums.as_deref() else {
        return String::new();
    };
    match st.checksums_unverified_blocks * 4096 {
        0 => format!(" · checksums {}", esc(c)),
        left => format!(
            " · checksums {} ({} being re-derived)",
            esc(c),
            size::short(left)
        ),
    }
}

fn array_status(h: &mut String, st: &ArrayStatus) {
    let word = state_word(st.state);
    let _ = writeln!(
        h,
        "<section class=\"array\" data-array=\"{}\"><h2>{} <span class=\"badge {word}\">{word}\
         </span></h2><p class=\"meta\">{}{} · {} · {} members · {}{}</p>",
        esc(&st.name),
        esc(&st.name),
        esc(&st.level),
        st.layout
            .as_deref()
            .map_or(String::new(), |l| format!(" {}", esc(l))),
        size::short(st.size_bytes),
        st.slots.len(),
        st.consistency_policy,
        checksums_text(st),
    );
    if let Some(j) = &st.journal {
        let _ = writeln!(
            h,
            "<p class=\"journal\">write journal <span class=\"member\">{}</span> \
             <span class=\"state\">{}</span> (<span class=\"mode\">{}</span>)</p>",
            esc(j.member.as_deref().unwrap_or("—")),
            journal_word(j.state),
            journal_mode(j)
        );
    }
    if let Some(p) = &st.sync {
        let eta = p.eta_s.map_or("unknown".to_string(), duration_text);
        let _ = writeln!(
            h,
            "<div class=\"sync\"><span class=\"what\">{}{}</span> \
             <progress max=\"{}\" value=\"{}\"></progress> \
             <span class=\"pct\">{:.1} %</span> · <span class=\"speed\">{}/s</span> · \
             ETA <span class=\"eta\">{eta}</span></div>",
            kind_word(p.kind),
            p.member
                .as_deref()
                .map_or(String::new(), |m| format!(" onto {}", esc(m))),
            p.total_bytes.max(1),
            p.done_bytes,
            p.percent,
            size::short(p.speed_bytes_s),
        );
    }
    h.push_str(
        "<table class=\"members\"><tr><th>slot</th><th>member</th><th>state</th>\
         <th>reads</th><th>writes</th><th>read errors</th><th>write errors</th>\
         <th>checksum errors</th><th>corrected</th></tr>",
    );
    for s in &st.slots {
        let errs = s.io.read_errors + s.io.write_errors + s.io.checksum_errors > 0;
        let _ = write!(
            h,
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td{}>{}</td><td{}>{}</td><td{}>{}</td><td title=\"{} bytes repaired\">{}</td></tr>",
            if s.state == SlotState::InSync {
                "ok"
            } else {
                "bad"
            },
            s.role,
            esc(s.member.as_deref().unwrap_or("—")),
            slot_word(s.state),
            s.io.reads,
            s.io.writes,
            if errs { " class=\"err\"" } else { "" },
            s.io.read_errors,
            if errs { " class=\"err\"" } else { "" },
            s.io.write_errors,
            if errs { " class=\"err\"" } else { "" },
            s.io.checksum_errors,
            s.io.repaired_bytes,
            s.io.corrected_errors,
        );
    }
    for sp in &st.spares {
        let _ = write!(
            h,
            "<tr><td>—</td><td>{}</td><td>spare</td><td colspan=\"6\"></td></tr>",
            esc(sp)
        );
    }
    for f in &st.faulty {
        let _ = write!(
            h,
            "<tr class=\"bad\"><td>—</td><td>{}</td><td>failed, out of its slot</td>\
             <td colspan=\"5\"></td></tr>",
            esc(f)
        );
    }
    h.push_str("</table></section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(duration_text(5), "5 s");
        assert_eq!(duration_text(185), "3 min 5 s");
        assert_eq!(duration_text(7260), "2 h 1 min");
    }

    #[test]
    fn every_asset_the_page_names_is_served() {
        let r = StatusReport {
            version: "0".into(),
            nbd_listen: String::new(),
            iscsi: None,
            threads: 1,
            connections: 0,
            max_connections: 1,
            buffer_memory_used_bytes: 0,
            buffer_memory_bytes: 1,
            arrays: Vec::new(),
            not_started: Vec::new(),
            spare_pool: Vec::new(),
            ublk: Vec::new(),
        };
        let p = page(&r, Ui::Look);
        assert!(!p.contains("/login"));
        assert!(
            p.contains("http-equiv=\"refresh\""),
            "without JavaScript it reloads"
        );
        let acting = page(&r, Ui::Act { csrf: "x" });
        assert!(
            !acting.contains("http-equiv") && acting.contains("<a href=\"/\">reload</a>"),
            "a page with forms does not reload under the one typing"
        );
        assert!(page(&r, Ui::LogIn).contains("href=\"/login\""));
        for name in p
            .split("/assets/")
            .skip(1)
            .map(|s| &s[..s.find('"').unwrap()])
        {
            assert!(asset(name).is_some(), "{name}");
        }
        assert!(p.contains("All arrays healthy"));
        assert!(!p.contains("style="), "the CSP allows no inline styles");
        assert!(!p.contains("<script>"), "the CSP allows no inline scripts");
    }

    #[test]
    fn the_login_form_escapes_its_message_and_paths_are_encoded() {
        let p = login_page(Some("<wrong> token"));
        assert!(p.contains("&lt;wrong&gt; token") && p.contains("action=\"/login\""));
        assert!(!login_page(None).contains("banner"));
        assert_eq!(percent_encode("a b/ü"), "a%20b%2F%C3%BC");
        assert_eq!(percent_encode("vol-1_x.y~"), "vol-1_x.y~");
    }
}
