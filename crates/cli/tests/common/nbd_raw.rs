//! A bare NBD client over a TCP socket: the handshake to the transmission phase and raw
//! request headers, for clients that misbehave on purpose.
#![allow(clippy::unwrap_used, dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub const READ: u16 = 0;
pub const WRITE: u16 = 1;
pub const WRITE_ZEROES: u16 = 6;

/// Connects and negotiates `export` with NBD_OPT_EXPORT_NAME (no structured replies).
pub fn handshake_to_transmission(addr: SocketAddr, export: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut greet = [0u8; 18];
    s.read_exact(&mut greet).unwrap();
    s.write_all(&3u32.to_be_bytes()).unwrap(); // FIXED_NEWSTYLE | NO_ZEROES
    let mut opt = Vec::new();
    opt.extend_from_slice(b"IHAVEOPT");
    opt.extend_from_slice(&1u32.to_be_bytes()); // EXPORT_NAME
    opt.extend_from_slice(&(export.len() as u32).to_be_bytes());
    opt.extend_from_slice(export.as_bytes());
    s.write_all(&opt).unwrap();
    let mut info = [0u8; 10];
    s.read_exact(&mut info).unwrap();
    s
}

/// A request header.
pub fn request(command: u16, cookie: u64, offset: u64, length: u32) -> [u8; 28] {
    let mut h = [0u8; 28];
    h[0..4].copy_from_slice(&0x2560_9513u32.to_be_bytes());
    h[6..8].copy_from_slice(&command.to_be_bytes());
    h[8..16].copy_from_slice(&cookie.to_be_bytes());
    h[16..24].copy_from_slice(&offset.to_be_bytes());
    h[24..28].copy_from_slice(&length.to_be_bytes());
    h
}

/// Whether the server has closed the connection (reading what it still had to say).
pub fn closed(s: &mut TcpStream) -> bool {
    let mut b = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => {
                return e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::TimedOut
            }
        }
    }
}
