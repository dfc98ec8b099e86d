//! One module per subcommand.

pub mod config;
pub mod create;
pub mod detail;
pub mod docs;
pub mod examine;
pub mod export;
pub mod grow;
pub mod lun;
pub mod manage;
pub mod pattern;
pub mod read;
pub mod serve;
pub mod status;
pub mod ublk;
pub mod volume;
pub mod write;

/// How the commands that work on an array's data offline start it (`read`, `write`,
/// `pattern`).
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct StartArgs {
    /// Start the array even if it was not shut down cleanly and is degraded (RAID4/5/6).
    /// Where writes were in flight, data of the missing member may then read back wrong.
    #[arg(long)]
    pub start_dirty_degraded: bool,
    /// The write journal's mode (md's `journal_mode`; every start is write-through unless
    /// told): `write-back` acknowledges each write once it is in the journal (clients see
    /// a volatile cache: a flush makes it durable). With `grow --array`, it switches the
    /// served array.
    #[arg(long, value_name = "MODE")]
    pub journal_mode: Option<raidd_engine::JournalMode>,
}

impl StartArgs {
    pub fn start(self) -> raidd_admin::session::Start {
        raidd_admin::session::Start {
            dirty_degraded: self.start_dirty_degraded,
            member_timeout: None,
            dab: None,
            journal_mode: self.journal_mode.unwrap_or_default(),
            tag_cache: 0,
            rederive_in_background: false,
        }
    }
}

/// `--volume`: the commands that move data offline address one volume of the array instead
/// of all of it (`read`, `write`, `pattern`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct VolumeArg {
    /// A volume (GPT partition) of the array, by name or number: offsets are relative to
    /// its start, and nothing beyond its end is read or written.
    #[arg(long, value_name = "NAME")]
    pub volume: Option<String>,
}

impl VolumeArg {
    /// What the command works on: the whole outermost array, or the volume.
    pub async fn extent(
        &self,
        session: &raidd_admin::session::Session,
    ) -> raidd_admin::exit::AdminResult<raidd_engine::Extent> {
        let array = session.root();
        match &self.volume {
            None => Ok(raidd_engine::Extent::whole(array.clone())),
            Some(v) => {
                let r = raidd_admin::volume::VolumeRef::parse(v);
                Ok(raidd_admin::volume_io::open(array, &r).await?.1)
            }
        }
    }
}

/// Which array: its members (offline), or its name in the running daemon.
#[derive(clap::Args, Debug)]
pub struct On {
    /// An array the running daemon serves, by its name in the config (instead of members).
    #[arg(long, value_name = "NAME", conflicts_with = "members")]
    pub array: Option<String>,
    /// The daemon's control socket, with --array (default: $RAIDD_CONTROL or
    /// /run/raidd/raidd.sock).
    #[arg(long, value_name = "PATH", requires = "array")]
    pub control: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub start: StartArgs,
    /// Members of the array (nested arrays: all of them).
    #[arg(value_name = "MEMBER", required_unless_present = "array")]
    pub members: Vec<std::path::PathBuf>,
}
