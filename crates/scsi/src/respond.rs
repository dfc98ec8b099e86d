//! Data-In for the commands that need no array I/O.

use crate::bytes::truncate;
use crate::{capacity, inquiry, luns, mode, opcodes};
use crate::{LunInfo, ModeState, Op, Sense};

/// What [`respond`] needs besides the command.
#[derive(Debug, Clone, Copy)]
pub struct RespondCtx<'a> {
    /// The LUN addressed.
    pub lun: &'a LunInfo,
    /// Its mode page state.
    pub mode: &'a ModeState,
    /// LUN numbers of the target, for REPORT LUNS.
    pub luns: &'a [u64],
    /// Sense data pending for this I_T nexus, for REQUEST SENSE (the shell clears it after).
    pub pending_sense: Option<&'a Sense>,
}

/// Builds the Data-In for `op`, already cut to the allocation length. Data commands (READ,
/// WRITE, VERIFY, ...) and those with parameter lists (MODE SELECT, UNMAP, PERSISTENT RESERVE)
/// are the shell's: for those this returns INVALID COMMAND OPERATION CODE, except the ones
/// that transfer nothing (TEST UNIT READY, START STOP UNIT, SYNCHRONIZE CACHE, PRE-FETCH),
/// which get an empty vector.
pub fn respond(op: &Op, ctx: &RespondCtx) -> Result<Vec<u8>, Sense> {
    let lun = ctx.lun;
    match *op {
        Op::TestUnitReady
        | Op::StartStopUnit { .. }
        | Op::SynchronizeCache { .. }
        | Op::PreFetch { .. } => Ok(Vec::new()),
        Op::Inquiry { evpd, page, alloc } => {
            Ok(truncate(inquiry::inquiry(evpd, page, lun)?, alloc.into()))
        }
        Op::RequestSense { descriptor, alloc } => {
            let no_sense = Sense::no_sense();
            let s = ctx.pending_sense.unwrap_or(&no_sense);
            Ok(truncate(s.encode(descriptor), alloc.into()))
        }
        Op::ReadCapacity10 => Ok(capacity::read_capacity_10(lun)),
        Op::ReadCapacity16 { alloc } => Ok(truncate(capacity::read_capacity_16(lun), alloc.into())),
        Op::GetLbaStatus { lba, alloc } => {
            Ok(truncate(capacity::get_lba_status(lba, lun)?, alloc.into()))
        }
        Op::ModeSense {
            ten,
            dbd,
            llbaa,
            pc,
            page,
            subpage,
            alloc,
        } => Ok(truncate(
            mode::mode_sense(ten, dbd, llbaa, pc, page, subpage, ctx.mode, lun)?,
            alloc.into(),
        )),
        Op::ReportLuns { select, alloc } => Ok(truncate(
            luns::report_luns(select, ctx.luns, alloc),
            alloc.into(),
        )),
        Op::ReportSupportedOpcodes {
            rctd,
            options,
            opcode,
            service_action,
            alloc,
        } => Ok(truncate(
            opcodes::report_supported_opcodes(rctd, options, opcode, service_action, lun)?,
            alloc.into(),
        )),
        Op::Read { .. }
        | Op::Write { .. }
        | Op::Verify { .. }
        | Op::WriteAndVerify { .. }
        | Op::WriteSame { .. }
        | Op::Unmap { .. }
        | Op::CompareAndWrite { .. }
        | Op::OrWrite { .. }
        | Op::Reserve6
        | Op::Release6
        | Op::ModeSelect { .. }
        | Op::PersistentReserveIn { .. }
        | Op::PersistentReserveOut { .. } => Err(Sense::invalid_opcode()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode;
    use crate::lun::test_lun;

    fn run(cdb: &[u8], pending: Option<&Sense>) -> Result<Vec<u8>, Sense> {
        let lun = test_lun();
        let mode = ModeState::new(&lun);
        let ctx = RespondCtx {
            lun: &lun,
            mode: &mode,
            luns: &[0, 1],
            pending_sense: pending,
        };
        let op = decode(cdb, &lun)?;
        respond(&op, &ctx)
    }

    #[test]
    fn allocation_lengths_truncate() {
        let d = run(&[0x12, 0, 0, 0, 5, 0], None).expect("inquiry");
        assert_eq!(d.len(), 5);
        assert_eq!(d[4], 91);
        let d = run(&[0x12, 0, 0, 0, 0, 0], None).expect("inquiry 0");
        assert!(d.is_empty());
        let d = run(&[0x1a, 0, 0x3f, 0, 4, 0], None).expect("mode sense");
        assert_eq!(d.len(), 4);
        let mut rc16 = [0u8; 16];
        rc16[0] = 0x9e;
        rc16[1] = 0x10;
        rc16[13] = 12;
        assert_eq!(run(&rc16, None).expect("rc16").len(), 12);
        let d = run(&[0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 0, 0], None).expect("luns");
        assert_eq!(d, vec![0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn request_sense() {
        let d = run(&[0x03, 0, 0, 0, 252, 0], None).expect("no sense");
        assert_eq!(d.len(), 18);
        assert_eq!((d[0], d[2], d[12]), (0x70, 0, 0));
        let pending = Sense::power_on_reset();
        let d = run(&[0x03, 1, 0, 0, 252, 0], Some(&pending)).expect("pending");
        assert_eq!(&d[..4], &[0x72, 0x06, 0x29, 0x00]);
        let d = run(&[0x03, 0, 0, 0, 8, 0], Some(&pending)).expect("short");
        assert_eq!(d.len(), 8);
    }

    #[test]
    fn no_data_commands() {
        assert_eq!(run(&[0, 0, 0, 0, 0, 0], None), Ok(vec![]));
        assert_eq!(run(&[0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0], None), Ok(vec![]));
        assert_eq!(
            run(&[0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0], None).map_err(|e| e.asc),
            Err(0x20)
        );
    }

    #[test]
    fn capacity_and_opcodes() {
        let d = run(&[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], None).expect("rc10");
        assert_eq!(d.len(), 8);
        let d = run(&[0xa3, 0x0c, 0x01, 0x2a, 0, 0, 0, 0, 1, 0, 0, 0], None).expect("rsoc");
        assert_eq!(d[4], 0x2a);
        let mut gls = [0u8; 16];
        gls[0] = 0x9e;
        gls[1] = 0x12;
        gls[13] = 24;
        assert_eq!(run(&gls, None).expect("get lba status").len(), 24);
    }
}
