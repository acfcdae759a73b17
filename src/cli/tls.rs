//! perf_analyzer's TLS and compression flags (`--ssl-https-*`, `--ssl-grpc-*`,
//! `--grpc-compression-algorithm`), read into the client's [`TlsOptions`].

use std::path::PathBuf;

use crate::client::tls::{FileFormat, GrpcCompression, GrpcTls, HttpsTls, TlsOptions};

/// perf_analyzer's flags, to `#[command(flatten)]` into the profile arguments.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct TlsArgs {
    /// HTTPS: verify the server's certificate chain (1) or not (0).
    #[arg(long = "ssl-https-verify-peer", value_name = "0|1", value_parser = ["0", "1"])]
    pub ssl_https_verify_peer: Option<String>,
    /// HTTPS: check that the certificate names the host (1 or 2) or not (0).
    #[arg(long = "ssl-https-verify-host", value_name = "0|1|2", value_parser = ["0", "1", "2"])]
    pub ssl_https_verify_host: Option<String>,
    /// HTTPS: PEM file of the CAs to trust instead of the system's.
    #[arg(long = "ssl-https-ca-certificates-file", value_name = "FILE")]
    pub ssl_https_ca_certificates_file: Option<PathBuf>,
    /// HTTPS: the client certificate, for mutual TLS.
    #[arg(long = "ssl-https-client-certificate-file", value_name = "FILE")]
    pub ssl_https_client_certificate_file: Option<PathBuf>,
    /// HTTPS: the client certificate's format.
    #[arg(long = "ssl-https-client-certificate-type", value_name = "PEM|DER")]
    pub ssl_https_client_certificate_type: Option<FileFormat>,
    /// HTTPS: the client certificate's private key.
    #[arg(long = "ssl-https-private-key-file", value_name = "FILE")]
    pub ssl_https_private_key_file: Option<PathBuf>,
    /// HTTPS: the private key's format.
    #[arg(long = "ssl-https-private-key-type", value_name = "PEM|DER")]
    pub ssl_https_private_key_type: Option<FileFormat>,
    /// gRPC: connect over TLS. perf_analyzer takes it bare; `=true|false` is accepted too.
    #[arg(long = "ssl-grpc-use-ssl", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true",
          value_parser = clap::builder::BoolishValueParser::new())]
    pub ssl_grpc_use_ssl: Option<bool>,
    /// gRPC: PEM file of the CAs to trust instead of the system's.
    #[arg(long = "ssl-grpc-root-certifications-file", value_name = "FILE")]
    pub ssl_grpc_root_certifications_file: Option<PathBuf>,
    /// gRPC: the client's PEM private key, for mutual TLS.
    #[arg(long = "ssl-grpc-private-key-file", value_name = "FILE")]
    pub ssl_grpc_private_key_file: Option<PathBuf>,
    /// gRPC: the client's PEM certificate chain, for mutual TLS.
    #[arg(long = "ssl-grpc-certificate-chain-file", value_name = "FILE")]
    pub ssl_grpc_certificate_chain_file: Option<PathBuf>,
    /// gRPC: compress requests with none, gzip or deflate.
    #[arg(long = "grpc-compression-algorithm", value_name = "ALG")]
    pub grpc_compression_algorithm: Option<GrpcCompression>,
}

impl TlsArgs {
    /// The options, with perf_analyzer's defaults for what was not given; `None` when no flag
    /// was given. [`TlsOptions::check`] judges the combination.
    pub fn options(&self) -> Option<TlsOptions> {
        if *self == TlsArgs::default() {
            return None;
        }
        let https = HttpsTls {
            verify_peer: self.ssl_https_verify_peer.as_deref() != Some("0"),
            verify_host: self.ssl_https_verify_host.as_deref() != Some("0"),
            ca_file: self.ssl_https_ca_certificates_file.clone(),
            client_cert: self.ssl_https_client_certificate_file.clone(),
            client_cert_format: self.ssl_https_client_certificate_type.unwrap_or_default(),
            client_key: self.ssl_https_private_key_file.clone(),
            client_key_format: self.ssl_https_private_key_type.unwrap_or_default(),
        };
        let grpc = GrpcTls {
            use_ssl: self.ssl_grpc_use_ssl.unwrap_or(false),
            root_certs: self.ssl_grpc_root_certifications_file.clone(),
            private_key: self.ssl_grpc_private_key_file.clone(),
            cert_chain: self.ssl_grpc_certificate_chain_file.clone(),
        };
        Some(TlsOptions { https, grpc, grpc_compression: self.grpc_compression_algorithm.unwrap_or_default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tonic::codec::CompressionEncoding;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        tls: TlsArgs,
    }

    fn parse(args: &[&str]) -> Result<TlsOptions, String> {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).unwrap();
        let options = cli.tls.options().unwrap_or_default();
        options.check().map(|()| options)
    }

    #[test]
    fn perf_analyzer_flags_and_defaults() {
        assert_eq!(Cli::try_parse_from(["x"]).unwrap().tls.options(), None);
        let o = parse(&[]).unwrap();
        assert_eq!(o, TlsOptions::default());
        assert!(o.https.verify_peer && o.https.verify_host && !o.grpc.use_ssl);
        let o = parse(&["--ssl-https-verify-peer", "0", "--ssl-https-verify-host", "0"]).unwrap();
        assert!(!o.https.verify_peer && !o.https.verify_host);
        assert!(parse(&["--ssl-https-verify-host", "2"]).unwrap().https.verify_host);
        let o = parse(&["--ssl-grpc-use-ssl", "--grpc-compression-algorithm", "gzip"]).unwrap();
        assert!(o.grpc.use_ssl);
        assert_eq!(o.grpc_compression.encoding(), Some(CompressionEncoding::Gzip));
        assert!(!parse(&["--ssl-grpc-use-ssl=false"]).unwrap().grpc.use_ssl);
        assert!(parse(&["--ssl-grpc-root-certifications-file", "ca.pem"]).unwrap_err().contains("use-ssl"));
        assert!(parse(&["--ssl-https-private-key-file", "k.pem"]).is_err());
        let o = parse(&["--ssl-https-client-certificate-type", "DER", "--ssl-https-private-key-type", "der"]).unwrap();
        assert_eq!((o.https.client_cert_format, o.https.client_key_format), (FileFormat::Der, FileFormat::Der));
        assert!(Cli::try_parse_from(["x", "--grpc-compression-algorithm", "zstd"]).is_err());
        assert!(Cli::try_parse_from(["x", "--ssl-https-verify-peer", "3"]).is_err());
    }
}
