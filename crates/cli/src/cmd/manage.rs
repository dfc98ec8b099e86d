//! Run-time member management and scrubbing, sent to the daemon over its control socket:
//! `fail`, `remove`, `add`, `spare add|remove`, `check`, `repair`, `idle`. With `--wait`,
//! `add`, `check` and `repair` follow the pass with a progress bar until it ends.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};

use raidd_admin::control::{self, socket_path as control_socket, Request};
use raidd_admin::exit::{AdminError, AdminResult, Exit};

use super::status::ask_and_print;
use crate::output;

#[derive(Args, Debug)]
pub struct Target {
    /// The array's name in the daemon's config.
    pub array: String,
    /// The daemon's control socket (default: $RAIDD_CONTROL or /run/raidd/raidd.sock).
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct MemberArgs {
    #[command(flatten)]
    pub target: Target,
    /// The member (its path as the daemon opened it, or any path to the same file).
    pub member: PathBuf,
}

#[derive(Args, Debug)]
pub struct AddArgs {
    #[command(flatten)]
    pub member: MemberArgs,
    /// Follow the recovery until it ends.
    #[arg(long)]
    pub wait: bool,
    /// The member becomes the array's write journal, in place of a failed or missing one
    /// (mdadm's --add-journal); the array takes writes again.
    #[arg(long, conflicts_with = "wait")]
    pub journal: bool,
}

#[derive(Args, Debug)]
pub struct ReplaceArgs {
    #[command(flatten)]
    pub member: MemberArgs,
    /// The new member the old one's contents are copied onto.
    #[arg(long, value_name = "NEW")]
    pub with: PathBuf,
    /// Follow the copy until it ends.
    #[arg(long)]
    pub wait: bool,
}

#[derive(Args, Debug)]
pub struct ScrubArgs {
    #[command(flatten)]
    pub target: Target,
    /// Follow the pass until it ends and print the mismatches found (exit 8 if any).
    #[arg(long)]
    pub wait: bool,
}

#[derive(Args, Debug)]
pub struct SpareArgs {
    #[command(subcommand)]
    pub action: SpareAction,
}

#[derive(Subcommand, Debug)]
pub enum SpareAction {
    /// Put a member into the hot-spare pool shared by all arrays.
    Add {
        member: PathBuf,
        /// Only arrays of this spare group may take it.
        #[arg(long)]
        group: Option<String>,
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
    },
    /// Take a member out of the pool.
    Remove {
        member: PathBuf,
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
    },
}

/// The daemon runs elsewhere: send it absolute paths.
fn absolute(p: &Path) -> AdminResult<PathBuf> {
    std::path::absolute(p).map_err(|e| AdminError::io(format!("{}", p.display()), &e))
}

pub fn fail(args: MemberArgs, json: bool) -> AdminResult {
    let req = Request::Fail {
        array: args.target.array,
        member: absolute(&args.member)?.display().to_string(),
    };
    ask_and_print(&control_socket(args.target.control), &req, json)
}

pub fn remove(args: MemberArgs, json: bool) -> AdminResult {
    let req = Request::Remove {
        array: args.target.array,
        member: absolute(&args.member)?.display().to_string(),
    };
    ask_and_print(&control_socket(args.target.control), &req, json)
}

pub fn add(args: AddArgs, json: bool) -> AdminResult {
    let socket = control_socket(args.member.target.control);
    let array = args.member.target.array;
    let req = Request::Add {
        array: array.clone(),
        member: absolute(&args.member.member)?,
        journal: args.journal,
    };
    ask_and_print(&socket, &req, json)?;
    if args.wait {
        follow(&socket, &array, json)?;
    }
    Ok(())
}

pub fn replace(args: ReplaceArgs, json: bool) -> AdminResult {
    let socket = control_socket(args.member.target.control);
    let array = args.member.target.array;
    let req = Request::Replace {
        array: array.clone(),
        member: absolute(&args.member.member)?.display().to_string(),
        with: absolute(&args.with)?,
    };
    ask_and_print(&socket, &req, json)?;
    if args.wait {
        follow(&socket, &array, json)?;
    }
    Ok(())
}

pub fn scrub(args: ScrubArgs, repair: bool, json: bool) -> AdminResult {
    let socket = control_socket(args.target.control);
    let array = args.target.array;
    let req = if repair {
        Request::Repair {
            array: array.clone(),
        }
    } else {
        Request::Check {
            array: array.clone(),
        }
    };
    if !args.wait {
        return ask_and_print(&socket, &req, json);
    }
    ask_and_print(&socket, &req, false)?;
    let mismatches = follow(&socket, &array, json)?;
    if !repair && mismatches > 0 {
        return Err(AdminError::new(
            Exit::BadData,
            format!("{array}: check found {mismatches} inconsistent sectors (run repair)"),
        ));
    }
    Ok(())
}

pub fn idle(args: Target, json: bool) -> AdminResult {
    let req = Request::Idle { array: args.array };
    ask_and_print(&control_socket(args.control), &req, json)
}

pub fn spare(args: SpareArgs, json: bool) -> AdminResult {
    match args.action {
        SpareAction::Add {
            member,
            group,
            control,
        } => {
            let req = Request::SpareAdd {
                member: absolute(&member)?,
                group,
            };
            ask_and_print(&control_socket(control), &req, json)
        }
        SpareAction::Remove { member, control } => {
            let req = Request::SpareRemove {
                member: absolute(&member)?,
            };
            ask_and_print(&control_socket(control), &req, json)
        }
    }
}

/// Passes running on the configured array's arrays, and the last results, from `detail`;
/// each result carries the name of the array it ran on (`array`: a pool's group, say).
fn passes(detail: &serde_json::Value) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let mut running = Vec::new();
    let mut last = Vec::new();
    let mut stack = vec![&detail["array"]];
    while let Some(a) = stack.pop() {
        if !a["sync"].is_null() {
            running.push(a["sync"].clone());
        }
        if !a["last_sync"].is_null() {
            let mut l = a["last_sync"].clone();
            l["array"] = a["name"].clone();
            last.push(l);
        }
        if let Some(slots) = a["slots"].as_array() {
            stack.extend(slots.iter().map(|s| &s["array"]).filter(|x| !x.is_null()));
        }
    }
    (running, last)
}

