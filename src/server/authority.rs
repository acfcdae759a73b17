//! A gRPC connection's `:authority` made acceptable to h2. perf_analyzer's gRPC client sends
//! `-u host:port/` as the HTTP/2 authority `host:port/`; h2 resets every such stream as
//! malformed (and will not relax that: hyperium/h2#525), while Triton serves it.
//!
//! [`AuthorityRepair`] sits on a connection's read side. It decodes the first header block:
//! when its authority is well formed, the connection's bytes pass untouched from then on. When
//! the authority carries a path, it is cut at its '/' and every header block of that connection
//! is decoded and encoded again, since the HPACK state the server sees is then this filter's.

use bytes::{BufMut, BytesMut};
use fluke_hpack::{Decoder, Encoder};

/// `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`, which a client sends before its first frame.
const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The frame size every HTTP/2 peer accepts (SETTINGS_MAX_FRAME_SIZE's initial value).
const MAX_FRAME_LEN: usize = 16_384;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Before the first header block is complete.
    Inspect,
    /// The authority needed repair: every header block is encoded again.
    Rewrite,
    /// Bytes go through untouched.
    Pass,
}

/// A header block being gathered from a HEADERS frame and its CONTINUATIONs.
struct Block {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
    /// The frames as they came, passed on when nothing needs repair.
    raw: BytesMut,
}

pub struct AuthorityRepair {
    mode: Mode,
    preface_left: usize,
    /// Bytes read that do not yet make a whole frame.
    pending: BytesMut,
    /// Bytes ready for the server.
    out: BytesMut,
    block: Option<Block>,
    decoder: Decoder<'static>,
    encoder: Encoder<'static>,
}

impl Default for AuthorityRepair {
    fn default() -> Self {
        AuthorityRepair {
            mode: Mode::Inspect,
            preface_left: PREFACE_LEN,
            pending: BytesMut::new(),
            out: BytesMut::new(),
            block: None,
            decoder: Decoder::new(),
            encoder: Encoder::new(),
        }
    }
}

impl AuthorityRepair {
    /// The client's HTTP/2 connection preface has not fully arrived yet.
    pub fn awaiting_preface(&self) -> bool {
        self.preface_left > 0
    }

    /// Nothing more to change on this connection: once [`Self::out`] is drained, read directly.
    pub fn passing(&self) -> bool {
        self.mode == Mode::Pass
    }

    /// The bytes ready for the server.
    pub fn out(&mut self) -> &mut BytesMut {
        &mut self.out
    }

