//! A bare iSCSI initiator over a TCP socket, for the protocol errors real initiators never
//! make and the clients that misbehave on purpose.
#![allow(clippy::unwrap_used, dead_code)]

use raidd_iscsi::digest;
use raidd_iscsi::pdu::{build, op, Bhs, BHS_LEN};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub struct Raw {
    pub s: TcpStream,
    pub cmdsn: u32,
    pub statsn: u32,
    pub header_digest: bool,
    pub data_digest: bool,
    itt: u32,
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().unwrap())
}

fn text(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut v = Vec::new();
    for (k, val) in pairs {
        v.extend_from_slice(format!("{k}={val}").as_bytes());
        v.push(0);
    }
    v
}

fn login_pdu(csg: u8, nsg: u8, itt: u32, data: &[u8]) -> [u8; BHS_LEN] {
    let mut h = [0u8; BHS_LEN];
    h[0] = 0x40 | op::LOGIN;
    h[1] = 0x80 | (csg << 2) | nsg;
    h[5] = (data.len() >> 16) as u8;
    h[6] = (data.len() >> 8) as u8;
    h[7] = data.len() as u8;
    h[8..14].copy_from_slice(&[0x80, 0, 0x23, 0x45, 0, 1]);
    h[16..20].copy_from_slice(&itt.to_be_bytes());
    h
}

impl Raw {
    /// Logs in to `target` (no authentication) with the given header digest.
    pub fn login(addr: SocketAddr, initiator: &str, target: &str, header_digest: bool) -> Raw {
        Raw::login_with(addr, initiator, target, header_digest, false)
    }

    /// Logs in with the given header and data digests.
    pub fn login_with(
        addr: SocketAddr,
        initiator: &str,
        target: &str,
        header_digest: bool,
        data_digest: bool,
    ) -> Raw {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // Login PDUs are immediate: the first command carries the login's CmdSN (0).
        let mut r = Raw {
            s,
            cmdsn: 0,
            statsn: 0,
            header_digest: false,
            data_digest: false,
            itt: 1,
        };
        let sec = text(&[
            ("InitiatorName", initiator),
            ("TargetName", target),
            ("SessionType", "Normal"),
            ("AuthMethod", "None"),
        ]);
        r.send(login_pdu(0, 1, 0, &sec), &sec);
        let (h, d) = r.recv();
        assert_eq!(h.opcode(), op::LOGIN_RESPONSE);
        assert_eq!(
            (h.0[36], h.0[37]),
            (0, 0),
            "{}",
            String::from_utf8_lossy(&d)
        );
        let hd = if header_digest { "CRC32C" } else { "None" };
        let dd = if data_digest { "CRC32C" } else { "None" };
        let opn = text(&[
            ("HeaderDigest", hd),
            ("DataDigest", dd),
            ("MaxRecvDataSegmentLength", "65536"),
            ("InitialR2T", "Yes"),
            ("ImmediateData", "No"),
            ("MaxBurstLength", "65536"),
            ("FirstBurstLength", "65536"),
            ("ErrorRecoveryLevel", "0"),
        ]);
        r.send(login_pdu(1, 3, 0, &opn), &opn);
        let (h, d) = r.recv();
        assert_eq!(
            (h.0[36], h.0[37]),
            (0, 0),
            "{}",
            String::from_utf8_lossy(&d)
        );
        assert!(h.0[1] & 0x80 != 0 && h.0[1] & 3 == 3, "full feature phase");
        let answer = String::from_utf8_lossy(&d).to_string();
        assert!(answer.contains(&format!("HeaderDigest={hd}")), "{answer}");
        assert!(answer.contains(&format!("DataDigest={dd}")), "{answer}");
        r.header_digest = header_digest;
        r.data_digest = data_digest;
        r
    }

    pub fn itt(&mut self) -> u32 {
        self.itt += 1;
        self.itt
    }

    /// Sends a header (its digest computed when on, or `bad_digest` flipped) and data.
    pub fn send_with(&mut self, h: [u8; BHS_LEN], data: &[u8], bad_digest: bool) {
        self.send_digests(h, data, bad_digest, false)
    }

    /// Like `send_with`, with a flipped data digest when `bad_data` is set.
    pub fn send_digests(
        &mut self,
        h: [u8; BHS_LEN],
        data: &[u8],
        bad_header: bool,
        bad_data: bool,
    ) {
        let mut v = h.to_vec();
        if self.header_digest {
            let mut d = digest::wire(digest::crc32c(&[&h]));
            if bad_header {
                d[0] ^= 1;
            }
            v.extend_from_slice(&d);
        }
        let start = v.len();
        v.extend_from_slice(data);
        v.resize(v.len() + (4 - data.len() % 4) % 4, 0);
        if self.data_digest && !data.is_empty() {
            let mut d = digest::wire(digest::crc32c(&[&v[start..]]));
            if bad_data {
                d[3] ^= 0x80;
            }
            v.extend_from_slice(&d);
        }
        self.s.write_all(&v).unwrap();
    }

    pub fn send(&mut self, h: [u8; BHS_LEN], data: &[u8]) {
        self.send_with(h, data, false)
    }

