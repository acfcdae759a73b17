//! The connection against h2's own server (an implementation we did not write).

use std::sync::Arc;

use bytes::Bytes;
use h2::server::SendResponse;
use http::{HeaderMap, Response};

use super::frame::MAX_FRAME;
use super::{header_block, Answer, Broken, Connection};
use crate::client::grpc::message::Message;

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
    let bodies: Vec<Bytes> = done.await.expect("waiting calls were woken").into_iter().map(Result::unwrap).collect();
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
