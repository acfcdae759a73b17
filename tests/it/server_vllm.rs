//! vLLM's own routes on the twin's API port (issue 43): `/health`, `/ping`, `/version`,
//! `/metrics`, `/tokenize`, `/detokenize` and the rankings routes, their bad input, their
//! `--restricted-api` groups and the `--record-requests` lines of rankings.

use std::time::{Duration, Instant};

use perfbench::server::access::{RestrictedApi, Restriction};
use perfbench::server::serve::{self, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;
use perfbench::tokenize::Tokenizer;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::server_llm::llm_config;

const FAST: &[(&str, &str)] = &[("step_us", "500"), ("decode_us_per_seq", "5"), ("prefill_us_per_token", "1")];

/// `perfbench serve` with one `llm` model, `--record-requests` and these restrictions.
struct Twin {
    server: RunningServer,
    _repo: tempfile::TempDir,
    record: std::path::PathBuf,
    http: reqwest::Client,
}

impl Twin {
    async fn start(params: &[(&str, &str)], restricted: RestrictedApi) -> Twin {
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir(repo.path().join("llm")).unwrap();
        std::fs::write(repo.path().join("llm/config.pbtxt"), llm_config(params)).unwrap();
        let record = repo.path().join("requests.jsonl");
        let options = ServerOptions {
            model_repository: Some(repo.path().to_path_buf()),
            record_requests: Some(record.clone()),
            restricted,
            ..Default::default()
        };
        let server = serve::start(ServeConfig { options, ..Default::default() }).await.expect("server starts");
        Twin { server, _repo: repo, record, http: reqwest::Client::new() }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.http_url())
    }

    async fn get(&self, path: &str) -> (StatusCode, String) {
        let response = self.http.get(self.url(path)).send().await.expect("reaches the server");
        (response.status(), response.text().await.unwrap())
    }

    /// POSTs raw bytes; the answer must be JSON.
    async fn post_raw(&self, path: &str, body: String, header: Option<(&str, &str)>) -> (StatusCode, Value) {
        let mut request = self.http.post(self.url(path)).header("content-type", "application/json").body(body);
        if let Some((name, value)) = header {
            request = request.header(name, value);
        }
        let response = request.send().await.expect("reaches the server");
        let status = response.status();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")))
    }

    async fn post(&self, path: &str, body: &Value) -> (StatusCode, Value) {
        self.post_raw(path, body.to_string(), None).await
    }

    /// The records once `n` are written (a record follows its request's last event).
    async fn records(&self, n: usize) -> Vec<Value> {
        let read = || -> Vec<Value> {
            let text = std::fs::read_to_string(&self.record).unwrap();
            text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while read().len() < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        read()
    }
}

fn cl100k() -> Tokenizer {
    Tokenizer::open("cl100k_base").unwrap()
}

/// A vLLM-named metric's value for the model `llm` in a Prometheus page.
fn metric(page: &str, name: &str) -> f64 {
    let line = page
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains("model_name=\"llm\""))
        .unwrap_or_else(|| panic!("{name} missing from:\n{page}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_ping_version_and_metrics_answer_on_the_api_port() {
    let twin = Twin::start(FAST, RestrictedApi::default()).await;
    assert_eq!(twin.get("/health").await, (StatusCode::OK, String::new()), "vLLM's /health has no body");
    assert_eq!(twin.get("/ping").await.0, StatusCode::OK);
    let ping = twin.http.post(twin.url("/ping")).send().await.unwrap();
    assert_eq!(ping.status(), StatusCode::OK);
    let (status, version) = twin.get("/version").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(serde_json::from_str::<Value>(&version).unwrap(), json!({"version": env!("CARGO_PKG_VERSION")}));

    let response = twin.http.get(twin.url("/metrics")).send().await.unwrap();
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/plain"));
    let page = response.text().await.unwrap();
    // The same families as the metrics port: Triton's and vLLM's.
    for family in ["nv_inference_count", "vllm:num_requests_running", "vllm:prompt_tokens_total"] {
        assert!(page.contains(&format!("# TYPE {family} ")), "{family} missing from:\n{page}");
    }
    let port = format!("http://{}/metrics", twin.server.metrics_addr);
    let port_page = twin.http.get(port).send().await.unwrap().text().await.unwrap();
    let families = |p: &str| p.lines().filter(|l| l.starts_with("# TYPE")).map(String::from).collect::<Vec<_>>();
    assert_eq!(families(&page), families(&port_page));
    twin.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenize_counts_what_chat_and_completions_report_and_detokenize_inverts_it() {
    let twin = Twin::start(&[("step_us", "500"), ("max_model_len", "4096")], RestrictedApi::default()).await;
    let prompt = "Tell me about the night train to the coast, caf\u{e9} and all.";
    let (status, tokens) = twin.post("/tokenize", &json!({"model": "llm", "prompt": prompt})).await;
    assert_eq!(status, StatusCode::OK, "{tokens}");
    assert_eq!(tokens["max_model_len"], 4096);
    assert_eq!(tokens["token_strs"], Value::Null);
    let ids: Vec<u32> = serde_json::from_value(tokens["tokens"].clone()).unwrap();
    assert_eq!(ids, cl100k().encode(prompt));
    assert_eq!(tokens["count"], ids.len());
    let completion = json!({"model": "llm", "prompt": prompt, "max_tokens": 2});
    let (_, answer) = twin.post("/v1/completions", &completion).await;
    assert_eq!(answer["usage"]["prompt_tokens"], tokens["count"], "{answer}");

    // Messages are counted as chat counts them.
    let messages = json!([{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": [{"type": "text", "text": prompt}]}]);
    let (status, chat_tokens) = twin.post("/tokenize", &json!({"model": "llm", "messages": messages})).await;
    assert_eq!(status, StatusCode::OK, "{chat_tokens}");
    let (_, answer) =
        twin.post("/v1/chat/completions", &json!({"model": "llm", "messages": messages, "max_tokens": 2})).await;
    assert_eq!(answer["usage"]["prompt_tokens"], chat_tokens["count"], "{answer}");
    assert!(chat_tokens["count"].as_u64() > tokens["count"].as_u64());

    // vLLM's `model` is optional; the strings are the vocabulary's pieces.
    let (_, strs) = twin.post("/tokenize", &json!({"prompt": "hello world", "return_token_strs": true})).await;
    assert_eq!(strs["token_strs"], json!(["hello", " world"]), "{strs}");

    let (status, text) = twin.post("/detokenize", &json!({"model": "llm", "tokens": ids})).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(text, json!({"prompt": prompt}));
    let (_, empty) = twin.post("/detokenize", &json!({"tokens": []})).await;
    assert_eq!(empty, json!({"prompt": ""}));
    twin.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_sorts_by_relevance_cuts_at_top_n_and_records_each_pair() {
    let twin = Twin::start(FAST, RestrictedApi::default()).await;
    let query = "night train to the coast";
    let documents = json!(["a recipe for rye bread", "the night train to the coast leaves at nine",
                           {"text": "trains run to the coast"}]);
    let request = json!({"model": "llm", "query": query, "documents": documents});
    let (status, body) = twin.post_raw("/v2/rerank", request.to_string(), Some(("x-request-id", "rk"))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["id"].as_str().unwrap().starts_with("rerank-"), "{body}");
    assert_eq!(body["model"], "llm");
    let results = body["results"].as_array().unwrap();
    let order: Vec<u64> = results.iter().map(|r| r["index"].as_u64().unwrap()).collect();
    assert_eq!(order, [1, 2, 0], "the document holding the query first: {body}");
    let scores: Vec<f64> = results.iter().map(|r| r["relevance_score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    assert_eq!(results[0]["document"]["text"], "the night train to the coast leaves at nine");
    assert_eq!(results[1]["document"]["text"], "trains run to the coast");
    let texts = ["a recipe for rye bread", "the night train to the coast leaves at nine", "trains run to the coast"];
    let pair_tokens: Vec<usize> = texts.iter().map(|d| cl100k().count(&format!("{query}\n{d}"))).collect();
    let total: usize = pair_tokens.iter().sum();
    assert_eq!(body["usage"]["total_tokens"], total);
    assert_eq!(body["usage"]["prompt_tokens"], total);

    // Each pair was one prefill-only request through the batcher, recorded under the client's id.
    let records = twin.records(3).await;
    let mut seen: Vec<(String, u64, u64)> = records
        .iter()
        .map(|r| {
            let id = r["id"].as_str().unwrap().to_string();
            (id, r["prompt_tokens"].as_u64().unwrap(), r["completion_tokens"].as_u64().unwrap())
        })
        .collect();
    seen.sort();
    let want: Vec<(String, u64, u64)> =
        pair_tokens.iter().enumerate().map(|(i, &n)| (format!("rk-{i}"), n as u64, 0)).collect();
    assert_eq!(seen, want);
    let (_, page) = twin.get("/metrics").await;
    assert_eq!(metric(&page, "vllm:prompt_tokens_total"), total as f64);

    // The same ranking on every path; top_n cuts it, return_documents drops the texts.
    for path in ["/rerank", "/v1/rerank"] {
        let (_, again) = twin.post(path, &request).await;
        assert_eq!(again["results"], body["results"], "{path}");
    }
    let (_, top) = twin
        .post(
            "/rerank",
            &json!({"query": query, "documents": documents, "top_n": 2,
                                                "return_documents": false}),
        )
        .await;
    let top = top["results"].as_array().unwrap().clone();
    assert_eq!(top.len(), 2);
    assert_eq!(top[0]["index"], 1);
    assert!(top.iter().all(|r| r.get("document").is_none()), "{top:?}");
    let (_, one) = twin.post("/rerank", &json!({"query": query, "documents": ["solo"]})).await;
    assert_eq!(one["results"].as_array().unwrap().len(), 1);
    twin.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_vllm_input_gets_openai_errors_and_the_server_keeps_serving() {
    let twin = Twin::start(&[("step_us", "500"), ("max_model_len", "64")], RestrictedApi::default()).await;
    let long = "word ".repeat(100);
    let long_ids = cl100k().encode(&long);
    let good: [(&str, Value); 5] = [
        ("/tokenize", json!({"model": "llm", "prompt": "hi"})),
        ("/detokenize", json!({"model": "llm", "tokens": [6151]})),
        ("/rerank", json!({"model": "llm", "query": "q", "documents": ["d"]})),
        ("/v1/rerank", json!({"model": "llm", "query": "q", "documents": ["d"]})),
        ("/v2/rerank", json!({"model": "llm", "query": "q", "documents": ["d"]})),
    ];
    let mut cases: Vec<(&str, Value, StatusCode, Option<&str>)> = Vec::new();
    for (path, _) in &good {
        cases.push((
            path,
            json!({"model": "nope", "prompt": "hi", "tokens": [1], "query": "q", "documents": ["d"]}),
            StatusCode::NOT_FOUND,
            Some("model_not_found"),
        ));
    }
    for path in ["/rerank", "/v1/rerank", "/v2/rerank"] {
        let too_long = json!({"model": "llm", "query": "q", "documents": ["short", long]});
        cases.push((path, too_long, StatusCode::BAD_REQUEST, Some("context_length_exceeded")));
        cases.push((path, json!({"model": "llm", "documents": ["d"]}), StatusCode::BAD_REQUEST, None));
        cases.push((path, json!({"model": "llm", "query": "q", "documents": [7]}), StatusCode::BAD_REQUEST, None));
    }
    cases.push(("/tokenize", json!({"model": "llm"}), StatusCode::BAD_REQUEST, None));
    cases.push(("/tokenize", json!({"model": "llm", "prompt": "a", "messages": []}), StatusCode::BAD_REQUEST, None));
    cases.push(("/tokenize", json!({"model": "llm", "messages": []}), StatusCode::BAD_REQUEST, None));
    cases.push(("/detokenize", json!({"model": "llm", "tokens": [-1]}), StatusCode::BAD_REQUEST, None));
    cases.push(("/detokenize", json!({"model": "llm", "tokens": [4_000_000_000u32]}), StatusCode::BAD_REQUEST, None));
    for (path, body, want, code) in cases {
        let (status, reply) = twin.post(path, &body).await;
        assert_eq!(status, want, "{path} {body}: {reply}");
        let error = &reply["error"];
        let message = error["message"].as_str().unwrap_or_else(|| panic!("{path}: {reply}"));
        assert!(!message.is_empty() && !message.contains('\n'), "{message}");
        assert!(error["type"].is_string() && error.get("param").is_some(), "{reply}");
        if let Some(code) = code {
            assert_eq!(error["code"], code, "{path}: {reply}");
        }
        // Still serving: the same route answers a good request.
        let (_, good_body) = good.iter().find(|(p, _)| *p == path).unwrap();
        assert_eq!(twin.post(path, good_body).await.0, StatusCode::OK, "{path} after {body}");
    }
    for (path, _) in &good {
        let (status, reply) = twin.post_raw(path, "{not json".into(), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {reply}");
        assert!(reply["error"]["message"].is_string(), "{path}: {reply}");
    }
    // As in vLLM, a prompt over the context is counted, not refused: the client compares.
    let (status, counted) = twin.post("/tokenize", &json!({"model": "llm", "prompt": long})).await;
    assert_eq!(status, StatusCode::OK, "{counted}");
    assert_eq!(counted["count"], long_ids.len());
    assert!(counted["count"].as_u64().unwrap() > counted["max_model_len"].as_u64().unwrap());
    let (status, text) = twin.post("/detokenize", &json!({"model": "llm", "tokens": long_ids})).await;
    assert_eq!((status, text), (StatusCode::OK, json!({"prompt": long})));
    for (path, body) in &good {
        assert_eq!(twin.post(path, body).await.0, StatusCode::OK, "{path}");
    }
    twin.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_vllm_route_keeps_its_restricted_group() {
    let restrictions = ["health:x-h=1", "metadata:x-m=1", "statistics:x-s=1", "inference:x-i=1"];
    let restricted =
        RestrictedApi::new(restrictions.iter().map(|r| r.parse::<Restriction>().unwrap()).collect()).unwrap();
    let twin = Twin::start(FAST, restricted).await;
    let routes: [(&str, Option<Value>, &str); 10] = [
        ("/health", None, "x-h"),
        ("/ping", None, "x-h"),
        ("/version", None, "x-m"),
        ("/metrics", None, "x-s"),
        ("/tokenize", Some(json!({"prompt": "hi"})), "x-i"),
        ("/detokenize", Some(json!({"tokens": [6151]})), "x-i"),
        ("/rerank", Some(json!({"query": "q", "documents": ["d"]})), "x-i"),
        ("/v1/rerank", Some(json!({"query": "q", "documents": ["d"]})), "x-i"),
        ("/v2/rerank", Some(json!({"query": "q", "documents": ["d"]})), "x-i"),
        ("/v1/models", None, "x-m"),
    ];
    for (path, body, header) in routes {
        for (sent, want) in [(header, StatusCode::OK), ("x-other", StatusCode::FORBIDDEN)] {
            let request = match &body {
                None => twin.http.get(twin.url(path)),
                Some(b) => {
                    twin.http.post(twin.url(path)).header("content-type", "application/json").body(b.to_string())
                }
            };
            let status = request.header(sent, "1").send().await.unwrap().status();
            assert_eq!(status, want, "{path} with {sent}");
        }
    }
    twin.server.shutdown().await;
}
