//! The HTTP front end of `perfbench serve`, started in-process on ephemeral ports and driven with
//! reqwest: happy paths, every bad input of issue 2 (each followed by a good request), system
//! shared memory, statistics, the repository extension and Prometheus metrics.

use std::io::{Read, Write};

use perfbench::server::serve::{self, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

use crate::common::{f32_bytes, Region};

const MAX_REQUEST_BYTES: usize = 1 << 20;

async fn start() -> RunningServer {
    let options = ServerOptions { max_request_bytes: MAX_REQUEST_BYTES, ..Default::default() };
    serve::start(ServeConfig { options, ..Default::default() }).await.expect("server starts")
}

struct Reply {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }
    /// The JSON error message; the status must be `status`.
    fn error(&self, status: StatusCode) -> String {
        assert_eq!(self.status, status, "body: {}", String::from_utf8_lossy(&self.body));
        self.json()["error"].as_str().expect("an error string").to_string()
    }
}

struct Http {
    client: Client,
    base: String,
}

impl Http {
    fn new(server: &RunningServer) -> Self {
        Http { client: Client::new(), base: server.http_url() }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        let response = request.send().await.expect("request reaches the server");
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.bytes().await.expect("body").to_vec();
        Reply { status, headers, body }
    }

    async fn get(&self, path: &str) -> Reply {
        self.send(self.client.get(format!("{}{path}", self.base))).await
    }

    async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> Reply {
        self.send(self.client.post(format!("{}{path}", self.base)).body(body)).await
    }

    async fn post_json(&self, path: &str, body: &Value) -> Reply {
        self.post(path, body.to_string()).await
    }

    /// A JSON header followed by binary tensor data.
    async fn post_binary(&self, path: &str, header: &Value, data: &[u8]) -> Reply {
        let header = header.to_string();
        let mut body = header.clone().into_bytes();
        body.extend_from_slice(data);
        let request = self
            .client
            .post(format!("{}{path}", self.base))
            .header("Inference-Header-Content-Length", header.len())
            .body(body);
        self.send(request).await
    }

    /// A good identity request, proving the server still serves after a bad one.
    async fn assert_still_serves(&self) {
        let reply = self.post_json("/v2/models/identity/infer", &json_infer(&[1.0, 2.0])).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", String::from_utf8_lossy(&reply.body));
        assert_eq!(reply.json()["outputs"][0]["data"], json!([1.0, 2.0]));
    }
}

fn json_infer(values: &[f32]) -> Value {
    json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, values.len()], "data": values}]})
}

fn binary_infer(len: usize) -> Value {
    json!({
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, len], "parameters": {"binary_data_size": len * 4}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": true}}]
    })
}

