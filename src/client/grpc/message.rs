//! gRPC's length-prefixed messages: a request as the connection writes it, and a unary
//! answer's message read back from its prefix.

use bytes::{Buf, Bytes};

use crate::client::tls::GrpcCompression;
use crate::client::{ClientError, ClientResult};

/// gRPC's message prefix: a compression flag byte and a 4-byte big-endian length.
pub const PREFIX_BYTES: usize = 5;

/// A request message on the wire: its gRPC prefix and parts, written as they are (a large
/// tensor goes to the socket from its own bytes: the connection's writes are vectored).
#[derive(Clone, Default)]
pub struct Message {
    parts: [Bytes; 3],
}

impl Message {
    pub fn new(prefix: Bytes, body: Bytes, tail: Bytes) -> Message {
        Message { parts: [prefix, body, tail] }
    }

    /// Up to `most` of the next bytes, as they are (no copy).
    pub fn split_chunk(&mut self, most: usize) -> Bytes {
        match self.parts.iter_mut().find(|p| !p.is_empty()) {
            Some(part) => part.split_to(most.min(part.len())),
            None => Bytes::new(),
        }
    }
}

impl Buf for Message {
    fn remaining(&self) -> usize {
        self.parts.iter().map(Bytes::len).sum()
    }

    fn chunk(&self) -> &[u8] {
        self.parts.iter().find(|p| !p.is_empty()).map_or(&[], |p| p)
    }

    fn advance(&mut self, mut n: usize) {
        for part in &mut self.parts {
            let step = n.min(part.len());
            part.advance(step);
            n -= step;
        }
        assert_eq!(n, 0, "advanced past the end of a message");
    }
}

/// The prefix of an uncompressed (`0`) or compressed (`1`) message of `length` bytes.
pub fn prefix(compressed: bool, length: usize) -> ClientResult<Bytes> {
    let length = u32::try_from(length)
        .ok()
        .filter(|&n| n <= i32::MAX as u32)
        .ok_or_else(|| ClientError::Invalid(format!("a request of {length} bytes is over gRPC's 2 GiB limit")))?;
    let mut bytes = [0u8; PREFIX_BYTES];
    bytes[0] = compressed as u8;
    bytes[1..].copy_from_slice(&length.to_be_bytes());
    Ok(Bytes::copy_from_slice(&bytes))
}

/// `body` and `tail` as one request message, compressed as `compression` says.
pub fn message(body: &Bytes, tail: Bytes, compression: GrpcCompression) -> ClientResult<Message> {
    use std::io::Read;
    let level = flate2::Compression::default();
    let mut compressed = Vec::new();
    let read = match compression {
        GrpcCompression::None => return Ok(Message::new(prefix(false, body.len() + tail.len())?, body.clone(), tail)),
        GrpcCompression::Gzip => {
            flate2::read::GzEncoder::new(body.clone().chain(tail).reader(), level).read_to_end(&mut compressed)
        }
        // zlib's format, as gRPC (and tonic) mean by deflate.
        GrpcCompression::Deflate => {
            flate2::read::ZlibEncoder::new(body.clone().chain(tail).reader(), level).read_to_end(&mut compressed)
        }
    };
    read.expect("compressing from memory to memory");
    Ok(Message::new(prefix(true, compressed.len())?, compressed.into(), Bytes::new()))
}

/// The message of a unary answer: one uncompressed message, as long as its prefix says.
pub fn unprefixed(data: Bytes) -> ClientResult<Bytes> {
    if data.len() < PREFIX_BYTES {
        return Err(ClientError::Protocol(format!("an answer of {} bytes has no gRPC message", data.len())));
    }
    if data[0] != 0 {
        return Err(ClientError::Protocol("the answer is compressed, and no compression was offered".into()));
    }
    let length = u32::from_be_bytes(data[1..PREFIX_BYTES].try_into().expect("four bytes")) as usize;
    if data.len() - PREFIX_BYTES != length {
        return Err(ClientError::Protocol(format!(
            "the answer's message is {} bytes, its prefix says {length}",
            data.len() - PREFIX_BYTES
        )));
    }
    Ok(data.slice(PREFIX_BYTES..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_its_parts_in_order() {
        let mut m = Message::new(prefix(false, 6).unwrap(), Bytes::from_static(b"abcd"), Bytes::from_static(b"ef"));
        assert_eq!(m.remaining(), 11);
        assert_eq!(m.split_chunk(2), prefix(false, 6).unwrap().slice(..2));
        m.advance(5); // the prefix's last 3 bytes and "ab"
        assert_eq!(m.chunk(), b"cd");
        assert_eq!(m.copy_to_bytes(m.remaining()), Bytes::from_static(b"cdef"));
    }

    #[test]
    fn an_answer_is_one_message_as_long_as_its_prefix() {
        let framed = |flag: u8, len: u32, body: &[u8]| {
            let mut b = vec![flag];
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(body);
            Bytes::from(b)
        };
        assert_eq!(unprefixed(framed(0, 3, b"abc")).unwrap(), Bytes::from_static(b"abc"));
        assert!(unprefixed(framed(0, 4, b"abc")).unwrap_err().to_string().contains("prefix says 4"));
        assert!(unprefixed(framed(1, 3, b"abc")).unwrap_err().to_string().contains("compressed"));
        assert!(unprefixed(Bytes::from_static(b"\0\0")).is_err());
    }
}
