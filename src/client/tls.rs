//! TLS and compression for the network clients, with perf_analyzer's flags and meanings:
//! `--ssl-https-*` (curl's options: verify peer, verify host, CA bundle, client certificate and
//! key), `--ssl-grpc-*` (gRPC's SslCredentialsOptions: root certificates, private key,
//! certificate chain) and `--grpc-compression-algorithm`. Everything runs on rustls with ring.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::{Deserialize, Serialize};
use tonic::codec::CompressionEncoding;

use super::{ClientError, ClientResult};
use crate::x509_v1;

/// How a certificate or key file is encoded (`--ssl-https-client-certificate-type`,
/// `--ssl-https-private-key-type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    #[default]
    Pem,
    Der,
}

impl FromStr for FileFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "PEM" => Ok(FileFormat::Pem),
            "DER" => Ok(FileFormat::Der),
            other => Err(format!("'{other}': expected PEM or DER")),
        }
    }
}

/// HTTPS, as perf_analyzer sets up curl. Used when the URL is `https://`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpsTls {
    /// `--ssl-https-verify-peer 1`: the server's certificate must chain to a trusted CA.
    pub verify_peer: bool,
    /// `--ssl-https-verify-host 1|2`: the certificate must name the host of the URL.
    pub verify_host: bool,
    /// `--ssl-https-ca-certificates-file`: trusted CAs instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// `--ssl-https-client-certificate-file` / `-type`.
    pub client_cert: Option<PathBuf>,
    pub client_cert_format: FileFormat,
    /// `--ssl-https-private-key-file` / `-type`.
    pub client_key: Option<PathBuf>,
    pub client_key_format: FileFormat,
}

impl Default for HttpsTls {
    /// curl's defaults, which perf_analyzer keeps: verify both.
    fn default() -> Self {
        HttpsTls {
            verify_peer: true,
            verify_host: true,
            ca_file: None,
            client_cert: None,
            client_cert_format: FileFormat::Pem,
            client_key: None,
            client_key_format: FileFormat::Pem,
        }
    }
}

/// gRPC over TLS, as perf_analyzer sets up its SSL channel credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcTls {
    /// `--ssl-grpc-use-ssl`: connect over TLS.
    pub use_ssl: bool,
    /// `--ssl-grpc-root-certifications-file`: trusted CAs instead of the system's.
    pub root_certs: Option<PathBuf>,
    /// `--ssl-grpc-private-key-file`: the client's key, for mutual TLS.
    pub private_key: Option<PathBuf>,
    /// `--ssl-grpc-certificate-chain-file`: the client's certificate chain, for mutual TLS.
    pub cert_chain: Option<PathBuf>,
}

/// `--grpc-compression-algorithm`: how gRPC requests are compressed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GrpcCompression {
    #[default]
    None,
    Gzip,
    Deflate,
}

impl FromStr for GrpcCompression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(GrpcCompression::None),
            "gzip" => Ok(GrpcCompression::Gzip),
            "deflate" => Ok(GrpcCompression::Deflate),
            other => Err(format!("'{other}': expected none, gzip or deflate")),
        }
    }
}

impl GrpcCompression {
    /// The `grpc-encoding` header's value.
    pub fn name(self) -> Option<&'static str> {
        match self {
            GrpcCompression::None => None,
            GrpcCompression::Gzip => Some("gzip"),
            GrpcCompression::Deflate => Some("deflate"),
        }
    }

    pub fn encoding(self) -> Option<CompressionEncoding> {
        match self {
            GrpcCompression::None => None,
            GrpcCompression::Gzip => Some(CompressionEncoding::Gzip),
            GrpcCompression::Deflate => Some(CompressionEncoding::Deflate),
        }
    }
}

/// Everything the network clients need for TLS and compression (a plan's `[sweeps.call.tls]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsOptions {
    pub https: HttpsTls,
    pub grpc: GrpcTls,
    pub grpc_compression: GrpcCompression,
}

impl TlsOptions {
    /// perf_analyzer's defaults: nothing to set up.
    pub fn is_default(&self) -> bool {
        *self == TlsOptions::default()
    }

