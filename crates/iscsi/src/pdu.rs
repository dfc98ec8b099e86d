//! iSCSI PDUs (RFC 7143 section 11): the 48-byte Basic Header Segment of every PDU the
//! initiator sends, parsed into [`Request`], and the target's PDUs built as headers.
//!
//! A PDU on the wire is the BHS, `TotalAHSLength` words of additional header segments, a
//! header digest when negotiated, the data segment padded to a multiple of 4 bytes, and a
//! data digest when negotiated. [`Framing`] says how many bytes follow a BHS so the shell can
//! read exactly them; nothing here reads or allocates by a length from the wire.

/// Bytes in a Basic Header Segment.
pub const BHS_LEN: usize = 48;
/// Longest additional header segment area: TotalAHSLength is one byte of 4-byte words.
pub const MAX_AHS_LEN: usize = 255 * 4;
/// The reserved tag value ("no task" / "no transfer").
pub const RESERVED_TAG: u32 = 0xffff_ffff;

/// Initiator opcodes.
pub mod op {
    pub const NOP_OUT: u8 = 0x00;
    pub const SCSI_COMMAND: u8 = 0x01;
    pub const TASK_MGMT: u8 = 0x02;
    pub const LOGIN: u8 = 0x03;
    pub const TEXT: u8 = 0x04;
    pub const DATA_OUT: u8 = 0x05;
    pub const LOGOUT: u8 = 0x06;
    pub const SNACK: u8 = 0x10;
    /// Target opcodes.
    pub const NOP_IN: u8 = 0x20;
    pub const SCSI_RESPONSE: u8 = 0x21;
    pub const TASK_MGMT_RESPONSE: u8 = 0x22;
    pub const LOGIN_RESPONSE: u8 = 0x23;
    pub const TEXT_RESPONSE: u8 = 0x24;
    pub const DATA_IN: u8 = 0x25;
    pub const LOGOUT_RESPONSE: u8 = 0x26;
    pub const R2T: u8 = 0x31;
    pub const ASYNC: u8 = 0x32;
    pub const REJECT: u8 = 0x3f;
}

/// Reject reasons (RFC 7143 11.17.1).
pub mod reject {
    pub const DATA_DIGEST: u8 = 0x02;
    pub const SNACK: u8 = 0x03;
    pub const PROTOCOL_ERROR: u8 = 0x04;
    pub const NOT_SUPPORTED: u8 = 0x05;
    pub const IMMEDIATE_REJECT: u8 = 0x06;
    pub const TASK_IN_PROGRESS: u8 = 0x07;
    pub const INVALID_DATA_ACK: u8 = 0x08;
    pub const INVALID_PDU_FIELD: u8 = 0x09;
    pub const OUT_OF_RESOURCES: u8 = 0x0a;
    pub const WAITING_FOR_LOGOUT: u8 = 0x0c;
}

/// Task management functions (RFC 7143 11.5.1) and responses (11.6.1).
pub mod tmf {
    pub const ABORT_TASK: u8 = 1;
    pub const ABORT_TASK_SET: u8 = 2;
    pub const CLEAR_ACA: u8 = 3;
    pub const CLEAR_TASK_SET: u8 = 4;
    pub const LOGICAL_UNIT_RESET: u8 = 5;
    pub const TARGET_WARM_RESET: u8 = 6;
    pub const TARGET_COLD_RESET: u8 = 7;
    pub const TASK_REASSIGN: u8 = 8;

    pub const COMPLETE: u8 = 0;
    pub const NO_TASK: u8 = 1;
    pub const NO_LUN: u8 = 2;
    pub const TASK_ALLEGIANT: u8 = 3;
    pub const NO_REASSIGN: u8 = 4;
    pub const NOT_SUPPORTED: u8 = 5;
    pub const NOT_AUTHORIZED: u8 = 6;
    pub const REJECTED: u8 = 255;
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(v)
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// A Basic Header Segment as received.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Bhs(pub [u8; BHS_LEN]);

impl std::fmt::Debug for Bhs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Bhs(op {:#04x}, itt {:#x}, data {})",
            self.opcode(),
            self.itt(),
            self.data_len()
        )
    }
}

