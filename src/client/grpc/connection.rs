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
//!
//! Here: the handle calls open streams through, and a call's stream. `frame` holds HTTP/2's
//! vocabulary, `hpack` the request's header block, `streams` the shared state and flow control,
//! `driver` the task that writes and reads.

mod driver;
mod frame;
mod hpack;
mod streams;
#[cfg(test)]
mod tests;

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::{BufMut, Bytes};
use parking_lot::Mutex;

use super::message::Message;
use crate::client::connect::Io;
use driver::Driver;
use frame::CANCEL;
pub use hpack::header_block;
use streams::{State, Stream, COPY_BELOW};

/// Our receive windows: a stream's and the connection's, as hyper's client sets them.
pub const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
pub const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;

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
        let shared = Arc::new(Mutex::new(State::new()));
        tokio::spawn(Driver::new(shared.clone(), io).run());
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
