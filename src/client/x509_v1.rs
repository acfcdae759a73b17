//! X.509 version-1 certificates, as `openssl req -x509` and `openssl x509 -req` make them without
//! an extensions config (Triton's own test suite makes its mutual-TLS certificates that way).
//! webpki checks version-3 certificates only; OpenSSL, and so perf_analyzer and Triton, accept
//! version 1. An end-entity certificate that is v1 is checked here instead:
//! - it is within its validity period (expiry);
//! - its signature verifies with the key of a CA you trust (chain), through rustls's own
//!   signature algorithms (so SHA-1 is refused, as webpki refuses it); a v1 certificate must be
//!   signed by a trusted CA directly, intermediates are not followed (webpki refuses v1 ones);
//! - a server's name is its subject's common name (a v1 certificate has no subjectAltName, so the
//!   common name is what names it, as in curl and gRPC): exact, ignoring case, or a `*.` wildcard
//!   for one leftmost label.
//!
//! Key usage and extended key usage do not exist in a v1 certificate, so they are not checked.
//! Chains whose end entity is v3 still go through webpki unchanged. The DER is read with yasna.

use std::net::IpAddr;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, DigitallySignedStruct, DistinguishedName, Error, PeerMisbehaved, RootCertStore, SignatureScheme,
};
use yasna::tags::{TAG_GENERALIZEDTIME, TAG_UTCTIME};
use yasna::{ASN1Error, ASN1ErrorKind, ASN1Result, BERReader, Tag};

/// The parts of a v1 certificate the checks read. Names and algorithm identifiers hold the
/// contents of their DER SEQUENCE, as rustls's `TrustAnchor` and algorithms do.
struct V1Cert {
    /// The DER of `tbsCertificate`, which the signature covers.
    tbs: Vec<u8>,
    signature_algorithm: Vec<u8>,
    signature: Vec<u8>,
    issuer: Vec<u8>,
    subject: Vec<u8>,
    not_before: i64,
    not_after: i64,
    /// The whole DER `SubjectPublicKeyInfo`.
    spki: Vec<u8>,
}

fn malformed_der() -> ASN1Error {
    ASN1Error::new(ASN1ErrorKind::Invalid)
}

/// `Some` for a well-formed v1 certificate, `None` for any other (v3 ones included).
fn parse_v1(der: &[u8]) -> Option<V1Cert> {
    let (tbs, signature_algorithm, signature) = yasna::parse_der(der, |r| {
        r.read_sequence(|r| {
            let tbs = r.next().read_der()?;
            let algorithm = r.next().read_tagged_der()?.value().to_vec();
            let (signature, _) = r.next().read_bitvec_bytes()?;
            Ok((tbs, algorithm, signature))
        })
    })
    .ok()?;
    yasna::parse_der(&tbs.clone(), |r| {
        r.read_sequence(|r| {
            // v2 and v3 start with an explicit [0] version; v1 leaves it out.
            let serial = r.next();
            if serial.lookahead_tag()? == Tag::context(0) {
                return Err(malformed_der());
            }
            serial.read_der()?;
            r.next().read_der()?; // the signature algorithm again, inside what is signed
            let issuer = r.next().read_tagged_der()?.value().to_vec();
            let (not_before, not_after) =
                r.next().read_sequence(|r| Ok((read_time(r.next())?, read_time(r.next())?)))?;
            let subject = r.next().read_tagged_der()?.value().to_vec();
            let spki = r.next().read_der()?;
            Ok(V1Cert { tbs, signature_algorithm, signature, issuer, subject, not_before, not_after, spki })
        })
    })
    .ok()
}

