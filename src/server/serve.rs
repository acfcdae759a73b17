//! Running the server: binds the HTTP, gRPC and metrics listeners over one [`InferenceServer`]
//! and shuts them down gracefully. [`start`] is a library call (the profiler's embedded default
//! uses it with port 0); [`run`] is `perfbench serve`, serving until SIGINT/SIGTERM. HTTP and
//! gRPC take connections through [`listen`](super::listen): limits, TLS, restricted endpoints.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::serve::ListenerExt;
use futures::StreamExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tower::Layer;

use super::access::{RestrictedApi, Restriction};
use super::core::{InferenceServer, ServerOptions, DEFAULT_MAX_CONNECTIONS};
use super::listen::{self, AcceptConfig, ConnectionSettings, GrpcGuardLayer, Guard, TlsFiles};
use super::{grpc, http, metrics};

/// How long shutdown waits for open connections (e.g. an idle gRPC stream) before closing them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Where to listen and what to serve. Port 0 picks a free port.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub host: String,
    pub http_port: u16,
    pub grpc_port: u16,
    pub metrics_port: u16,
    /// What to serve, limits, access rules and TLS.
    pub options: ServerOptions,
    /// How long connections may keep the server waiting.
    pub connections: ConnectionSettings,
}

impl Default for ServeConfig {
    /// Loopback, ephemeral ports, the bundled zoo: what tests and the embedded default want.
    fn default() -> Self {
        ServeConfig {
            host: "127.0.0.1".into(),
            http_port: 0,
            grpc_port: 0,
            metrics_port: 0,
            options: ServerOptions::default(),
            connections: ConnectionSettings::default(),
        }
    }
}

/// A started server and the addresses it actually bound. Dropping it stops the listeners too
/// (without waiting); [`RunningServer::shutdown`] waits for them.
pub struct RunningServer {
    pub core: Arc<InferenceServer>,
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    tls: bool,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningServer {
    /// `http://host:port` (`https://` with TLS) of the HTTP front end.
    pub fn http_url(&self) -> String {
        format!("{}://{}", self.scheme(), self.http_addr)
    }

    /// `http://host:port` (`https://` with TLS) of the gRPC front end.
    pub fn grpc_url(&self) -> String {
        format!("{}://{}", self.scheme(), self.grpc_addr)
    }

    fn scheme(&self) -> &'static str {
        if self.tls {
            "https"
        } else {
            "http"
        }
    }

    /// Stops accepting, lets in-flight requests finish (up to a grace period), then returns.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        for task in self.tasks.drain(..) {
            let abort = task.abort_handle();
            if tokio::time::timeout_at(deadline, task).await.is_err() {
                abort.abort();
            }
        }
    }
}

