//! The inference connections a client opens itself (HTTP/1.1 and gRPC): TCP with Nagle off,
//! bounded by a connect timeout, then TLS where the URL asks for it.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use super::{ClientError, ClientResult};

/// How long a TCP connect may take before the server counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The byte stream under a connection: plain TCP or TLS.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Where a client connects to, and how.
#[derive(Clone)]
pub(crate) struct Dialer {
    host: String,
    port: u16,
    /// The TLS connector and the name the server's certificate must carry.
    tls: Option<(tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>)>,
}

impl Dialer {
    /// A dialer for `url`'s host and port (`default_port` when it names none), with TLS when
    /// `tls` is given; `url` only names the URL in errors.
    pub fn new(url: &str, host: &str, port: u16, tls: Option<rustls::ClientConfig>) -> ClientResult<Dialer> {
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
        Ok(Dialer { host, port, tls })
    }

    /// A new connection.
    pub async fn dial(&self) -> io::Result<Box<dyn Io>> {
        let connect = tokio::net::TcpStream::connect((self.host.as_str(), self.port));
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        tcp.set_nodelay(true)?;
        Ok(match &self.tls {
            None => Box::new(tcp),
            Some((connector, name)) => Box::new(connector.connect(name.clone(), tcp).await?),
        })
    }
}