impl Bhs {
    pub fn opcode(&self) -> u8 {
        self.0[0] & 0x3f
    }

    /// The I bit: an immediate command (not ordered by CmdSN).
    pub fn immediate(&self) -> bool {
        self.0[0] & 0x40 != 0
    }

    /// The F bit (final) where the opcode has one.
    pub fn final_bit(&self) -> bool {
        self.0[1] & 0x80 != 0
    }

    /// Bytes of additional header segments.
    pub fn ahs_len(&self) -> usize {
        usize::from(self.0[4]) * 4
    }

    /// Bytes in the data segment, padding excluded.
    pub fn data_len(&self) -> usize {
        (usize::from(self.0[5]) << 16) | (usize::from(self.0[6]) << 8) | usize::from(self.0[7])
    }

    pub fn lun(&self) -> u64 {
        be64(&self.0, 8)
    }

    pub fn itt(&self) -> u32 {
        be32(&self.0, 16)
    }

    /// What follows this header on the wire.
    pub fn framing(&self, digests: Digests) -> Framing {
        Framing {
            ahs: self.ahs_len(),
            header_digest: digests.header,
            data: self.data_len(),
            data_digest: digests.data && self.data_len() > 0,
        }
    }
}

/// The digests a connection negotiated (CRC32C when on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digests {
    pub header: bool,
    pub data: bool,
}

/// The parts of a PDU after its BHS, in wire order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Framing {
    pub ahs: usize,
    pub header_digest: bool,
    pub data: usize,
    pub data_digest: bool,
}

impl Framing {
    /// AHS and header digest bytes: read before the header can be trusted.
    pub fn header_tail(&self) -> usize {
        self.ahs + if self.header_digest { 4 } else { 0 }
    }

    /// Padding after the data segment.
    pub fn pad(&self) -> usize {
        pad(self.data)
    }
}

/// Padding that brings `len` to a multiple of 4.
pub fn pad(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// The bytes around a PDU's data segment: the header (with its digest) before, the
/// padding (with the data digest) after. Fixed-size arrays, so framing allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    head: [u8; BHS_LEN + 4],
    head_len: u8,
    tail: [u8; 7],
    tail_len: u8,
}

impl Frame {
    /// The header segment and its digest, when negotiated.
    pub fn head(&self) -> &[u8] {
        &self.head[..usize::from(self.head_len)]
    }

    /// The data segment's padding and its digest, when negotiated (empty without data).
    pub fn tail(&self) -> &[u8] {
        &self.tail[..usize::from(self.tail_len)]
    }
}

/// Frames a PDU whose data segment is `data` (sent between [`Frame::head`] and
/// [`Frame::tail`]).
pub fn frame(header: &[u8; BHS_LEN], data: &[u8], digests: Digests) -> Frame {
    let mut f = Frame {
        head: [0; BHS_LEN + 4],
        head_len: BHS_LEN as u8,
        tail: [0; 7],
        tail_len: 0,
    };
    f.head[..BHS_LEN].copy_from_slice(header);
    if digests.header {
        f.head[BHS_LEN..].copy_from_slice(&crate::digest::wire(crate::digest::crc32c(&[header])));
        f.head_len += 4;
    }
    let zeros = [0u8; 3];
    let padding = &zeros[..pad(data.len())];
    f.tail_len = padding.len() as u8;
    if digests.data && !data.is_empty() {
        let at = padding.len();
        f.tail[at..at + 4].copy_from_slice(&crate::digest::wire(crate::digest::crc32c(&[
            data, padding,
        ])));
        f.tail_len += 4;
    }
    f
}

