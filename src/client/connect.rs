//! The inference connections a client opens itself (HTTP/1.1 and gRPC): TCP with Nagle off,
//! bounded by a connect timeout, then TLS where the URL asks for it. A connection that fails
//! says why in words a user can act on (`explain`): the cause (refused, timeout, DNS, the TLS
//! handshake's reason), the peer, and the flag that fixes it. A TLS 1.3 server refuses our
//! client certificate only after the handshake, with an alert that hyper, reqwest and tonic
//! turn into `transport error` or `operation was canceled`: an error that names no cause is
//! explained by one probe connection that reads that alert (`Dialer::explain_probing`).

use std::error::Error;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::{AlertDescription, CertificateError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

use super::{error_chain, ClientError, ClientResult};

/// How long a TCP connect may take before the server counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a probe waits for the server's first record after its handshake. A server that
/// refuses our certificate sends its alert at once; one that takes it may say nothing (HTTP/1.1
/// waits for a request), so the wait bounds only the probe of a server that is fine.
const PROBE_WAIT: Duration = Duration::from_secs(1);

/// The byte stream under a connection: plain TCP or TLS.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Which protocol's flags fix a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    Http,
    Grpc,
}

impl Wire {
    fn ca_flag(self) -> &'static str {
        match self {
            Wire::Http => "--ssl-https-ca-certificates-file",
            Wire::Grpc => "--ssl-grpc-root-certifications-file",
        }
    }

    fn client_cert_flags(self) -> &'static str {
        match self {
            Wire::Http => "--ssl-https-client-certificate-file and --ssl-https-private-key-file",
            Wire::Grpc => "--ssl-grpc-certificate-chain-file and --ssl-grpc-private-key-file",
        }
    }

    fn name_fix(self) -> &'static str {
        match self {
            Wire::Http => "put a name the certificate carries in -u, or skip the check with --ssl-https-verify-host 0",
            Wire::Grpc => "put a name the certificate carries in -u (gRPC always checks it)",
        }
    }

    fn tls_off(self) -> &'static str {
        match self {
            Wire::Http => "use http:// in -u if the server speaks plain HTTP",
            Wire::Grpc => "drop --ssl-grpc-use-ssl if the server speaks plain gRPC",
        }
    }
}

/// The other end of a connection, as messages name it.
#[derive(Debug)]
struct Peer {
    host: String,
    port: u16,
    wire: Wire,
    /// The last TLS failure a connection met after its handshake (a server that refuses our
    /// client certificate says so only then, with TLS 1.3): tonic's errors drop that cause.
    last_tls_failure: parking_lot::Mutex<Option<String>>,
    /// `last_tls_failure` is set: a TLS stream that reads the server's bytes clears it.
    tls_failed: AtomicBool,
    /// A TLS connection has read the server's bytes: it took our certificate, so no probe.
    answered: AtomicBool,
}

impl Peer {
    fn tls_failed(&self, text: String) {
        *self.last_tls_failure.lock() = Some(text);
        self.tls_failed.store(true, Ordering::Relaxed);
    }

    fn address(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }

