//! ublk's control device (/dev/ublk-control): adding, starting, stopping, deleting and
//! recovering devices. Its commands go in 128-byte submission entries, which the workers'
//! rings do not have, so this has a small ring of its own, used synchronously: control
//! commands are rare, and START_DEV and STOP_DEV block until the kernel is done (they run on
//! a helper thread, never on a thread whose executor serves I/O).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use raidd_ublk::abi::{self, Ctrl, CtrlCmd, DevInfo, DEV_INFO_LEN};

/// Whether `info` is a device raidd made (its mark's high half).
pub fn made_by_raidd(info: &DevInfo) -> bool {
    info.ublksrv_flags >> 32 == 0x7261_6964
}

/// Whether process `pid` exists.
pub fn pid_alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid, 0) } == 0
}

/// The control device, open, with its ring.
pub struct Control {
    file: File,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Control(fd {})", self.file.as_raw_fd())
    }
}

/// What a user reads when the kernel has no ublk.
pub fn missing_driver(e: &io::Error) -> String {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "this kernel".into());
    format!(
        "ublk is not available: {} cannot be opened ({e}); kernel {release} has no ublk_drv \
         loaded (modprobe ublk_drv; it is in Linux 6.0 and later, Debian 12 has it in \
         linux-image-6.12-amd64). The arrays are still served over NBD and iSCSI: a local \
         /dev/nbdN comes from `nbd-client 127.0.0.1 PORT -N EXPORT`",
        abi::CONTROL_PATH
    )
}

impl Control {
    /// Opens /dev/ublk-control; the error says what is missing.
    pub fn open() -> Result<Control, String> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(abi::CONTROL_PATH)
            .map_err(|e| missing_driver(&e))?;
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .build(4)
            .map_err(|e| format!("ublk control needs io_uring, which failed: {e}"))?;
        Ok(Control { file, ring })
    }

    /// Sends one command and waits for its result (a negative errno is an error).
    fn send(&mut self, op: Ctrl, cmd: CtrlCmd) -> io::Result<i32> {
        let mut bytes = [0u8; 80];
        bytes[..abi::CTRL_CMD_LEN].copy_from_slice(&cmd.encode());
        let sqe = opcode::UringCmd80::new(types::Fd(self.file.as_raw_fd()), op.op())
            .cmd(bytes)
            .build()
            .user_data(1);
        // SAFETY: the memory the command names (`cmd.addr`, `cmd.len` bytes) belongs to
        // the caller's frame, which waits below until the kernel has completed the command.
        unsafe { self.ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("the ublk control ring is full"))?;
        self.ring.submit_and_wait(1)?;
        let cqe = self
            .ring
            .completion()
            .next()
            .ok_or_else(|| io::Error::other("the ublk control ring returned no completion"))?;
        let res = cqe.result();
        if res < 0 {
            return Err(io::Error::from_raw_os_error(-res));
        }
        Ok(res)
    }

    /// Adds a device as `info` asks (`dev_id` `u32::MAX`: any free number); returns the
    /// kernel's info (its number, its flags).
    pub fn add(&mut self, info: &DevInfo) -> io::Result<DevInfo> {
        let mut buf = info.encode();
        let cmd = CtrlCmd {
            len: DEV_INFO_LEN as u16,
            addr: buf.as_mut_ptr() as u64,
            ..CtrlCmd::new(info.dev_id)
        };
        self.send(Ctrl::AddDev, cmd)?;
        Ok(DevInfo::decode(&buf))
    }

    /// The kernel's info of device `id`.
    pub fn info(&mut self, id: u32) -> io::Result<DevInfo> {
        let mut buf = [0u8; DEV_INFO_LEN];
        let cmd = CtrlCmd {
            len: DEV_INFO_LEN as u16,
            addr: buf.as_mut_ptr() as u64,
            ..CtrlCmd::new(id)
        };
        self.send(Ctrl::GetDevInfo, cmd)?;
        Ok(DevInfo::decode(&buf))
    }

    pub fn set_params(
        &mut self,
        id: u32,
        params: &[u8; raidd_ublk::params::PARAMS_LEN],
    ) -> io::Result<()> {
        let mut buf = *params;
        let cmd = CtrlCmd {
            len: buf.len() as u16,
            addr: buf.as_mut_ptr() as u64,
            ..CtrlCmd::new(id)
        };
        self.send(Ctrl::SetParams, cmd).map(|_| ())
    }

    /// Starts the device: returns once every queue has fetched on every tag and the block
    /// device exists.
    pub fn start(&mut self, id: u32) -> io::Result<()> {
        let cmd = CtrlCmd {
            data: u64::from(std::process::id()),
            ..CtrlCmd::new(id)
        };
        self.send(Ctrl::StartDev, cmd).map(|_| ())
    }

    /// Stops the device: the block device goes away once its I/O is done, and the queues'
    /// fetches complete with ABORT.
    pub fn stop(&mut self, id: u32) -> io::Result<()> {
        self.send(Ctrl::StopDev, CtrlCmd::new(id)).map(|_| ())
    }

    pub fn delete(&mut self, id: u32) -> io::Result<()> {
        self.send(Ctrl::DelDev, CtrlCmd::new(id)).map(|_| ())
    }

    /// The devices that exist, by number (from /dev/ublkcN), with the kernel's info on each.
    pub fn list(&mut self) -> Vec<(u32, io::Result<DevInfo>)> {
        let mut ids: Vec<u32> = std::fs::read_dir("/dev")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str()?.strip_prefix("ublkc")?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort_unstable();
        ids.into_iter().map(|id| (id, self.info(id))).collect()
    }

    /// Begins recovering a device whose server died (its requests wait meanwhile).
    pub fn start_recovery(&mut self, id: u32) -> io::Result<()> {
        self.send(Ctrl::StartUserRecovery, CtrlCmd::new(id))
            .map(|_| ())
    }

    /// Ends the recovery once every queue fetches again: the waiting requests go on.
    pub fn end_recovery(&mut self, id: u32) -> io::Result<()> {
        let cmd = CtrlCmd {
            data: u64::from(std::process::id()),
            ..CtrlCmd::new(id)
        };
        self.send(Ctrl::EndUserRecovery, cmd).map(|_| ())
    }
}
