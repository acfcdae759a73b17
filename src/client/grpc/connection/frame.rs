//! HTTP/2's wire vocabulary as this connection uses it: frame kinds and flags, error codes,
//! the limits we announce, and padding.

use bytes::{Buf, Bytes};

/// The largest frame we accept (HTTP/2's default; we do not raise it).
pub const MAX_FRAME: usize = 16_384;
/// HTTP/2's defaults until the server's SETTINGS say otherwise.
pub const DEFAULT_WINDOW: i64 = 65_535;
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame kinds.
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
/// Flags.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY: u8 = 0x20;

/// RST_STREAM and GOAWAY codes we send or read.
pub const NO_ERROR: u32 = 0x0;
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;

/// A DATA or HEADERS payload without its padding.
pub fn unpadded(flags: u8, mut payload: Bytes) -> Result<Bytes, String> {
    if flags & PADDED == 0 {
        return Ok(payload);
    }
    let pad = *payload.first().ok_or("a padded frame with no pad length")? as usize;
    if pad + 1 > payload.len() {
        return Err("a frame's padding is longer than the frame".into());
    }
    payload.advance(1);
    payload.truncate(payload.len() - pad);
    Ok(payload)
}

/// An HTTP/2 error code's name.
pub fn reason(code: u32) -> &'static str {
    match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => "unknown error code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_is_cut_and_bad_padding_refused() {
        let padded = Bytes::from_static(&[2, b'a', b'b', 0, 0]);
        assert_eq!(unpadded(PADDED, padded).unwrap(), Bytes::from_static(b"ab"));
        assert!(unpadded(PADDED, Bytes::from_static(&[9, b'a'])).is_err());
        assert_eq!(unpadded(0, Bytes::from_static(b"x")).unwrap(), Bytes::from_static(b"x"));
    }
}
