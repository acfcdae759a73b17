//! One HTTP/2 connection carrying unary gRPC calls, framed here rather than by `h2`: a call is
//! one HEADERS frame whose header block is encoded once per client, its message in DATA frames,
//! and an answer of headers, DATA and trailers. The connection's task writes what calls queued
//! and reads what the server sent, handing each stream its frames. Driven through the `h2`
//! crate, its general stream machinery was 22% of the client's CPU samples, 40% of its user time
//! (the profile of issue 33), and a unary call needs little of it.
//!
//! What the connection does: flow control both ways (the windows hyper's client
//! sets: 2 MiB a stream, 5 MiB the connection), SETTINGS and their ACK, PING answers (server
//! keepalive), GOAWAY (streams past its last id fail as never processed, the rest finish),
//! RST_STREAM, CONTINUATION, padding, and HPACK decoding of answers (fluke-hpack). A request's
//! header block uses no HPACK table, so it is the same bytes on every call.

use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::message::Message;
use crate::client::connect::Io;

/// Our receive windows: a stream's and the connection's, as hyper's client sets them.
pub const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
pub const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
/// The largest frame we accept (HTTP/2's default; we do not raise it).
const MAX_FRAME: usize = 16_384;
/// HTTP/2's defaults until the server's SETTINGS say otherwise.
const DEFAULT_WINDOW: i64 = 65_535;
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// DATA payloads shorter than this are copied next to their frame header; longer ones are
/// written from the request's own bytes.
const COPY_BELOW: usize = 1024;
/// At most this many slices per vectored write.
const MAX_SLICES: usize = 64;

mod frame {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// RST_STREAM and GOAWAY codes we send or read.
const NO_ERROR: u32 = 0x0;
const PROTOCOL_ERROR: u32 = 0x1;
const REFUSED_STREAM: u32 = 0x7;
const CANCEL: u32 = 0x8;

/// How a stream ended short of an answer.
#[derive(Debug, Clone)]
pub enum Broken {
    /// The server never processed it (REFUSED_STREAM, or past a GOAWAY's last stream, or the
    /// connection was closed before it opened): it may be sent again.
    Unprocessed(String),
    /// The server reset it with CANCEL.
    Cancelled(String),
    /// The stream or the connection broke.
    Lost(String),
}

/// An answer as HTTP/2 delivered it: what a gRPC client reads of its two header blocks, and
/// its body.
#[derive(Debug, Default)]
pub struct Answer {
    pub status: u16,
    /// `grpc-status` and `grpc-message`, from the trailers or a trailers-only answer.
    pub grpc_status: Option<Bytes>,
    pub grpc_message: Option<Bytes>,
    pub body: Bytes,
    /// When the last DATA frame (or the end of the stream) arrived.
    pub received_at: Option<Instant>,
}

#[derive(Default)]
struct Stream {
    waker: Option<Waker>,
    /// Request bytes that wait for window.
    unsent: Message,
    /// Our send window on this stream.
    window: i64,
    /// Bytes received and not yet given back with a WINDOW_UPDATE.
    unacked: u32,
    headers_seen: bool,
    answer: Answer,
    /// Body chunks after the first.
    more: BytesMut,
    /// `Some` once the stream is over.
    end: Option<Result<(), Broken>>,
}

struct State {
    /// Frames queued and not yet handed to the connection's task.
    out: VecDeque<Bytes>,
    /// Small frames, gathered before they join `out`.
    staging: BytesMut,
    /// The connection's task, when it waits for something to write.
    task: Option<Waker>,
    max_frame: usize,
    initial_window: i64,
    max_streams: usize,
    /// Our connection-level send window.
    send_window: i64,
    /// Bytes received on the connection and not yet given back.
    unacked: u32,
    next_id: u32,
    streams: HashMap<u32, Stream>,
    /// Streams not yet ended: what the server's MAX_CONCURRENT_STREAMS counts.
    live: usize,
    /// Streams whose request waits for window.
    blocked: VecDeque<u32>,
    /// Calls waiting for the server's stream limit.
    waiting: Vec<Waker>,
    /// Why the connection can take no new stream (broken, or the server is going away).
    closed: Option<String>,
    /// No handle is left, or the server is going away: the task ends once the streams have.
    closing: bool,
}

impl State {
    fn queue(&mut self, bytes: Bytes) {
        if !self.staging.is_empty() {
            self.out.push_back(self.staging.split().freeze());
        }
        self.out.push_back(bytes);
    }