#[tokio::test]
async fn health_metadata_config_and_routing() {
    let server = start().await;
    let http = Http::new(&server);

    for path in
        ["/v2/health/live", "/v2/health/ready", "/v2/models/identity/ready", "/v2/models/identity/versions/1/ready"]
    {
        let r = http.get(path).await;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        assert!(r.body.is_empty(), "{path} has an empty body");
    }
    let r = http.get("/v2/models/nope/ready").await;
    assert_eq!(r.error(StatusCode::BAD_REQUEST), "Model version not ready");

    let meta = http.get("/v2").await.json();
    assert_eq!(meta["name"], "perfbench");
    let extensions: Vec<&str> = meta["extensions"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    for e in ["statistics", "binary_tensor_data", "model_configuration", "system_shared_memory"] {
        assert!(extensions.contains(&e), "{e} listed");
    }

    let model = http.get("/v2/models/identity").await.json();
    assert_eq!(model["versions"], json!(["1"]));
    assert_eq!(model["inputs"][0], json!({"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}));
    assert_eq!(http.get("/v2/models/identity/versions/1").await.json()["name"], "identity");

    let config = http.get("/v2/models/identity/config").await.json();
    assert_eq!(config["max_batch_size"], 64);
    assert_eq!(config["input"][0]["data_type"], "TYPE_FP32");
    assert_eq!(config["model_transaction_policy"]["decoupled"], false);

    let r = http.get("/v2/no/such/route").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json(), json!({"error": "Not Found"}));
    let r = http.get("/v2/models/identity/infer").await;
    assert_eq!(r.error(StatusCode::METHOD_NOT_ALLOWED), "Method Not Allowed");

    let trace = http.get("/v2/trace/setting").await.json();
    assert_eq!(trace["trace_level"], json!(["OFF"]));
    let r = http.post_json("/v2/trace/setting", &json!({"trace_level": ["LOUD"]})).await;
    assert!(r.error(StatusCode::BAD_REQUEST).contains("trace_level"));
    server.shutdown().await;
}

#[tokio::test]
async fn json_inference_echoes_id_and_returns_json_data() {
    let server = start().await;
    let http = Http::new(&server);
    let body = json!({
        "id": "req-7",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [2, 2], "data": [[1.5, 2], [3, 4.25]]}],
        "outputs": [{"name": "OUTPUT0"}]
    });
    let r = http.post_json("/v2/models/identity/versions/1/infer", &body).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.headers.get("inference-header-content-length").is_none());
    let v = r.json();
    assert_eq!(v["id"], "req-7");
    assert_eq!(v["model_name"], "identity");
    assert_eq!(v["model_version"], "1");
    let out = &v["outputs"][0];
    assert_eq!(out["shape"], json!([2, 2]));
    assert_eq!(out["data"], json!([1.5, 2.0, 3.0, 4.25]));
    assert!(out.get("parameters").is_none(), "no parameters object on a JSON output: {out}");

    // Without an id, none comes back.
    let v = http.post_json("/v2/models/identity/infer", &json_infer(&[1.0])).await.json();
    assert!(v.get("id").is_none());

    // BYTES as JSON strings.
    let body = json!({"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 2], "data": ["héllo", ""]}]});
    let v = http.post_json("/v2/models/identity_bytes/infer", &body).await.json();
    assert_eq!(v["outputs"][0]["data"], json!(["héllo", ""]));
    assert_eq!(v["outputs"][0]["datatype"], "BYTES");
    server.shutdown().await;
}

#[tokio::test]
async fn binary_inference_round_trips_bytes_exactly() {
    let server = start().await;
    let http = Http::new(&server);
    let values = [1.0f32, -2.5, f32::MAX, 1e-30];
    let data = f32_bytes(&values);
    let r = http.post_binary("/v2/models/identity/infer", &binary_infer(4), &data).await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.headers["content-type"], "application/octet-stream");
    let header_len: usize = r.headers["inference-header-content-length"].to_str().unwrap().parse().unwrap();
    let head: Value = serde_json::from_slice(&r.body[..header_len]).unwrap();
    assert_eq!(head["outputs"][0]["parameters"]["binary_data_size"], 16);
    assert_eq!(&r.body[header_len..], &data[..]);

    // `binary_data_output` with no outputs listed: every output comes back binary.
    let mut header = binary_infer(4);
    header.as_object_mut().unwrap().remove("outputs");
    header["parameters"] = json!({"binary_data_output": true});
    let r = http.post_binary("/v2/models/identity/infer", &header, &data).await;
    let header_len: usize = r.headers["inference-header-content-length"].to_str().unwrap().parse().unwrap();
    assert_eq!(&r.body[header_len..], &data[..]);

    // Inference-Header-Content-Length: 0 — the whole body is the single input.
    let request = http
        .client
        .post(format!("{}/v2/models/identity/infer", http.base))
        .header("Inference-Header-Content-Length", "0")
        .body(data.clone());
    let r = http.send(request).await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
    let header_len: usize = r.headers["inference-header-content-length"].to_str().unwrap().parse().unwrap();
    let head: Value = serde_json::from_slice(&r.body[..header_len]).unwrap();
    assert_eq!(head["outputs"][0]["shape"], json!([1, 4]));
    assert_eq!(&r.body[header_len..], &data[..]);

    // FP16 travels binary, and cannot be asked for as JSON.
    let half = [0x00u8, 0x3c, 0x00, 0xc0];
    let header = json!({
        "inputs": [{"name": "INPUT0", "datatype": "FP16", "shape": [2], "parameters": {"binary_data_size": 4}}],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": true}}]
    });
    let r = http.post_binary("/v2/models/identity_fp16/infer", &header, &half).await;
    let header_len: usize = r.headers["inference-header-content-length"].to_str().unwrap().parse().unwrap();
    assert_eq!(&r.body[header_len..], &half[..]);
    let mut header = header;
    header["outputs"][0]["parameters"]["binary_data"] = json!(false);
    let r = http.post_binary("/v2/models/identity_fp16/infer", &header, &half).await;
    let e = r.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("FP16") && e.contains("JSON"), "{e}");
    server.shutdown().await;
}

