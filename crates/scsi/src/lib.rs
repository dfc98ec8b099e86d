//! SCSI block commands (SPC-4 / SBC-3) as pure functions on bytes, for raidd's iSCSI target.