    fn frame_head(&mut self, length: usize, kind: u8, flags: u8, id: u32) {
        let head = &mut self.staging;
        head.put_uint(length as u64, 3);
        head.put_u8(kind);
        head.put_u8(flags);
        head.put_u32(id);
    }

    fn window_update(&mut self, id: u32, increment: u32) {
        self.frame_head(4, frame::WINDOW_UPDATE, 0, id);
        self.staging.put_u32(increment);
    }

    fn reset(&mut self, id: u32, code: u32) {
        self.frame_head(4, frame::RST_STREAM, 0, id);
        self.staging.put_u32(code);
    }

    /// Queues as much of stream `id`'s request as the windows allow.
    fn pump(&mut self, id: u32) {
        let Some(stream) = self.streams.get_mut(&id) else { return };
        let mut unsent = std::mem::take(&mut stream.unsent);
        let mut window = stream.window;
        let mut blocked = false;
        while unsent.has_remaining() {
            let length = (unsent.remaining() as i64).min(window).min(self.send_window).min(self.max_frame as i64);
            if length <= 0 {
                blocked = true;
                break;
            }
            let length = length as usize;
            let end = length == unsent.remaining();
            self.frame_head(length, frame::DATA, if end { frame::END_STREAM } else { 0 }, id);
            if length < COPY_BELOW {
                self.staging.put((&mut unsent).take(length));
            } else {
                let mut left = length;
                while left > 0 {
                    let piece = unsent.split_chunk(left);
                    left -= piece.len();
                    self.queue(piece);
                }
            }
            window -= length as i64;
            self.send_window -= length as i64;
        }
        let stream = self.streams.get_mut(&id).expect("looked up above");
        stream.unsent = unsent;
        stream.window = window;
        if blocked && !self.blocked.contains(&id) {
            self.blocked.push_back(id);
        }
    }

    /// Streams that waited for window, given another chance.
    fn pump_blocked(&mut self) {
        for id in std::mem::take(&mut self.blocked) {
            self.pump(id);
        }
    }

    /// Ends stream `id` and wakes its call.
    fn end(&mut self, id: u32, result: Result<(), Broken>) {
        if let Some(stream) = self.streams.get_mut(&id) {
            if stream.end.is_none() {
                if result.is_ok() && stream.answer.received_at.is_none() {
                    stream.answer.received_at = Some(Instant::now());
                }
                let answered_early = result.is_ok() && stream.unsent.has_remaining();
                stream.end = Some(result);
                self.live -= 1;
                stream.unsent = Message::default();
                if let Some(waker) = stream.waker.take() {
                    waker.wake();
                }
                if answered_early {
                    // The server answered before the request was all sent: our half closes too.
                    self.reset(id, NO_ERROR);
                }
                self.blocked.retain(|&b| b != id);
                self.waiting.drain(..).for_each(Waker::wake);
            }
        }
    }

    fn wake_task(&mut self) {
        if let Some(task) = self.task.take() {
            task.wake();
        }
    }
}

/// A handle on one connection; the connection closes once every handle and call is gone.
pub struct Connection {
    shared: Arc<Mutex<State>>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.closing = true;
        state.wake_task();
    }
}

impl Connection {
    /// Starts the HTTP/2 connection on `io` (the preface and our settings go first) and the
    /// task that drives it.
    pub fn start(io: Box<dyn Io>) -> Connection {
        let mut staging = BytesMut::with_capacity(16 * 1024);
        staging.put_slice(PREFACE);
        let mut state = State {
            out: VecDeque::new(),
            staging,
            task: None,
            max_frame: MAX_FRAME,
            initial_window: DEFAULT_WINDOW,
            max_streams: usize::MAX,
            send_window: DEFAULT_WINDOW,
            unacked: 0,
            next_id: 1,
            streams: HashMap::new(),
            live: 0,
            blocked: VecDeque::new(),
            waiting: Vec::new(),
            closed: None,
            closing: false,
        };
        // SETTINGS: ENABLE_PUSH 0, INITIAL_WINDOW_SIZE; then the connection's window.
        state.frame_head(12, frame::SETTINGS, 0, 0);
        state.staging.put_u16(0x2);
        state.staging.put_u32(0);
        state.staging.put_u16(0x4);
        state.staging.put_u32(STREAM_WINDOW);
        state.window_update(0, CONNECTION_WINDOW - DEFAULT_WINDOW as u32);
        let shared = Arc::new(Mutex::new(state));
        let driver = Driver {
            shared: shared.clone(),
            io,
            read: BytesMut::with_capacity(64 * 1024),
            writing: VecDeque::new(),
            decoder: fluke_hpack::Decoder::new(),
            block: None,
        };
        tokio::spawn(driver.run());
        Connection { shared }
    }