    /// What went wrong, its peer and the flag that fixes it, for the failures told apart here;
    /// `None` for any other.
    fn explain(&self, e: &(dyn Error + 'static)) -> Option<String> {
        let at = self.address();
        let wire = self.wire;
        let mut next: Option<&(dyn Error + 'static)> = Some(e);
        while let Some(error) = next {
            if let Some(failure) = error.downcast_ref::<ConnectFailure>() {
                return Some(failure.0.clone());
            }
            if let Some(tls) = error.downcast_ref::<rustls::Error>() {
                return Some(tls_failure(tls, &at, &self.host, wire));
            }
            if let Some(io) = error.downcast_ref::<io::Error>() {
                if let Some(inner) = io.get_ref() {
                    if let Some(text) = self.explain(inner) {
                        return Some(text);
                    }
                }
                match io.kind() {
                    io::ErrorKind::ConnectionRefused => return Some(refused(&at, wire)),
                    io::ErrorKind::TimedOut => return Some(timed_out(&at)),
                    _ => {}
                }
            }
            let text = error.to_string();
            if text.contains("dns error") || text.contains("failed to lookup address") {
                return Some(dns(&self.host, &error_chain(error)));
            }
            next = error.source();
        }
        None
    }
}

fn refused(at: &str, wire: Wire) -> String {
    let port = match wire {
        Wire::Http => "HTTP port (-i http)",
        Wire::Grpc => "gRPC port (-i grpc)",
    };
    format!("connection refused by {at}: no server listens there; check -u names the server's {port}")
}

fn timed_out(at: &str) -> String {
    format!(
        "no TCP connection to {at} within {}s (connect timeout): check -u, and that the host is up and reachable",
        CONNECT_TIMEOUT.as_secs()
    )
}

fn dns(host: &str, why: &str) -> String {
    format!("cannot resolve the host '{host}' (DNS: {why}): check the host name in -u")
}

/// A TLS failure in words: the handshake's reason, the peer and the flag that fixes it.
fn tls_failure(e: &rustls::Error, at: &str, host: &str, wire: Wire) -> String {
    let ca = wire.ca_flag();
    let client = wire.client_cert_flags();
    let why = match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => {
                format!("the server's certificate is signed by an unknown CA: give the CA that signed it with {ca}")
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => format!(
                "the server's certificate does not name the host '{host}' (hostname mismatch): {}",
                wire.name_fix()
            ),
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. } => {
                format!("the server's certificate has expired or is not valid yet ({c:?}): renew it on the server")
            }
            other => format!("the server's certificate is bad ({other:?}): check it, and the CAs given with {ca}"),
        },
        rustls::Error::AlertReceived(alert) => {
            let name = alert_name(*alert);
            match alert {
                AlertDescription::CertificateRequired => {
                    format!("the server requires a client certificate (TLS alert {name}): give one with {client}")
                }
                AlertDescription::UnknownCA => format!(
                    "the server does not trust our client certificate (TLS alert {name}): give one signed by a CA \
                     the server trusts, with {client}"
                ),
                AlertDescription::BadCertificate
                | AlertDescription::UnsupportedCertificate
                | AlertDescription::CertificateExpired
                | AlertDescription::CertificateRevoked
                | AlertDescription::CertificateUnknown
                | AlertDescription::AccessDenied
                | AlertDescription::DecryptError => format!(
                    "the server refused our client certificate (TLS alert {name}): give one it accepts, with the \
                     key that belongs to it, with {client}"
                ),
                AlertDescription::HandshakeFailure => format!(
                    "the server refused the handshake (TLS alert {name}: no common TLS version or cipher, or it \
                     wants a client certificate: {client})"
                ),
                AlertDescription::ProtocolVersion => {
                    format!("the server speaks no TLS version we do (TLS alert {name}; we speak TLS 1.2 and 1.3)")
                }
                _ => format!("the server ended the handshake (TLS alert {name})"),
            }
        }
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => {
            format!("the server does not speak TLS there (protocol error: {e}): {}", wire.tls_off())
        }
        other => format!("TLS protocol error: {other}"),
    };
    format!("TLS handshake with {at} failed: {why}")
}

/// An alert's name as RFC 8446 spells it (`UnknownCA` → `unknown_ca`), as curl and openssl
/// print it.
fn alert_name(alert: AlertDescription) -> String {
    let mut name = String::new();
    let mut lower_before = false;
    for c in format!("{alert:?}").chars() {
        if c.is_ascii_uppercase() && lower_before {
            name.push('_');
        }
        lower_before = !c.is_ascii_uppercase();
        name.push(c.to_ascii_lowercase());
    }
    name
}

/// A connection that could not be made, explained (see [`Peer::explain`]): carried inside an
/// `io::Error` through hyper and tonic, and found again by its type.
#[derive(Debug)]
struct ConnectFailure(String);

impl std::fmt::Display for ConnectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for ConnectFailure {}

/// Where a client connects to, and how.
#[derive(Clone)]
pub(crate) struct Dialer {
    peer: Arc<Peer>,
    /// The TLS connector and the name the server's certificate must carry.
    tls: Option<(tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>)>,
}