    /// A key without its certificate (or the reverse), or gRPC files without `use_ssl`, are
    /// mistakes perf_analyzer would silently ignore; they are refused here.
    pub fn check(&self) -> Result<(), String> {
        if self.https.client_cert.is_some() != self.https.client_key.is_some() {
            return Err("--ssl-https-client-certificate-file and --ssl-https-private-key-file go together".into());
        }
        let grpc = &self.grpc;
        if grpc.private_key.is_some() != grpc.cert_chain.is_some() {
            return Err("--ssl-grpc-private-key-file and --ssl-grpc-certificate-chain-file go together".into());
        }
        if (grpc.root_certs.is_some() || grpc.private_key.is_some()) && !grpc.use_ssl {
            return Err("--ssl-grpc-* files take effect only with --ssl-grpc-use-ssl: add it, or drop the files".into());
        }
        Ok(())
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path, what: &str) -> ClientResult<Vec<u8>> {
    std::fs::read(path).map_err(|e| ClientError::Invalid(format!("cannot read the {what} '{}': {e}", path.display())))
}

fn pem_certificates(path: &Path, what: &str) -> ClientResult<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(&read(path, what)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ClientError::Invalid(format!("bad {what} '{}': {e}", path.display())))?;
    if certs.is_empty() {
        return Err(ClientError::Invalid(format!("the {what} '{}' holds no PEM certificate", path.display())));
    }
    Ok(certs)
}

fn certificates(path: &Path, format: FileFormat, what: &str) -> ClientResult<Vec<CertificateDer<'static>>> {
    match format {
        FileFormat::Pem => pem_certificates(path, what),
        FileFormat::Der => Ok(vec![CertificateDer::from(read(path, what)?)]),
    }
}

fn private_key(path: &Path, format: FileFormat) -> ClientResult<PrivateKeyDer<'static>> {
    let bytes = read(path, "TLS private key")?;
    let bad = |e: String| ClientError::Invalid(format!("bad TLS private key '{}': {e}", path.display()));
    match format {
        FileFormat::Pem => PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| bad(e.to_string())),
        FileFormat::Der => PrivateKeyDer::try_from(bytes).map_err(|e| bad(e.to_string())),
    }
}

/// The CAs in `ca_file`, or the system's when none is given (curl and gRPC do the same).
fn root_store(ca_file: Option<&Path>, what: &str) -> ClientResult<RootCertStore> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in pem_certificates(path, what)? {
                roots.add(cert).map_err(|e| {
                    ClientError::Invalid(format!("bad certificate in the {what} '{}': {e}", path.display()))
                })?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
            if roots.is_empty() {
                return Err(ClientError::Invalid(format!(
                    "no system CA certificates found: give the {what} with its flag"
                )));
            }
        }
    }
    Ok(roots)
}