    /// Whether a call may still open a stream here.
    pub fn is_open(&self) -> bool {
        self.shared.lock().closed.is_none()
    }

    /// One call: a stream with `header_block` and `message`. Returns the answer and when the
    /// request was queued for the connection.
    pub async fn call(&self, header_block: &Bytes, message: Message) -> (Result<Answer, Broken>, Instant) {
        let mut message = Some(message);
        let opened = poll_fn(|cx| self.open(cx, header_block, &mut message)).await;
        let sent_at = Instant::now();
        let id = match opened {
            Ok(id) => id,
            Err(broken) => return (Err(broken), sent_at),
        };
        let mut call = Call { shared: &self.shared, id, done: false };
        (poll_fn(|cx| call.poll_end(cx)).await, sent_at)
    }

    fn open(
        &self,
        cx: &mut Context<'_>,
        header_block: &Bytes,
        message: &mut Option<Message>,
    ) -> Poll<Result<u32, Broken>> {
        let mut state = self.shared.lock();
        if let Some(closed) = &state.closed {
            // Nothing of this call was sent: it may go on another connection.
            return Poll::Ready(Err(Broken::Unprocessed(closed.clone())));
        }
        if state.live >= state.max_streams {
            state.waiting.push(cx.waker().clone());
            return Poll::Pending;
        }
        let id = state.next_id;
        if id > i32::MAX as u32 {
            let why = "the connection used up its stream ids".to_string();
            state.closed = Some(why.clone());
            state.closing = true;
            return Poll::Ready(Err(Broken::Unprocessed(why)));
        }
        state.next_id += 2;
        // A block longer than a frame goes on in CONTINUATION frames.
        let mut rest = header_block.clone();
        let mut kind = frame::HEADERS;
        loop {
            let piece = rest.split_to(rest.len().min(state.max_frame));
            let flags = if rest.is_empty() { frame::END_HEADERS } else { 0 };
            state.frame_head(piece.len(), kind, flags, id);
            if piece.len() < COPY_BELOW {
                state.staging.put_slice(&piece);
            } else {
                state.queue(piece);
            }
            if rest.is_empty() {
                break;
            }
            kind = frame::CONTINUATION;
        }
        let window = state.initial_window;
        let unsent = message.take().expect("opened once");
        state.streams.insert(id, Stream { unsent, window, ..Default::default() });
        state.live += 1;
        state.pump(id);
        state.wake_task();
        Poll::Ready(Ok(id))
    }
}

/// A call's stream, reset if the call is dropped before its answer.
struct Call<'a> {
    shared: &'a Mutex<State>,
    id: u32,
    done: bool,
}

impl Call<'_> {
    fn poll_end(&mut self, cx: &mut Context<'_>) -> Poll<Result<Answer, Broken>> {
        let mut state = self.shared.lock();
        let stream = state.streams.get_mut(&self.id).expect("a call's stream stays until the call is done");
        match stream.end.take() {
            None => {
                if !stream.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    stream.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            Some(end) => {
                let mut stream = state.streams.remove(&self.id).expect("just seen");
                self.done = true;
                if state.closing && state.streams.is_empty() {
                    state.wake_task();
                }
                Poll::Ready(end.map(|()| {
                    if !stream.more.is_empty() {
                        stream.answer.body = stream.more.freeze();
                    }
                    stream.answer
                }))
            }
        }
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.shared.lock();
        if let Some(stream) = state.streams.remove(&self.id) {
            if stream.end.is_none() {
                state.live -= 1;
                state.reset(self.id, CANCEL);
            }
            state.blocked.retain(|&b| b != self.id);
            state.waiting.drain(..).for_each(Waker::wake);
            state.wake_task();
        }
    }
}

/// A header block being gathered across CONTINUATION frames.
struct Block {
    id: u32,
    end_stream: bool,
    /// The HEADERS frame's fragment, as received; joined with each CONTINUATION's.
    fragment: Bytes,
}

/// The connection's task: writes what calls queued, reads and dispatches what the server sent.
struct Driver {
    shared: Arc<Mutex<State>>,
    io: Box<dyn Io>,
    read: BytesMut,
    /// Frames taken from the queue, partly written.
    writing: VecDeque<Bytes>,
    decoder: fluke_hpack::Decoder<'static>,
    block: Option<Block>,
}

