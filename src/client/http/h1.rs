//! One inference exchange on a keep-alive HTTP/1.1 connection, without a general HTTP stack
//! between the load and the socket: the request's head and body go out as prepared (one
//! vectored write), the answer's head is parsed with `httparse` (hyper's own parser) and its
//! body framed by `Content-Length` or chunked encoding. hyper's client costs a dispatch channel,
//! header maps and body channels per request, more than the exchange itself (the profile of
//! issue 33); the control calls keep reqwest.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

use crate::client::connect::Io;

/// Headers an answer may carry; more is a protocol error.
const MAX_HEADERS: usize = 64;
/// An answer's head larger than this is refused.
const MAX_HEAD: usize = 64 * 1024;
/// What one read asks the socket for, at least.
const READ_CHUNK: usize = 16 * 1024;

/// A keep-alive HTTP/1.1 connection for inference requests.
pub(crate) struct Connection {
    io: Box<dyn Io>,
    /// Bytes read past the last answer (none from a well-behaved server).
    buf: BytesMut,
}

/// An answer: status, the `Inference-Header-Content-Length` header, the body, and when the
/// request was written and the answer's head parsed.
pub(crate) struct Answer {
    pub status: u16,
    /// `None`: no such header; `Some(None)`: not a number.
    pub header_length: Option<Option<usize>>,
    pub body: Bytes,
    pub sent_at: Instant,
    pub head_at: Instant,
    /// The server keeps the connection open for another request.
    pub keep_alive: bool,
}

/// Why an exchange failed, and whether the request may be sent again on a new connection: not
/// one byte of it was written (a pooled connection the server had closed). A request written
/// and then reset is a failed request, as perf_analyzer counts it, never sent twice.
#[derive(Debug)]
pub(crate) struct Failed {
    pub error: io::Error,
    pub unsent: bool,
}

impl Connection {
    pub fn new(io: Box<dyn Io>) -> Connection {
        Connection { io, buf: BytesMut::with_capacity(READ_CHUNK) }
    }

    /// Whether an idle connection can take a request: a close by the server while it sat idle
    /// shows as an end of stream that is ready to read (and an answer nobody asked for as data).
    pub fn usable(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut probe = [0u8; 1];
        let mut read = ReadBuf::new(&mut probe);
        let mut cx = Context::from_waker(Waker::noop());
        matches!(Pin::new(&mut self.io).poll_read(&mut cx, &mut read), Poll::Pending)
    }

    /// Writes `parts` (head, body) and reads the whole answer.
    pub async fn exchange(&mut self, parts: &mut impl Buf) -> Result<Answer, Failed> {
        let whole = parts.remaining();
        let written = self.io.write_all_buf(parts).await;
        let unsent = parts.remaining() == whole;
        written.and(self.io.flush().await).map_err(|error| Failed { error, unsent })?;
        let sent_at = Instant::now();
        self.read_answer(sent_at).await.map_err(|error| Failed { error, unsent: false })
    }

    /// Reads more bytes into the buffer; an end of stream is an error.
    async fn fill(&mut self) -> io::Result<()> {
        self.buf.reserve(READ_CHUNK);
        match self.io.read_buf(&mut self.buf).await? {
            0 => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection")),
            _ => Ok(()),
        }
    }

    async fn read_answer(&mut self, sent_at: Instant) -> io::Result<Answer> {
        loop {
            let head = match parse_head(&self.buf)? {
                Some(head) => head,
                None if self.buf.len() > MAX_HEAD => return Err(invalid("an answer head over 64 KiB")),
                None => {
                    self.fill().await?;
                    continue;
                }
            };
            let head_at = Instant::now();
            self.buf.advance(head.len);
            // 1xx answers (100 Continue) come before the real one.
            if (100..200).contains(&head.status) {
                continue;
            }
            let body = match head.framing {
                Framing::Length(n) => {
                    while self.buf.len() < n {
                        self.fill().await?;
                    }
                    self.buf.split_to(n).freeze()
                }
                Framing::Chunked => self.read_chunked().await?,
                Framing::ToEnd => {
                    while self.fill().await.is_ok() {}
                    self.buf.split().freeze()
                }
            };
            let keep_alive = head.keep_alive && head.framing != Framing::ToEnd;
            return Ok(Answer {
                status: head.status,
                header_length: head.header_length,
                body,
                sent_at,
                head_at,
                keep_alive,
            });
        }
    }

    /// A chunked body, its chunks joined (trailers read and dropped).
    async fn read_chunked(&mut self) -> io::Result<Bytes> {
        let mut body = BytesMut::new();
        loop {
            let line = self.line().await?;
            let size = std::str::from_utf8(&line)
                .ok()
                .and_then(|l| usize::from_str_radix(l.split(';').next().unwrap_or("").trim(), 16).ok())
                .ok_or_else(|| invalid("a bad chunk size line"))?;
            if size == 0 {
                // Trailers, up to the empty line.
                while !self.line().await?.is_empty() {}
                return Ok(body.freeze());
            }
            while self.buf.len() < size + 2 {
                self.fill().await?;
            }
            body.extend_from_slice(&self.buf[..size]);
            if &self.buf[size..size + 2] != b"\r\n" {
                return Err(invalid("a chunk not ended by CRLF"));
            }
            self.buf.advance(size + 2);
        }
    }