#[tokio::test]
async fn compressed_requests_and_responses() {
    let server = start().await;
    let http = Http::new(&server);
    let body = json_infer(&[3.0; 64]).to_string();

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(body.as_bytes()).unwrap();
    let request = http
        .client
        .post(format!("{}/v2/models/identity/infer", http.base))
        .header("Content-Encoding", "gzip")
        .body(gz.finish().unwrap());
    let r = http.send(request).await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));

    let mut deflate = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    deflate.write_all(body.as_bytes()).unwrap();
    let request = http
        .client
        .post(format!("{}/v2/models/identity/infer", http.base))
        .header("Content-Encoding", "deflate")
        .body(deflate.finish().unwrap());
    assert_eq!(http.send(request).await.status, StatusCode::OK);

    let request = http
        .client
        .post(format!("{}/v2/models/identity/infer", http.base))
        .header("Content-Encoding", "br")
        .body(body.clone());
    let e = http.send(request).await.error(StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(e.contains("Unsupported compression type"), "{e}");

    // The response is gzip when the client accepts it (a raw client, so we see the encoding).
    let raw = Client::builder().no_gzip().no_deflate().build().unwrap();
    let request =
        raw.post(format!("{}/v2/models/identity/infer", http.base)).header("Accept-Encoding", "gzip").body(body);
    let r = http.send(request).await;
    assert_eq!(r.headers["content-encoding"], "gzip");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&r.body[..]).read_to_string(&mut text).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["outputs"][0]["data"][63], 3.0);
    server.shutdown().await;
}