impl Driver {
    async fn run(mut self) {
        let outcome = poll_fn(|cx| self.poll_drive(cx)).await;
        let mut state = self.shared.lock();
        let why = outcome.err().unwrap_or_else(|| "the connection was closed".into());
        tracing::debug!("gRPC connection ended: {why}");
        if state.closed.is_none() {
            state.closed = Some(why.clone());
        }
        let ids: Vec<u32> = state.streams.keys().copied().collect();
        for id in ids {
            state.end(id, Err(Broken::Lost(why.clone())));
        }
        state.waiting.drain(..).for_each(Waker::wake);
    }

    fn poll_drive(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), String>> {
        loop {
            let mut progress = false;
            {
                let mut state = self.shared.lock();
                if !state.staging.is_empty() {
                    let small = state.staging.split().freeze();
                    state.out.push_back(small);
                }
                self.writing.extend(state.out.drain(..));
                if state.closing && state.streams.is_empty() && self.writing.is_empty() {
                    return Poll::Ready(Ok(()));
                }
            }
            while !self.writing.is_empty() {
                let mut slices = [IoSlice::new(&[]); MAX_SLICES];
                let count = self.writing.len().min(MAX_SLICES);
                for (slice, bytes) in slices.iter_mut().zip(self.writing.iter()) {
                    *slice = IoSlice::new(bytes);
                }
                match Pin::new(&mut self.io).poll_write_vectored(cx, &slices[..count]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err("the connection closed while writing".into())),
                    Poll::Ready(Ok(mut n)) => {
                        progress = true;
                        while n > 0 {
                            let front = self.writing.front_mut().expect("wrote no more than queued");
                            let step = n.min(front.len());
                            front.advance(step);
                            n -= step;
                            if front.is_empty() {
                                self.writing.pop_front();
                            }
                        }
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(crate::client::error_chain(&e))),
                    Poll::Pending => break,
                }
            }
            if self.writing.is_empty() {
                // TLS keeps written records until flushed.
                if let Poll::Ready(Err(e)) = Pin::new(&mut self.io).poll_flush(cx) {
                    return Poll::Ready(Err(crate::client::error_chain(&e)));
                }
            }
            loop {
                if self.read.capacity() - self.read.len() < 16 * 1024 {
                    self.read.reserve(64 * 1024);
                }
                let spare = self.read.spare_capacity_mut();
                let mut buf = ReadBuf::uninit(spare);
                match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
                    Poll::Ready(Ok(())) => {
                        let n = buf.filled().len();
                        if n == 0 {
                            return Poll::Ready(Err("connection closed by the server".into()));
                        }
                        // SAFETY: `poll_read` initialized the first `n` spare bytes.
                        unsafe { self.read.set_len(self.read.len() + n) };
                        progress = true;
                        self.handle_frames()?;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(crate::client::error_chain(&e))),
                    Poll::Pending => break,
                }
            }
            if !progress {
                let mut state = self.shared.lock();
                if state.out.is_empty() && state.staging.is_empty() {
                    if state.closing && state.streams.is_empty() && self.writing.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                    state.task = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            }
        }
    }

    /// Every whole frame in the read buffer.
    fn handle_frames(&mut self) -> Result<(), String> {
        while self.read.len() >= 9 {
            let length = (self.read[0] as usize) << 16 | (self.read[1] as usize) << 8 | self.read[2] as usize;
            if length > MAX_FRAME {
                return Err(format!("the server sent a frame of {length} bytes, over our limit of {MAX_FRAME}"));
            }
            if self.read.len() < 9 + length {
                break;
            }
            let head = self.read.split_to(9);
            let (kind, flags) = (head[3], head[4]);
            let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let payload = self.read.split_to(length).freeze();
            self.handle_frame(kind, flags, id, payload)?;
        }
        Ok(())
    }

    fn handle_frame(&mut self, kind: u8, flags: u8, id: u32, payload: Bytes) -> Result<(), String> {
        if let Some(block) = &self.block {
            if kind != frame::CONTINUATION || id != block.id {
                return Err("a header block was interrupted by another frame".into());
            }
        }
        let mut state = self.shared.lock();
        match kind {
            frame::DATA => {
                let length = payload.len() as u32;
                let data = unpadded(flags, payload)?;
                state.unacked += length;
                if state.unacked >= CONNECTION_WINDOW / 2 {
                    let increment = std::mem::take(&mut state.unacked);
                    state.window_update(0, increment);
                }
                if let Some(stream) = state.streams.get_mut(&id) {
                    if stream.end.is_none() {
                        stream.unacked += length;
                        let give_back = (stream.unacked >= STREAM_WINDOW / 2 && flags & frame::END_STREAM == 0)
                            .then(|| std::mem::take(&mut stream.unacked));
                        if stream.answer.body.is_empty() && stream.more.is_empty() {
                            stream.answer.body = data;
                        } else {
                            if stream.more.is_empty() {
                                let first = std::mem::take(&mut stream.answer.body);
                                stream.more.extend_from_slice(&first);
                            }
                            stream.more.extend_from_slice(&data);
                        }
                        stream.answer.received_at = Some(Instant::now());
                        if let Some(increment) = give_back {
                            state.window_update(id, increment);
                        }
                        if flags & frame::END_STREAM != 0 {
                            state.end(id, Ok(()));
                        }
                    }
                }
            }
            frame::HEADERS | frame::CONTINUATION => {
                let block = match kind {
                    frame::HEADERS => {
                        let mut fragment = unpadded(flags, payload)?;
                        if flags & frame::PRIORITY != 0 {
                            if fragment.len() < 5 {
                                return Err("a HEADERS frame too short for its priority".into());
                            }
                            fragment.advance(5);
                        }
                        Block { id, end_stream: flags & frame::END_STREAM != 0, fragment }
                    }
                    _ => {
                        let mut block = self.block.take().ok_or("a CONTINUATION frame without a header block")?;
                        let mut joined = BytesMut::from(&block.fragment[..]);
                        joined.extend_from_slice(&payload);
                        block.fragment = joined.freeze();
                        block
                    }
                };
                if flags & frame::END_HEADERS == 0 {
                    self.block = Some(block);
                    return Ok(());
                }
                decode_block(&mut self.decoder, &mut state, block)?;
            }
            frame::RST_STREAM => {
                let code = payload.get(..4).map_or(PROTOCOL_ERROR, |c| u32::from_be_bytes(c.try_into().unwrap()));
                let text = format!("stream reset by the server: {}", reason(code));
                let broken = match code {
                    REFUSED_STREAM => Broken::Unprocessed(text),
                    CANCEL => Broken::Cancelled(text),
                    _ => Broken::Lost(text),
                };
                state.end(id, Err(broken));
            }
            frame::SETTINGS if flags & frame::ACK == 0 => {
                for setting in payload.chunks_exact(6) {
                    let value = u32::from_be_bytes(setting[2..6].try_into().unwrap());
                    match u16::from_be_bytes([setting[0], setting[1]]) {
                        0x3 => state.max_streams = value as usize,
                        0x4 => {
                            let delta = value as i64 - state.initial_window;
                            state.initial_window = value as i64;
                            state.streams.values_mut().for_each(|s| s.window += delta);
                        }
                        0x5 => state.max_frame = (value as usize).clamp(MAX_FRAME, 16_777_215),
                        _ => {}
                    }
                }
                state.frame_head(0, frame::SETTINGS, frame::ACK, 0);
                state.pump_blocked();
                state.waiting.drain(..).for_each(Waker::wake);
            }
            frame::PING if flags & frame::ACK == 0 => {
                state.frame_head(payload.len(), frame::PING, frame::ACK, 0);
                state.staging.put_slice(&payload);
            }
            frame::GOAWAY => {
                let last = payload.get(..4).map_or(0, |l| u32::from_be_bytes(l.try_into().unwrap()) & 0x7fff_ffff);
                let code = payload.get(4..8).map_or(NO_ERROR, |c| u32::from_be_bytes(c.try_into().unwrap()));
                let text = format!("the server is going away (GOAWAY, {})", reason(code));
                if state.closed.is_none() {
                    state.closed = Some(text.clone());
                }
                let past: Vec<u32> = state.streams.keys().copied().filter(|&s| s > last).collect();
                for id in past {
                    state.end(id, Err(Broken::Unprocessed(text.clone())));
                }
                state.closing = true;
            }
            frame::WINDOW_UPDATE => {
                let increment =
                    payload.get(..4).map_or(0, |i| u32::from_be_bytes(i.try_into().unwrap()) & 0x7fff_ffff) as i64;
                if id == 0 {
                    state.send_window += increment;
                } else if let Some(stream) = state.streams.get_mut(&id) {
                    stream.window += increment;
                }
                state.pump_blocked();
            }
            frame::PUSH_PROMISE => return Err("the server pushed a stream, which we disabled".into()),
            _ => {}
        }
        Ok(())
    }
}

