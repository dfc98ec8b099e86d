//! The control socket's protocol: a Unix socket, readable and writable by root only, through
//! which the CLI (`raidd status`, `raidd detail NAME`, `raidd add`, ...) asks the daemon. One
//! request per connection: a JSON line in, a JSON line out. The daemon's side (the listener
//! and the handlers) is `raidd-server`'s; the client ([`ask`]) is here.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::exit::{AdminError, Exit};
use crate::volume::VolumeRef;

/// The control socket when neither the config nor the command line names one.
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/raidd/raidd.sock";

/// The control socket a client uses: the option, then `$RAIDD_CONTROL`, then the default.
pub fn socket_path(option: Option<PathBuf>) -> PathBuf {
    option
        .or_else(|| std::env::var_os("RAIDD_CONTROL").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONTROL_SOCKET))
}

/// Longest request line the daemon reads; anything longer is refused unread.
pub const MAX_REQUEST: usize = 64 * 1024;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "lowercase")]
pub enum Request {
    /// Every array and export, briefly (mdstat-like).
    Status,
    /// One array, as `raidd detail` reports it.
    Detail {
        array: String,
    },
    /// Fail a working member (as an I/O error would).
    Fail {
        array: String,
        member: String,
    },
    /// Take a failed member or a spare out of the array.
    Remove {
        array: String,
        member: String,
    },
    /// Add a member: it rebuilds into a free slot, or waits as the array's spare; with
    /// `journal`, it becomes the array's write journal in place of a failed or missing one.
    Add {
        array: String,
        member: PathBuf,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        journal: bool,
    },
    /// Copy a working member onto a new one, then retire the old one.
    Replace {
        array: String,
        member: String,
        with: PathBuf,
    },
    /// Start a check (count mismatches) or a repair.
    Check {
        array: String,
    },
    Repair {
        array: String,
    },
    /// Stop the running check or repair (a recovery stops and restarts from its checkpoint).
    Idle {
        array: String,
    },
    /// Put a member into, or take it out of, the hot-spare pool shared by all arrays.
    #[serde(rename = "spare-add")]
    SpareAdd {
        member: PathBuf,
        #[serde(default)]
        group: Option<String>,
    },
    #[serde(rename = "spare-remove")]
    SpareRemove {
        member: PathBuf,
    },
    /// An array's volumes (its partition table read again).
    #[serde(rename = "volume-list")]
    VolumeList {
        array: String,
    },
    /// Add a volume of `size` bytes named `name`.
    #[serde(rename = "volume-create")]
    VolumeCreate {
        array: String,
        name: String,
        size: u64,
    },
    /// Give a volume a new size (`shrink`: smaller too).
    #[serde(rename = "volume-resize")]
    VolumeResize {
        array: String,
        name: String,
        size: u64,
        #[serde(default)]
        shrink: bool,
    },
    #[serde(rename = "volume-delete")]
    VolumeDelete {
        array: String,
        name: String,
    },
    /// Offer an NBD export while the daemon runs (not written to the config).
    #[serde(rename = "export-add")]
    ExportAdd {
        name: String,
        array: String,
        /// A volume of the array (name or number), instead of all of it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        volume: Option<VolumeRef>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        read_only: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// Stop offering an NBD export: its connections take no more requests.
    #[serde(rename = "export-remove")]
    ExportRemove {
        name: String,
    },
    /// Offer a LUN of a served iSCSI target while the daemon runs (not written to the
    /// config).
    #[serde(rename = "lun-add")]
    LunAdd {
        target: String,
        /// Its number; none: the lowest free one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lun: Option<u64>,
        array: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        volume: Option<VolumeRef>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        read_only: bool,
    },
    /// Stop offering a LUN (not a target's last one).
    #[serde(rename = "lun-remove")]
    LunRemove {
        target: String,
        lun: u64,
    },
    /// Make a ublk device of a served array while the daemon runs (not written to the
    /// config).
    #[serde(rename = "ublk-add")]
    UblkAdd {
        array: String,
        /// Its number (N of /dev/ublkbN); none: the lowest one no entry uses.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        volume: Option<VolumeRef>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        read_only: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue_depth: Option<u16>,
        /// The largest request, as a size ("512K").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_io: Option<String>,
    },
    /// Stop and remove a ublk device the daemon serves.
    #[serde(rename = "ublk-remove")]
    UblkRemove {
        id: u32,
    },
    /// Change the array's shape or policy while it serves (mdadm's --grow): for now its
    /// consistency policy.
    Grow {
        array: String,
        #[serde(default)]
        consistency_policy: Option<raidd_engine::ConsistencyPolicy>,
        /// Bytes per bit of a bitmap put on (`consistency_policy` bitmap).
        #[serde(default)]
        bitmap_chunk: Option<u32>,
        /// The write journal's mode (md's `journal_mode`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        journal_mode: Option<raidd_engine::JournalMode>,
    },
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Response {
    /// The exit code the CLI should end with (0 on success).
    pub exit: u8,
    /// On failure, what went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The human form of the answer.
    #[serde(default)]
    pub text: String,
    /// The machine form of the answer (what `--json` prints).
    #[serde(default)]
    pub json: serde_json::Value,
}

impl Response {
    pub fn ok(text: String, json: serde_json::Value) -> Response {
        Response {
            exit: 0,
            error: None,
            text,
            json,
        }
    }

    pub fn err(exit: Exit, error: impl Into<String>) -> Response {
        Response {
            exit: exit.code(),
            error: Some(error.into()),
            text: String::new(),
            json: serde_json::Value::Null,
        }
    }
}

/// Parses one request line as the daemon receives it.
pub fn parse_request(line: &[u8]) -> Result<Request, String> {
    serde_json::from_slice(line).map_err(|e| format!("bad control request: {e}"))
}

/// Encodes a response as one line.
pub fn encode_response(r: &Response) -> Vec<u8> {
    let mut out = serde_json::to_vec(r).unwrap_or_else(|e| {
        format!("{{\"exit\":1,\"error\":\"cannot encode the response: {e}\"}}").into_bytes()
    });
    out.push(b'\n');
    out
}

/// Sends `req` to the daemon at `socket` and returns its answer.
pub fn ask(socket: &Path, req: &Request) -> Result<Response, AdminError> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        let exit = match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => Exit::NotFound,
            _ => Exit::Failure,
        };
        AdminError::new(
            exit,
            format!(
                "no raidd daemon answers at {}: {e} (is `raidd serve` running? --control names another socket)",
                socket.display()
            ),
        )
    })?;
    let timeout = Some(Duration::from_secs(30));
    let io = |e: std::io::Error| AdminError::io(format!("control socket {}", socket.display()), &e);
    stream.set_read_timeout(timeout).map_err(io)?;
    stream.set_write_timeout(timeout).map_err(io)?;
    let mut line = serde_json::to_vec(req)
        .map_err(|e| AdminError::failure(format!("cannot encode the request: {e}")))?;
    line.push(b'\n');
    stream.write_all(&line).map_err(io)?;
    let mut reply = Vec::new();
    BufReader::new(stream)
        .read_until(b'\n', &mut reply)
        .map_err(io)?;
    serde_json::from_slice(&reply).map_err(|e| {
        AdminError::failure(format!(
            "the daemon at {} sent an answer raidd cannot read: {e}",
            socket.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_garbage_is_refused() {
        for r in [
            Request::Status,
            Request::Detail {
                array: "vol".into(),
            },
            Request::Fail {
                array: "vol".into(),
                member: "/d/1.img".into(),
            },
            Request::Add {
                array: "vol".into(),
                member: "/d/9.img".into(),
                journal: false,
            },
            Request::Add {
                array: "vol".into(),
                member: "/d/j.img".into(),
                journal: true,
            },
            Request::Check {
                array: "vol".into(),
            },
            Request::SpareAdd {
                member: "/s.img".into(),
                group: Some("g".into()),
            },
            Request::SpareRemove {
                member: "/s.img".into(),
            },
            Request::VolumeList {
                array: "vol".into(),
            },
            Request::VolumeCreate {
                array: "vol".into(),
                name: "data".into(),
                size: 1 << 30,
            },
            Request::VolumeResize {
                array: "vol".into(),
                name: "data".into(),
                size: 2 << 30,
                shrink: true,
            },
            Request::VolumeDelete {
                array: "vol".into(),
                name: "data".into(),
            },
        ] {
            let line = serde_json::to_vec(&r).expect("encode");
            assert_eq!(parse_request(&line).expect("parse"), r);
        }
        assert_eq!(
            parse_request(br#"{"command":"status"}"#).expect("status"),
            Request::Status
        );
        for bad in [
            &b""[..],
            b"{}",
            b"{\"command\":\"reboot\"}",
            b"\xff\xfe",
            b"[1,2]",
        ] {
            assert!(parse_request(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn responses_are_one_line() {
        let r = Response::ok("a\nb\n".into(), serde_json::json!({"x": 1}));
        let line = encode_response(&r);
        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
        let back: Response = serde_json::from_slice(&line).expect("decode");
        assert_eq!(back.text, "a\nb\n");
        let e = Response::err(Exit::NotFound, "no array named x");
        let back: Response = serde_json::from_slice(&encode_response(&e)).expect("decode");
        assert_eq!(
            (back.exit, back.error.as_deref()),
            (3, Some("no array named x"))
        );
    }
}