impl Dialer {
    /// A dialer for `url`'s host and port (`default_port` when it names none), with TLS when
    /// `tls` is given; `url` only names the URL in errors, `wire` the flags that fix them.
    pub fn new(
        url: &str,
        host: &str,
        port: u16,
        tls: Option<rustls::ClientConfig>,
        wire: Wire,
    ) -> ClientResult<Dialer> {
        // An IPv6 literal keeps its brackets in the URL but not in a socket address or a name.
        let host = host.trim_matches(['[', ']']).to_string();
        let tls = match tls {
            None => None,
            Some(config) => {
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| ClientError::Invalid(format!("bad server URL '{url}': {e}")))?;
                Some((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
            }
        };
        let peer = Arc::new(Peer {
            host,
            port,
            wire,
            last_tls_failure: parking_lot::Mutex::new(None),
            tls_failed: AtomicBool::new(false),
            answered: AtomicBool::new(false),
        });
        Ok(Dialer { peer, tls })
    }

    /// A new connection; a failure's error holds its explanation.
    pub async fn dial(&self) -> io::Result<Box<dyn Io>> {
        let peer = &self.peer;
        let fail = |e: io::Error| {
            let text = peer
                .explain(&e)
                .unwrap_or_else(|| format!("cannot connect to {}: {}", peer.address(), error_chain(&e)));
            io::Error::new(e.kind(), ConnectFailure(text))
        };
        let addresses = tokio::net::lookup_host((peer.host.as_str(), peer.port))
            .await
            .map_err(|e| io::Error::new(e.kind(), ConnectFailure(dns(&peer.host, &error_chain(&e)))))?;
        let addresses: Vec<_> = addresses.collect();
        let connect = tokio::net::TcpStream::connect(&addresses[..]);
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, ConnectFailure(timed_out(&peer.address()))))?
            .map_err(fail)?;
        tcp.set_nodelay(true)?;
        Ok(match &self.tls {
            None => Box::new(tcp),
            Some((connector, name)) => {
                let stream = connector.connect(name.clone(), tcp).await.map_err(|e| {
                    let e = fail(e);
                    peer.tls_failed(e.to_string());
                    e
                })?;
                Box::new(Explained { inner: stream, peer: peer.clone() })
            }
        })
    }

    /// `e` in words a user can act on: its cause, this dialer's peer and the flag that fixes
    /// it, where the cause is one told apart here (found anywhere in `e`'s sources, or, for an
    /// error that lost it, the last TLS failure a connection met); otherwise `e`'s own chain.
    pub fn explain(&self, e: &(dyn Error + 'static)) -> String {
        if let Some(text) = self.peer.explain(e) {
            return text;
        }
        let chain = error_chain(e);
        match self.peer.last_tls_failure.lock().as_ref() {
            Some(tls) => format!("{chain}: {tls}"),
            None => chain,
        }
    }

    /// [`Dialer::explain`], but an error that names no cause of its own, on a TLS connection
    /// whose server has not answered us yet, is explained by what [`Dialer::probe`] finds.
    /// (The texts are made before the future, which holds no borrow of `e`.)
    pub fn explain_probing(&self, e: &(dyn Error + 'static)) -> impl Future<Output = String> + Send + '_ {
        let cause = self.cause(e);
        let fallback = self.explain(e);
        async move { cause.await.unwrap_or(fallback) }
    }

    /// The cause of `e` told apart here, or found by [`Dialer::probe`] where `e` names none;
    /// `None` when neither finds one.
    pub fn cause(&self, e: &(dyn Error + 'static)) -> impl Future<Output = Option<String>> + Send + '_ {
        let known = self.peer.explain(e);
        async move {
            match known {
                Some(text) => Some(text),
                None => self.probe().await,
            }
        }
    }

    /// Why this TLS peer drops our connections, as one new connection finds out: it shakes
    /// hands (the server's certificate is checked here) and reads the server's first record,
    /// where a TLS 1.3 server puts its alert refusing our client certificate. `None` without
    /// TLS, once a connection has read the server's bytes, or when the probe meets no failure.
    pub async fn probe(&self) -> Option<String> {
        if self.tls.is_none() || self.peer.answered.load(Ordering::Relaxed) {
            return None;
        }
        // A handshake the server never answers is not what the probe looks for.
        let mut stream = match tokio::time::timeout(CONNECT_TIMEOUT, self.dial()).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return self.peer.explain(&e),
            Err(_) => return None,
        };
        let mut first = [0u8; 1];
        match tokio::time::timeout(PROBE_WAIT, stream.read(&mut first)).await {
            Ok(Err(e)) => self.peer.explain(&e),
            // Bytes, a close without an alert, or silence: nothing TLS refused.
            _ => None,
        }
    }
}

/// A TLS stream whose read and write errors are explained: a server refuses our client
/// certificate (TLS 1.3) with an alert after the handshake, on the first read.
struct Explained<S> {
    inner: S,
    peer: Arc<Peer>,
}

impl<S> Explained<S> {
    fn explained<T>(&self, result: io::Result<T>) -> io::Result<T> {
        result.map_err(|e| match e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) {
            true => {
                let text = self.peer.explain(&e).unwrap_or_else(|| e.to_string());
                self.peer.tls_failed(text.clone());
                io::Error::new(e.kind(), ConnectFailure(text))
            }
            false => e,
        })
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Explained<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.peer.answered.store(true, Ordering::Relaxed);
            if self.peer.tls_failed.load(Ordering::Relaxed) {
                // The server answers: an earlier connection's TLS failure no longer explains anything.
                self.peer.tls_failed.store(false, Ordering::Relaxed);
                *self.peer.last_tls_failure.lock() = None;
            }
        }
        polled.map(|r| self.explained(r))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Explained<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        polled.map(|r| self.explained(r))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        polled.map(|r| self.explained(r))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        polled.map(|r| self.explained(r))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        polled.map(|r| self.explained(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(wire: Wire) -> Peer {
        Peer {
            host: "localhost".into(),
            port: 8001,
            wire,
            last_tls_failure: parking_lot::Mutex::new(None),
            tls_failed: AtomicBool::new(false),
            answered: AtomicBool::new(false),
        }
    }

    fn explain(wire: Wire, e: rustls::Error) -> String {
        let io = io::Error::new(io::ErrorKind::InvalidData, e);
        peer(wire).explain(&io).expect("a TLS failure is explained")
    }

    #[test]
    fn each_tls_failure_names_its_cause_peer_and_flag() {
        let cases = [
            (
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
                "unknown ca",
                "--ssl-grpc-root-certifications-file",
            ),
            (rustls::Error::InvalidCertificate(CertificateError::NotValidForName), "hostname mismatch", "-u"),
            (
                rustls::Error::AlertReceived(AlertDescription::CertificateRequired),
                "requires a client certificate (tls alert certificate_required)",
                "--ssl-grpc-certificate-chain-file",
            ),
            (
                rustls::Error::AlertReceived(AlertDescription::UnknownCA),
                "does not trust our client certificate (tls alert unknown_ca)",
                "--ssl-grpc-private-key-file",
            ),
            (
                rustls::Error::AlertReceived(AlertDescription::BadCertificate),
                "refused our client certificate (tls alert bad_certificate)",
                "--ssl-grpc-certificate-chain-file",
            ),
            (rustls::Error::AlertReceived(AlertDescription::ProtocolVersion), "protocol_version", "TLS 1.2"),
            (
                rustls::Error::AlertReceived(AlertDescription::DecryptError),
                "refused our client certificate (tls alert decrypt_error)",
                "--ssl-grpc-certificate-chain-file",
            ),
        ];
        for (error, cause, flag) in cases {
            let text = explain(Wire::Grpc, error);
            let lower = text.to_lowercase();
            assert!(lower.contains(cause) && text.contains(flag) && text.contains("localhost:8001"), "{text}");
            assert!(!text.contains('\n'), "{text}");
        }
        let https = explain(Wire::Http, rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer));
        assert!(https.contains("--ssl-https-ca-certificates-file"), "{https}");
        let name = explain(Wire::Http, rustls::Error::InvalidCertificate(CertificateError::NotValidForName));
        assert!(name.contains("--ssl-https-verify-host 0"), "{name}");
    }

    #[test]
    fn refused_timeout_and_dns_name_the_peer() {
        let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
        let text = peer(Wire::Grpc).explain(&refused).unwrap();
        assert!(text.contains("refused by localhost:8001") && text.contains("-i grpc"), "{text}");
        let timed_out = io::Error::from(io::ErrorKind::TimedOut);
        assert!(peer(Wire::Http).explain(&timed_out).unwrap().contains("connect timeout"));
        let other = io::Error::other("something else");
        assert_eq!(peer(Wire::Http).explain(&other), None);
    }

    #[tokio::test]
    async fn dialing_names_dns_and_refused_failures() {
        let dialer = Dialer::new("u", "no-such-host.invalid", 1, None, Wire::Http).unwrap();
        let e = dialer.dial().await.err().expect("no such host");
        let text = dialer.explain(&e);
        assert!(text.contains("DNS") && text.contains("no-such-host.invalid") && text.contains("-u"), "{text}");
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dialer = Dialer::new("u", "127.0.0.1", port, None, Wire::Grpc).unwrap();
        let e = dialer.dial().await.err().expect("refused");
        let text = dialer.explain(&e);
        assert!(text.contains(&format!("connection refused by 127.0.0.1:{port}")), "{text}");
    }
}