/// A SCSI Command PDU's fields (RFC 7143 11.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScsiCommand {
    pub immediate: bool,
    pub final_bit: bool,
    pub read: bool,
    pub write: bool,
    pub attr: u8,
    pub lun: u64,
    pub itt: u32,
    pub expected_len: u32,
    pub cmdsn: u32,
    pub expstatsn: u32,
    /// The CDB: 16 bytes from the BHS, longer when an extended-CDB AHS carried the rest.
    pub cdb: Vec<u8>,
    /// A bidirectional command's expected read length (its AHS), when present.
    pub bidi_read_len: Option<u32>,
}

/// What an initiator sent, by opcode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    NopOut {
        immediate: bool,
        lun: u64,
        itt: u32,
        ttt: u32,
        cmdsn: u32,
        expstatsn: u32,
    },
    Command(ScsiCommand),
    TaskMgmt {
        immediate: bool,
        function: u8,
        lun: u64,
        itt: u32,
        referenced_tag: u32,
        cmdsn: u32,
        expstatsn: u32,
        ref_cmdsn: u32,
        exp_datasn: u32,
    },
    Login {
        transit: bool,
        cont: bool,
        csg: u8,
        nsg: u8,
        version_max: u8,
        version_min: u8,
        isid: [u8; 6],
        tsih: u16,
        itt: u32,
        cid: u16,
        cmdsn: u32,
        expstatsn: u32,
    },
    Text {
        immediate: bool,
        final_bit: bool,
        cont: bool,
        lun: u64,
        itt: u32,
        ttt: u32,
        cmdsn: u32,
        expstatsn: u32,
    },
    DataOut {
        final_bit: bool,
        lun: u64,
        itt: u32,
        ttt: u32,
        expstatsn: u32,
        datasn: u32,
        offset: u32,
    },
    Logout {
        immediate: bool,
        reason: u8,
        itt: u32,
        cid: u16,
        cmdsn: u32,
        expstatsn: u32,
    },
    Snack {
        itt: u32,
    },
    /// An opcode a target does not accept.
    Unknown(u8),
}

/// Why a header could not be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PduError {
    #[error("AHS of type {0} is not understood")]
    UnknownAhs(u8),
    #[error("malformed additional header segment")]
    BadAhs,
}

impl Request {
    /// Parses a BHS and its additional header segments (`ahs`, digest excluded).
    pub fn parse(bhs: &Bhs, ahs: &[u8]) -> Result<Request, PduError> {
        let b = &bhs.0;
        let immediate = bhs.immediate();
        let itt = bhs.itt();
        Ok(match bhs.opcode() {
            op::NOP_OUT => Request::NopOut {
                immediate,
                lun: bhs.lun(),
                itt,
                ttt: be32(b, 20),
                cmdsn: be32(b, 24),
                expstatsn: be32(b, 28),
            },
            op::SCSI_COMMAND => scsi_command(bhs, ahs)?,
            op::TASK_MGMT => Request::TaskMgmt {
                immediate,
                function: b[1] & 0x7f,
                lun: bhs.lun(),
                itt,
                referenced_tag: be32(b, 20),
                cmdsn: be32(b, 24),
                expstatsn: be32(b, 28),
                ref_cmdsn: be32(b, 32),
                exp_datasn: be32(b, 36),
            },
            op::LOGIN => {
                let mut isid = [0u8; 6];
                isid.copy_from_slice(&b[8..14]);
                Request::Login {
                    transit: b[1] & 0x80 != 0,
                    cont: b[1] & 0x40 != 0,
                    csg: (b[1] >> 2) & 3,
                    nsg: b[1] & 3,
                    version_max: b[2],
                    version_min: b[3],
                    isid,
                    tsih: be16(b, 14),
                    itt,
                    cid: be16(b, 20),
                    cmdsn: be32(b, 24),
                    expstatsn: be32(b, 28),
                }
            }
            op::TEXT => Request::Text {
                immediate,
                final_bit: bhs.final_bit(),
                cont: b[1] & 0x40 != 0,
                lun: bhs.lun(),
                itt,
                ttt: be32(b, 20),
                cmdsn: be32(b, 24),
                expstatsn: be32(b, 28),
            },
            op::DATA_OUT => Request::DataOut {
                final_bit: bhs.final_bit(),
                lun: bhs.lun(),
                itt,
                ttt: be32(b, 20),
                expstatsn: be32(b, 28),
                datasn: be32(b, 36),
                offset: be32(b, 40),
            },
            op::LOGOUT => Request::Logout {
                immediate,
                reason: b[1] & 0x7f,
                itt,
                cid: be16(b, 20),
                cmdsn: be32(b, 24),
                expstatsn: be32(b, 28),
            },
            op::SNACK => Request::Snack { itt },
            other => Request::Unknown(other),
        })
    }

