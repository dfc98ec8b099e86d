//! `raidd`: create, examine and inspect md-compatible arrays, and move data in and out of
//! them, in mdadm's spirit; run the daemon (`serve`, which is `raidd-server`'s) and talk to
//! it over its control socket. Human-readable output by default, `--json` for scripts, and
//! the exit codes in EXIT_CODES.md.

mod cmd;
use raidd_admin::output;
mod progress;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::{ArgAction, CommandFactory, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

use raidd_admin::exit::{AdminResult, Exit};

#[derive(Parser, Debug)]
#[command(
    name = "raidd",
    version,
    about = "User-space software RAID, compatible with Linux md (v1.2 superblocks)",
    after_help = raidd_admin::exit::HELP
)]
struct Cli {
    /// More log output on stderr: -v info, -vv debug (RUST_LOG overrides).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,
    /// Machine-readable JSON on stdout.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create an array: write md superblocks on the members (creating image files with
    /// --size), run the initial sync if needed, and print its details.
    Create(cmd::create::CreateArgs),
    /// The daemon's configuration: `config scan [PATTERN]...` prints one that names, by
    /// UUID, the arrays found under the patterns (as mdadm --detail --scan).
    Config(cmd::config::ConfigArgs),
    /// Print each member's md superblock, like mdadm --examine.
    Examine(cmd::examine::ExamineArgs),
    /// Assemble read-only and report the array: state, slots, members not used and why.
    Detail(cmd::detail::DetailArgs),
    /// Copy bytes out of an array (to a file or stdout).
    Read(cmd::read::ReadArgs),
    /// Copy bytes into an array (from a file or stdin).
    Write(cmd::write::WriteArgs),
    /// Write or verify raidd's self-verifying test pattern through an array.
    Pattern(cmd::pattern::PatternArgs),
    /// An array's volumes (GPT partitions): list, create, resize, delete, offline on its
    /// members or through the daemon.
    Volume(cmd::volume::VolumeArgs),
    /// Change an array as mdadm --grow does, served (--array NAME) or offline on its
    /// members: its consistency policy (the partial parity log on or off).
    Grow(cmd::grow::GrowArgs),
    /// The ublk devices on this host (/dev/ublkbN): list them, delete one a dead server left;
    /// ask the running daemon to add or remove one.
    Ublk(cmd::ublk::UblkArgs),
    /// Benchmarks.
    Bench(raidd_bench::BenchArgs),
    /// Transfer rate against offset across a member, an array, or simulated drives.
    Scan(raidd_bench::ScanArgs),
    /// Run the storage daemon: assemble the configured arrays and serve them over NBD.
    Serve(cmd::serve::ServeArgs),
    /// What the running daemon serves: every array and export, briefly, with running
    /// recoveries, resyncs and scrubs.
    Status(cmd::status::StatusArgs),
    /// Mark a working member of a served array faulty (the array runs degraded).
    Fail(cmd::manage::MemberArgs),
    /// Take a failed member or a spare out of a served array.
    Remove(cmd::manage::MemberArgs),
    /// Add a member to a served array: it rebuilds into a free slot, or waits as a spare.
    Add(cmd::manage::AddArgs),
    /// Copy a working member of a served array onto a new one while the array stays
    /// redundant, then retire the old one (it waits for `remove`).
    Replace(cmd::manage::ReplaceArgs),
    /// The running daemon's NBD exports: export add NAME --array A [--volume V], export
    /// remove NAME (until the next start; SIGHUP applies an edited config's).
    Export(cmd::export::ExportArgs),
    /// The running daemon's iSCSI LUNs: lun add TARGET --array A [--lun N] [--volume V],
    /// lun remove TARGET N.
    Lun(cmd::lun::LunArgs),
    /// The hot-spare pool shared by all arrays: spare add|remove MEMBER.
    Spare(cmd::manage::SpareArgs),
    /// Read every stripe of a served array and count mismatches (md's check).
    Check(cmd::manage::ScrubArgs),
    /// As check, and rewrite what does not match (md's repair).
    Repair(cmd::manage::ScrubArgs),
    /// Stop the running check or repair of a served array.
    Idle(cmd::manage::Target),
    /// Write the man pages and shell completions into DIR (for packaging).
    #[command(hide = true)]
    GenerateDocs { dir: std::path::PathBuf },
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(verbose >= 2)
        .without_time()
        .try_init();
}

fn dispatch(cli: Cli) -> AdminResult {
    let json = cli.json;
    match cli.command {
        Command::Create(a) => cmd::create::run(a, json),
        Command::Config(a) => cmd::config::run(a, json),
        Command::Examine(a) => cmd::examine::run(a, json),
        Command::Detail(a) => cmd::detail::run(a, json),
        Command::Read(a) => cmd::read::run(a, json),
        Command::Write(a) => cmd::write::run(a, json),
        Command::Pattern(a) => cmd::pattern::run(a, json),
        Command::Volume(a) => cmd::volume::run(a, json),
        Command::Grow(a) => cmd::grow::run(a, json),
        Command::Ublk(a) => cmd::ublk::run(a, json),
        Command::Scan(a) => raidd_bench::scan(a, json),
        Command::Bench(a) => raidd_bench::run(a, json),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Status(a) => cmd::status::run(a, json),
        Command::Fail(a) => cmd::manage::fail(a, json),
        Command::Remove(a) => cmd::manage::remove(a, json),
        Command::Add(a) => cmd::manage::add(a, json),
        Command::Spare(a) => cmd::manage::spare(a, json),
        Command::Export(a) => cmd::export::run(a, json),
        Command::Lun(a) => cmd::lun::run(a, json),
        Command::Replace(a) => cmd::manage::replace(a, json),
        Command::Check(a) => cmd::manage::scrub(a, false, json),
        Command::Repair(a) => cmd::manage::scrub(a, true, json),
        Command::Idle(a) => cmd::manage::idle(a, json),
        Command::GenerateDocs { dir } => cmd::docs::generate(Cli::command(), &dir),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    match dispatch(cli) {
        Ok(()) => Exit::Success.into(),
        Err(e) => {
            if !e.message.is_empty() {
                // stderr may be closed; nothing else to report to then.
                let _ = writeln!(std::io::stderr().lock(), "raidd: {e}");
            }
            e.exit.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn json_and_verbose_work_before_and_after_the_subcommand() {
        let a = Cli::try_parse_from(["raidd", "--json", "examine", "x"]).expect("parse");
        assert!(a.json);
        let b = Cli::try_parse_from(["raidd", "examine", "-vv", "x", "--json"]).expect("parse");
        assert!(b.json);
        assert_eq!(b.verbose, 2);
        let e = Cli::try_parse_from(["raidd", "create", "--level", "raid7", "x"])
            .expect_err("bad level");
        assert_eq!(e.exit_code(), 2);
        let e = Cli::try_parse_from(["raidd", "create", "--level", "5", "--size", "1000", "x"])
            .expect_err("bad size");
        assert!(e.to_string().contains("not a multiple of 512"), "{e}");
    }
}
