//! Taking connections in for the HTTP and gRPC front ends: the connection limit, TLS (mutual
//! when a client CA is given), and a guard in front of every request that enforces
//! `--restricted-api`, the request timeout and the over-limit answer.
//!
//! One accept task per listener takes TCP connections and never waits on a client: TLS
//! handshakes run in their own tasks with a deadline, so a stalled or failed handshake costs
//! nothing but its own connection. Ready connections go out on a channel to hyper (HTTP/1.1) or
//! tonic (HTTP/2).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::Request;
use axum::http::header::{HeaderValue, CONNECTION, RETRY_AFTER};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tower::{Service, ServiceExt};

use super::access::{ApiGroup, RestrictedApi};
use super::authority::AuthorityRepair;
use super::error::ServerError;
use super::llm::monotonic_ns;
use crate::rx_stamp::{StampedStream, Stamps};
use crate::x509_v1;

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long connections may keep the server waiting (`perfbench serve --header-read-timeout`,
/// `--grpc-keepalive-*`, `--grpc-max-connection-age`). A client that opens a connection and
/// sends nothing, or half a request head, holds only its own connection until these close it.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnectionSettings {
    /// HTTP/1.1: a request's headers must arrive within this, and a keep-alive connection idle
    /// this long is closed (hyper times the next request's head from the end of the last
    /// response). gRPC: a new connection's HTTP/2 preface must arrive within this.
    pub header_read_timeout: Duration,
    /// gRPC: the server pings an idle connection this often (HTTP/2 PING); none when `None`.
    pub grpc_keepalive_interval: Option<Duration>,
    /// gRPC: a ping not acknowledged within this closes the connection.
    pub grpc_keepalive_timeout: Duration,
    /// gRPC: a connection older than this is asked to go away (GOAWAY; calls in flight finish).
    pub grpc_max_connection_age: Option<Duration>,
}

impl Default for ConnectionSettings {
    fn default() -> Self {
        ConnectionSettings {
            header_read_timeout: Duration::from_secs(30),
            grpc_keepalive_interval: None,
            grpc_keepalive_timeout: Duration::from_secs(20),
            grpc_max_connection_age: None,
        }
    }
}
/// A connection over the limit is kept this long to be told so, then closed.
const OVER_LIMIT_LINGER: Duration = Duration::from_secs(2);
/// Connections over the limit that are being told so at once; beyond this they are closed unread.
const OVER_LIMIT_ANSWERED: usize = 64;

/// `--tls-cert`, `--tls-key` and `--tls-client-ca`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate signed by one of these CAs (mTLS).
    pub client_ca: Option<PathBuf>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in a PEM file, with a one-line reason when there is none.
pub fn read_certificates(path: &Path, what: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("cannot read the {what} '{}': {e}", path.display()))?;
    if certs.is_empty() {
        anyhow::bail!("the {what} '{}' holds no PEM certificate", path.display());
    }
    Ok(certs)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) in a PEM file.
pub fn read_private_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| anyhow::anyhow!("cannot read the TLS private key '{}': {e}", path.display()))
}

/// The server's TLS configuration, checked in full at start-up (a certificate that does not
/// match its key is an error here, not at the first handshake). `alpn`: `h2` for gRPC,
/// `http/1.1` for HTTP.
pub fn server_tls_config(files: &TlsFiles, alpn: &[u8]) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let certs = read_certificates(&files.cert, "TLS certificate")?;
    let key = read_private_key(&files.key)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .context("TLS setup failed")?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in read_certificates(ca, "TLS client CA")? {
                roots
                    .add(cert)
                    .map_err(|e| anyhow::anyhow!("bad certificate in the TLS client CA '{}': {e}", ca.display()))?;
            }
            let roots = Arc::new(roots);
            let inner = rustls::server::WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
                .build()
                .map_err(|e| anyhow::anyhow!("cannot use the TLS client CA '{}': {e}", ca.display()))?;
            // Client certificates made as Triton's tests make them are X.509 v1.
            builder.with_client_cert_verifier(Arc::new(x509_v1::ClientVerifier { inner, roots, provider: provider() }))
        }
    };
    let key = x509_v1::certified_key(certs, key, &provider()).map_err(|e| {
        anyhow::anyhow!(
            "the TLS certificate '{}' and key '{}' cannot be used together: {e}",
            files.cert.display(),
            files.key.display()
        )
    })?;
    let mut config = builder.with_cert_resolver(x509_v1::single(key));
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// What a front end's listener enforces.
#[derive(Clone)]
pub struct AcceptConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Open connections at once; 0 means no limit.
    pub max_connections: usize,
    /// gRPC: cut an HTTP/2 authority with a path at its '/' ([`AuthorityRepair`]).
    pub repair_authority: bool,
    /// gRPC: the HTTP/2 preface must arrive within this, or the connection is closed.
    pub preface_timeout: Option<Duration>,
    /// Plain connections keep the kernel's receive stamps ([`ReceivedAt`] from them): set when
    /// the server records its requests, where arrival is ground truth.
    pub stamp_arrivals: bool,
}