async fn bind(host: &str, port: u16, what: &str) -> anyhow::Result<(TcpListener, SocketAddr)> {
    let listener =
        TcpListener::bind((host, port)).await.with_context(|| format!("cannot listen for {what} on {host}:{port}"))?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// Loads the models and binds all three listeners; serving runs on the current tokio runtime.
/// A bad TLS certificate or key fails here, before anything listens.
pub async fn start(cfg: ServeConfig) -> anyhow::Result<RunningServer> {
    crate::proto::install_crypto_provider();
    let (http_tls, grpc_tls) = match &cfg.options.tls {
        None => (None, None),
        Some(files) => {
            (Some(listen::server_tls_config(files, b"http/1.1")?), Some(listen::server_tls_config(files, b"h2")?))
        }
    };
    let options = cfg.options.clone();
    // Loading builds models (and may read a repository): off the async workers.
    let core = tokio::task::spawn_blocking(move || InferenceServer::new(options))
        .await
        .context("model loading task failed")?
        .context("cannot load the models")?;
    let (http_listener, http_addr) = bind(&cfg.host, cfg.http_port, "HTTP").await?;
    let (grpc_listener, grpc_addr) = bind(&cfg.host, cfg.grpc_port, "gRPC").await?;
    let (metrics_listener, metrics_addr) = bind(&cfg.host, cfg.metrics_port, "metrics").await?;

    let (stop, stopped) = watch::channel(false);
    let signal = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|&s| s).await;
        }
    };

    let guard = Arc::new(Guard {
        restricted: cfg.options.restricted.clone(),
        request_timeout: cfg.options.request_timeout,
        max_connections: cfg.options.max_connections,
    });
    let connections = &cfg.connections;
    let accept = |tls, grpc: bool| AcceptConfig {
        tls,
        max_connections: cfg.options.max_connections,
        repair_authority: grpc,
        preface_timeout: grpc.then_some(connections.header_read_timeout),
        stamp_arrivals: !grpc && (cfg.options.record_requests.is_some() || cfg.options.otlp_traces_endpoint.is_some()),
    };

    let http_app =
        axum::middleware::from_fn_with_state(guard.clone(), listen::guard_http).layer(http::service(core.clone()));
    let http_incoming = listen::accept(http_listener, accept(http_tls, false), stop.subscribe());
    let http_task =
        tokio::spawn(listen::serve_http(http_incoming, http_app, connections.header_read_timeout, signal()));

    // Request/response traffic: send small writes at once rather than wait for more (Nagle).
    let metrics_listener = metrics_listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });

    let metrics_app = metrics::router(core.clone());
    let metrics_signal = signal();
    let metrics_task = tokio::spawn(async move {
        if let Err(e) = axum::serve(metrics_listener, metrics_app).with_graceful_shutdown(metrics_signal).await {
            tracing::error!("metrics server failed: {e}");
        }
    });

    let mut grpc_server = tonic::transport::Server::builder()
        .http2_keepalive_interval(connections.grpc_keepalive_interval)
        .http2_keepalive_timeout(Some(connections.grpc_keepalive_timeout));
    if let Some(age) = connections.grpc_max_connection_age {
        grpc_server = grpc_server.max_connection_age(age);
    }
    let grpc_router = grpc_server
        .layer(GrpcGuardLayer(guard))
        .add_service(grpc::inference_service(core.clone()))
        .add_service(grpc::health_service(core.clone()));
    let grpc_signal = signal();
    let grpc_incoming = listen::accept(grpc_listener, accept(grpc_tls, true), stop.subscribe());
    let grpc_task = tokio::spawn(async move {
        let incoming = ReceiverStream::new(grpc_incoming).map(Ok::<_, std::io::Error>);
        if let Err(e) = grpc_router.serve_with_incoming_shutdown(incoming, grpc_signal).await {
            tracing::error!("gRPC server failed: {e}");
        }
    });

    tracing::info!(%http_addr, %grpc_addr, %metrics_addr, "perfbench server listening");
    Ok(RunningServer {
        core,
        http_addr,
        grpc_addr,
        metrics_addr,
        tls: cfg.options.tls.is_some(),
        stop,
        tasks: vec![http_task, grpc_task, metrics_task],
    })
}

/// `perfbench serve`: the bundled KServe v2 inference server.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// HTTP/REST port (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    pub http_port: u16,
    /// gRPC port (0 picks a free one).
    #[arg(long, default_value_t = 8001)]
    pub grpc_port: u16,
    /// Prometheus metrics port (0 picks a free one).
    #[arg(long, default_value_t = 8002)]
    pub metrics_port: u16,
    /// Directory of `<model>/config.pbtxt`; without it the bundled model zoo is served.
    #[arg(long, value_name = "DIR")]
    pub model_repository: Option<PathBuf>,
    /// Serve only these models (comma-separated); all of them when omitted.
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    pub models: Vec<String>,
    /// Largest request accepted, in bytes (HTTP body after decompression, gRPC message).
    #[arg(long, default_value_t = ServerOptions::default().max_request_bytes)]
    pub max_request_bytes: usize,
    /// Most elements one input tensor may have; more is answered 429 / RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = ServerOptions::default().max_tensor_elements)]
    pub max_tensor_elements: usize,
    /// Most bytes of system shared memory registered at once; more is answered 429 / RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = ServerOptions::default().max_shm_bytes)]
    pub max_shm_bytes: u64,
    /// Most bytes of HTTP request bodies held at once (0: no limit); further requests wait, unread, for their share.
    #[arg(long, default_value_t = ServerOptions::default().max_body_bytes_in_flight)]
    pub max_body_bytes_in_flight: u64,
    /// Most open connections per protocol (0: no limit); more are answered 503 / RESOURCE_EXHAUSTED and closed.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Seconds a request may take, body and queueing included (0: no limit); then 503 / DEADLINE_EXCEEDED.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub request_timeout: f64,
    /// Endpoint groups that answer only requests carrying HEADER: VALUE (403 / PERMISSION_DENIED
    /// otherwise), over HTTP and gRPC. Groups: health, metadata, inference, shared-memory,
    /// model-config, model-repository, statistics, trace, logging. Repeatable, one key per flag.
    #[arg(long, value_name = "GROUP[,GROUP...]:HEADER=VALUE")]
    pub restricted_api: Vec<Restriction>,
    /// PEM certificate chain: serve HTTPS and gRPC over TLS (metrics stay plain HTTP).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates: clients must present a certificate they signed (mutual TLS).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Seconds an HTTP client may take to send a request's headers, and an HTTP keep-alive
    /// connection may stay idle; seconds a gRPC client may take to send the HTTP/2 preface.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub header_read_timeout: f64,
    /// gRPC: ping idle connections every SECS (0: never), closing those that do not answer
    /// within --grpc-keepalive-timeout.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    pub grpc_keepalive_time: f64,
    /// gRPC: seconds a keepalive ping may go unanswered.
    #[arg(long, value_name = "SECS", default_value_t = 20.0)]
    pub grpc_keepalive_timeout: f64,
    /// gRPC: ask connections older than SECS to go away (GOAWAY; calls in flight finish;
    /// 0: never).
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    pub grpc_max_connection_age: f64,
    /// Generative models (the zoo's `llm`: OpenAI routes under /v1, Triton's generate extension,
    /// gRPC streaming) write one JSON line per finished request here: id, token counts, and the
    /// instants it arrived, was admitted, left each chunk and finished, in CLOCK_MONOTONIC
    /// nanoseconds (the clock Rust's Instant and Python's time.monotonic_ns() read on Linux).
    /// Their text comes from a bundled corpus, seeded by `seed`: sampling fields such as
    /// `temperature` and `top_p` are accepted and change nothing.
    #[arg(long, value_name = "FILE")]
    pub record_requests: Option<PathBuf>,
    /// Generative models export one OpenTelemetry span per finished request to this OTLP/HTTP
    /// collector (protobuf; a URL with no path gets /v1/traces): vLLM's `llm_request` span and
    /// attribute names, `gen_ai.request.id` being the request's X-Request-ID.
    #[arg(long, value_name = "URL")]
    pub otlp_traces_endpoint: Option<String>,
}