    /// The CmdSN of a request that carries one, and whether it is immediate (not ordered).
    pub fn cmdsn(&self) -> Option<(u32, bool)> {
        match *self {
            Request::NopOut {
                cmdsn, immediate, ..
            }
            | Request::TaskMgmt {
                cmdsn, immediate, ..
            }
            | Request::Text {
                cmdsn, immediate, ..
            }
            | Request::Logout {
                cmdsn, immediate, ..
            } => Some((cmdsn, immediate)),
            Request::Command(ref c) => Some((c.cmdsn, c.immediate)),
            Request::Login { cmdsn, .. } => Some((cmdsn, true)),
            _ => None,
        }
    }

    /// The ExpStatSN the initiator acknowledges, where the PDU carries one.
    pub fn expstatsn(&self) -> Option<u32> {
        match *self {
            Request::NopOut { expstatsn, .. }
            | Request::TaskMgmt { expstatsn, .. }
            | Request::Login { expstatsn, .. }
            | Request::Text { expstatsn, .. }
            | Request::DataOut { expstatsn, .. }
            | Request::Logout { expstatsn, .. } => Some(expstatsn),
            Request::Command(ref c) => Some(c.expstatsn),
            _ => None,
        }
    }
}

/// A SCSI Command PDU: its CDB (extended by an AHS) and the bidirectional read length.
fn scsi_command(bhs: &Bhs, ahs: &[u8]) -> Result<Request, PduError> {
    let b = &bhs.0;
    let (immediate, itt) = (bhs.immediate(), bhs.itt());
    let mut cdb = b[32..48].to_vec();
    let mut bidi_read_len = None;
    let mut rest = ahs;
    while !rest.is_empty() {
        if rest.len() < 4 {
            return Err(PduError::BadAhs);
        }
        let len = usize::from(be16(rest, 0));
        let kind = rest[2];
        // AHSLength counts bytes after the reserved byte; segments are padded.
        let total = 3 + len;
        let padded = total + pad(total);
        if padded > rest.len() || len == 0 {
            return Err(PduError::BadAhs);
        }
        match kind {
            1 => cdb.extend_from_slice(&rest[4..3 + len]),
            2 if len == 5 => bidi_read_len = Some(be32(rest, 4)),
            2 => return Err(PduError::BadAhs),
            other => return Err(PduError::UnknownAhs(other)),
        }
        rest = &rest[padded..];
    }
    Ok(Request::Command(ScsiCommand {
        immediate,
        final_bit: bhs.final_bit(),
        read: b[1] & 0x40 != 0,
        write: b[1] & 0x20 != 0,
        attr: b[1] & 0x07,
        lun: bhs.lun(),
        itt,
        expected_len: be32(b, 20),
        cmdsn: be32(b, 24),
        expstatsn: be32(b, 28),
        cdb,
        bidi_read_len,
    }))
}

/// The sequence numbers every status-carrying target PDU reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seq {
    pub statsn: u32,
    pub expcmdsn: u32,
    pub maxcmdsn: u32,
}

fn header(opcode: u8, flags: u8, data_len: usize) -> [u8; BHS_LEN] {
    let mut h = [0u8; BHS_LEN];
    h[0] = opcode;
    h[1] = flags;
    set_data_len(&mut h, data_len);
    h
}