    /// The next PDU, or None when the target closed the connection.
    pub fn try_recv(&mut self) -> Option<(Bhs, Vec<u8>)> {
        let mut h = [0u8; BHS_LEN];
        self.s.read_exact(&mut h).ok()?;
        let bhs = Bhs(h);
        let mut tail = vec![0u8; bhs.ahs_len() + if self.header_digest { 4 } else { 0 }];
        self.s.read_exact(&mut tail).ok()?;
        if self.header_digest {
            let got: [u8; 4] = tail[bhs.ahs_len()..].try_into().unwrap();
            assert!(
                digest::matches(&[&h, &tail[..bhs.ahs_len()]], got),
                "target's header digest"
            );
        }
        let n = bhs.data_len();
        let mut d = vec![0u8; n + (4 - n % 4) % 4];
        self.s.read_exact(&mut d).ok()?;
        if self.data_digest && n > 0 {
            let mut dd = [0u8; 4];
            self.s.read_exact(&mut dd).ok()?;
            assert!(digest::matches(&[&d], dd), "target's data digest");
        }
        d.truncate(n);
        if matches!(bhs.opcode(), 0x21 | 0x22 | 0x24 | 0x26 | 0x3f)
            || bhs.opcode() == 0x20 && bhs.itt() != u32::MAX
        {
            self.statsn = be32(&h, 24).wrapping_add(1);
        }
        Some((bhs, d))
    }

    pub fn recv(&mut self) -> (Bhs, Vec<u8>) {
        self.try_recv().expect("the target closed the connection")
    }

    /// A SCSI command (no data out); returns the next CmdSN's PDU.
    pub fn command(&mut self, cdb: &[u8], read_len: u32, cmdsn: u32) -> u32 {
        let itt = self.itt();
        let h = build::command(
            itt,
            0,
            cdb,
            read_len > 0,
            false,
            read_len,
            cmdsn,
            self.statsn,
            0,
        );
        self.send(h, &[]);
        itt
    }

    /// A command with Data-Out, answering R2Ts until the status comes (InitialR2T=Yes,
    /// ImmediateData=No as `login` negotiates).
    pub fn command_out(&mut self, cdb: &[u8], data: &[u8]) -> (Bhs, Vec<u8>) {
        let itt = self.itt();
        let h = build::command(
            itt,
            0,
            cdb,
            false,
            true,
            data.len() as u32,
            self.cmdsn,
            self.statsn,
            0,
        );
        self.cmdsn += 1;
        self.send(h, &[]);
        loop {
            let (b, d) = self.recv();
            if b.opcode() != op::R2T {
                assert_eq!(b.itt(), itt);
                return (b, d);
            }
            let ttt = be32(&b.0, 20);
            let off = be32(&b.0, 40) as usize;
            let len = be32(&b.0, 44) as usize;
            let chunk = &data[off..off + len];
            self.send(build::data_out(itt, ttt, 0, off as u32, true, len), chunk);
        }
    }

    /// A command with Data-In: (status, data, sense data of a CHECK CONDITION).
    pub fn command_in(&mut self, cdb: &[u8], alloc: u32) -> (u8, Vec<u8>, Vec<u8>) {
        let itt = self.itt();
        let h = build::command(itt, 0, cdb, true, false, alloc, self.cmdsn, self.statsn, 0);
        self.cmdsn += 1;
        self.send(h, &[]);
        let mut data = Vec::new();
        loop {
            let (b, d) = self.recv();
            assert_eq!(b.itt(), itt);
            match b.opcode() {
                op::DATA_IN => {
                    data.extend_from_slice(&d);
                    if b.0[1] & 0x01 != 0 {
                        return (b.0[3], data, Vec::new());
                    }
                }
                op::SCSI_RESPONSE => {
                    let sense = if d.len() > 2 {
                        d[2..].to_vec()
                    } else {
                        Vec::new()
                    };
                    return (b.0[3], data, sense);
                }
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    /// A NOP-Out ping; the target's (ExpCmdSN, MaxCmdSN) from its answer.
    pub fn ping_seq(&mut self) -> (u32, u32) {
        self.ping();
        // `ping` read the answer; ask again to see the numbers in a fresh one.
        let itt = self.itt();
        let mut h = [0u8; BHS_LEN];
        h[0] = 0x40;
        h[1] = 0x80;
        h[16..20].copy_from_slice(&itt.to_be_bytes());
        h[20..24].copy_from_slice(&u32::MAX.to_be_bytes());
        h[24..28].copy_from_slice(&self.cmdsn.to_be_bytes());
        h[28..32].copy_from_slice(&self.statsn.to_be_bytes());
        self.send(h, &[]);
        let (b, _) = self.recv();
        assert_eq!((b.opcode(), b.itt()), (op::NOP_IN, itt));
        (be32(&b.0, 28), be32(&b.0, 32))
    }

    /// NOP-Out ping with data; asserts the echo comes back.
    pub fn ping(&mut self) {
        let itt = self.itt();
        let mut h = [0u8; BHS_LEN];
        h[0] = 0x40;
        h[1] = 0x80;
        h[7] = 4;
        h[16..20].copy_from_slice(&itt.to_be_bytes());
        h[20..24].copy_from_slice(&u32::MAX.to_be_bytes());
        h[24..28].copy_from_slice(&self.cmdsn.to_be_bytes());
        h[28..32].copy_from_slice(&self.statsn.to_be_bytes());
        self.send(h, b"ping");
        let (b, d) = self.recv();
        assert_eq!((b.opcode(), b.itt()), (op::NOP_IN, itt));
        assert_eq!(d, b"ping");
    }
}
