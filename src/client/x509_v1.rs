//! X.509 version-1 certificates, as `openssl req -x509` and `openssl x509 -req` make them without
//! an extensions config (Triton's own test suite makes its mutual-TLS certificates that way).
//! webpki checks version-3 certificates only; OpenSSL, and so perf_analyzer and Triton, accept
//! version 1. A chain that holds a v1 certificate is checked here instead, as OpenSSL checks it:
//! - every certificate in the chain is within its validity period (expiry);
//! - each signature verifies with its issuer's key, up to a trusted CA (chain); an intermediate
//!   must be a v3 CA (`basicConstraints CA:true`) or a self-signed v1 certificate, as OpenSSL
//!   requires; SHA-1 signatures are refused, as webpki refuses them;
//! - a server's name: its subjectAltName DNS or IP entries when it has them, else its subject's
//!   common name (a v1 certificate has no extensions, so the common name is what names it, as in
//!   curl and gRPC); exact match, ignoring case, or a `*.` wildcard for one leftmost label.
//!
//! Key usage, extended key usage and name constraints do not exist in a v1 certificate, so they
//! are not checked for it. Chains of v3 certificates only still go through webpki unchanged.

use std::net::IpAddr;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, PeerMisbehaved, SignatureScheme};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::oid_registry::{OID_PKCS1_SHA1WITHRSA, OID_SHA1_WITH_RSA};
use x509_parser::prelude::FromDer;
use x509_parser::time::ASN1Time;
use x509_parser::x509::X509Version;

/// Chains longer than this are refused (OpenSSL's default depth is 100; real chains are 2-4).
const MAX_DEPTH: usize = 8;

fn parse<'a>(der: &'a CertificateDer<'_>) -> Result<X509Certificate<'a>, Error> {
    match X509Certificate::from_der(der.as_ref()) {
        Ok(([], cert)) => Ok(cert),
        _ => Err(CertificateError::BadEncoding.into()),
    }
}

/// True when `der` parses as an X.509 version-1 certificate.
pub fn is_v1(der: &CertificateDer<'_>) -> bool {
    parse(der).is_ok_and(|cert| cert.version() == X509Version::V1)
}

/// True when the presented chain holds a v1 certificate, which webpki would refuse.
pub fn chain_has_v1(end_entity: &CertificateDer<'_>, intermediates: &[CertificateDer<'_>]) -> bool {
    is_v1(end_entity) || intermediates.iter().any(is_v1)
}

fn check_time(cert: &X509Certificate<'_>, now: ASN1Time) -> Result<(), Error> {
    let validity = cert.validity();
    if now < validity.not_before {
        return Err(CertificateError::NotValidYet.into());
    }
    if now > validity.not_after {
        return Err(CertificateError::Expired.into());
    }
    Ok(())
}

/// `issuer` signed `cert`, and may sign certificates at all.
fn signed_by(cert: &X509Certificate<'_>, issuer: &X509Certificate<'_>) -> Result<bool, Error> {
    if cert.issuer().as_raw() != issuer.subject().as_raw() {
        return Ok(false);
    }
    let algorithm = &cert.signature_algorithm.algorithm;
    if [OID_PKCS1_SHA1WITHRSA, OID_SHA1_WITH_RSA].contains(algorithm) {
        return Err(Error::General("a certificate is signed with SHA-1, which is not accepted".into()));
    }
    Ok(cert.verify_signature(Some(issuer.public_key())).is_ok())
}

/// OpenSSL's rule for an intermediate: a v3 CA, or a self-signed v1 certificate.
fn may_sign(cert: &X509Certificate<'_>) -> bool {
    match cert.version() {
        X509Version::V1 => cert.subject().as_raw() == cert.issuer().as_raw(),
        _ => cert.is_ca(),
    }
}