#[tokio::test]
async fn every_bad_input_names_the_problem_and_the_server_keeps_serving() {
    let server = start().await;
    let http = Http::new(&server);
    let infer = "/v2/models/identity/infer";

    let e = http.post_json("/v2/models/nope/infer", &json_infer(&[1.0])).await.error(StatusCode::NOT_FOUND);
    assert!(e.contains("unknown model") && e.contains("'nope'"), "{e}");
    http.assert_still_serves().await;

    let e =
        http.post_json("/v2/models/identity/versions/7/infer", &json_infer(&[1.0])).await.error(StatusCode::NOT_FOUND);
    assert!(e.contains("version 7"), "{e}");
    http.assert_still_serves().await;

    let body = json!({"inputs": [{"name": "WRONG", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]});
    let e = http.post_json(infer, &body).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("unexpected inference input 'WRONG'"), "{e}");
    http.assert_still_serves().await;

    let body = json!({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [1]}]});
    let e = http.post_json(infer, &body).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("data-type is 'INT32'") && e.contains("expects 'FP32'"), "{e}");
    http.assert_still_serves().await;

    let body = json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1, 1], "data": [1.0]}]});
    let e = http.post_json(infer, &body).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("unexpected shape for input 'INPUT0'"), "{e}");
    http.assert_still_serves().await;

    let body = json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1.0, 2.0]}]});
    let e = http.post_json(infer, &body).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("Shape does not match"), "{e}");
    http.assert_still_serves().await;

    // binary_data_size disagrees with the shape.
    let mut header = binary_infer(3);
    header["inputs"][0]["parameters"]["binary_data_size"] = json!(8);
    let e = http.post_binary(infer, &header, &[0u8; 8]).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("expecting 12 bytes but got 8"), "{e}");
    http.assert_still_serves().await;

    // Truncated binary body: 12 bytes declared, 8 sent.
    let e = http.post_binary(infer, &binary_infer(3), &[0u8; 8]).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("expecting 4 additional bytes"), "{e}");
    http.assert_still_serves().await;

    // Leftover bytes after the last input.
    let e = http.post_binary(infer, &binary_infer(3), &[0u8; 13]).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("unexpected additional input data"), "{e}");
    http.assert_still_serves().await;

    // Header length larger than the body.
    let request =
        http.client.post(format!("{}{infer}", http.base)).header("Inference-Header-Content-Length", "999").body("{}");
    let e = http.send(request).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("inference header size"), "{e}");
    http.assert_still_serves().await;

    // Oversized body: a 400 that names the limit, not a dropped connection.
    let big = vec![b' '; 2 * MAX_REQUEST_BYTES];
    let e = http.post(infer, big).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("exceeds the server's limit") && e.contains(&MAX_REQUEST_BYTES.to_string()), "{e}");
    http.assert_still_serves().await;

    let e = http.post(infer, "{\"inputs\": [").await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("failed to parse the request JSON"), "{e}");
    http.assert_still_serves().await;

    let body = json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0], "parameters": {"binary_data_size": 4}}]});
    let e = http.post_json(infer, &body).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("must set only one of"), "{e}");
    http.assert_still_serves().await;

    let body = json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2],
        "parameters": {"shared_memory_region": "never_registered", "shared_memory_byte_size": 8}}]});
    let e = http.post_json(infer, &body).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("Unable to find system shared memory region: 'never_registered'"), "{e}");
    http.assert_still_serves().await;

    // A real region for the offset/size and duplicate cases.
    let region = Region::new("bad", 64);
    let register = json!({"key": region.key, "offset": 0, "byte_size": 64});
    assert_eq!(http.post_json("/v2/systemsharedmemory/region/bad/register", &register).await.status, StatusCode::OK);
    let e =
        http.post_json("/v2/systemsharedmemory/region/bad/register", &register).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("'bad' already in manager"), "{e}");
    http.assert_still_serves().await;

    let body = json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
        "parameters": {"shared_memory_region": "bad", "shared_memory_byte_size": 16, "shared_memory_offset": 56}}]});
    let e = http.post_json(infer, &body).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("Invalid offset + byte size for shared memory region: 'bad'"), "{e}");
    http.assert_still_serves().await;

    let too_big = json!({"key": region.key, "offset": 32, "byte_size": 64});
    let e =
        http.post_json("/v2/systemsharedmemory/region/bad2/register", &too_big).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("Invalid offset + byte size"), "{e}");
    let e = http
        .post_json("/v2/systemsharedmemory/region/x/register", &json!({"key": "/pb_no_such_key", "byte_size": 8}))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert!(e.contains("Unable to open shared memory region"), "{e}");
    let e = http
        .post_json("/v2/systemsharedmemory/region/x/register", &json!({"offset": 0}))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert!(e.contains("missing field"), "{e}");
    http.assert_still_serves().await;
    assert_eq!(http.post("/v2/systemsharedmemory/unregister", "").await.status, StatusCode::OK);
    server.shutdown().await;
}

