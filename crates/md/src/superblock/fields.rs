//! The fields of `struct mdp_superblock_1` as raidd holds them, the roles a member can
//! have, and what parsing can refuse. The codec and the checks build on these.

/// Errors from parsing or validating a superblock. The text is shown to users.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SbError {
    #[error("no md superblock (magic {found:#010x}, expected 0xa92b4efc)")]
    BadMagic { found: u32 },
    #[error("md superblock major version {0} is not 1")]
    BadVersion(u32),
    #[error("md superblock checksum {stored:#010x} does not match computed {computed:#010x}")]
    BadChecksum { stored: u32, computed: u32 },
    #[error("md superblock has unknown feature bits {0:#x}")]
    UnknownFeatures(u32),
    #[error("md superblock max_dev {0} is larger than the kernel's limit of 1920")]
    TooManyDevs(u32),
    #[error("md superblock super_offset {stored} is not where it was read ({read_at})")]
    WrongSuperOffset { stored: u64, read_at: u64 },
    #[error("md superblock data_size {0} is smaller than 10 sectors")]
    DataTooSmall(u64),
    #[error("md superblock has non-zero padding")]
    NonZeroPad,
    #[error("md superblock combines PPL with a bitmap or journal")]
    PplConflict,
    #[error("md superblock is truncated: {got} bytes, need {need}")]
    Truncated { got: usize, need: usize },
    #[error("md superblock field {field} is invalid: {why}")]
    Invalid { field: &'static str, why: String },
}

/// A member's role as recorded in `dev_roles[]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevRole {
    /// Active in slot n (0..=0xfeff).
    Active(u16),
    /// 0xffff
    Spare,
    /// 0xfffe
    Faulty,
    /// 0xfffd
    Journal,
}

impl DevRole {
    /// md's raw role values. Values 0xff00..=0xfffc are not defined by md; the kernel treats
    /// any role it does not recognise as a slot number, so they decode as `Active` too and
    /// round-trip unchanged.
    pub fn from_raw(v: u16) -> DevRole {
        match v {
            ROLE_SPARE => DevRole::Spare,
            ROLE_FAULTY => DevRole::Faulty,
            ROLE_JOURNAL => DevRole::Journal,
            slot => DevRole::Active(slot),
        }
    }
    pub fn to_raw(self) -> u16 {
        match self {
            DevRole::Active(slot) => slot,
            DevRole::Spare => ROLE_SPARE,
            DevRole::Faulty => ROLE_FAULTY,
            DevRole::Journal => ROLE_JOURNAL,
        }
    }
}

/// `MD_DISK_ROLE_SPARE`.
pub const ROLE_SPARE: u16 = 0xffff;
/// `MD_DISK_ROLE_FAULTY`.
pub const ROLE_FAULTY: u16 = 0xfffe;
/// `MD_DISK_ROLE_JOURNAL`.
pub const ROLE_JOURNAL: u16 = 0xfffd;
/// The highest slot md defines: one below the kernel's `MD_DISK_ROLE_MAX` (0xff00).
pub const ROLE_MAX_SLOT: u16 = 0xfeff;

/// Every field of `mdp_superblock_1`, decoded. `dev_roles.len()` is `max_dev`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub feature_map: u32,
    pub set_uuid: [u8; 16],
    /// Raw 32-byte name field ("host:name", NUL padded).
    pub set_name: [u8; 32],
    /// Low 40 bits seconds, high 24 bits microseconds.
    pub ctime: u64,
    pub level: i32,
    pub layout: u32,
    /// Component size in sectors ("Used Dev Size"); 0 for linear/RAID0.
    pub size: u64,
    pub chunksize: u32,
    pub raid_disks: u32,
    /// Signed sectors from the superblock (also the PPL offset/size union).
    pub bitmap_offset: i32,
    pub new_level: u32,
    pub reshape_position: u64,
    pub delta_disks: u32,
    pub new_layout: u32,
    pub new_chunk: u32,
    pub new_offset: u32,
    pub data_offset: u64,
    pub data_size: u64,
    pub super_offset: u64,
    pub recovery_offset: u64,
    pub dev_number: u32,
    pub cnt_corrected_read: u32,
    pub device_uuid: [u8; 16],
    pub devflags: u8,
    pub bblog_shift: u8,
    pub bblog_size: u16,
    pub bblog_offset: i32,
    pub utime: u64,
    pub events: u64,
    pub resync_offset: u64,
    pub dev_roles: Vec<u16>,
}
