//! The floor for `perfbench serve`'s HTTP path (scripts/bench-hot-paths.sh): a bare axum server
//! that answers every POST with its own body, on the same runtime, listener and socket options
//! as `perfbench serve`. Whatever the real server spends beyond this is its own.
//!
//! Usage: `cargo run --release --example echo_axum -- [PORT]` (default 24200).

use axum::body::Bytes;
use axum::http::header::CONTENT_TYPE;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::serve::ListenerExt;
use axum::Router;

async fn echo(headers: HeaderMap, body: Bytes) -> (HeaderMap, Bytes) {
    // The answer keeps the request's content type and, for binary tensors, its
    // Inference-Header-Content-Length, as an identity model's answer would.
    let mut reply = HeaderMap::new();
    for name in [CONTENT_TYPE.as_str(), "inference-header-content-length"] {
        if let Some(value) = headers.get(name) {
            reply.insert(name, value.clone());
        }
    }
    (reply, body)
}

fn main() -> std::io::Result<()> {
    let port: u16 = std::env::args().nth(1).map_or(24200, |p| p.parse().expect("PORT is a number"));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let app = Router::new().route("/v2/models/{model}/infer", post(echo));
        eprintln!("echo_axum on 127.0.0.1:{port}");
        axum::serve(listener, app).await
    })
}
