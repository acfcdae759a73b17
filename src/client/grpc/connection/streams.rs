//! The connection's shared state: its streams, the frames queued for the connection's task,
//! and flow control both ways (our send windows, and the bytes received and not yet given back).

use std::collections::{HashMap, VecDeque};
use std::task::Waker;
use std::time::Instant;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::frame::{self, DEFAULT_WINDOW, MAX_FRAME, NO_ERROR, PREFACE};
use super::{Answer, Broken, CONNECTION_WINDOW, STREAM_WINDOW};
use crate::client::grpc::message::Message;

/// DATA payloads shorter than this are copied next to their frame header; longer ones are
/// written from the request's own bytes.
pub(super) const COPY_BELOW: usize = 1024;

#[derive(Default)]
pub(super) struct Stream {
    pub(super) waker: Option<Waker>,
    /// Request bytes that wait for window.
    pub(super) unsent: Message,
    /// Our send window on this stream.
    pub(super) window: i64,
    /// Bytes received and not yet given back with a WINDOW_UPDATE.
    pub(super) unacked: u32,
    pub(super) headers_seen: bool,
    pub(super) answer: Answer,
    /// Body chunks after the first.
    pub(super) more: BytesMut,
    /// `Some` once the stream is over.
    pub(super) end: Option<Result<(), Broken>>,
}

pub(super) struct State {
    /// Frames queued and not yet handed to the connection's task.
    pub(super) out: VecDeque<Bytes>,
    /// Small frames, gathered before they join `out`.
    pub(super) staging: BytesMut,
    /// The connection's task, when it waits for something to write.
    pub(super) task: Option<Waker>,
    pub(super) max_frame: usize,
    pub(super) initial_window: i64,
    pub(super) max_streams: usize,
    /// Our connection-level send window.
    pub(super) send_window: i64,
    /// Bytes received on the connection and not yet given back.
    pub(super) unacked: u32,
    pub(super) next_id: u32,
    pub(super) streams: HashMap<u32, Stream>,
    /// Streams not yet ended: what the server's MAX_CONCURRENT_STREAMS counts.
    pub(super) live: usize,
    /// Streams whose request waits for window.
    pub(super) blocked: VecDeque<u32>,
    /// Calls waiting for the server's stream limit.
    pub(super) waiting: Vec<Waker>,
    /// Why the connection can take no new stream (broken, or the server is going away).
    pub(super) closed: Option<String>,
    /// No handle is left, or the server is going away: the task ends once the streams have.
    pub(super) closing: bool,
}

impl State {
    /// A new connection's state, with the preface and our settings queued first: ENABLE_PUSH 0,
    /// INITIAL_WINDOW_SIZE, then the connection's window.
    pub(super) fn new() -> State {
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
        state.frame_head(12, frame::SETTINGS, 0, 0);
        state.staging.put_u16(0x2);
        state.staging.put_u32(0);
        state.staging.put_u16(0x4);
        state.staging.put_u32(STREAM_WINDOW);
        state.window_update(0, CONNECTION_WINDOW - DEFAULT_WINDOW as u32);
        state
    }

    pub(super) fn queue(&mut self, bytes: Bytes) {
        if !self.staging.is_empty() {
            self.out.push_back(self.staging.split().freeze());
        }
        self.out.push_back(bytes);
    }

    pub(super) fn frame_head(&mut self, length: usize, kind: u8, flags: u8, id: u32) {
        let head = &mut self.staging;
        head.put_uint(length as u64, 3);
        head.put_u8(kind);
        head.put_u8(flags);
        head.put_u32(id);
    }

    pub(super) fn window_update(&mut self, id: u32, increment: u32) {
        self.frame_head(4, frame::WINDOW_UPDATE, 0, id);
        self.staging.put_u32(increment);
    }

    pub(super) fn reset(&mut self, id: u32, code: u32) {
        self.frame_head(4, frame::RST_STREAM, 0, id);
        self.staging.put_u32(code);
    }

    /// Queues as much of stream `id`'s request as the windows allow.
    pub(super) fn pump(&mut self, id: u32) {
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
    pub(super) fn pump_blocked(&mut self) {
        for id in std::mem::take(&mut self.blocked) {
            self.pump(id);
        }
    }

    /// Ends stream `id` and wakes its call.
    pub(super) fn end(&mut self, id: u32, result: Result<(), Broken>) {
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

    pub(super) fn wake_task(&mut self) {
        if let Some(task) = self.task.take() {
            task.wake();
        }
    }
}
