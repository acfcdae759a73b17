//! TLS on both sides (issue 13), with certificates made here by rcgen (no network): the server
//! over HTTPS and gRPC-over-TLS, mutual TLS with a client CA, perf_analyzer's client options
//! (CA file, verify peer/host, client certificate), gRPC request compression, handshakes that
//! fail without hurting the server, and bad certificate files refused at start-up in one line.

use std::path::PathBuf;

use perfbench::client::grpc::GrpcClient;
use perfbench::client::http::HttpClient;
use perfbench::client::tls::{GrpcCompression, GrpcTls, HttpsTls, TlsOptions};
use perfbench::client::{ConnectOptions, InferClient, InputSource, OutputTarget, RequestSpec};
use perfbench::server::listen::TlsFiles;
use perfbench::server::serve::{self, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;
use perfbench::tensor::Tensor;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::common::{perfbench, stderr};

/// A CA, a server certificate for `localhost` signed by it, a client certificate signed by it,
/// and an unrelated CA, as PEM files in a temporary directory.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let ca = ca("perfbench test CA");
        let other = ca_params("someone else's CA");
        let other = CertifiedIssuer::self_signed(other, KeyPair::generate().unwrap()).unwrap();
        let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose, file: &str| {
            let mut params = CertificateParams::new(names).unwrap();
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &ca).unwrap();
            std::fs::write(dir.path().join(format!("{file}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.path().join(format!("{file}.key")), key.serialize_pem()).unwrap();
        };
        leaf(vec!["localhost".into()], ExtendedKeyUsagePurpose::ServerAuth, "server");
        leaf(vec!["client".into()], ExtendedKeyUsagePurpose::ClientAuth, "client");
        // A client certificate from a CA the server does not trust.
        let mut params = CertificateParams::new(vec!["stranger".to_string()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &other).unwrap();
        std::fs::write(dir.path().join("stranger.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("stranger.key"), key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("other-ca.pem"), other.pem()).unwrap();
        Pki { dir }
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn server_files(&self, client_ca: bool) -> TlsFiles {
        TlsFiles {
            cert: self.path("server.pem"),
            key: self.path("server.key"),
            client_ca: client_ca.then(|| self.path("ca.pem")),
        }
    }

    fn https(&self, ca: &str) -> HttpsTls {
        HttpsTls { ca_file: Some(self.path(ca)), ..Default::default() }
    }

    fn grpc(&self, ca: &str) -> GrpcTls {
        GrpcTls { use_ssl: true, root_certs: Some(self.path(ca)), ..Default::default() }
    }
}

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    CertifiedIssuer::self_signed(ca_params(name), KeyPair::generate().unwrap()).unwrap()
}

async fn start(pki: &Pki, client_ca: bool) -> RunningServer {
    let options = ServerOptions { tls: Some(pki.server_files(client_ca)), ..Default::default() };
    let config = ServeConfig { options, ..Default::default() };
    serve::start(config).await.expect("server starts with TLS")
}

/// `https://localhost:PORT`: the name the server certificate carries.
fn localhost(addr: std::net::SocketAddr) -> String {
    format!("https://localhost:{}", addr.port())
}

fn identity_spec() -> RequestSpec {
    RequestSpec {
        model_name: "identity".into(),
        model_version: String::new(),
        inputs: vec![("INPUT0".into(), InputSource::Inline(Tensor::from_f32(vec![1, 3], &[1.0, 2.0, 3.0])))],
        outputs: vec![("OUTPUT0".into(), OutputTarget::Inline)],
        decoupled: false,
    }
}

/// Metadata and one inference; the error in one line otherwise.
async fn round_trip<C: InferClient>(client: C) -> Result<(), String> {
    client.server_metadata().await.map_err(|e| e.to_string())?;
    let prepared = client.prepare(&identity_spec()).map_err(|e| e.to_string())?;
    let (result, _) = client.infer(&prepared, true).await;
    let result = result.map_err(|e| e.to_string())?;
    assert_eq!(result.outputs[0].1.to_f32(), vec![1.0, 2.0, 3.0]);
    Ok(())
}

async fn https(url: &str, tls: HttpsTls) -> Result<(), String> {
    let options = TlsOptions { https: tls, ..Default::default() };
    round_trip(HttpClient::with_tls(url, &ConnectOptions::default(), &options).map_err(|e| e.to_string())?).await
}

async fn grpcs(url: &str, tls: GrpcTls, compression: GrpcCompression) -> Result<(), String> {
    let options = TlsOptions { grpc: tls, grpc_compression: compression, ..Default::default() };
    round_trip(GrpcClient::with_tls(url, &ConnectOptions::default(), &options).map_err(|e| e.to_string())?).await
}

fn one_line(e: &str, needle: &str) {
    assert!(!e.contains('\n'), "one line expected: {e}");
    assert!(e.to_lowercase().contains(needle), "'{needle}' expected in: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_and_grpc_over_tls_with_the_ca() {
    let pki = Pki::new();
    let server = start(&pki, false).await;
    let http = localhost(server.http_addr);
    let grpc = format!("localhost:{}", server.grpc_addr.port());
    assert!(server.http_url().starts_with("https://"));
    https(&http, pki.https("ca.pem")).await.unwrap();
    grpcs(&grpc, pki.grpc("ca.pem"), GrpcCompression::None).await.unwrap();
    grpcs(&grpc, pki.grpc("ca.pem"), GrpcCompression::Gzip).await.unwrap();
    grpcs(&grpc, pki.grpc("ca.pem"), GrpcCompression::Deflate).await.unwrap();

    // Clients that do not trust the CA fail in one line, and the server goes on.
    one_line(&https(&http, pki.https("other-ca.pem")).await.unwrap_err(), "certificate");
    one_line(&https(&http, HttpsTls::default()).await.unwrap_err(), "certificate");
    one_line(&grpcs(&grpc, pki.grpc("other-ca.pem"), GrpcCompression::None).await.unwrap_err(), "certificate");
    // A plain-text client on the TLS port gets an error too.
    let plain = format!("http://127.0.0.1:{}", server.http_addr.port());
    assert!(round_trip(HttpClient::new(&plain, &ConnectOptions::default()).unwrap()).await.is_err());
    let plain = format!("http://127.0.0.1:{}", server.grpc_addr.port());
    assert!(round_trip(GrpcClient::new(&plain, &ConnectOptions::default()).unwrap()).await.is_err());
    https(&http, pki.https("ca.pem")).await.expect("the server goes on after failed handshakes");
    grpcs(&grpc, pki.grpc("ca.pem"), GrpcCompression::None).await.expect("and over gRPC");
    server.shutdown().await;
}

/// Asserts a failure names its cause, its peer (`at`: host:port) and the flag that fixes it.
fn names(e: &str, cause: &str, at: &str, flag: &str) {
    one_line(e, &cause.to_lowercase());
    assert!(e.contains(at), "the peer {at} expected in: {e}");
    assert!(e.contains(flag), "the flag {flag} expected in: {e}");
}

/// Each TLS failure names its cause (unknown CA, hostname mismatch, certificate required, an
/// untrusted or refused client certificate, not TLS at all), the peer and the flag that fixes
/// it, on both protocols.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_failures_name_their_cause_peer_and_flag() {
    let pki = Pki::new();
    let server = start(&pki, false).await;
    let (http_port, grpc_port) = (server.http_addr.port(), server.grpc_addr.port());
    let (http, grpc) = (localhost(server.http_addr), format!("localhost:{grpc_port}"));
    let at = |port: u16| format!("localhost:{port}");
    let e = https(&http, pki.https("other-ca.pem")).await.unwrap_err();
    names(&e, "unknown CA", &at(http_port), "--ssl-https-ca-certificates-file");
    let e = grpcs(&grpc, pki.grpc("other-ca.pem"), GrpcCompression::None).await.unwrap_err();
    names(&e, "unknown CA", &at(grpc_port), "--ssl-grpc-root-certifications-file");
    // The certificate names localhost, not 127.0.0.1.
    let e = https(&format!("https://127.0.0.1:{http_port}"), pki.https("ca.pem")).await.unwrap_err();
    names(&e, "hostname mismatch", &format!("127.0.0.1:{http_port}"), "--ssl-https-verify-host 0");
    let e = grpcs(&format!("127.0.0.1:{grpc_port}"), pki.grpc("ca.pem"), GrpcCompression::None).await.unwrap_err();
    names(&e, "hostname mismatch", &format!("127.0.0.1:{grpc_port}"), "-u");
    server.shutdown().await;

    // Mutual TLS: no client certificate, or one from a CA the server does not trust.
    let server = start(&pki, true).await;
    let (http_port, grpc_port) = (server.http_addr.port(), server.grpc_addr.port());
    let (http, grpc) = (localhost(server.http_addr), format!("localhost:{grpc_port}"));
    let required = "requires a client certificate (TLS alert certificate_required)";
    let e = https(&http, pki.https("ca.pem")).await.unwrap_err();
    names(&e, required, &at(http_port), "--ssl-https-client-certificate-file");
    let e = grpcs(&grpc, pki.grpc("ca.pem"), GrpcCompression::None).await.unwrap_err();
    names(&e, required, &at(grpc_port), "--ssl-grpc-certificate-chain-file");
    let untrusted = "does not trust our client certificate (TLS alert unknown_ca)";
    let stranger = HttpsTls {
        client_cert: Some(pki.path("stranger.pem")),
        client_key: Some(pki.path("stranger.key")),
        ..pki.https("ca.pem")
    };
    let e = https(&http, stranger).await.unwrap_err();
    names(&e, untrusted, &at(http_port), "--ssl-https-client-certificate-file");
    let stranger = GrpcTls {
        private_key: Some(pki.path("stranger.key")),
        cert_chain: Some(pki.path("stranger.pem")),
        ..pki.grpc("ca.pem")
    };
    let e = grpcs(&grpc, stranger, GrpcCompression::None).await.unwrap_err();
    names(&e, untrusted, &at(grpc_port), "--ssl-grpc-certificate-chain-file");
    // The server's own certificate, made for servers only, presented by a client.
    let wrong = HttpsTls {
        client_cert: Some(pki.path("server.pem")),
        client_key: Some(pki.path("server.key")),
        ..pki.https("ca.pem")
    };
    let e = https(&http, wrong).await.unwrap_err();
    names(&e, "refused our client certificate (TLS alert", &at(http_port), "--ssl-https-client-certificate-file");
    server.shutdown().await;

    // TLS to a server that speaks plain text.
    let plain = serve::start(ServeConfig::default()).await.unwrap();
    let (http_port, grpc_port) = (plain.http_addr.port(), plain.grpc_addr.port());
    let e = grpcs(&format!("localhost:{grpc_port}"), pki.grpc("ca.pem"), GrpcCompression::None).await.unwrap_err();
    names(&e, "does not speak TLS", &at(grpc_port), "--ssl-grpc-use-ssl");
    let e = https(&localhost(plain.http_addr), pki.https("ca.pem")).await.unwrap_err();
    names(&e, "does not speak TLS", &at(http_port), "use http://");
    plain.shutdown().await;
}

/// The case through the binary: a client whose certificate the server does not trust
/// ends at start-up with exit 3 (server unreachable) and one line naming the cause, the peer
/// and the flags, not `transport error` or `operation was canceled`; over gRPC and HTTPS.
#[test]
fn profile_with_an_untrusted_client_certificate_names_the_cause() {
    let pki = Pki::new();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = runtime.block_on(start(&pki, true));
    let grpc = format!("localhost:{}", server.grpc_addr.port());
    let http = localhost(server.http_addr);
    let path = |file: &str| pki.path(file).to_str().unwrap().to_string();
    let (ca, key, cert) = (path("ca.pem"), path("stranger.key"), path("stranger.pem"));
    let grpc_flags = [
        "-i",
        "grpc",
        "--ssl-grpc-use-ssl",
        "--ssl-grpc-root-certifications-file",
        &ca,
        "--ssl-grpc-private-key-file",
        &key,
        "--ssl-grpc-certificate-chain-file",
        &cert,
    ];
    let https_flags = [
        "--ssl-https-ca-certificates-file",
        &ca,
        "--ssl-https-private-key-file",
        &key,
        "--ssl-https-client-certificate-file",
        &cert,
    ];
    let runs = [
        (&grpc, &grpc_flags[..], grpc.clone(), "--ssl-grpc-certificate-chain-file"),
        (
            &http,
            &https_flags[..],
            http.trim_start_matches("https://").to_string(),
            "--ssl-https-client-certificate-file",
        ),
    ];
    for (url, flags, at, flag) in runs {
        let mut args = vec!["profile", "-m", "identity", "--shape", "INPUT0:4", "-u", url];
        args.extend_from_slice(flags);
        let out = perfbench(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{err}");
        names(&err, "does not trust our client certificate (TLS alert unknown_ca)", &at, flag);
    }
    runtime.block_on(server.shutdown());
}

/// perf_analyzer's `--ssl-https-verify-peer 0` and `--ssl-https-verify-host 0`, curl's meanings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_peer_and_verify_host() {
    let pki = Pki::new();
    let server = start(&pki, false).await;
    // The certificate names localhost, not 127.0.0.1.
    let by_ip = format!("https://127.0.0.1:{}", server.http_addr.port());
    one_line(&https(&by_ip, pki.https("ca.pem")).await.unwrap_err(), "certificate");
    https(&by_ip, HttpsTls { verify_host: false, ..pki.https("ca.pem") }).await.expect("host not checked");
    one_line(
        &https(&by_ip, HttpsTls { verify_host: false, ..pki.https("other-ca.pem") }).await.unwrap_err(),
        "certificate",
    );
    https(&by_ip, HttpsTls { verify_peer: false, verify_host: false, ..Default::default() })
        .await
        .expect("nothing checked");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_a_client_certificate_from_the_ca() {
    let pki = Pki::new();
    let server = start(&pki, true).await;
    let http = localhost(server.http_addr);
    let grpc = format!("localhost:{}", server.grpc_addr.port());
    let with_cert = HttpsTls {
        client_cert: Some(pki.path("client.pem")),
        client_key: Some(pki.path("client.key")),
        ..pki.https("ca.pem")
    };
    https(&http, with_cert).await.expect("HTTPS with the client certificate");
    let grpc_cert = GrpcTls {
        private_key: Some(pki.path("client.key")),
        cert_chain: Some(pki.path("client.pem")),
        ..pki.grpc("ca.pem")
    };
    grpcs(&grpc, grpc_cert.clone(), GrpcCompression::None).await.expect("gRPC with the client certificate");
    // Without a certificate the handshake is refused; the server is unharmed.
    assert!(!https(&http, pki.https("ca.pem")).await.unwrap_err().contains('\n'));
    assert!(grpcs(&grpc, pki.grpc("ca.pem"), GrpcCompression::None).await.is_err());
    // A certificate made for servers only (the server's own, presented by a client) is refused.
    let wrong = HttpsTls {
        client_cert: Some(pki.path("server.pem")),
        client_key: Some(pki.path("server.key")),
        ..pki.https("ca.pem")
    };
    assert!(https(&http, wrong).await.is_err());
    grpcs(&grpc, grpc_cert, GrpcCompression::Gzip).await.expect("the server goes on");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_certificates_fail_at_start_up_in_one_line() {
    let pki = Pki::new();
    let junk = pki.path("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let cases: [(PathBuf, PathBuf, &str); 4] = [
        (pki.path("missing.pem"), pki.path("server.key"), "missing.pem"),
        (junk.clone(), pki.path("server.key"), "no pem certificate"),
        (pki.path("server.pem"), junk.clone(), "private key"),
        (pki.path("server.pem"), pki.path("client.key"), "cannot be used together"),
    ];
    for (cert, key, needle) in cases {
        let files = TlsFiles { cert, key, client_ca: None };
        let options = ServerOptions { tls: Some(files), ..Default::default() };
        let config = ServeConfig { options, ..Default::default() };
        let e = serve::start(config).await.err().expect("refused").to_string();
        one_line(&e, needle);
    }
}

#[test]
fn serve_with_a_bad_key_exits_with_one_line() {
    let pki = Pki::new();
    let args = ["serve", "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0", "--tls-cert"];
    let cert = pki.path("server.pem");
    let key = pki.path("client.key");
    let mut argv: Vec<&str> = args.to_vec();
    argv.extend([cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()]);
    let out = perfbench(&argv);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot be used together"), "{err}");
    // A key without its certificate is a usage error.
    let out = perfbench(&["serve", "--tls-key", key.to_str().unwrap()]);
    assert!(!out.status.success());
}

/// Helper for the lead's wiring check: `perfbench profile` over HTTPS and gRPC+TLS.
#[test]
fn profile_over_https_and_grpc_tls() {
    let pki = Pki::new();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = runtime.block_on(start(&pki, false));
    let ca = pki.path("ca.pem");
    let http = localhost(server.http_addr);
    let grpc = format!("localhost:{}", server.grpc_addr.port());
    let common = ["profile", "-m", "identity", "--shape", "INPUT0:4", "--measurement-mode", "count_windows"];
    let ca = ca.to_str().unwrap();
    let runs: [Vec<&str>; 2] = [
        vec!["-u", &http, "--ssl-https-ca-certificates-file", ca],
        vec!["-u", &grpc, "-i", "grpc", "--ssl-grpc-use-ssl", "--ssl-grpc-root-certifications-file", ca],
    ];
    for extra in runs {
        let args: Vec<&str> =
            common.iter().copied().chain(extra).chain(["--measurement-request-count", "20"]).collect();
        let out = perfbench(&args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
    runtime.block_on(server.shutdown());
}

/// Certificates as `openssl` makes them without an extensions config (Triton's tests do this):
/// X.509 version 1, which webpki alone refuses. Made by the openssl CLI here, at test time.
struct OpensslPki {
    dir: tempfile::TempDir,
}

impl OpensslPki {
    /// `None`, with a message, when the openssl CLI is missing (`scripts/setup-ci.sh` installs it).
    fn new() -> Option<OpensslPki> {
        if std::process::Command::new("openssl").arg("version").output().is_err() {
            eprintln!("SKIPPED: the openssl CLI is missing, so no v1 certificates can be made");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        // No x509_extensions: `req -x509` and `x509 -req` then make version-1 certificates.
        std::fs::write(dir.path().join("bare.cnf"), "[req]\ndistinguished_name = dn\n[dn]\n").unwrap();
        let pki = OpensslPki { dir };
        pki.ca("ca", "v1 test CA");
        pki.ca("other-ca", "someone else's v1 CA");
        pki.leaf("server", "localhost", "ca", "2");
        pki.leaf("client", "client", "ca", "2");
        pki.leaf("expired", "localhost", "ca", "-1");
        pki.leaf("stranger", "client", "other-ca", "2");
        for name in ["ca", "server", "client"] {
            let text = pki.openssl(&["x509", "-noout", "-text", "-in", &format!("{name}.pem")]);
            assert!(text.contains("Version: 1 (0x0)"), "{name}.pem is not X.509 v1:\n{text}");
        }
        Some(pki)
    }

    fn openssl(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("openssl").args(args).current_dir(self.dir.path()).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn ca(&self, name: &str, cn: &str) {
        let (key, pem, subject) = (format!("{name}.key"), format!("{name}.pem"), format!("/CN={cn}"));
        self.openssl(
            &["req", "-config", "bare.cnf", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
                .into_iter()
                .chain(["-keyout", &key, "-out", &pem, "-subj", &subject])
                .collect::<Vec<_>>(),
        );
    }

    /// A certificate for `cn` signed by `ca`, valid for `days` (negative: already expired).
    fn leaf(&self, name: &str, cn: &str, ca: &str, days: &str) {
        let (key, csr, pem, subject) =
            (format!("{name}.key"), format!("{name}.csr"), format!("{name}.pem"), format!("/CN={cn}"));
        self.openssl(
            &["req", "-config", "bare.cnf", "-new", "-newkey", "rsa:2048", "-nodes"]
                .into_iter()
                .chain(["-keyout", &key, "-out", &csr, "-subj", &subject])
                .collect::<Vec<_>>(),
        );
        let (ca_pem, ca_key) = (format!("{ca}.pem"), format!("{ca}.key"));
        self.openssl(
            &["x509", "-req", "-in", &csr, "-CA", &ca_pem, "-CAkey", &ca_key, "-set_serial", "1"]
                .into_iter()
                .chain(["-days", days, "-out", &pem])
                .collect::<Vec<_>>(),
        );
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    async fn start(&self, cert: &str, client_ca: bool) -> RunningServer {
        let files = TlsFiles {
            cert: self.path(&format!("{cert}.pem")),
            key: self.path(&format!("{cert}.key")),
            client_ca: client_ca.then(|| self.path("ca.pem")),
        };
        let options = ServerOptions { tls: Some(files), ..Default::default() };
        serve::start(ServeConfig { options, ..Default::default() }).await.expect("server starts with v1 certificates")
    }

    fn https(&self, ca: &str, client: Option<&str>) -> HttpsTls {
        HttpsTls {
            ca_file: Some(self.path(&format!("{ca}.pem"))),
            client_cert: client.map(|c| self.path(&format!("{c}.pem"))),
            client_key: client.map(|c| self.path(&format!("{c}.key"))),
            ..Default::default()
        }
    }

    fn grpc(&self, ca: &str, client: Option<&str>) -> GrpcTls {
        GrpcTls {
            use_ssl: true,
            root_certs: Some(self.path(&format!("{ca}.pem"))),
            cert_chain: client.map(|c| self.path(&format!("{c}.pem"))),
            private_key: client.map(|c| self.path(&format!("{c}.key"))),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_certificates_work_for_mutual_tls_on_both_protocols() {
    let Some(pki) = OpensslPki::new() else { return };
    let server = pki.start("server", true).await;
    let http = localhost(server.http_addr);
    let grpc = format!("localhost:{}", server.grpc_addr.port());
    https(&http, pki.https("ca", Some("client"))).await.expect("HTTPS, v1 server and client certificates");
    grpcs(&grpc, pki.grpc("ca", Some("client")), GrpcCompression::None).await.expect("gRPC, v1 both ways");
    // The server still checks the client's chain: a certificate from another CA, or none, is refused.
    assert!(https(&http, pki.https("ca", Some("stranger"))).await.is_err());
    assert!(grpcs(&grpc, pki.grpc("ca", Some("stranger")), GrpcCompression::None).await.is_err());
    assert!(grpcs(&grpc, pki.grpc("ca", None), GrpcCompression::None).await.is_err());
    https(&http, pki.https("ca", Some("client"))).await.expect("the server goes on");
    server.shutdown().await;
}

/// Expiry, chain and host name are still checked for a v1 certificate (the common name names it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_certificates_still_get_expiry_chain_and_host_checks() {
    let Some(pki) = OpensslPki::new() else { return };
    let server = pki.start("server", false).await;
    let http = localhost(server.http_addr);
    let grpc = format!("localhost:{}", server.grpc_addr.port());
    https(&http, pki.https("ca", None)).await.expect("the CA's v1 certificate for localhost");
    one_line(&https(&http, pki.https("other-ca", None)).await.unwrap_err(), "unknown ca");
    one_line(&grpcs(&grpc, pki.grpc("other-ca", None), GrpcCompression::None).await.unwrap_err(), "certificate");
    let by_ip = format!("https://127.0.0.1:{}", server.http_addr.port());
    one_line(&https(&by_ip, pki.https("ca", None)).await.unwrap_err(), "hostname mismatch");
    https(&by_ip, HttpsTls { verify_host: false, ..pki.https("ca", None) }).await.expect("host not checked");
    let grpc_by_ip = format!("127.0.0.1:{}", server.grpc_addr.port());
    assert!(grpcs(&grpc_by_ip, pki.grpc("ca", None), GrpcCompression::None).await.is_err(), "gRPC checks the host");
    server.shutdown().await;

    let expired = pki.start("expired", false).await;
    let http = localhost(expired.http_addr);
    one_line(&https(&http, pki.https("ca", None)).await.unwrap_err(), "expired");
    let grpc = format!("localhost:{}", expired.grpc_addr.port());
    assert!(grpcs(&grpc, pki.grpc("ca", None), GrpcCompression::None).await.is_err());
    expired.shutdown().await;
}

/// As a user meets it: `perfbench profile` over gRPC with v1 mutual-TLS certificates exits 0.
#[test]
fn profile_over_grpc_with_v1_certificates() {
    let Some(pki) = OpensslPki::new() else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = runtime.block_on(pki.start("server", true));
    let grpc = format!("localhost:{}", server.grpc_addr.port());
    let (ca, key, cert) = (pki.path("ca.pem"), pki.path("client.key"), pki.path("client.pem"));
    let args = [
        "profile",
        "-m",
        "identity",
        "--shape",
        "INPUT0:4",
        "--measurement-mode",
        "count_windows",
        "--measurement-request-count",
        "20",
        "-u",
        &grpc,
        "-i",
        "grpc",
        "--ssl-grpc-use-ssl",
        "--ssl-grpc-root-certifications-file",
        ca.to_str().unwrap(),
        "--ssl-grpc-private-key-file",
        key.to_str().unwrap(),
        "--ssl-grpc-certificate-chain-file",
        cert.to_str().unwrap(),
    ];
    let out = perfbench(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    runtime.block_on(server.shutdown());
}