    /// Takes bytes read from the client.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.mode == Mode::Pass {
            self.out.extend_from_slice(bytes);
            return;
        }
        self.pending.extend_from_slice(bytes);
        if self.preface_left > 0 {
            let n = self.preface_left.min(self.pending.len());
            self.out.extend_from_slice(&self.pending.split_to(n));
            self.preface_left -= n;
        }
        while self.mode != Mode::Pass && self.preface_left == 0 && self.pending.len() >= FRAME_HEADER_LEN {
            let p = &self.pending;
            let len = u32::from_be_bytes([0, p[0], p[1], p[2]]) as usize;
            if self.pending.len() < FRAME_HEADER_LEN + len {
                break;
            }
            let frame = self.pending.split_to(FRAME_HEADER_LEN + len);
            self.frame(frame);
        }
        if self.mode == Mode::Pass {
            let rest = self.pending.split();
            self.out.extend_from_slice(&rest);
        }
    }

    /// The client closed its side: whatever is held goes on as it came.
    pub fn finish(&mut self) {
        if let Some(block) = self.block.take() {
            self.out.extend_from_slice(&block.raw);
        }
        let rest = self.pending.split();
        self.out.extend_from_slice(&rest);
        self.mode = Mode::Pass;
    }

    fn frame(&mut self, frame: BytesMut) {
        let (kind, flags) = (frame[3], frame[4]);
        let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        match kind {
            HEADERS if self.block.is_none() => {
                let Some((priority, fragment)) = headers_payload(flags, &frame[FRAME_HEADER_LEN..]) else {
                    // Malformed: h2 answers it as it would have.
                    return self.give_up(frame);
                };
                self.block = Some(Block {
                    stream,
                    end_stream: flags & END_STREAM != 0,
                    priority,
                    fragment: fragment.to_vec(),
                    raw: frame.clone(),
                });
            }
            CONTINUATION if self.block.as_ref().is_some_and(|b| b.stream == stream) => {
                let block = self.block.as_mut().expect("checked above");
                block.fragment.extend_from_slice(&frame[FRAME_HEADER_LEN..]);
                block.raw.extend_from_slice(&frame);
            }
            HEADERS | CONTINUATION => return self.give_up(frame),
            _ => {
                self.out.extend_from_slice(&frame);
                return;
            }
        }
        if flags & END_HEADERS != 0 {
            let block = self.block.take().expect("a block is open");
            self.block_done(block);
        }
    }

    /// Passes everything on as it came; used when the bytes are not what a well-behaved client
    /// sends, so h2 sees them and answers.
    fn give_up(&mut self, frame: BytesMut) {
        if let Some(block) = self.block.take() {
            self.out.extend_from_slice(&block.raw);
        }
        self.out.extend_from_slice(&frame);
        self.mode = Mode::Pass;
    }

    fn block_done(&mut self, block: Block) {
        let Ok(mut headers) = self.decoder.decode(&block.fragment) else {
            return self.give_up(block.raw);
        };
        let mut repaired = false;
        for (name, value) in headers.iter_mut() {
            if name.as_slice() == b":authority" {
                if let Some(slash) = value.iter().position(|&b| b == b'/') {
                    value.truncate(slash);
                    repaired = true;
                }
            }
        }
        if self.mode == Mode::Inspect && !repaired {
            self.out.extend_from_slice(&block.raw);
            self.mode = Mode::Pass;
            return;
        }
        if repaired && self.mode == Mode::Inspect {
            tracing::debug!("gRPC client sent an authority with a path; cut at its '/'");
        }
        self.mode = Mode::Rewrite;
        let encoded = self.encoder.encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        self.write_block(&block, &encoded);
    }

    /// One HEADERS frame, then CONTINUATIONs when the block does not fit a frame.
    fn write_block(&mut self, block: &Block, encoded: &[u8]) {
        let priority_len = if block.priority.is_some() { 5 } else { 0 };
        let first_len = encoded.len().min(MAX_FRAME_LEN - priority_len);
        let (first, mut rest) = encoded.split_at(first_len);
        let mut flags = if block.end_stream { END_STREAM } else { 0 };
        if block.priority.is_some() {
            flags |= PRIORITY;
        }
        if rest.is_empty() {
            flags |= END_HEADERS;
        }
        self.frame_header(priority_len + first.len(), HEADERS, flags, block.stream);
        if let Some(priority) = block.priority {
            self.out.extend_from_slice(&priority);
        }
        self.out.extend_from_slice(first);
        while !rest.is_empty() {
            let (chunk, after) = rest.split_at(rest.len().min(MAX_FRAME_LEN));
            rest = after;
            let flags = if rest.is_empty() { END_HEADERS } else { 0 };
            self.frame_header(chunk.len(), CONTINUATION, flags, block.stream);
            self.out.extend_from_slice(chunk);
        }
    }

    fn frame_header(&mut self, len: usize, kind: u8, flags: u8, stream: u32) {
        self.out.put_slice(&(len as u32).to_be_bytes()[1..]);
        self.out.put_u8(kind);
        self.out.put_u8(flags);
        self.out.put_u32(stream);
    }
}