/// Checks a chain that holds a v1 certificate: expiry, signatures up to one of `anchors`, and
/// the server's name when `server_name` is given (the server's certificate; `None` for a client's).
pub fn verify_chain(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    anchors: &[CertificateDer<'static>],
    server_name: Option<&ServerName<'_>>,
    now: UnixTime,
) -> Result<(), Error> {
    let now = ASN1Time::from_timestamp(now.as_secs() as i64).map_err(|_| Error::FailedToGetCurrentTime)?;
    let leaf = parse(end_entity)?;
    let intermediates = intermediates.iter().map(parse).collect::<Result<Vec<_>, _>>()?;
    let anchors: Vec<_> = anchors.iter().filter_map(|der| parse(der).ok()).collect();
    check_time(&leaf, now)?;
    if let Some(name) = server_name {
        check_name(&leaf, name)?;
    }
    let mut current = &leaf;
    for _ in 0..MAX_DEPTH {
        for anchor in &anchors {
            if signed_by(current, anchor)? {
                return check_time(anchor, now);
            }
        }
        let mut next = None;
        for candidate in &intermediates {
            if may_sign(candidate) && signed_by(current, candidate)? {
                next = Some(candidate);
                break;
            }
        }
        match next {
            Some(issuer) => {
                check_time(issuer, now)?;
                current = issuer;
            }
            None => return Err(CertificateError::UnknownIssuer.into()),
        }
    }
    Err(CertificateError::UnknownIssuer.into())
}

/// subjectAltName DNS and IP entries when there are any, else the subject's common names.
fn check_name(cert: &X509Certificate<'_>, name: &ServerName<'_>) -> Result<(), Error> {
    let expected = match name {
        ServerName::DnsName(dns) => dns.as_ref().to_ascii_lowercase(),
        ServerName::IpAddress(ip) => IpAddr::from(*ip).to_string(),
        _ => return Err(CertificateError::NotValidForName.into()),
    };
    let mut presented: Vec<String> = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for entry in &san.value.general_names {
            match entry {
                GeneralName::DNSName(dns) => presented.push(dns.to_ascii_lowercase()),
                GeneralName::IPAddress(bytes) => match bytes.len() {
                    4 => presented.push(IpAddr::from(<[u8; 4]>::try_from(*bytes).unwrap()).to_string()),
                    16 => presented.push(IpAddr::from(<[u8; 16]>::try_from(*bytes).unwrap()).to_string()),
                    _ => {}
                },
                _ => {}
            }
        }
    }
    if presented.is_empty() {
        presented = cert
            .subject()
            .iter_common_name()
            .filter_map(|cn| cn.as_str().ok())
            .map(|cn| cn.to_ascii_lowercase())
            .collect();
    }
    if presented.iter().any(|p| name_matches(p, &expected)) {
        Ok(())
    } else {
        Err(CertificateError::NotValidForName.into())
    }
}

fn name_matches(presented: &str, expected: &str) -> bool {
    if presented == expected {
        return true;
    }
    match (presented.strip_prefix("*."), expected.split_once('.')) {
        (Some(suffix), Some((label, rest))) => !label.is_empty() && suffix.contains('.') && suffix == rest,
        _ => false,
    }
}

/// A TLS 1.2 handshake signature made with a v1 certificate's key.
pub fn verify_tls12_signature(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, Error> {
    if !is_v1(cert) {
        return rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms);
    }
    let parsed = parse(cert)?;
    let key = &parsed.public_key().subject_public_key.data;
    let candidates = algorithms
        .mapping
        .iter()
        .find(|(scheme, _)| *scheme == dss.scheme)
        .map(|(_, candidates)| *candidates)
        .ok_or(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme)?;
    // Each candidate verifies only keys of its own type, so trying them in turn is safe.
    match candidates.iter().any(|alg| alg.verify_signature(key, message, dss.signature()).is_ok()) {
        true => Ok(HandshakeSignatureValid::assertion()),
        false => Err(CertificateError::BadSignature.into()),
    }
}

/// A TLS 1.3 handshake signature made with a v1 certificate's key.
pub fn verify_tls13_signature(
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, Error> {
    if !is_v1(cert) {
        return rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms);
    }
    let parsed = parse(cert)?;
    let spki = SubjectPublicKeyInfoDer::from(parsed.public_key().raw);
    rustls::crypto::verify_tls13_signature_with_raw_key(message, &spki, dss, algorithms)
}

/// A certificate chain and its key, checked to belong together. rustls's own check parses the
/// certificate with webpki and so refuses a v1 one; for that one the keys are compared here.
pub fn certified_key(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, Error> {
    let Some(leaf) = chain.first() else {
        return Err(Error::NoCertificatesPresented);
    };
    if !is_v1(leaf) {
        return CertifiedKey::from_der(chain, key, provider);
    }
    let signing_key = provider.key_provider.load_private_key(key)?;
    let matches = match signing_key.public_key() {
        Some(spki) => spki.as_ref() == parse(leaf)?.public_key().raw,
        None => true, // rustls too lets a key that cannot tell its public half through
    };
    if !matches {
        return Err(rustls::InconsistentKeys::KeyMismatch.into());
    }
    Ok(CertifiedKey::new(chain, signing_key))
}

/// The resolver that always answers with `key` (client or server side).
pub fn single(key: CertifiedKey) -> Arc<rustls::sign::SingleCertAndKey> {
    Arc::new(rustls::sign::SingleCertAndKey::from(key))
}

/// The server's check of client certificates: webpki's, except for a chain with a v1 certificate.
#[derive(Debug)]
pub struct ClientVerifier {
    pub inner: Arc<dyn ClientCertVerifier>,
    pub anchors: Vec<CertificateDer<'static>>,
    pub provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for ClientVerifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        if !chain_has_v1(end_entity, intermediates) {
            return self.inner.verify_client_cert(end_entity, intermediates, now);
        }
        verify_chain(end_entity, intermediates, &self.anchors, None, now).map(|()| ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::name_matches;

    #[test]
    fn names_match_exactly_or_by_one_wildcard_label() {
        assert!(name_matches("localhost", "localhost"));
        assert!(name_matches("*.example.com", "a.example.com"));
        assert!(!name_matches("*.example.com", "a.b.example.com"));
        assert!(!name_matches("*.example.com", "example.com"));
        assert!(!name_matches("*.com", "example.com"), "a wildcard needs two labels after it");
        assert!(!name_matches("localhost", "otherhost"));
    }
}