/// A complete header block: the answer's headers, or its trailers. Every block is decoded, a
/// cancelled stream's too: HPACK's table is the connection's.
fn decode_block(decoder: &mut fluke_hpack::Decoder<'static>, state: &mut State, block: Block) -> Result<(), String> {
    let (mut status, mut grpc_status, mut grpc_message) = (None, None, None);
    decoder
        .decode_with_cb(&block.fragment, |name, value| match &*name {
            b":status" => status = Some(std::str::from_utf8(&value).ok().and_then(|s| s.parse().ok()).unwrap_or(0)),
            b"grpc-status" => grpc_status = Some(Bytes::copy_from_slice(&value)),
            b"grpc-message" => grpc_message = Some(Bytes::copy_from_slice(&value)),
            _ => {}
        })
        .map_err(|e| format!("cannot decode the server's headers: {e:?}"))?;
    let Some(stream) = state.streams.get_mut(&block.id) else { return Ok(()) };
    if stream.end.is_some() {
        return Ok(());
    }
    let trailers = stream.headers_seen;
    if let Some(status) = status.filter(|_| !trailers) {
        stream.answer.status = status;
    }
    if grpc_status.is_some() {
        stream.answer.grpc_status = grpc_status;
    }
    if grpc_message.is_some() {
        stream.answer.grpc_message = grpc_message;
    }
    stream.headers_seen = true;
    if block.end_stream || trailers {
        state.end(block.id, Ok(()));
    }
    Ok(())
}