/// What the request handlers learn about their connection.
#[derive(Clone, Debug)]
pub struct ConnInfo {
    pub remote: SocketAddr,
    /// The connection came in over the limit: every request on it is refused.
    pub over_limit: bool,
}

enum Stream {
    Plain(TcpStream),
    /// Plain, keeping when its bytes arrived (the request record's arrival stamps).
    Stamped(StampedStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// An accepted connection. It holds its place under the limit until dropped.
pub struct Conn {
    stream: Stream,
    info: ConnInfo,
    _permit: OwnedSemaphorePermit,
    /// Over-limit connections read end-of-stream from here on, so they close soon.
    linger: Option<Pin<Box<Sleep>>>,
    /// Until a gRPC connection's first header block is read (and for its life when the
    /// authority needed repair), reads go through this.
    repair: Option<Box<AuthorityRepair>>,
    /// gRPC: when the preface is due; the connection reads end-of-stream past it.
    preface_due: Option<Pin<Box<Sleep>>>,
}

impl Conn {
    fn new(stream: Stream, info: ConnInfo, permit: OwnedSemaphorePermit, config: &AcceptConfig) -> Conn {
        let linger = info.over_limit.then(|| Box::pin(tokio::time::sleep(OVER_LIMIT_LINGER)));
        let repair = config.repair_authority.then(Box::default);
        let preface_due =
            config.preface_timeout.filter(|_| config.repair_authority).map(|t| Box::pin(tokio::time::sleep(t)));
        Conn { stream, info, _permit: permit, linger, repair, preface_due }
    }

    fn poll_read_raw(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Stamped(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }

    /// When this connection's bytes arrived, where it keeps that.
    fn stamps(&self) -> Option<Stamps> {
        match &self.stream {
            Stream::Stamped(s) => Some(s.stamps()),
            _ => None,
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if let Some(linger) = self.linger.as_mut() {
            if linger.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
        }
        let this = &mut *self;
        if let Some(due) = this.preface_due.as_mut() {
            if !this.repair.as_ref().is_some_and(|r| r.awaiting_preface()) {
                this.preface_due = None;
            } else if due.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
        }
        while let Some(repair) = this.repair.as_mut() {
            let ready = repair.out();
            if !ready.is_empty() {
                let n = ready.len().min(buf.remaining());
                buf.put_slice(&ready.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if repair.passing() {
                this.repair = None;
                break;
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            std::task::ready!(this.poll_read_raw(cx, &mut read))?;
            let repair = this.repair.as_mut().expect("still repairing");
            if read.filled().is_empty() {
                repair.finish();
                if repair.out().is_empty() {
                    return Poll::Ready(Ok(()));
                }
            } else {
                repair.feed(read.filled());
            }
        }
        this.poll_read_raw(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Stamped(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Stamped(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Stamped(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Stamped(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Stamped(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;
    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

/// Accepts connections until `stop`, handing them on ready to serve (handshake done).
pub fn accept(listener: TcpListener, config: AcceptConfig, mut stop: watch::Receiver<bool>) -> mpsc::Receiver<Conn> {
    let (tx, rx) = mpsc::channel(256);
    let limit = Arc::new(Semaphore::new(if config.max_connections == 0 {
        Semaphore::MAX_PERMITS
    } else {
        config.max_connections
    }));
    let answered = Arc::new(Semaphore::new(OVER_LIMIT_ANSWERED));
    let acceptor = config.tls.clone().map(TlsAcceptor::from);
    tokio::spawn(async move {
        let stopped = async move {
            let _ = stop.wait_for(|&s| s).await;
        };
        tokio::pin!(stopped);
        loop {
            let (tcp, remote) = tokio::select! {
                _ = &mut stopped => return,
                accepted = listener.accept() => match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        // Out of descriptors, or the peer gave up before accept: wait a little.
                        tracing::debug!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                },
            };
            let _ = tcp.set_nodelay(true);
            let (permit, over_limit) = match limit.clone().try_acquire_owned() {
                Ok(p) => (p, false),
                Err(_) => match answered.clone().try_acquire_owned() {
                    Ok(p) => (p, true),
                    // Too many over the limit already: close without a word.
                    Err(_) => continue,
                },
            };
            let info = ConnInfo { remote, over_limit };
            let config = config.clone();
            let tx = tx.clone();
            match &acceptor {
                None => {
                    let stream = if config.stamp_arrivals {
                        Stream::Stamped(StampedStream::new(tcp))
                    } else {
                        Stream::Plain(tcp)
                    };
                    let conn = Conn::new(stream, info, permit, &config);
                    if tx.send(conn).await.is_err() {
                        return;
                    }
                }
                Some(acceptor) => {
                    let handshake = acceptor.accept(tcp);
                    tokio::spawn(async move {
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                            Ok(Ok(tls)) => {
                                let stream = Stream::Tls(Box::new(tls));
                                let _ = tx.send(Conn::new(stream, info, permit, &config)).await;
                            }
                            Ok(Err(e)) => tracing::debug!(%remote, "TLS handshake failed: {e}"),
                            Err(_) => tracing::debug!(%remote, "TLS handshake timed out"),
                        }
                    });
                }
            }
        }
    });
    rx
}

/// Serves HTTP/1.1 connections from `incoming` with `app` until `stop`, then lets open
/// connections finish their request in flight.
pub async fn serve_http<S>(
    mut incoming: mpsc::Receiver<Conn>,
    app: S,
    header_read_timeout: Duration,
    stop: impl Future<Output = ()>,
) where
    S: Service<Request, Response = Response, Error = std::convert::Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
    tokio::pin!(stop);
    loop {
        let conn = tokio::select! {
            _ = &mut stop => break,
            conn = incoming.recv() => match conn {
                Some(conn) => conn,
                None => break,
            },
        };
        let info = conn.info.clone();
        let stamps = conn.stamps();
        let app = app.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            // The head's arrival: the kernel's stamp of the latest read, else now.
            let now = monotonic_ns();
            let arrived = stamps.as_ref().and_then(|s| s.received_monotonic_ns(now)).unwrap_or(now);
            request.extensions_mut().insert(ReceivedAt(arrived));
            request.extensions_mut().insert(info.clone());
            app.clone().oneshot(request.map(axum::body::Body::new))
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(conn), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("HTTP connection ended: {e}");
            }
        });
    }
    graceful.shutdown().await;
}

/// When an HTTP request arrived (CLOCK_MONOTONIC ns): on a connection that keeps receive stamps
/// (`AcceptConfig::stamp_arrivals`), when the kernel received the bytes that completed its head;
/// otherwise when hyper had parsed the head. The generative twin's records count a request's
/// arrival from here: its handler runs tens of µs later, after the guard and the router.
#[derive(Clone, Copy, Debug)]
pub struct ReceivedAt(pub u64);

impl ReceivedAt {
    /// The request's arrival, or now for a request that did not come through [`serve_http`].
    pub fn of(request: &Request) -> u64 {
        request.extensions().get::<ReceivedAt>().map_or_else(monotonic_ns, |r| r.0)
    }
}

/// What the guard in front of every request enforces.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    pub restricted: RestrictedApi,
    /// Whole requests (body included) past this are answered with a timeout error.
    pub request_timeout: Option<Duration>,
    /// For the over-limit message.
    pub max_connections: usize,
}

impl Guard {
    fn over_limit(&self) -> ServerError {
        ServerError::exhausted(format!(
            "the server has reached its limit of {} open connections (--max-connections); retry later",
            self.max_connections
        ))
    }
}

/// A request the guard's timeout ended.
fn timed_out(limit: Duration) -> ServerError {
    ServerError::timeout(format!("the request did not complete within the server's timeout of {limit:?}"))
}

/// The HTTP guard, as axum middleware: over-limit connections get 503 and are closed,
/// restricted groups need their header, and the whole request runs within the timeout.
pub async fn guard_http(guard: axum::extract::State<Arc<Guard>>, request: Request, next: Next) -> Response {
    if request.extensions().get::<ConnInfo>().is_some_and(|c| c.over_limit) {
        let mut response = guard.over_limit().into_response();
        *response.status_mut() = axum::http::StatusCode::SERVICE_UNAVAILABLE;
        response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    }
    if !guard.restricted.is_empty() {
        let group = ApiGroup::of_http_path(request.uri().path());
        let headers = request.headers();
        if let Err(e) = guard.restricted.check(group, |name| headers.get(name).map(|v| v.as_bytes())) {
            return e.into_response();
        }
    }
    match guard.request_timeout {
        None => next.run(request).await,
        Some(limit) => match tokio::time::timeout(limit, next.run(request)).await {
            Ok(response) => response,
            Err(_) => timed_out(limit).into_response(),
        },
    }
}

/// The gRPC guard, as a tower layer over tonic's routes. Streams (ModelStreamInfer, health
/// Watch) are long-lived by design: the timeout covers unary calls; streamed inferences get the
/// core's own timeout.
#[derive(Clone)]
pub struct GrpcGuardLayer(pub Arc<Guard>);

impl<S> tower::Layer<S> for GrpcGuardLayer {
    type Service = GrpcGuard<S>;
    fn layer(&self, inner: S) -> GrpcGuard<S> {
        GrpcGuard { inner, guard: self.0.clone() }
    }
}

#[derive(Clone)]
pub struct GrpcGuard<S> {
    inner: S,
    guard: Arc<Guard>,
}

type GrpcResponse = axum::http::Response<tonic::body::Body>;

impl<S> Service<axum::http::Request<tonic::body::Body>> for GrpcGuard<S>
where
    S: Service<axum::http::Request<tonic::body::Body>, Response = GrpcResponse> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = GrpcResponse;
    type Error = S::Error;
    type Future = GuardedCall<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::http::Request<tonic::body::Body>) -> Self::Future {
        let refuse = |e: ServerError| GuardedCall::Refused { response: Some(tonic::Status::from(e).into_http()) };
        if request.extensions().get::<ConnInfo>().is_some_and(|c| c.over_limit) {
            return refuse(self.guard.over_limit());
        }
        let path = request.uri().path();
        let streaming = path.ends_with("/ModelStreamInfer") || path.ends_with("/Watch");
        if !self.guard.restricted.is_empty() {
            let group = ApiGroup::of_grpc_path(path);
            let headers = request.headers();
            if let Err(e) = self.guard.restricted.check(group, |name| headers.get(name).map(|v| v.as_bytes())) {
                return refuse(e);
            }
        }
        // The service that was polled ready serves this call; its clone takes the next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let call = inner.call(request);
        match self.guard.request_timeout.filter(|_| !streaming) {
            None => GuardedCall::Untimed { call },
            Some(limit) => GuardedCall::Timed { call: tokio::time::timeout(limit, call), limit },
        }
    }
}

pin_project_lite::pin_project! {
    /// A gRPC call through the guard: refused at once, or the service's own call, within the
    /// request timeout where one applies. A plain enum, not a boxed future: every call makes one.
    #[project = GuardedCallProjection]
    pub enum GuardedCall<F> {
        Refused { response: Option<GrpcResponse> },
        Untimed { #[pin] call: F },
        Timed { #[pin] call: tokio::time::Timeout<F>, limit: Duration },
    }
}

impl<F, E> Future for GuardedCall<F>
where
    F: Future<Output = Result<GrpcResponse, E>>,
{
    type Output = Result<GrpcResponse, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            GuardedCallProjection::Refused { response } => {
                Poll::Ready(Ok(response.take().expect("a refused call is polled to completion once")))
            }
            GuardedCallProjection::Untimed { call } => call.poll(cx),
            GuardedCallProjection::Timed { call, limit } => match call.poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Ok(result)) => Poll::Ready(result),
                Poll::Ready(Err(_)) => Poll::Ready(Ok(tonic::Status::from(timed_out(*limit)).into_http())),
            },
        }
    }
}