/// UTCTime (`YYMMDDHHMMSSZ`, years 1950-2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`), in Unix seconds.
fn read_time(r: BERReader<'_, '_>) -> ASN1Result<i64> {
    let value = r.read_tagged_der()?;
    let text = std::str::from_utf8(value.value()).map_err(|_| malformed_der())?;
    let digits = text.strip_suffix('Z').filter(|d| d.bytes().all(|b| b.is_ascii_digit())).ok_or_else(malformed_der)?;
    let (year, rest) = match (value.tag(), digits.len()) {
        (tag, 12) if tag == TAG_UTCTIME => {
            let yy: i64 = digits[..2].parse().map_err(|_| malformed_der())?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &digits[2..])
        }
        (tag, 14) if tag == TAG_GENERALIZEDTIME => (digits[..4].parse().map_err(|_| malformed_der())?, &digits[4..]),
        _ => return Err(malformed_der()),
    };
    let field = |i: usize| rest[i..i + 2].parse::<i64>().map_err(|_| malformed_der());
    let (month, day, hour, minute, second) = (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return Err(malformed_der());
    }
    Ok(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The algorithm identifier (contents) and key bits of a DER `SubjectPublicKeyInfo`.
fn spki_parts(spki: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    yasna::parse_der(spki, |r| {
        r.read_sequence(|r| Ok((r.next().read_tagged_der()?.value().to_vec(), r.next().read_bitvec_bytes()?.0)))
    })
    .ok()
}

/// The DER SEQUENCE around `contents` (a trust anchor keeps only the contents of its SPKI).
fn sequence(contents: &[u8]) -> Vec<u8> {
    [&[0x30][..], &length(contents.len()), contents].concat()
}

fn length(n: usize) -> Vec<u8> {
    if n < 0x80 {
        return vec![n as u8];
    }
    let bytes: Vec<u8> = n.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
    [vec![0x80 | bytes.len() as u8], bytes].concat()
}

/// True when `der` is an X.509 version-1 certificate.
pub fn is_v1(der: &CertificateDer<'_>) -> bool {
    parse_v1(der.as_ref()).is_some()
}

/// `key` (a DER SPKI) signed `message` with `signature` under the certificate signature
/// algorithm `algorithm`, by one of rustls's algorithms (the ones webpki accepts).
fn signature_valid(
    algorithms: &WebPkiSupportedAlgorithms,
    spki: &[u8],
    algorithm: &[u8],
    message: &[u8],
    signature: &[u8],
) -> bool {
    let Some((key_algorithm, key)) = spki_parts(spki) else { return false };
    algorithms.all.iter().any(|alg| {
        alg.signature_alg_id().as_ref() == algorithm
            && alg.public_key_alg_id().as_ref() == key_algorithm
            && alg.verify_signature(&key, message, signature).is_ok()
    })
}

/// Checks a v1 end-entity certificate: expiry, a signature by one of `roots`, and the server's
/// name when `server_name` is given (the server's certificate; `None` for a client's).
pub fn verify(
    end_entity: &CertificateDer<'_>,
    roots: &RootCertStore,
    algorithms: &WebPkiSupportedAlgorithms,
    server_name: Option<&ServerName<'_>>,
    now: UnixTime,
) -> Result<(), Error> {
    let cert = parse_v1(end_entity.as_ref()).ok_or(CertificateError::BadEncoding)?;
    let at = |secs: i64| UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs.max(0) as u64));
    if (now.as_secs() as i64) < cert.not_before {
        return Err(CertificateError::NotValidYetContext { time: now, not_before: at(cert.not_before) }.into());
    }
    if now.as_secs() as i64 > cert.not_after {
        return Err(CertificateError::ExpiredContext { time: now, not_after: at(cert.not_after) }.into());
    }
    let signed = roots.roots.iter().filter(|anchor| anchor.subject.as_ref() == cert.issuer).any(|anchor| {
        let spki = sequence(anchor.subject_public_key_info.as_ref());
        signature_valid(algorithms, &spki, &cert.signature_algorithm, &cert.tbs, &cert.signature)
    });
    if !signed {
        return Err(CertificateError::UnknownIssuer.into());
    }
    match server_name {
        Some(name) => check_name(&cert, name),
        None => Ok(()),
    }
}

/// The subject's common names (OID 2.5.4.3), lower-cased.
fn common_names(subject: &[u8]) -> Vec<String> {
    let mut names = Vec::new();
    let _ = yasna::parse_der(&sequence(subject), |r| {
        r.read_sequence_of(|r| {
            r.read_set_of(|r| {
                r.read_sequence(|r| {
                    let oid = r.next().read_oid()?;
                    let value = r.next().read_tagged_der()?;
                    if oid.components().as_slice() == [2, 5, 4, 3] {
                        names.push(String::from_utf8_lossy(value.value()).to_ascii_lowercase());
                    }
                    Ok(())
                })
            })
        })
    });
    names
}

fn check_name(cert: &V1Cert, name: &ServerName<'_>) -> Result<(), Error> {
    let expected = match name {
        ServerName::DnsName(dns) => dns.as_ref().to_ascii_lowercase(),
        ServerName::IpAddress(ip) => IpAddr::from(*ip).to_string(),
        _ => return Err(CertificateError::NotValidForName.into()),
    };
    let presented = common_names(&cert.subject);
    if presented.iter().any(|cn| name_matches(cn, &expected)) {
        Ok(())
    } else {
        Err(CertificateError::NotValidForNameContext { expected: name.to_owned(), presented }.into())
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
    let Some(parsed) = parse_v1(cert.as_ref()) else {
        return rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms);
    };
    let (key_algorithm, key) = spki_parts(&parsed.spki).ok_or(CertificateError::BadEncoding)?;
    let candidates = algorithms
        .mapping
        .iter()
        .find(|(scheme, _)| *scheme == dss.scheme)
        .map(|(_, candidates)| *candidates)
        .ok_or(PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme)?;
    let valid = candidates.iter().any(|alg| {
        alg.public_key_alg_id().as_ref() == key_algorithm
            && alg.verify_signature(&key, message, dss.signature()).is_ok()
    });
    match valid {
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
    let Some(parsed) = parse_v1(cert.as_ref()) else {
        return rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms);
    };
    let spki = SubjectPublicKeyInfoDer::from(parsed.spki.as_slice());
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
    let Some(parsed) = parse_v1(leaf.as_ref()) else {
        return CertifiedKey::from_der(chain, key, provider);
    };
    let signing_key = provider.key_provider.load_private_key(key)?;
    let matches = match signing_key.public_key() {
        Some(spki) => spki.as_ref() == parsed.spki.as_slice(),
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
    pub roots: Arc<RootCertStore>,
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
        if !is_v1(end_entity) {
            return self.inner.verify_client_cert(end_entity, intermediates, now);
        }
        verify(end_entity, &self.roots, &self.provider.signature_verification_algorithms, None, now)
            .map(|()| ClientCertVerified::assertion())
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
    use super::{days_from_civil, name_matches};

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2026, 11, 26), 20_783);
    }

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
