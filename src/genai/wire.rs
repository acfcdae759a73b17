//! The generative client's HTTP: one POST per request whose answer is read chunk by chunk, each
//! chunk with the instant its bytes reached the socket, and the request with the instant its
//! bytes were written. Over plain HTTP those are the socket's own ([`crate::rx_stamp`]), so a
//! client busy with other streams does not add its task hand-offs and wake-ups to a request's
//! times; over HTTPS (reqwest with rustls) they are the instants the client sent and read.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::rx_stamp::{StampedStream, Stamps};

/// How long a connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

type Stamped = Client<Connector, Full<Bytes>>;

/// Opens plain TCP connections that stamp what they receive.
#[derive(Clone, Debug)]
pub struct Connector;

impl tower::Service<Uri> for Connector {
    type Response = TokioIo<StampedStream>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        Box::pin(async move {
            let bad = || std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("no host in {uri}"));
            let host = uri.host().ok_or_else(bad)?.trim_start_matches('[').trim_end_matches(']').to_string();
            let port = uri.port_u16().unwrap_or(80);
            let connect = tokio::net::TcpStream::connect((host.as_str(), port));
            let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
                .await
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
            stream.set_nodelay(true)?;
            Ok(TokioIo::new(StampedStream::new(stream)))
        })
    }
}

/// The client: stamped over `http://`, reqwest over `https://`.
pub enum Http {
    Stamped { client: Box<Stamped>, headers: HeaderMap },
    Tls(reqwest::Client),
}

/// An answer whose body is still to be read.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// Just before the request's bytes went to the kernel (plain HTTP only).
    pub sent: Option<Instant>,
    body: ReplyBody,
}

enum ReplyBody {
    Stamped { body: Incoming, stamps: Option<Stamps> },
    Tls(reqwest::Response),
}

impl Http {
    /// A client for `url` keeping up to `pool` idle connections, sending `headers` on every request.
    pub fn new(url: &str, headers: HeaderMap, pool: usize) -> anyhow::Result<Http> {
        if url.starts_with("https://") {
            let client = reqwest::Client::builder()
                .no_proxy()
                .http1_only()
                .tcp_nodelay(true)
                .pool_max_idle_per_host(pool)
                .connect_timeout(CONNECT_TIMEOUT)
                .default_headers(headers)
                .build()?;
            return Ok(Http::Tls(client));
        }
        let client = Client::builder(TokioExecutor::new()).pool_max_idle_per_host(pool).build(Connector);
        Ok(Http::Stamped { client: Box::new(client), headers })
    }

    /// POSTs `body` to `url` with `x-request-id`; the answer once its head is in.
    pub async fn post(&self, url: &str, request_id: &str, body: Vec<u8>) -> Result<Reply, String> {
        match self {
            Http::Stamped { client, headers } => {
                let mut request = Request::post(url)
                    .header("x-request-id", request_id)
                    .body(Full::new(Bytes::from(body)))
                    .map_err(|e| e.to_string())?;
                for (name, value) in headers {
                    request.headers_mut().append(name, value.clone());
                }
                let response = client.request(request).await.map_err(|e| crate::client::error_chain(&e))?;
                let stamps = response.extensions().get::<Stamps>().cloned();
                let sent = stamps.as_ref().and_then(Stamps::sent);
                let (head, body) = response.into_parts();
                let body = ReplyBody::Stamped { body, stamps };
                Ok(Reply { status: head.status, headers: head.headers, sent, body })
            }
            Http::Tls(client) => {
                let response = client
                    .post(url)
                    .header("x-request-id", request_id)
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| crate::client::error_chain(&e))?;
                Ok(Reply {
                    status: response.status(),
                    headers: response.headers().clone(),
                    sent: None,
                    body: ReplyBody::Tls(response),
                })
            }
        }
    }
}

impl Reply {
    /// The next chunk of the body and when its bytes arrived (`None` where the socket gave no
    /// stamp); `None` at the end.
    pub async fn chunk(&mut self) -> Result<Option<(Bytes, Option<Instant>)>, String> {
        match &mut self.body {
            ReplyBody::Stamped { body, stamps } => loop {
                match body.frame().await {
                    None => return Ok(None),
                    Some(Err(e)) => return Err(crate::client::error_chain(&e)),
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            return Ok(Some((data, stamps.as_ref().and_then(Stamps::received))));
                        }
                    }
                }
            },
            ReplyBody::Tls(response) => {
                let chunk = response.chunk().await.map_err(|e| crate::client::error_chain(&e))?;
                Ok(chunk.map(|bytes| (bytes, None)))
            }
        }
    }
}