    /// One CRLF-ended line, without its CRLF.
    async fn line(&mut self) -> io::Result<Bytes> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.buf.split_to(at).freeze();
                self.buf.advance(2);
                return Ok(line);
            }
            if self.buf.len() > MAX_HEAD {
                return Err(invalid("a chunk line over 64 KiB"));
            }
            self.fill().await?;
        }
    }
}

/// How an answer's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    /// Neither: the body runs to the end of the connection.
    ToEnd,
}

struct Head {
    len: usize,
    status: u16,
    header_length: Option<Option<usize>>,
    framing: Framing,
    keep_alive: bool,
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// The answer's head at the start of `buf`, or `None` while it is incomplete.
fn parse_head(buf: &[u8]) -> io::Result<Option<Head>> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let len = match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(invalid(&format!("a bad answer head: {e}"))),
    };
    let status = response.code.unwrap_or(0);
    let number = |v: &[u8]| std::str::from_utf8(v).ok().and_then(|s| s.trim().parse::<usize>().ok());
    let mut head = Head {
        len,
        status,
        header_length: None,
        framing: Framing::ToEnd,
        // HTTP/1.1 keeps the connection unless told otherwise; 1.0 closes it unless told.
        keep_alive: response.version == Some(1),
    };
    let mut length = None;
    for h in response.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            length = Some(number(h.value).ok_or_else(|| invalid("a bad Content-Length"))?);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if h.value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                head.framing = Framing::Chunked;
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            let value = h.value.trim_ascii();
            if value.eq_ignore_ascii_case(b"close") {
                head.keep_alive = false;
            } else if value.eq_ignore_ascii_case(b"keep-alive") {
                head.keep_alive = true;
            }
        } else if h.name.eq_ignore_ascii_case("inference-header-content-length") {
            head.header_length = Some(number(h.value));
        }
    }
    if head.framing != Framing::Chunked {
        // No body at all for 204 and 304 (and 1xx, skipped by the caller).
        head.framing = match (length, status) {
            (_, 204 | 304) | (_, 100..=199) => Framing::Length(0),
            (Some(n), _) => Framing::Length(n),
            (None, _) => Framing::ToEnd,
        };
    }
    Ok(Some(head))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection to a scripted peer: what it writes back, in pieces.
    async fn exchange_with(answer: &[&[u8]]) -> (Result<Answer, Failed>, Vec<u8>) {
        let (client, mut server) = tokio::io::duplex(1 << 20);
        let mut connection = Connection::new(Box::new(client));
        let pieces: Vec<Vec<u8>> = answer.iter().map(|p| p.to_vec()).collect();
        let peer = tokio::spawn(async move {
            let mut request = vec![0u8; 4096];
            let n = server.read(&mut request).await.unwrap();
            request.truncate(n);
            for piece in pieces {
                server.write_all(&piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            request
        });
        let mut parts =
            Bytes::from_static(b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\n").chain(Bytes::from_static(b"abc"));
        let answer = connection.exchange(&mut parts).await;
        (answer, peer.await.unwrap())
    }

    #[tokio::test]
    async fn answers_are_framed_by_length_or_chunks_in_any_pieces() {
        let (answer, request) = exchange_with(&[
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nInference-Header-Content-Length: 2\r\nCon",
            b"tent-Length: 5\r\n\r\nhe",
            b"llo",
        ])
        .await;
        assert_eq!(request, b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
        let answer = answer.unwrap();
        assert_eq!((answer.status, answer.header_length, &answer.body[..]), (200, Some(Some(2)), &b"hello"[..]));
        assert!(answer.keep_alive && answer.head_at >= answer.sent_at);

        let (answer, _) = exchange_with(&[
            b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nab",
            b"c\r\n2;x=y\r\nde\r\n0\r\nTrailer: 1\r\n\r\n",
        ])
        .await;
        let answer = answer.unwrap();
        assert_eq!((answer.status, &answer.body[..], answer.keep_alive), (400, &b"abcde"[..], false));
        assert_eq!(answer.header_length, None);

        let (answer, _) = exchange_with(&[b"HTTP/1.0 200 OK\r\n\r\nto the end"]).await;
        let answer = answer.unwrap();
        assert_eq!((&answer.body[..], answer.keep_alive), (&b"to the end"[..], false));
    }

    #[tokio::test]
    async fn a_request_written_is_never_sent_again_and_one_never_written_may_be() {
        let (answer, _) = exchange_with(&[]).await;
        let failed = answer.err().expect("no answer");
        assert!(!failed.unsent && failed.error.kind() == io::ErrorKind::UnexpectedEof, "{failed:?}");
        let (answer, _) = exchange_with(&[b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort"]).await;
        assert!(!answer.err().expect("cut short").unsent);
        let (answer, _) = exchange_with(&[b"NOT HTTP AT ALL\r\n\r\n"]).await;
        let failed = answer.err().expect("garbage");
        assert!(!failed.unsent && failed.error.to_string().contains("bad answer head"), "{failed:?}");
        // The peer is gone before the request is written: nothing of it left.
        let (client, server) = tokio::io::duplex(64);
        drop(server);
        let mut connection = Connection::new(Box::new(client));
        let failed = connection.exchange(&mut Bytes::from_static(b"POST / HTTP/1.1\r\n\r\n")).await.err().unwrap();
        assert!(failed.unsent, "{failed:?}");
    }

    #[tokio::test]
    async fn an_idle_connection_closed_by_its_peer_is_not_usable() {
        let (client, server) = tokio::io::duplex(64);
        let mut connection = Connection::new(Box::new(client));
        assert!(connection.usable());
        drop(server);
        assert!(!connection.usable());
    }
}
