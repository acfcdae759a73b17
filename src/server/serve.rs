//! Running the server: binds the HTTP, gRPC and metrics listeners over one [`InferenceServer`]
//! and shuts them down gracefully. [`start`] is a library call (the profiler's embedded default
//! uses it with port 0); [`run`] is `perfbench serve`, serving until SIGINT/SIGTERM.

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
use tokio_stream::wrappers::TcpListenerStream;

use super::core::{InferenceServer, ServerOptions};
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
    pub options: ServerOptions,
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
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningServer {
    /// `http://host:port` of the HTTP front end.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    /// `http://host:port` of the gRPC front end.
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc_addr)
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
pub async fn start(cfg: ServeConfig) -> anyhow::Result<RunningServer> {
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

    // Request/response traffic: send small writes at once rather than wait for more (Nagle).
    let http_listener = http_listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let metrics_listener = metrics_listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let http_app = http::router(core.clone());
    let http_signal = signal();
    let http_task = tokio::spawn(async move {
        if let Err(e) = axum::serve(http_listener, http_app).with_graceful_shutdown(http_signal).await {
            tracing::error!("HTTP server failed: {e}");
        }
    });

    let metrics_app = metrics::router(core.clone());
    let metrics_signal = signal();
    let metrics_task = tokio::spawn(async move {
        if let Err(e) = axum::serve(metrics_listener, metrics_app).with_graceful_shutdown(metrics_signal).await {
            tracing::error!("metrics server failed: {e}");
        }
    });

    let grpc_router = tonic::transport::Server::builder()
        .add_service(grpc::inference_service(core.clone()))
        .add_service(grpc::health_service(core.clone()));
    let grpc_signal = signal();
    let grpc_task = tokio::spawn(async move {
        let incoming = TcpListenerStream::new(grpc_listener).map(|accepted| {
            accepted.inspect(|tcp| {
                let _ = tcp.set_nodelay(true);
            })
        });
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
}

impl ServeArgs {
    pub fn config(&self) -> ServeConfig {
        ServeConfig {
            host: self.host.clone(),
            http_port: self.http_port,
            grpc_port: self.grpc_port,
            metrics_port: self.metrics_port,
            options: ServerOptions {
                model_repository: self.model_repository.clone(),
                models: self.models.clone(),
                max_request_bytes: self.max_request_bytes,
            },
        }
    }
}

/// Serves until SIGINT or SIGTERM, then shuts down gracefully.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let server = start(args.config()).await?;
        eprintln!(
            "perfbench serve: http on {}, grpc on {}, metrics on {}",
            server.http_addr, server.grpc_addr, server.metrics_addr
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
