//! The connection's task: writes what calls queued, reads the server's frames and hands each
//! stream its part (answers, resets, settings, pings, GOAWAY, window updates).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::frame::{self, reason, unpadded, CANCEL, MAX_FRAME, NO_ERROR, PROTOCOL_ERROR, REFUSED_STREAM};
use super::streams::State;
use super::{Broken, CONNECTION_WINDOW, STREAM_WINDOW};
use crate::client::connect::Io;

/// At most this many slices per vectored write.
const MAX_SLICES: usize = 64;

/// A header block being gathered across CONTINUATION frames.
pub(super) struct Block {
    id: u32,
    end_stream: bool,
    /// The HEADERS frame's fragment, as received; joined with each CONTINUATION's.
    fragment: Bytes,
}

/// The connection's task: writes what calls queued, reads and dispatches what the server sent.
pub(super) struct Driver {
    shared: Arc<Mutex<State>>,
    io: Box<dyn Io>,
    read: BytesMut,
    /// Frames taken from the queue, partly written.
    writing: VecDeque<Bytes>,
    decoder: fluke_hpack::Decoder<'static>,
    block: Option<Block>,
}

impl Driver {
    pub(super) fn new(shared: Arc<Mutex<State>>, io: Box<dyn Io>) -> Driver {
        Driver {
            shared,
            io,
            read: BytesMut::with_capacity(64 * 1024),
            writing: VecDeque::new(),
            decoder: fluke_hpack::Decoder::new(),
            block: None,
        }
    }

    pub(super) async fn run(mut self) {
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