#[tokio::test]
async fn system_shared_memory_round_trip() {
    let server = start().await;
    let http = Http::new(&server);
    let input = Region::new("in", 64);
    let output = Region::new("out", 64);
    let data = f32_bytes(&[0.5, -1.0, 7.25, 1e9]);
    input.write(16, &data);

    let r = http
        .post_json(
            "/v2/systemsharedmemory/region/in/register",
            &json!({"key": input.key, "offset": 0, "byte_size": 64}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
    let r = http
        .post_json(
            "/v2/systemsharedmemory/region/out/register",
            &json!({"key": output.key, "offset": 8, "byte_size": 56}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let status = http.get("/v2/systemsharedmemory/status").await.json();
    assert_eq!(status.as_array().unwrap().len(), 2);
    let one = http.get("/v2/systemsharedmemory/region/out/status").await.json();
    assert_eq!(one, json!([{"name": "out", "key": output.key, "offset": 8, "byte_size": 56}]));

    let body = json!({
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4],
            "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 16, "shared_memory_offset": 16}}],
        "outputs": [{"name": "OUTPUT0",
            "parameters": {"shared_memory_region": "out", "shared_memory_byte_size": 16, "shared_memory_offset": 4}}]
    });
    let r = http.post_json("/v2/models/identity/infer", &body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
    let out = &r.json()["outputs"][0];
    assert_eq!(
        *out,
        json!({"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4]}),
        "shm outputs carry no data or parameters"
    );
    // Region "out" starts 8 bytes into the object; the output went 4 bytes into the region.
    assert_eq!(output.read(12, 16), data);

    // An output region too small for the result: Triton answers INTERNAL, but the client sized
    // the region, so perfbench answers a client error (issue 13: malformed requests never 5xx).
    let mut small = body.clone();
    small["outputs"][0]["parameters"]["shared_memory_byte_size"] = json!(8);
    let e = http.post_json("/v2/models/identity/infer", &small).await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("should be at least 16 bytes"), "{e}");

    assert_eq!(http.post("/v2/systemsharedmemory/region/in/unregister", "").await.status, StatusCode::OK);
    assert_eq!(http.get("/v2/systemsharedmemory/status").await.json().as_array().unwrap().len(), 1);
    assert_eq!(http.post("/v2/systemsharedmemory/unregister", "").await.status, StatusCode::OK);
    assert_eq!(http.get("/v2/systemsharedmemory/status").await.json(), json!([]));

    // CUDA shared memory: none without a GPU, and unregistering is always fine.
    assert_eq!(http.get("/v2/cudasharedmemory/status").await.json(), json!([]));
    assert_eq!(http.post("/v2/cudasharedmemory/unregister", "").await.status, StatusCode::OK);
    let e = http
        .post_json(
            "/v2/cudasharedmemory/region/g/register",
            &json!({"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 8}),
        )
        .await
        .error(StatusCode::BAD_REQUEST);
    assert!(e.contains("no GPU"), "{e}");
    server.shutdown().await;
}

#[tokio::test]
async fn statistics_count_every_request() {
    let server = start().await;
    let http = Http::new(&server);
    const N: u64 = 5;
    for _ in 0..N {
        http.assert_still_serves().await;
    }
    // A rejected request is not an inference.
    http.post_json("/v2/models/identity/infer", &json!({"inputs": []})).await;

    let stats = http.get("/v2/models/identity/stats").await.json();
    let m = &stats["model_stats"][0];
    assert_eq!(m["name"], "identity");
    assert_eq!(m["version"], "1");
    assert_eq!(m["inference_stats"]["success"]["count"], N);
    assert_eq!(m["inference_count"], N);
    // Sequential requests never share a batch.
    assert_eq!(m["execution_count"], N);
    assert_eq!(m["batch_stats"][0]["batch_size"], 1);
    assert_eq!(m["batch_stats"][0]["compute_infer"]["count"], N);
    for k in ["queue", "compute_input", "compute_infer", "compute_output"] {
        assert_eq!(m["inference_stats"][k]["count"], N, "{k}");
    }
    assert!(m["last_inference"].as_u64().unwrap() > 0);
    assert_eq!(http.get("/v2/models/identity/versions/1/stats").await.json(), stats);

    let all = http.get("/v2/models/stats").await.json();
    let names: Vec<&str> = all["model_stats"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"identity") && names.contains(&"delay"), "{names:?}");

    let e = http.get("/v2/models/nope/stats").await.error(StatusCode::NOT_FOUND);
    assert!(e.contains("'nope'"), "{e}");

    // Prometheus metrics read the same statistics.
    let text = reqwest::get(format!("http://{}/metrics", server.metrics_addr)).await.unwrap().text().await.unwrap();
    for line in [
        "nv_inference_request_success{model=\"identity\",version=\"1\"} 5.000000",
        "nv_inference_count{model=\"identity\",version=\"1\"} 5.000000",
        "nv_inference_exec_count{model=\"identity\",version=\"1\"} 5.000000",
        "nv_inference_pending_request_count{model=\"identity\",version=\"1\"} 0.000000",
        "nv_inference_request_failure{model=\"identity\",reason=\"BACKEND\",version=\"1\"} 0.000000",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    for family in [
        "nv_inference_request_duration_us{",
        "nv_inference_queue_duration_us{",
        "nv_inference_compute_input_duration_us{",
        "nv_inference_compute_infer_duration_us{",
        "nv_inference_compute_output_duration_us{",
        "\nnv_cpu_utilization ",
        "\nnv_cpu_memory_total_bytes ",
        "\nnv_cpu_memory_used_bytes ",
    ] {
        assert!(text.contains(family), "missing {family:?} in\n{text}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn repository_index_unload_and_load() {
    let server = start().await;
    let http = Http::new(&server);
    let index = http.post("/v2/repository/index", "").await.json();
    assert!(index
        .as_array()
        .unwrap()
        .contains(&json!({"name": "delay", "version": "1", "state": "READY", "reason": ""})));

    assert_eq!(http.post("/v2/repository/models/delay/unload", "").await.status, StatusCode::OK);
    let ready_only = http.post_json("/v2/repository/index", &json!({"ready": true})).await.json();
    assert!(!ready_only.as_array().unwrap().iter().any(|m| m["name"] == "delay"));
    let index = http.post("/v2/repository/index", "").await.json();
    assert!(index.as_array().unwrap().iter().any(|m| m["name"] == "delay" && m["state"] == "UNAVAILABLE"));
    assert_eq!(http.get("/v2/models/delay/ready").await.status, StatusCode::BAD_REQUEST);
    let e = http.post("/v2/repository/models/delay/unload", "").await.error(StatusCode::BAD_REQUEST);
    assert!(e.contains("not loaded"), "{e}");

    assert_eq!(http.post("/v2/repository/models/delay/load", "").await.status, StatusCode::OK);
    assert_eq!(http.get("/v2/models/delay/ready").await.status, StatusCode::OK);

    // A config override, as JSON text.
    let mut config = http.get("/v2/models/delay/config").await.json();
    config["parameters"]["delay_us"]["string_value"] = json!("10");
    let r = http
        .post_json("/v2/repository/models/delay/load", &json!({"parameters": {"config": config.to_string()}}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
    let after = http.get("/v2/models/delay/config").await.json();
    assert_eq!(after["parameters"]["delay_us"]["string_value"], "10");

    let e = http
        .post_json("/v2/repository/models/delay/load", &json!({"parameters": {"config": "{not json"}}))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert!(e.contains("bad config JSON"), "{e}");
    let e = http.post("/v2/repository/models/nope/load", "").await.error(StatusCode::NOT_FOUND);
    assert!(e.contains("'nope'"), "{e}");
    let e = http.post("/v2/repository/other/models/delay/load", "").await.error(StatusCode::NOT_IMPLEMENTED);
    assert!(e.contains("repository_name"), "{e}");
    assert_eq!(http.post("/v2/repository/any/index", "").await.status, StatusCode::OK);
    http.assert_still_serves().await;
    server.shutdown().await;
}