/// Sets DataSegmentLength (24 bits; longer segments are the caller's bug).
pub fn set_data_len(h: &mut [u8; BHS_LEN], len: usize) {
    debug_assert!(len < 1 << 24, "data segment of {len} bytes");
    h[5] = (len >> 16) as u8;
    h[6] = (len >> 8) as u8;
    h[7] = len as u8;
}

fn put_seq(h: &mut [u8; BHS_LEN], s: Seq) {
    put32(h, 24, s.statsn);
    put32(h, 28, s.expcmdsn);
    put32(h, 32, s.maxcmdsn);
}

/// Residual of a SCSI command (RFC 7143 11.4.5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Residual {
    #[default]
    None,
    /// The command wanted more than the initiator expected: this many bytes not transferred.
    Overflow(u32),
    /// The command transferred this many bytes fewer than expected.
    Underflow(u32),
}

impl Residual {
    /// The residual for a command that moves `actual` bytes against `expected`.
    pub fn of(expected: u32, actual: u64) -> Residual {
        let exp = u64::from(expected);
        match actual.cmp(&exp) {
            std::cmp::Ordering::Equal => Residual::None,
            std::cmp::Ordering::Greater => {
                Residual::Overflow(u32::try_from(actual - exp).unwrap_or(u32::MAX))
            }
            std::cmp::Ordering::Less => Residual::Underflow((exp - actual) as u32),
        }
    }

    fn apply(self, h: &mut [u8; BHS_LEN]) {
        match self {
            Residual::None => {}
            Residual::Overflow(n) => {
                h[1] |= 0x04;
                put32(h, 44, n);
            }
            Residual::Underflow(n) => {
                h[1] |= 0x02;
                put32(h, 44, n);
            }
        }
    }
}

/// SCSI Response header. `data_len` covers the sense segment (2-byte length + sense).
pub fn scsi_response(
    itt: u32,
    status: u8,
    residual: Residual,
    exp_datasn: u32,
    seq: Seq,
    data_len: usize,
) -> [u8; BHS_LEN] {
    let mut h = header(op::SCSI_RESPONSE, 0x80, data_len);
    h[2] = 0; // command completed at target
    h[3] = status;
    put32(&mut h, 16, itt);
    put_seq(&mut h, seq);
    put32(&mut h, 36, exp_datasn);
    residual.apply(&mut h);
    h
}

/// The data segment of a SCSI Response carrying sense data.
pub fn sense_segment(sense: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(2 + sense.len());
    v.extend_from_slice(&(sense.len() as u16).to_be_bytes());
    v.extend_from_slice(sense);
    v
}

/// Data-In header. `status` Some puts the command's status in this (final) PDU.
#[allow(clippy::too_many_arguments)]
pub fn data_in(
    itt: u32,
    lun: u64,
    datasn: u32,
    offset: u32,
    data_len: usize,
    final_bit: bool,
    status: Option<(u8, Residual)>,
    seq: Seq,
) -> [u8; BHS_LEN] {
    let mut h = header(op::DATA_IN, if final_bit { 0x80 } else { 0 }, data_len);
    put64(&mut h, 8, lun);
    put32(&mut h, 16, itt);
    put32(&mut h, 20, RESERVED_TAG);
    put_seq(&mut h, seq);
    if let Some((status, residual)) = status {
        h[1] |= 0x01;
        h[3] = status;
        residual.apply(&mut h);
    } else {
        // StatSN is reserved without status.
        put32(&mut h, 24, 0);
    }
    put32(&mut h, 36, datasn);
    put32(&mut h, 40, offset);
    h
}

/// Ready To Transfer: ask for `len` bytes at `offset`. StatSN is not advanced by an R2T.
pub fn r2t(
    itt: u32,
    lun: u64,
    ttt: u32,
    r2tsn: u32,
    offset: u32,
    len: u32,
    seq: Seq,
) -> [u8; BHS_LEN] {
    let mut h = header(op::R2T, 0x80, 0);
    put64(&mut h, 8, lun);
    put32(&mut h, 16, itt);
    put32(&mut h, 20, ttt);
    put_seq(&mut h, seq);
    put32(&mut h, 36, r2tsn);
    put32(&mut h, 40, offset);
    put32(&mut h, 44, len);
    h
}

