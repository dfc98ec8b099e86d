//! The ublk ABI: command numbers and the byte layouts of what crosses to the kernel.

/// The control device every ublk server opens.
pub const CONTROL_PATH: &str = "/dev/ublk-control";

/// The character device of device `id` (the server's side: I/O commands, descriptors).
pub fn char_path(id: u32) -> String {
    format!("/dev/ublkc{id}")
}

/// The block device of device `id` (the users' side).
pub fn block_path(id: u32) -> String {
    format!("/dev/ublkb{id}")
}

const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// Linux's `_IOC(dir, type, nr, size)`.
pub const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32 & 0x3fff) << 16) | ((ty as u32) << 8) | nr as u32
}

const fn iowr(nr: u8, size: usize) -> u32 {
    ioc(IOC_READ | IOC_WRITE, b'u', nr, size)
}

const fn ior(nr: u8, size: usize) -> u32 {
    ioc(IOC_READ, b'u', nr, size)
}

/// Bytes of a control command (`struct ublksrv_ctrl_cmd`).
pub const CTRL_CMD_LEN: usize = 32;
/// Bytes of an I/O command (`struct ublksrv_io_cmd`).
pub const IO_CMD_LEN: usize = 16;
/// Bytes of an I/O descriptor (`struct ublksrv_io_desc`).
pub const IO_DESC_LEN: usize = 24;
/// Bytes of the device info (`struct ublksrv_ctrl_dev_info`).
pub const DEV_INFO_LEN: usize = 64;

/// Control commands (sent on /dev/ublk-control in an SQE128 URING_CMD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ctrl {
    GetDevInfo,
    AddDev,
    DelDev,
    StartDev,
    StopDev,
    SetParams,
    GetParams,
    StartUserRecovery,
    EndUserRecovery,
    GetFeatures,
}

impl Ctrl {
    /// The command's ioctl-encoded number (`UBLK_U_CMD_*`).
    pub const fn op(self) -> u32 {
        match self {
            Ctrl::GetDevInfo => ior(0x02, CTRL_CMD_LEN),
            Ctrl::AddDev => iowr(0x04, CTRL_CMD_LEN),
            Ctrl::DelDev => iowr(0x05, CTRL_CMD_LEN),
            Ctrl::StartDev => iowr(0x06, CTRL_CMD_LEN),
            Ctrl::StopDev => iowr(0x07, CTRL_CMD_LEN),
            Ctrl::SetParams => iowr(0x08, CTRL_CMD_LEN),
            Ctrl::GetParams => ior(0x09, CTRL_CMD_LEN),
            Ctrl::StartUserRecovery => iowr(0x10, CTRL_CMD_LEN),
            Ctrl::EndUserRecovery => iowr(0x11, CTRL_CMD_LEN),
            Ctrl::GetFeatures => ior(0x13, CTRL_CMD_LEN),
        }
    }
}

/// I/O commands (sent on /dev/ublkcN in a plain URING_CMD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    /// Wait for a request on a tag (first time).
    Fetch,
    /// Complete the tag's request with a result, and wait for its next one.
    CommitAndFetch,
}

impl IoOp {
    pub const fn op(self) -> u32 {
        match self {
            IoOp::Fetch => iowr(0x20, IO_CMD_LEN),
            IoOp::CommitAndFetch => iowr(0x21, IO_CMD_LEN),
        }
    }
}

/// Device flags (`UBLK_F_*`) raidd uses.
pub mod flags {
    /// The device outlives its server: requests wait (queued) until a new server recovers
    /// it, and those in flight at the crash are issued again.
    pub const USER_RECOVERY: u64 = 1 << 3;
    pub const USER_RECOVERY_REISSUE: u64 = 1 << 4;
    /// Commands use ioctl-encoded numbers.
    pub const CMD_IOCTL_ENCODE: u64 = 1 << 6;
}

/// Device states (`UBLK_S_DEV_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevState {
    Dead,
    Live,
    Quiesced,
    FailIo,
    Other(u16),
}

impl DevState {
    pub fn from_raw(v: u16) -> DevState {
        match v {
            0 => DevState::Dead,
            1 => DevState::Live,
            2 => DevState::Quiesced,
            3 => DevState::FailIo,
            v => DevState::Other(v),
        }
    }
}

/// A tag's result, as the kernel completes a fetch: a request is there, or the queue is
/// going away (`UBLK_IO_RES_ABORT`, -ENODEV).
pub const IO_RES_OK: i32 = 0;
pub const IO_RES_ABORT: i32 = -19;

/// A control command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtrlCmd {
    pub dev_id: u32,
    /// `u16::MAX` when the command is for no particular queue.
    pub queue_id: u16,
    /// Bytes at `addr` (in or out).
    pub len: u16,
    pub addr: u64,
    /// Inline data (`data[0]`: the server's PID for START_DEV and END_USER_RECOVERY).
    pub data: u64,
}