/// Checks the chain and, with `verify_host`, the name; without `verify_peer` accepts any
/// certificate (handshake signatures are still checked, so the key must match the certificate).
/// An X.509 v1 server certificate, which webpki refuses, is checked by [`x509_v1`].
#[derive(Debug)]
struct CurlLikeVerifier {
    inner: Option<Arc<WebPkiServerVerifier>>,
    roots: Arc<RootCertStore>,
    verify_host: bool,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for CurlLikeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(inner) = &self.inner else {
            return Ok(ServerCertVerified::assertion());
        };
        let algorithms = &self.provider.signature_verification_algorithms;
        let verified = if x509_v1::is_v1(end_entity) {
            x509_v1::verify(end_entity, &self.roots, algorithms, Some(server_name), now)
                .map(|()| ServerCertVerified::assertion())
        } else {
            inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        };
        match verified {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.verify_host => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        x509_v1::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        x509_v1::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The server-certificate check: `roots` `None` accepts any certificate (no `verify_peer`);
/// `Some(None)` trusts the system's CAs, `Some(Some(file))` those in the file.
fn verifier(
    roots: Option<Option<&Path>>,
    verify_host: bool,
    what: &str,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> ClientResult<Arc<CurlLikeVerifier>> {
    let (inner, roots) = match roots {
        Some(ca_file) => {
            let roots = Arc::new(root_store(ca_file, what)?);
            let inner = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
                .build()
                .map_err(|e| ClientError::Invalid(format!("TLS setup failed: {e}")))?;
            (Some(inner), roots)
        }
        None => (None, Arc::new(RootCertStore::empty())),
    };
    Ok(Arc::new(CurlLikeVerifier { inner, roots, verify_host, provider: provider.clone() }))
}

/// The client configuration with its verifier and, for mutual TLS, its certificate and key
/// (which may be X.509 v1: [`x509_v1::certified_key`]).
fn with_identity(
    builder: rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier>,
    verifier: Arc<CurlLikeVerifier>,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    provider: &rustls::crypto::CryptoProvider,
    what: &str,
) -> ClientResult<rustls::ClientConfig> {
    let builder = builder.dangerous().with_custom_certificate_verifier(verifier);
    Ok(match identity {
        Some((certs, key)) => {
            let key = x509_v1::certified_key(certs, key, provider)
                .map_err(|e| ClientError::Invalid(format!("bad {what} client certificate or key: {e}")))?;
            builder.with_client_cert_resolver(x509_v1::single(key))
        }
        None => builder.with_no_client_auth(),
    })
}

impl HttpsTls {
    /// The rustls configuration for reqwest (`use_preconfigured_tls`). `https` false: the URL is
    /// plain HTTP, so nothing is loaded (reqwest still wants a configuration to be built).
    pub fn client_config(&self, https: bool) -> ClientResult<rustls::ClientConfig> {
        let provider = provider();
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::Invalid(format!("TLS setup failed: {e}")))?;
        if !https {
            return Ok(builder.with_root_certificates(RootCertStore::empty()).with_no_client_auth());
        }
        let ca = self.ca_file.as_deref();
        let verifier =
            verifier(self.verify_peer.then_some(ca), self.verify_host, "HTTPS CA certificates file", &provider)?;
        let identity = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some((
                certificates(cert, self.client_cert_format, "HTTPS client certificate")?,
                private_key(key, self.client_key_format)?,
            )),
            _ => None,
        };
        let mut config = with_identity(builder, verifier, identity, &provider, "HTTPS")?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

impl GrpcTls {
    /// The rustls configuration of the gRPC connections (ALPN `h2`), or `None` without
    /// `--ssl-grpc-use-ssl`. gRPC always checks the chain and the host name, as perf_analyzer's
    /// SSL channel credentials do.
    pub fn client_config(&self) -> ClientResult<Option<rustls::ClientConfig>> {
        if !self.use_ssl {
            return Ok(None);
        }
        let provider = provider();
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::Invalid(format!("TLS setup failed: {e}")))?;
        let verifier = verifier(Some(self.root_certs.as_deref()), true, "gRPC root certificates file", &provider)?;
        let identity = match (&self.private_key, &self.cert_chain) {
            (Some(key), Some(chain)) => {
                Some((pem_certificates(chain, "gRPC certificate chain file")?, private_key(key, FileFormat::Pem)?))
            }
            _ => None,
        };
        let mut config = with_identity(builder, verifier, identity, &provider, "gRPC")?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Some(config))
    }
}

/// `http://host:port` → `https://host:port` (tonic uses TLS for `https` URLs only).
pub fn https_url(url: &str) -> String {
    match url.strip_prefix("http://") {
        Some(rest) => format!("https://{rest}"),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_files_are_one_line_errors() {
        let https = HttpsTls { ca_file: Some("/nonexistent/ca.pem".into()), ..Default::default() };
        let e = https.client_config(true).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/ca.pem") && !e.contains('\n'), "{e}");
        assert!(https.client_config(false).is_ok(), "plain HTTP loads nothing");
        let grpc = GrpcTls { use_ssl: true, root_certs: Some("/nonexistent/ca.pem".into()), ..Default::default() };
        assert!(grpc.client_config().unwrap_err().to_string().contains("/nonexistent/ca.pem"));
        assert!(GrpcTls::default().client_config().unwrap().is_none());
        assert_eq!(https_url("http://h:1"), "https://h:1");
        assert_eq!(https_url("https://h:1"), "https://h:1");
    }

    #[test]
    fn files_go_in_pairs() {
        let key_only = HttpsTls { client_key: Some("k.pem".into()), ..Default::default() };
        let o = TlsOptions { https: key_only, ..Default::default() };
        assert!(o.check().unwrap_err().contains("go together"));
        let root_only = GrpcTls { root_certs: Some("ca.pem".into()), ..Default::default() };
        let o = TlsOptions { grpc: root_only, ..Default::default() };
        assert!(o.check().unwrap_err().contains("use-ssl"));
        assert!(TlsOptions::default().check().is_ok());
    }
}