/// Shows the running passes of `array` until none is left; returns the mismatches the
/// last passes found.
fn follow(socket: &Path, array: &str, json: bool) -> AdminResult<u64> {
    let tty = std::io::stderr().is_terminal();
    let req = Request::Detail {
        array: array.to_string(),
    };
    let started = std::time::Instant::now();
    let mut last_line = started;
    let mut seen = false;
    loop {
        let resp = control::ask(socket, &req)?;
        if resp.exit != 0 {
            return Err(AdminError::new(
                Exit::from_code(resp.exit),
                resp.error.unwrap_or_default(),
            ));
        }
        let (running, last) = passes(&resp.json);
        seen |= !running.is_empty();
        // The daemon starts a pass right after answering; give it a moment to show up.
        if running.is_empty() && !seen && started.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        if running.is_empty() {
            if tty {
                eprint!("\r\x1b[K");
            }
            let mut mismatches = 0;
            let mut failed = Vec::new();
            for l in &last {
                mismatches += l["mismatch_sectors"].as_u64().unwrap_or(0);
                if l["outcome"] != "finished" {
                    failed.push(format!(
                        "{} {} on {}",
                        l["kind"].as_str().unwrap_or("pass"),
                        l["outcome"].as_str().unwrap_or("ended"),
                        l["array"].as_str().unwrap_or(array)
                    ));
                }
            }
            if json {
                output::emit_json(&serde_json::json!({ "array": array, "passes": last }))?;
            } else {
                for l in &last {
                    output::emit(&format!(
                        "{}: {} {} in {:.1} s, {} mismatched sectors\n",
                        l["array"].as_str().unwrap_or(array),
                        l["kind"].as_str().unwrap_or("pass"),
                        l["outcome"].as_str().unwrap_or("ended"),
                        l["seconds"].as_f64().unwrap_or(0.0),
                        l["mismatch_sectors"].as_u64().unwrap_or(0)
                    ))?;
                }
            }
            if !failed.is_empty() {
                return Err(AdminError::failure(format!(
                    "{array}: {}",
                    failed.join(", ")
                )));
            }
            return Ok(mismatches);
        }
        let lines: Vec<String> = running
            .iter()
            .filter_map(|s| serde_json::from_value::<raidd_engine::SyncStatus>(s.clone()).ok())
            .map(|s| raidd_admin::progress::sync_line(&s))
            .collect();
        if tty {
            eprint!("\r\x1b[K{}", lines.join("; "));
            let _ = std::io::stderr().flush();
        } else if last_line.elapsed() >= Duration::from_secs(5) {
            eprintln!("{}", lines.join("; "));
            last_line = std::time::Instant::now();
        }
        std::thread::sleep(Duration::from_millis(if tty { 200 } else { 500 }));
    }
}