impl CtrlCmd {
    /// A command for device `dev_id` (`u32::MAX`: ADD_DEV picks a free number).
    pub fn new(dev_id: u32) -> CtrlCmd {
        CtrlCmd {
            dev_id,
            queue_id: u16::MAX,
            ..CtrlCmd::default()
        }
    }

    pub fn encode(&self) -> [u8; CTRL_CMD_LEN] {
        let mut b = [0u8; CTRL_CMD_LEN];
        b[0..4].copy_from_slice(&self.dev_id.to_le_bytes());
        b[4..6].copy_from_slice(&self.queue_id.to_le_bytes());
        b[6..8].copy_from_slice(&self.len.to_le_bytes());
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b[16..24].copy_from_slice(&self.data.to_le_bytes());
        b
    }
}

/// The device info: what the server asks for at ADD_DEV, and what the kernel reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevInfo {
    pub nr_hw_queues: u16,
    pub queue_depth: u16,
    pub state: u16,
    pub max_io_buf_bytes: u32,
    pub dev_id: u32,
    pub ublksrv_pid: i32,
    pub flags: u64,
    /// The server's own word about the device, kept by the kernel and given back (raidd
    /// marks its devices with it, to know one it may recover).
    pub ublksrv_flags: u64,
    pub owner_uid: u32,
    pub owner_gid: u32,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl DevInfo {
    pub fn encode(&self) -> [u8; DEV_INFO_LEN] {
        let mut b = [0u8; DEV_INFO_LEN];
        b[0..2].copy_from_slice(&self.nr_hw_queues.to_le_bytes());
        b[2..4].copy_from_slice(&self.queue_depth.to_le_bytes());
        b[4..6].copy_from_slice(&self.state.to_le_bytes());
        b[8..12].copy_from_slice(&self.max_io_buf_bytes.to_le_bytes());
        b[12..16].copy_from_slice(&self.dev_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.ublksrv_pid.to_le_bytes());
        b[24..32].copy_from_slice(&self.flags.to_le_bytes());
        b[32..40].copy_from_slice(&self.ublksrv_flags.to_le_bytes());
        b[40..44].copy_from_slice(&self.owner_uid.to_le_bytes());
        b[44..48].copy_from_slice(&self.owner_gid.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; DEV_INFO_LEN]) -> DevInfo {
        DevInfo {
            nr_hw_queues: u16_at(b, 0),
            queue_depth: u16_at(b, 2),
            state: u16_at(b, 4),
            max_io_buf_bytes: u32_at(b, 8),
            dev_id: u32_at(b, 12),
            ublksrv_pid: u32_at(b, 16) as i32,
            flags: u64_at(b, 24),
            ublksrv_flags: u64_at(b, 32),
            owner_uid: u32_at(b, 40),
            owner_gid: u32_at(b, 44),
        }
    }

    pub fn state(&self) -> DevState {
        DevState::from_raw(self.state)
    }
}

/// An I/O command: a tag's fetch, or its commit with the request's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoCmd {
    pub queue: u16,
    pub tag: u16,
    /// Bytes done, or a negative errno (commits only).
    pub result: i32,
    /// The tag's buffer in the server: the kernel copies a write's data there before the
    /// fetch completes, and a read's data from there at the commit.
    pub addr: u64,
}

impl IoCmd {
    pub fn encode(&self) -> [u8; IO_CMD_LEN] {
        let mut b = [0u8; IO_CMD_LEN];
        b[0..2].copy_from_slice(&self.queue.to_le_bytes());
        b[2..4].copy_from_slice(&self.tag.to_le_bytes());
        b[4..8].copy_from_slice(&self.result.to_le_bytes());
        b[8..16].copy_from_slice(&self.addr.to_le_bytes());
        b
    }
}

/// The descriptor of the request on a tag, as the kernel writes it in the shared area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoDesc {
    /// Operation (bits 0-7) and flags (8-31).
    pub op_flags: u32,
    pub nr_sectors: u32,
    pub start_sector: u64,
    pub addr: u64,
}

impl IoDesc {
    pub fn decode(b: &[u8; IO_DESC_LEN]) -> IoDesc {
        IoDesc {
            op_flags: u32_at(b, 0),
            nr_sectors: u32_at(b, 4),
            start_sector: u64_at(b, 8),
            addr: u64_at(b, 16),
        }
    }

    pub fn encode(&self) -> [u8; IO_DESC_LEN] {
        let mut b = [0u8; IO_DESC_LEN];
        b[0..4].copy_from_slice(&self.op_flags.to_le_bytes());
        b[4..8].copy_from_slice(&self.nr_sectors.to_le_bytes());
        b[8..16].copy_from_slice(&self.start_sector.to_le_bytes());
        b[16..24].copy_from_slice(&self.addr.to_le_bytes());
        b
    }
}

