//! `perfbench llm` replaying a mooncake trace against `perfbench serve`'s llm twin: requests
//! that share leading `hash_ids` share a prompt prefix, which the server's prefix cache counts
//! (`vllm:prefix_cache_hits_total`); the same trace with every hash made unique, and synthetic
//! prompts, give it nothing to hit.

use perfbench::server::serve::{self, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;

use crate::common::{perfbench, stderr};

const LINES: usize = 6;
/// Tokens per hash id (`--prompt-input-tokens-block-size`), two server KV blocks of 16.
const BLOCK: usize = 32;

async fn twin() -> RunningServer {
    let options = ServerOptions { models: vec!["llm".into()], ..Default::default() };
    serve::start(ServeConfig { options, ..Default::default() }).await.expect("server starts")
}

/// The server's prefix-cache hits (in tokens) after `perfbench llm ARGS` against it.
async fn hits_after(server: &RunningServer, args: &[&str]) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("artifacts");
    let url = server.http_url();
    let mut cmd = vec!["llm", "-m", "llm", "-u", &url, "--streaming", "--artifact-dir", artifacts.to_str().unwrap()];
    cmd.extend_from_slice(args);
    let out = tokio::task::spawn_blocking({
        let cmd: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
        move || perfbench(&cmd.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert!(out.status.success(), "perfbench llm {args:?}: {}", stderr(&out));
    let page = reqwest::get(format!("http://{}/metrics", server.metrics_addr)).await.unwrap().text().await.unwrap();
    page.lines()
        .filter(|l| l.starts_with("vllm:prefix_cache_hits_total{") && l.contains("model_name=\"llm\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// A trace of LINES requests 20 ms apart, three blocks each; `shared`: the first two blocks
/// are the same two hash ids on every line.
fn trace(dir: &std::path::Path, shared: bool) -> std::path::PathBuf {
    let lines: Vec<String> = (0..LINES as u64)
        .map(|i| {
            let ids = if shared { [1, 2, 100 + i] } else { [1000 + 3 * i, 1001 + 3 * i, 1002 + 3 * i] };
            let ids = serde_json::json!(ids);
            format!(
                r#"{{"timestamp": {}, "input_length": {}, "output_length": 4, "hash_ids": {ids}}}"#,
                20 * i,
                3 * BLOCK
            )
        })
        .collect();
    let path = dir.join(if shared { "shared.jsonl" } else { "unique.jsonl" });
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_hash_ids_hit_the_prefix_cache_and_unique_ones_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let block = BLOCK.to_string();
    for shared in [false, true] {
        // A fresh server each time: a cache warmed by the other trace would blur the count.
        let server = twin().await;
        let path = trace(dir.path(), shared);
        let hits =
            hits_after(&server, &["--input-file", path.to_str().unwrap(), "--prompt-input-tokens-block-size", &block])
                .await;
        if shared {
            // Every line after the first finds the two shared blocks (64 tokens, 4 KV blocks) cached.
            assert!(hits >= ((LINES - 1) * 2 * BLOCK) as f64, "{hits} prefix-cache hits, shared trace");
        } else {
            assert_eq!(hits, 0.0, "unique hash ids hit the prefix cache");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthetic_prompts_do_not_hit_the_prefix_cache() {
    let server = twin().await;
    let hits = hits_after(
        &server,
        &[
            "--concurrency",
            "4",
            "--request-count",
            "40",
            "--synthetic-input-tokens-mean",
            "64",
            "--output-tokens-mean",
            "2",
        ],
    )
    .await;
    assert_eq!(hits, 0.0, "synthetic prompts shared leading KV blocks");
}