/// A DATA or HEADERS payload without its padding.
fn unpadded(flags: u8, mut payload: Bytes) -> Result<Bytes, String> {
    if flags & frame::PADDED == 0 {
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
fn reason(code: u32) -> &'static str {
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

/// A request's header block, the same bytes on every call: each field a literal that HPACK's
/// dynamic table never keeps (`:method: POST` and `:scheme` from the static table).
pub fn header_block(https: bool, authority: &str, path: &str, fields: &[(&str, &[u8])]) -> Bytes {
    let mut block = BytesMut::new();
    block.put_u8(0x83); // :method: POST
    block.put_u8(if https { 0x87 } else { 0x86 }); // :scheme
    literal_indexed_name(&mut block, 4, path.as_bytes()); // :path
    literal_indexed_name(&mut block, 1, authority.as_bytes()); // :authority
    for (name, value) in fields {
        block.put_u8(0x10); // literal never indexed, new name
        string(&mut block, name.as_bytes());
        string(&mut block, value);
    }
    block.freeze()
}

fn literal_indexed_name(block: &mut BytesMut, index: u8, value: &[u8]) {
    block.put_u8(0x10 | index); // never indexed, name from the static table (index < 15)
    string(block, value);
}

/// An HPACK string literal, not Huffman-coded.
fn string(block: &mut BytesMut, value: &[u8]) {
    integer(block, 7, value.len());
    block.put_slice(value);
}

/// An HPACK integer with a `bits`-bit prefix (the first byte's other bits clear: no Huffman).
fn integer(block: &mut BytesMut, bits: u8, mut value: usize) {
    let max = (1usize << bits) - 1;
    if value < max {
        block.put_u8(value as u8);
        return;
    }
    block.put_u8(max as u8);
    value -= max;
    while value >= 128 {
        block.put_u8((value % 128) as u8 | 0x80);
        value /= 128;
    }
    block.put_u8(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_block_decodes_to_the_request_headers() {
        let long = "v".repeat(300);
        let block = header_block(
            false,
            "localhost:8001",
            "/inference.GRPCInferenceService/ModelInfer",
            &[("content-type", b"application/grpc"), ("te", b"trailers"), ("x-long", long.as_bytes())],
        );
        let decoded = fluke_hpack::Decoder::new().decode(&block).unwrap();
        let text: Vec<(String, String)> =
            decoded.into_iter().map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap())).collect();
        let pairs: Vec<(&str, &str)> = text.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(
            pairs,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", "/inference.GRPCInferenceService/ModelInfer"),
                (":authority", "localhost:8001"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("x-long", long.as_str()),
            ]
        );
        // The same bytes on a decoder that has seen them before: no table state.
        let mut decoder = fluke_hpack::Decoder::new();
        assert_eq!(decoder.decode(&block).unwrap(), decoder.decode(&block).unwrap());
    }

    use h2::server::SendResponse;
    use http::{HeaderMap, Response};

    fn block() -> Bytes {
        header_block(false, "test:1", "/inference.GRPCInferenceService/ModelInfer", &[("te", b"trailers")])
    }

    fn message(bytes: Vec<u8>) -> Message {
        Message::new(Bytes::new(), Bytes::from(bytes), Bytes::new())
    }

    /// A connection to h2's own server (an implementation we did not write), configured by
    /// `builder`; `serve` runs the server's side of each request.
    fn connect<F, Fut>(builder: h2::server::Builder, serve: F) -> Connection
    where
        F: Fn(http::Request<h2::RecvStream>, SendResponse<Bytes>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (client, server) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            let mut connection = builder.handshake::<_, Bytes>(server).await.unwrap();
            while let Some(Ok((request, respond))) = connection.accept().await {
                tokio::spawn(serve(request, respond));
            }
        });
        Connection::start(Box::new(client))
    }

    /// Reads a request's body whole, giving its window back as it goes.
    async fn body(request: http::Request<h2::RecvStream>) -> Vec<u8> {
        let mut body = request.into_body();
        let mut all = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            all.extend_from_slice(&chunk);
        }
        all
    }

    fn trailers(status: &'static str, message: &'static str) -> HeaderMap {
        let mut t = HeaderMap::new();
        t.insert("grpc-status", status.parse().unwrap());
        t.insert("grpc-message", message.parse().unwrap());
        t
    }

    /// Echoes the body back `times` times, then sends trailers.
    async fn echo(request: http::Request<h2::RecvStream>, mut respond: SendResponse<Bytes>, times: usize) {
        let all = Bytes::from(body(request).await);
        let mut send = respond.send_response(Response::new(()), false).unwrap();
        for _ in 0..times {
            send.send_data(all.clone(), false).unwrap();
        }
        send.send_trailers(trailers("0", "")).unwrap();
    }

    #[tokio::test]
    async fn a_call_gets_its_answer_and_trailers_and_large_bodies_pass_flow_control() {
        // The server keeps HTTP/2's default 64 KiB windows: a 1 MiB request waits for them.
        let c = connect(h2::server::Builder::new(), |request, respond| echo(request, respond, 3));
        let small = (0..100u8).collect::<Vec<_>>();
        let (answer, _) = c.call(&block(), message(small.clone())).await;
        let answer = answer.unwrap();
        assert_eq!(answer.status, 200);
        assert_eq!(answer.body, [&small[..], &small, &small].concat());
        assert_eq!(answer.grpc_status.as_deref(), Some(&b"0"[..]));
        let large: Vec<u8> = (0..(1 << 20)).map(|i| (i % 251) as u8).collect();
        // Three concurrent calls of 1 MiB each way (3 MiB answers, past our 2 MiB stream window).
        let block = block();
        let calls = (0..3).map(|_| c.call(&block, message(large.clone())));
        for (answer, _) in futures::future::join_all(calls).await {
            let answer = answer.unwrap();
            assert_eq!(answer.body.len(), 3 << 20);
            assert!(answer.body.chunks(1 << 20).all(|part| part == &large[..]));
        }
    }

    #[tokio::test]
    async fn a_header_block_longer_than_a_frame_goes_on_in_continuation_frames() {
        let c = connect(h2::server::Builder::new(), |request, mut respond| async move {
            let long = request.headers().get("x-long").map_or(0, |v| v.len());
            let mut send = respond.send_response(Response::new(()), false).unwrap();
            send.send_data(Bytes::from(long.to_string()), false).unwrap();
            send.send_trailers(trailers("0", "")).unwrap();
        });
        let long = "v".repeat(40_000);
        let block = header_block(false, "test:1", "/p", &[("x-long", long.as_bytes())]);
        assert!(block.len() > 2 * MAX_FRAME);
        let (answer, _) = c.call(&block, message(vec![1])).await;
        assert_eq!(answer.unwrap().body, Bytes::from_static(b"40000"));
    }

    #[tokio::test]
    async fn calls_past_the_servers_stream_limit_wait_for_a_stream_to_end() {
        let mut builder = h2::server::Builder::new();
        builder.max_concurrent_streams(1);
        let c = connect(builder, |request, respond| echo(request, respond, 1));
        // Let the server's SETTINGS arrive, then send more calls at once than it allows.
        let (first, _) = c.call(&block(), message(vec![0])).await;
        assert_eq!(first.unwrap().body, vec![0u8]);
        // Each call its own task, so only the connection's wake-ups can move a waiting one.
        let c = Arc::new(c);
        let calls = (1..=4u8).map(|i| {
            let c = c.clone();
            tokio::spawn(async move { c.call(&block(), message(vec![i])).await.0.unwrap().body })
        });
        // Bounded: a waiting call never woken would hang here.
        let done = tokio::time::timeout(std::time::Duration::from_secs(30), futures::future::join_all(calls));
        let bodies: Vec<Bytes> =
            done.await.expect("waiting calls were woken").into_iter().map(Result::unwrap).collect();
        assert_eq!(bodies, (1..=4u8).map(|i| Bytes::from(vec![i])).collect::<Vec<_>>());
        assert_eq!(c.shared.lock().live, 0);
    }

    #[tokio::test]
    async fn resets_say_whether_a_call_was_processed() {
        let c = connect(h2::server::Builder::new(), |request, mut respond| async move {
            match request.headers().get("te").is_some() && request.uri().path().ends_with("ModelInfer") {
                true => {
                    let code = body(request).await;
                    let reason = match code.first() {
                        Some(1) => h2::Reason::REFUSED_STREAM,
                        Some(2) => h2::Reason::CANCEL,
                        _ => h2::Reason::INTERNAL_ERROR,
                    };
                    respond.send_reset(reason);
                }
                false => respond.send_reset(h2::Reason::PROTOCOL_ERROR),
            }
        });
        let broken = |r: Result<Answer, Broken>| r.unwrap_err();
        assert!(matches!(broken(c.call(&block(), message(vec![1])).await.0), Broken::Unprocessed(_)));
        assert!(matches!(broken(c.call(&block(), message(vec![2])).await.0), Broken::Cancelled(_)));
        match broken(c.call(&block(), message(vec![3])).await.0) {
            Broken::Lost(reason) => assert!(reason.contains("INTERNAL_ERROR"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert!(c.is_open(), "a stream's reset leaves the connection up");
    }

    #[tokio::test]
    async fn after_a_goaway_new_calls_are_unprocessed_and_the_server_gets_its_pings_back() {
        let (client, server) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move {
            let mut connection = h2::server::handshake(server).await.unwrap();
            let (request, respond) = connection.accept().await.unwrap().unwrap();
            tokio::spawn(echo(request, respond, 1));
            // A ping answered proves the client reads and acknowledges control frames.
            let mut ping = connection.ping_pong().unwrap();
            let pinged = tokio::spawn(async move { ping.ping(h2::Ping::opaque()).await.is_ok() });
            let closing = async { while let Some(Ok(_)) = connection.accept().await {} };
            tokio::time::timeout(std::time::Duration::from_millis(300), closing).await.ok();
            connection.graceful_shutdown();
            while let Some(Ok(_)) = connection.accept().await {}
            pinged.await.unwrap()
        });
        let c = Connection::start(Box::new(client));
        let (answer, _) = c.call(&block(), message(vec![7; 10])).await;
        assert_eq!(answer.unwrap().body, vec![7u8; 10]);
        assert!(server.await.unwrap(), "the ping was answered");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!c.is_open());
        assert!(matches!(c.call(&block(), message(vec![1])).await.0, Err(Broken::Unprocessed(_))));
    }

    #[tokio::test]
    async fn a_dropped_call_resets_its_stream_and_the_connection_goes_on() {
        let (seen, mut resets) = tokio::sync::mpsc::unbounded_channel();
        let c = connect(h2::server::Builder::new(), move |request, mut respond| {
            let seen = seen.clone();
            async move {
                if request.uri().path().ends_with("ModelInfer") && request.headers().contains_key("x-slow") {
                    // The answer's stream stays open (dropped, h2 would reset it).
                    let mut open = respond.send_response(Response::new(()), false).unwrap();
                    let reset = std::future::poll_fn(|cx| open.poll_reset(cx)).await;
                    let _ = seen.send(reset.ok());
                } else {
                    echo(request, respond, 1).await;
                }
            }
        });
        let slow = header_block(false, "test:1", "/inference.GRPCInferenceService/ModelInfer", &[("x-slow", b"1")]);
        let call = c.call(&slow, message(vec![1]));
        let early = tokio::time::timeout(std::time::Duration::from_millis(100), call).await;
        assert!(early.is_err(), "{:?}", early.map(|(r, _)| r.map(|a| a.status)));
        assert_eq!(resets.recv().await.unwrap(), Some(h2::Reason::CANCEL));
        let (answer, _) = c.call(&block(), message(vec![5; 3])).await;
        assert_eq!(answer.unwrap().body, vec![5u8; 3]);
    }

    #[test]
    fn padding_is_cut_and_bad_padding_refused() {
        let padded = Bytes::from_static(&[2, b'a', b'b', 0, 0]);
        assert_eq!(unpadded(frame::PADDED, padded).unwrap(), Bytes::from_static(b"ab"));
        assert!(unpadded(frame::PADDED, Bytes::from_static(&[9, b'a'])).is_err());
        assert_eq!(unpadded(0, Bytes::from_static(b"x")).unwrap(), Bytes::from_static(b"x"));
    }
}