/// A HEADERS frame's priority fields and header block fragment, without its padding; `None`
/// when the lengths do not add up.
fn headers_payload(flags: u8, payload: &[u8]) -> Option<(Option<[u8; 5]>, &[u8])> {
    let mut body = payload;
    if flags & PADDED != 0 {
        let (&pad, after) = body.split_first()?;
        body = after.get(..after.len().checked_sub(pad as usize)?)?;
    }
    let priority = if flags & PRIORITY != 0 {
        let (fields, after) = body.split_at_checked(5)?;
        body = after;
        Some(fields.try_into().ok()?)
    } else {
        None
    };
    Some((priority, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    type Headers = Vec<(Vec<u8>, Vec<u8>)>;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        f.extend([kind, flags]);
        f.extend(stream.to_be_bytes());
        f.extend(payload);
        f
    }

    fn request(authority: &[u8]) -> Headers {
        [
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"http"),
            (b":path", b"/inference.GRPCInferenceService/ModelInfer"),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
        .iter()
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect()
    }

    fn encode(encoder: &mut Encoder<'static>, headers: &Headers) -> Vec<u8> {
        encoder.encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())))
    }

    /// The header blocks of `bytes` (after the preface), decoded as the server would, with
    /// the other frames' kinds in order.
    fn server_view(bytes: &[u8]) -> (Vec<Headers>, Vec<u8>) {
        assert_eq!(&bytes[..PREFACE_LEN], PREFACE);
        let mut rest = &bytes[PREFACE_LEN..];
        let mut decoder = Decoder::new();
        let (mut blocks, mut kinds, mut fragment) = (Vec::new(), Vec::new(), Vec::new());
        while !rest.is_empty() {
            let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
            let (kind, flags) = (rest[3], rest[4]);
            let payload = &rest[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len];
            kinds.push(kind);
            match kind {
                HEADERS => fragment = headers_payload(flags, payload).unwrap().1.to_vec(),
                CONTINUATION => fragment.extend_from_slice(payload),
                _ => {}
            }
            if matches!(kind, HEADERS | CONTINUATION) && flags & END_HEADERS != 0 {
                blocks.push(decoder.decode(&fragment).unwrap());
            }
            rest = &rest[FRAME_HEADER_LEN + len..];
        }
        (blocks, kinds)
    }

    /// A client's connection: preface, SETTINGS, then `n` requests of `authority`, each a
    /// header block (HEADERS padded on the first, a CONTINUATION on the second) and a DATA frame.
    fn client_bytes(authority: &[u8], n: u32) -> Vec<u8> {
        let mut encoder = Encoder::new();
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]));
        for i in 0..n {
            let stream = 1 + 2 * i;
            let block = encode(&mut encoder, &request(authority));
            match i {
                0 => {
                    let mut payload = vec![3];
                    payload.extend(&block);
                    payload.extend([0, 0, 0]);
                    bytes.extend(frame(HEADERS, END_HEADERS | PADDED, stream, &payload));
                }
                1 => {
                    let (a, b) = block.split_at(block.len() / 2);
                    bytes.extend(frame(HEADERS, 0, stream, a));
                    bytes.extend(frame(CONTINUATION, END_HEADERS, stream, b));
                }
                _ => bytes.extend(frame(HEADERS, END_HEADERS, stream, &block)),
            }
            bytes.extend(frame(0x0, END_STREAM, stream, &[0, 0, 0, 0, 1, 42]));
        }
        bytes
    }

    /// Feeds `bytes` in pieces of `step`, as reads would bring them.
    fn through(bytes: &[u8], step: usize) -> (Vec<u8>, bool) {
        let mut repair = AuthorityRepair::default();
        for chunk in bytes.chunks(step) {
            repair.feed(chunk);
        }
        repair.finish();
        (repair.out().split().to_vec(), repair.passing())
    }

    #[test]
    fn a_well_formed_authority_passes_byte_for_byte() {
        let bytes = client_bytes(b"localhost:8001", 3);
        for step in [1, 7, 4096] {
            assert_eq!(through(&bytes, step).0, bytes, "step {step}");
        }
    }

    #[test]
    fn an_authority_with_a_path_is_cut_in_every_block_of_the_connection() {
        let bytes = client_bytes(b"localhost:8001/", 3);
        for step in [1, 5, 4096] {
            let (out, _) = through(&bytes, step);
            let (blocks, kinds) = server_view(&out);
            assert_eq!(blocks.len(), 3, "step {step}");
            for block in &blocks {
                assert_eq!(block, &request(b"localhost:8001"), "step {step}");
            }
            // SETTINGS, then a header block and its DATA per request; padding and
            // CONTINUATION are folded into one HEADERS frame.
            assert_eq!(kinds, [0x4, HEADERS, 0x0, HEADERS, 0x0, HEADERS, 0x0], "step {step}");
        }
    }

    #[test]
    fn a_large_block_is_split_into_continuations() {
        let mut headers = request(b"h:1/x");
        headers.push((b"x-big".to_vec(), vec![b'a'; 40_000]));
        let mut bytes = PREFACE.to_vec();
        let block = encode(&mut Encoder::new(), &headers);
        for (i, chunk) in block.chunks(MAX_FRAME_LEN).enumerate() {
            let kind = if i == 0 { HEADERS } else { CONTINUATION };
            let last = (i + 1) * MAX_FRAME_LEN >= block.len();
            bytes.extend(frame(kind, if last { END_HEADERS } else { 0 }, 1, chunk));
        }
        let (out, _) = through(&bytes, 1000);
        let (blocks, kinds) = server_view(&out);
        headers[3].1 = b"h:1".to_vec();
        assert_eq!(blocks, [headers]);
        assert_eq!(kinds, [HEADERS, CONTINUATION, CONTINUATION]);
    }

    #[test]
    fn bytes_that_are_not_http2_pass_untouched() {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(HEADERS, END_HEADERS | PADDED, 1, &[200, 1, 2]));
        bytes.extend(b"anything after");
        let (out, passing) = through(&bytes, 3);
        assert_eq!(out, bytes);
        assert!(passing);
    }
}
