//! ublk as pure functions: the bytes raidd and the kernel's `ublk_drv` exchange, and the
//! decisions on them, with no I/O. The server's ublk frontend is the shell around this.
//!
//! - [`abi`]: command numbers (ioctl-encoded), and the layouts of the control command, the
//!   device info, the parameters, the I/O command and the I/O descriptor the kernel shares;
//! - [`params`]: a device's parameters (sizes, limits, cache, discard) from what raidd
//!   knows of the array or volume it serves;
//! - [`request`]: what a fetched I/O descriptor asks for, checked against the device.
//!
//! Layouts follow `include/uapi/linux/ublk_cmd.h` (little-endian, the only byte order
//! raidd runs on); each encoder is tested against the offsets that header gives.

pub mod abi;
pub mod params;
pub mod request;