/// The most tags a queue may have (`UBLK_MAX_QUEUE_DEPTH`).
pub const MAX_QUEUE_DEPTH: u16 = 4096;

/// Where queue `q`'s descriptors are in /dev/ublkcN's mapping: the driver places queues as
/// if each had the most tags a queue may have, whatever the device's depth.
pub fn desc_offset(q: u16, page: usize) -> u64 {
    (u64::from(q)) * desc_area_len(MAX_QUEUE_DEPTH, page) as u64
}

/// Bytes mapped for one queue's descriptors (whole pages).
pub fn desc_area_len(depth: u16, page: usize) -> usize {
    (usize::from(depth) * IO_DESC_LEN).div_ceil(page) * page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_numbers_are_the_headers() {
        // _IOWR('u', 0x04, 32-byte struct) and friends, as the kernel computes them.
        assert_eq!(Ctrl::AddDev.op(), 0xc020_7504);
        assert_eq!(Ctrl::DelDev.op(), 0xc020_7505);
        assert_eq!(Ctrl::StartDev.op(), 0xc020_7506);
        assert_eq!(Ctrl::StopDev.op(), 0xc020_7507);
        assert_eq!(Ctrl::SetParams.op(), 0xc020_7508);
        assert_eq!(Ctrl::GetDevInfo.op(), 0x8020_7502);
        assert_eq!(Ctrl::GetParams.op(), 0x8020_7509);
        assert_eq!(Ctrl::StartUserRecovery.op(), 0xc020_7510);
        assert_eq!(Ctrl::EndUserRecovery.op(), 0xc020_7511);
        assert_eq!(Ctrl::GetFeatures.op(), 0x8020_7513);
        assert_eq!(IoOp::Fetch.op(), 0xc010_7520);
        assert_eq!(IoOp::CommitAndFetch.op(), 0xc010_7521);
    }

    #[test]
    fn layouts_match_the_header() {
        let c = CtrlCmd {
            dev_id: 0x0102_0304,
            queue_id: 0x0506,
            len: 0x0708,
            addr: 0x1112_1314_1516_1718,
            data: 0x2122_2324_2526_2728,
        }
        .encode();
        assert_eq!(&c[0..4], &[4, 3, 2, 1]);
        assert_eq!(&c[4..8], &[6, 5, 8, 7]);
        assert_eq!(c[8], 0x18);
        assert_eq!(c[16], 0x28);
        assert_eq!(&c[24..], &[0; 8]);
        let io = IoCmd {
            queue: 2,
            tag: 7,
            result: -5,
            addr: 0xabc,
        }
        .encode();
        assert_eq!(
            io,
            [2, 0, 7, 0, 0xfb, 0xff, 0xff, 0xff, 0xbc, 0xa, 0, 0, 0, 0, 0, 0]
        );
        let info = DevInfo {
            nr_hw_queues: 4,
            queue_depth: 128,
            state: 1,
            max_io_buf_bytes: 1 << 20,
            dev_id: 9,
            ublksrv_pid: 1234,
            flags: flags::USER_RECOVERY | flags::CMD_IOCTL_ENCODE,
            ublksrv_flags: 0x5241_4944_0000_0001,
            owner_uid: 0,
            owner_gid: 0,
        };
        let b = info.encode();
        assert_eq!(&b[0..6], &[4, 0, 128, 0, 1, 0]);
        assert_eq!(&b[8..12], &(1u32 << 20).to_le_bytes());
        assert_eq!(b[12], 9);
        assert_eq!(&b[16..20], &1234i32.to_le_bytes());
        assert_eq!(b[24], 0x48);
        assert_eq!(&b[32..40], &0x5241_4944_0000_0001u64.to_le_bytes());
        assert_eq!(DevInfo::decode(&b), info);
        assert_eq!(info.state(), DevState::Live);
        let d = IoDesc {
            op_flags: 1 | 1 << 13,
            nr_sectors: 8,
            start_sector: 1 << 40,
            addr: 77,
        };
        assert_eq!(IoDesc::decode(&d.encode()), d);
        assert_eq!(&d.encode()[8..16], &(1u64 << 40).to_le_bytes());
    }

    #[test]
    fn each_queue_maps_whole_pages() {
        assert_eq!(desc_area_len(128, 4096), 4096);
        assert_eq!(desc_area_len(170, 4096), 4096);
        assert_eq!(desc_area_len(171, 4096), 8192);
        assert_eq!(
            desc_offset(3, 4096),
            3 * 98304,
            "queues are placed at the largest depth"
        );
        assert_eq!(char_path(3), "/dev/ublkc3");
        assert_eq!(block_path(0), "/dev/ublkb0");
    }
}