impl ServeArgs {
    pub fn config(&self) -> anyhow::Result<ServeConfig> {
        if !(self.request_timeout.is_finite() && self.request_timeout >= 0.0) {
            anyhow::bail!("--request-timeout must be a number of seconds >= 0, got {}", self.request_timeout);
        }
        let request_timeout = (self.request_timeout > 0.0).then(|| Duration::from_secs_f64(self.request_timeout));
        let seconds = |flag: &str, value: f64, zero_is_off: bool| -> anyhow::Result<Option<Duration>> {
            if !(value.is_finite() && (value > 0.0 || zero_is_off && value == 0.0)) {
                let least = if zero_is_off { ">= 0" } else { "> 0" };
                anyhow::bail!("--{flag} must be a number of seconds {least}, got {value}");
            }
            Ok((value > 0.0).then(|| Duration::from_secs_f64(value)))
        };
        let connections = ConnectionSettings {
            header_read_timeout: seconds("header-read-timeout", self.header_read_timeout, false)?.expect("checked > 0"),
            grpc_keepalive_interval: seconds("grpc-keepalive-time", self.grpc_keepalive_time, true)?,
            grpc_keepalive_timeout: seconds("grpc-keepalive-timeout", self.grpc_keepalive_timeout, false)?
                .expect("checked > 0"),
            grpc_max_connection_age: seconds("grpc-max-connection-age", self.grpc_max_connection_age, true)?,
        };
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => {
                Some(TlsFiles { cert: cert.clone(), key: key.clone(), client_ca: self.tls_client_ca.clone() })
            }
            _ => None,
        };
        Ok(ServeConfig {
            host: self.host.clone(),
            http_port: self.http_port,
            grpc_port: self.grpc_port,
            metrics_port: self.metrics_port,
            options: ServerOptions {
                model_repository: self.model_repository.clone(),
                models: self.models.clone(),
                max_request_bytes: self.max_request_bytes,
                max_tensor_elements: self.max_tensor_elements,
                max_shm_bytes: self.max_shm_bytes,
                max_body_bytes_in_flight: self.max_body_bytes_in_flight,
                request_timeout,
                max_connections: self.max_connections,
                restricted: RestrictedApi::new(self.restricted_api.clone()).map_err(anyhow::Error::msg)?,
                tls,
                record_requests: self.record_requests.clone(),
                otlp_traces_endpoint: self.otlp_traces_endpoint.clone(),
            },
            connections,
        })
    }
}

/// Serves until SIGINT or SIGTERM, then shuts down gracefully.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let server = start(args.config()?).await?;
        eprintln!(
            "perfbench serve: {} on {}, grpc{} on {}, metrics on {}",
            if server.tls { "https" } else { "http" },
            server.http_addr,
            if server.tls { " over TLS" } else { "" },
            server.grpc_addr,
            server.metrics_addr
        );
        wait_for_signal().await?;
        tracing::info!("shutting down");
        server.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("cannot listen for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}
