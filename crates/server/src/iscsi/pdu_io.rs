//! Reading and writing PDUs on a connection: a header, its data segment with padding and
//! digests, and why a connection ends.

use raidd_iscsi::pdu::{self, Bhs, Digests, Request, BHS_LEN};

use crate::link::{Input, Link};
use crate::watch::Wait;

/// A received PDU: its header, parsed request and data segment (padding and digests
/// checked and dropped).
pub struct Pdu {
    pub bhs: Bhs,
    pub request: Request,
    pub data: Vec<u8>,
}

/// Why a connection ends.
#[derive(Debug)]
pub enum End {
    Io(std::io::Error),
    /// The initiator broke the protocol in a way that ends the connection.
    Protocol(String),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Io(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                write!(f, "closed by the initiator")
            }
            End::Io(e) => write!(f, "{e}"),
            End::Protocol(s) => write!(f, "protocol error: {s}"),
        }
    }
}

impl From<std::io::Error> for End {
    fn from(e: std::io::Error) -> End {
        End::Io(e)
    }
}

/// Reads a header and what follows it up to the data segment; checks the header digest.
/// Until the header's first byte arrives the reader waits for `before`.
pub async fn read_header(
    link: &Link,
    input: &mut Input,
    digests: Digests,
    before: Wait,
) -> Result<(Bhs, Request, pdu::Framing), End> {
    let bhs = Bhs(input.header::<BHS_LEN>(link, before).await?);
    let framing = bhs.framing(digests);
    let tail = input.exact(link, framing.header_tail()).await?;
    let (ahs, hd) = tail.split_at(framing.ahs);
    if framing.header_digest {
        let got: [u8; 4] = hd.try_into().unwrap_or_default();
        if !raidd_iscsi::digest::matches(&[&bhs.0, ahs], got) {
            // Lengths in a header that fails its digest cannot be trusted: at error
            // recovery level 0 the connection ends.
            return Err(End::Protocol("header digest mismatch".into()));
        }
    }
    let request = Request::parse(&bhs, ahs).map_err(|e| End::Protocol(e.to_string()))?;
    Ok((bhs, request, framing))
}

/// Reads padding and the data digest after `data`; false when the digest does not match.
pub async fn read_data_tail(
    link: &Link,
    input: &mut Input,
    framing: &pdu::Framing,
    data: &[u8],
) -> Result<bool, End> {
    let n = framing.pad() + if framing.data_digest { 4 } else { 0 };
    if n == 0 {
        return Ok(true);
    }
    let tail = input.exact(link, n).await?;
    let (pad, dd) = tail.split_at(framing.pad());
    if framing.data_digest {
        let got: [u8; 4] = dd.try_into().unwrap_or_default();
        return Ok(raidd_iscsi::digest::matches(&[data, pad], got));
    }
    Ok(true)
}

/// A whole PDU whose data segment is at most `max_data` bytes. A data digest mismatch is
/// reported as `Ok(None)` after the PDU has been consumed.
pub async fn read_pdu(
    link: &Link,
    input: &mut Input,
    digests: Digests,
    max_data: usize,
) -> Result<Option<Pdu>, End> {
    let (bhs, request, framing) = read_header(link, input, digests, Wait::Nothing).await?;
    if framing.data > max_data {
        return Err(End::Protocol(format!(
            "data segment of {} bytes, more than the {max_data} allowed",
            framing.data
        )));
    }
    let data = input.exact(link, framing.data).await?;
    if !read_data_tail(link, input, &framing, &data).await? {
        return Ok(None);
    }
    Ok(Some(Pdu { bhs, request, data }))
}

/// Wire bytes for a target PDU: header (+ digest), data, padding (+ digest).
pub fn encode(header: [u8; BHS_LEN], data: &[u8], digests: Digests) -> Vec<u8> {
    let f = pdu::frame(&header, data, digests);
    [f.head(), data, f.tail()].concat()
}
