//! Unary `ModelInfer` calls on a few HTTP/2 connections of our own ([`super::connection`]), as
//! h2load drives them: each call opens a stream on a pooled connection, sends its prepared
//! message and reads the answer and its trailers. The connections open when first needed and
//! again after one breaks; the control calls and `--streaming` keep tonic.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;

use super::connection::{self, Broken, Connection};
use super::message::{unprefixed, Message};

use crate::client::connect::Dialer;
use crate::client::{ClientError, ClientResult};

/// An answer's message (without its prefix), when the request went out and when the message
/// was complete.
pub struct Answer {
    pub message: Bytes,
    pub sent_at: Instant,
    pub received_at: Instant,
}

/// One pooled connection: its handle, and a number that tells it from the one after it.
struct Slot {
    live: Mutex<Option<(u64, Arc<Connection>)>>,
    /// Held while the slot's connection is being made, so concurrent calls make one.
    connecting: tokio::sync::Mutex<()>,
}

/// Unary calls over a few HTTP/2 connections, opened when first needed and again after one
/// breaks.
pub struct Unary {
    base: String,
    dialer: Dialer,
    /// The request's header block: `:path`, `:authority`, content type, `te`, compression,
    /// `-H` metadata.
    header_block: Bytes,
    slots: Vec<Slot>,
    next: AtomicUsize,
    generation: AtomicU64,
}

impl Unary {
    /// `connections` connections to `dialer`'s server; `base` names it in errors.
    pub fn new(base: String, dialer: Dialer, header_block: Bytes, connections: usize) -> Unary {
        let slots = (0..connections.max(1))
            .map(|_| Slot { live: Mutex::new(None), connecting: tokio::sync::Mutex::new(()) })
            .collect();
        Unary { base, dialer, header_block, slots, next: AtomicUsize::new(0), generation: AtomicU64::new(0) }
    }

    /// The header block of every call: `https` or not, the server's `authority`, gRPC's
    /// content type and `te`, our user agent, a compressed request's encoding, and `metadata`.
    pub fn header_block(
        https: bool,
        authority: &str,
        path: &str,
        metadata: &tonic::metadata::MetadataMap,
        encoding: Option<&'static str>,
    ) -> Bytes {
        let agent = concat!("perfbench/", env!("CARGO_PKG_VERSION"));
        let mut fields: Vec<(&str, &[u8])> =
            vec![("content-type", b"application/grpc"), ("te", b"trailers"), ("user-agent", agent.as_bytes())];
        if let Some(encoding) = encoding {
            fields.push(("grpc-encoding", encoding.as_bytes()));
        }
        let headers = metadata.clone().into_headers();
        fields.extend(headers.iter().map(|(name, value)| (name.as_str(), value.as_bytes())));
        connection::header_block(https, authority, path, &fields)
    }

    /// Closes every connection (after a server restart); calls open new ones.
    pub fn drop_connections(&self) {
        for slot in &self.slots {
            *slot.live.lock() = None;
        }
    }

    /// One call of `message`: the answer's message, or why there is none. A call that was never
    /// processed (its connection had closed, or the server refused its stream) goes once more
    /// on a new connection.
    pub async fn call(&self, message: &Message) -> ClientResult<Answer> {
        let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()];
        loop {
            let (generation, connection, fresh) = self.connection(slot).await?;
            let (outcome, sent_at) = connection.call(&self.header_block, message.clone()).await;
            let reason = match outcome {
                Ok(answer) => return answered(answer, sent_at),
                Err(Broken::Cancelled(reason)) => return Err(ClientError::Server(reason)),
                Err(Broken::Lost(reason)) => return Err(self.lost(reason).await),
                Err(Broken::Unprocessed(reason)) => reason,
            };
            {
                let mut live = slot.live.lock();
                if live.as_ref().is_some_and(|(g, _)| *g == generation) {
                    *live = None;
                }
            }
            if fresh {
                return Err(self.lost(reason).await);
            }
            tracing::debug!("a pooled gRPC connection was closed: {reason}");
        }
    }

    /// The slot's connection, made first when it has none or its own has closed; the flag says
    /// it is new.
    async fn connection(&self, slot: &Slot) -> ClientResult<(u64, Arc<Connection>, bool)> {
        let reuse = |slot: &Slot| {
            let live = slot.live.lock();
            live.as_ref().filter(|(_, c)| c.is_open()).map(|(g, c)| (*g, c.clone(), false))
        };
        if let Some(found) = reuse(slot) {
            return Ok(found);
        }
        let _connecting = slot.connecting.lock().await;
        if let Some(found) = reuse(slot) {
            return Ok(found);
        }
        let io = self.dialer.dial().await.map_err(|e| self.unreachable(self.dialer.explain(&e)))?;
        let connection = Arc::new(Connection::start(io));
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        *slot.live.lock() = Some((generation, connection.clone()));
        Ok((generation, connection, true))
    }

    fn unreachable(&self, reason: String) -> ClientError {
        ClientError::Unreachable { url: self.base.clone(), reason }
    }

    /// A connection lost before its answer: the cause a probe finds where there is one (a TLS
    /// server that refused our certificate after the handshake closes the connection so).
    async fn lost(&self, reason: String) -> ClientError {
        self.unreachable(self.dialer.probe().await.unwrap_or(reason))
    }
}

/// A gRPC answer read: HTTP 200, `grpc-status: 0`, one message.
fn answered(answer: connection::Answer, sent_at: Instant) -> ClientResult<Answer> {
    if answer.status != 200 {
        return Err(ClientError::Server(format!(
            "HTTP status {} from the gRPC server, without a grpc-status",
            answer.status
        )));
    }
    check_status(answer.grpc_status.as_deref(), answer.grpc_message.as_deref())?;
    let received_at = answer.received_at.unwrap_or_else(Instant::now);
    Ok(Answer { message: unprefixed(answer.body)?, sent_at, received_at })
}

/// `Ok` for `grpc-status: 0`; another status as a server error with its `grpc-message`.
fn check_status(code: Option<&[u8]>, message: Option<&[u8]>) -> ClientResult<()> {
    let code = code.ok_or_else(|| ClientError::Protocol("the answer has no grpc-status".into()))?;
    let number: i32 = std::str::from_utf8(code)
        .ok()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| ClientError::Protocol(format!("bad grpc-status {:?}", String::from_utf8_lossy(code))))?;
    if number == 0 {
        return Ok(());
    }
    let message = message.map(|m| percent_encoding::percent_decode(m).decode_utf8_lossy().into_owned());
    Err(ClientError::Server(message.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_other_than_ok_is_a_server_error_with_its_message() {
        assert!(check_status(Some(b"0"), None).is_ok());
        match check_status(Some(b"3"), Some(b"unexpected%20shape%3A%20%5B1%5D")) {
            Err(ClientError::Server(m)) => assert_eq!(m, "unexpected shape: [1]"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(check_status(None, None), Err(ClientError::Protocol(_))));
        assert!(matches!(check_status(Some(b"x"), None), Err(ClientError::Protocol(_))));
    }
}