/// NOP-In: an answer to a NOP-Out (itt set, ttt reserved) or a target ping (itt reserved,
/// ttt set; StatSN not advanced).
pub fn nop_in(itt: u32, ttt: u32, lun: u64, seq: Seq, data_len: usize) -> [u8; BHS_LEN] {
    let mut h = header(op::NOP_IN, 0x80, data_len);
    put64(&mut h, 8, lun);
    put32(&mut h, 16, itt);
    put32(&mut h, 20, ttt);
    put_seq(&mut h, seq);
    h
}

/// Task Management Function Response.
pub fn tmf_response(itt: u32, response: u8, seq: Seq) -> [u8; BHS_LEN] {
    let mut h = header(op::TASK_MGMT_RESPONSE, 0x80, 0);
    h[2] = response;
    put32(&mut h, 16, itt);
    put_seq(&mut h, seq);
    h
}

/// The fields of a Login Response the login state machine decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginHeader {
    pub transit: bool,
    pub cont: bool,
    pub csg: u8,
    pub nsg: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub status_class: u8,
    pub status_detail: u8,
}

/// Login Response (version 0, the only one).
pub fn login_response(l: &LoginHeader, seq: Seq, data_len: usize) -> [u8; BHS_LEN] {
    let mut flags = ((l.csg & 3) << 2) | (l.nsg & 3);
    if l.transit {
        flags |= 0x80;
    }
    if l.cont {
        flags |= 0x40;
    }
    let mut h = header(op::LOGIN_RESPONSE, flags, data_len);
    h[2] = 0;
    h[3] = 0;
    h[8..14].copy_from_slice(&l.isid);
    put16(&mut h, 14, l.tsih);
    put32(&mut h, 16, l.itt);
    put_seq(&mut h, seq);
    h[36] = l.status_class;
    h[37] = l.status_detail;
    h
}

/// Text Response. `ttt` is reserved on the last PDU of a response and a target tag while
/// more follows (C bit).
pub fn text_response(
    itt: u32,
    ttt: u32,
    lun: u64,
    final_bit: bool,
    cont: bool,
    seq: Seq,
    data_len: usize,
) -> [u8; BHS_LEN] {
    let mut flags = 0;
    if final_bit {
        flags |= 0x80;
    }
    if cont {
        flags |= 0x40;
    }
    let mut h = header(op::TEXT_RESPONSE, flags, data_len);
    put64(&mut h, 8, lun);
    put32(&mut h, 16, itt);
    put32(&mut h, 20, ttt);
    put_seq(&mut h, seq);
    h
}

/// Logout Response (response 0: closed successfully; 1: CID not found; 2: recovery not
/// supported).
pub fn logout_response(itt: u32, response: u8, seq: Seq) -> [u8; BHS_LEN] {
    let mut h = header(op::LOGOUT_RESPONSE, 0x80, 0);
    h[2] = response;
    put32(&mut h, 16, itt);
    put_seq(&mut h, seq);
    // Time2Wait / Time2Retain 0: nothing to wait for, nothing retained (ERL 0).
    h
}

/// Reject: the data segment is the offending BHS.
pub fn reject(reason: u8, seq: Seq) -> [u8; BHS_LEN] {
    let mut h = header(op::REJECT, 0x80, BHS_LEN);
    h[2] = reason;
    put32(&mut h, 16, RESERVED_TAG);
    put_seq(&mut h, seq);
    h
}

/// Asynchronous Message: event 1 asks the initiator to log out within `param3` seconds.
pub fn async_logout_request(seq: Seq, wait_seconds: u16) -> [u8; BHS_LEN] {
    let mut h = header(op::ASYNC, 0x80, 0);
    put32(&mut h, 16, RESERVED_TAG);
    put_seq(&mut h, seq);
    h[36] = 1;
    put16(&mut h, 42, wait_seconds);
    h
}

/// Builds an initiator PDU header, for tests and clients.
pub mod build {
    use super::*;

    /// SCSI Command with a CDB of up to 16 bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn command(
        itt: u32,
        lun: u64,
        cdb: &[u8],
        read: bool,
        write: bool,
        expected_len: u32,
        cmdsn: u32,
        expstatsn: u32,
        data_len: usize,
    ) -> [u8; BHS_LEN] {
        let mut flags = 0x80;
        if read {
            flags |= 0x40;
        }
        if write {
            flags |= 0x20;
        }
        let mut h = header(op::SCSI_COMMAND, flags | 1, data_len);
        put64(&mut h, 8, lun);
        put32(&mut h, 16, itt);
        put32(&mut h, 20, expected_len);
        put32(&mut h, 24, cmdsn);
        put32(&mut h, 28, expstatsn);
        let n = cdb.len().min(16);
        h[32..32 + n].copy_from_slice(&cdb[..n]);
        h
    }

    /// Data-Out.
    pub fn data_out(
        itt: u32,
        ttt: u32,
        datasn: u32,
        offset: u32,
        final_bit: bool,
        data_len: usize,
    ) -> [u8; BHS_LEN] {
        let mut h = header(op::DATA_OUT, if final_bit { 0x80 } else { 0 }, data_len);
        put32(&mut h, 16, itt);
        put32(&mut h, 20, ttt);
        put32(&mut h, 36, datasn);
        put32(&mut h, 40, offset);
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn data_length_is_24_bits_and_padding_rounds_to_words() {
        let mut h = [0u8; BHS_LEN];
        set_data_len(&mut h, 0x01_02_03);
        let b = Bhs(h);
        assert_eq!(b.data_len(), 0x010203);
        assert_eq!(pad(0), 0);
        assert_eq!(pad(1), 3);
        assert_eq!(pad(4), 0);
        assert_eq!(pad(7), 1);
        let f = b.framing(Digests {
            header: true,
            data: true,
        });
        assert_eq!(f.header_tail(), 4);
        assert_eq!(f.pad(), 1);
        assert!(f.data_digest);
    }

    #[test]
    fn frames_carry_digests_and_padding() {
        let h = build::data_out(1, 2, 0, 0, true, 5);
        let f = frame(&h, b"hello", Digests::default());
        assert_eq!((f.head(), f.tail()), (&h[..], &[0u8, 0, 0][..]));
        let both = Digests {
            header: true,
            data: true,
        };
        let f = frame(&h, b"hello", both);
        let (head, tail) = (f.head(), f.tail());
        assert_eq!(&head[..BHS_LEN], &h[..]);
        assert_eq!(
            &head[BHS_LEN..],
            &crate::digest::wire(crate::digest::crc32c(&[&h]))
        );
        assert_eq!(tail.len(), 7);
        assert!(crate::digest::matches(
            &[b"hello", &[0, 0, 0]],
            tail[3..].try_into().unwrap_or_default()
        ));
        let f = frame(&h, b"", both);
        assert!(f.tail().is_empty(), "no data, no data digest");
        assert_eq!(f.head().len(), BHS_LEN + 4);
    }

    #[test]
    fn command_round_trips_through_the_builder() {
        let cdb = [0x28, 0, 0, 0, 0, 8, 0, 0, 16, 0];
        let h = build::command(7, 1 << 48, &cdb, true, false, 8192, 5, 3, 0);
        let Request::Command(c) = Request::parse(&Bhs(h), &[]).expect("parse") else {
            panic!("not a command");
        };
        assert!(c.read && !c.write && c.final_bit && !c.immediate);
        assert_eq!(
            (c.itt, c.lun, c.expected_len, c.cmdsn, c.expstatsn),
            (7, 1 << 48, 8192, 5, 3)
        );
        assert_eq!(&c.cdb[..10], &cdb);
        assert_eq!(c.cdb.len(), 16);
        assert_eq!(c.attr, 1);
    }

    #[test]
    fn extended_cdb_ahs_appends_to_the_cdb() {
        let h = build::command(1, 0, &[0x7f; 16], false, false, 0, 0, 0, 0);
        // AHSLength 9: one reserved byte + 8 CDB bytes; padded to 12 bytes.
        let mut ahs = vec![0, 9, 1, 0];
        ahs.extend_from_slice(&[0xaa; 8]);
        let Request::Command(c) = Request::parse(&Bhs(h), &ahs).expect("parse") else {
            panic!("not a command");
        };
        assert_eq!(c.cdb.len(), 24);
        assert_eq!(&c.cdb[16..], &[0xaa; 8]);
        // Truncated segment.
        assert_eq!(Request::parse(&Bhs(h), &ahs[..8]), Err(PduError::BadAhs));
        let bad = [0, 1, 9, 0];
        assert_eq!(Request::parse(&Bhs(h), &bad), Err(PduError::UnknownAhs(9)));
    }

    #[test]
    fn data_in_with_status_sets_s_and_residual() {
        let seq = Seq {
            statsn: 10,
            expcmdsn: 11,
            maxcmdsn: 42,
        };
        let h = data_in(
            5,
            0,
            2,
            4096,
            512,
            true,
            Some((0, Residual::Underflow(100))),
            seq,
        );
        assert_eq!(h[0], op::DATA_IN);
        assert_eq!(h[1], 0x80 | 0x01 | 0x02);
        assert_eq!(be32(&h, 24), 10);
        assert_eq!(be32(&h, 36), 2);
        assert_eq!(be32(&h, 40), 4096);
        assert_eq!(be32(&h, 44), 100);
        assert_eq!(Bhs(h).data_len(), 512);
        let h = data_in(5, 0, 0, 0, 512, false, None, seq);
        assert_eq!(h[1], 0);
        assert_eq!(be32(&h, 24), 0, "StatSN is reserved without status");
    }

    #[test]
    fn residual_of_compares_expected_and_actual() {
        assert_eq!(Residual::of(512, 512), Residual::None);
        assert_eq!(Residual::of(512, 1024), Residual::Overflow(512));
        assert_eq!(Residual::of(1024, 512), Residual::Underflow(512));
        assert_eq!(Residual::of(0, u64::MAX), Residual::Overflow(u32::MAX));
    }

    #[test]
    fn login_response_flags_and_status() {
        let l = LoginHeader {
            transit: true,
            cont: false,
            csg: 1,
            nsg: 3,
            isid: [1, 2, 3, 4, 5, 6],
            tsih: 9,
            itt: 77,
            status_class: 2,
            status_detail: 1,
        };
        let h = login_response(&l, Seq::default(), 10);
        assert_eq!(h[0], op::LOGIN_RESPONSE);
        assert_eq!(h[1], 0x80 | (1 << 2) | 3);
        assert_eq!(&h[8..14], &[1, 2, 3, 4, 5, 6]);
        assert_eq!(be16(&h, 14), 9);
        assert_eq!((h[36], h[37]), (2, 1));
    }

    proptest! {
        #[test]
        fn any_header_parses_without_panicking(bytes in proptest::collection::vec(any::<u8>(), BHS_LEN), ahs in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut h = [0u8; BHS_LEN];
            h.copy_from_slice(&bytes);
            let bhs = Bhs(h);
            let _ = bhs.framing(Digests { header: true, data: true });
            if let Ok(r) = Request::parse(&bhs, &ahs) {
                let _ = r.cmdsn();
                let _ = r.expstatsn();
                if let Request::Command(c) = r {
                    prop_assert!(c.cdb.len() >= 16 && c.cdb.len() <= 16 + ahs.len());
                }
            }
        }
    }
}
