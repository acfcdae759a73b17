//! Property-based fuzzing of the bundled server (issue 13): generated malformed requests over
//! HTTP (JSON bodies, the binary extension's header and payload, every other endpoint) and gRPC
//! (ModelInferRequests with wrong raw sizes, absurd shapes, wrong dtypes, shared-memory
//! parameters pointing anywhere, and bytes that are not protobuf at all), generated
//! `config.pbtxt` texts through the server's config loader, and scenario TOML through
//! `Scenario::parse`.
//!
//! Every request must get an answer, in time, on a connection that stays up: success or a
//! client error (4xx / INVALID_ARGUMENT, NOT_FOUND, ...), never a 5xx, INTERNAL, panic or hang.
//! Each test starts its own server on loopback ephemeral ports.
//!
//! `PERFBENCH_FUZZ_CASES=N` multiplies every test's case count by N (the long mode);
//! `PERFBENCH_FUZZ_SEED=S` changes the seed (fixed by default, so a failure reproduces).
//! Shrunk failures found so far are kept as fixed cases at the end of the file.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use perfbench::plan::scenario::Scenario;
use perfbench::plan::{Plan, Target};
use perfbench::proto::inference as pb;
use perfbench::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use perfbench::proto::inference::infer_parameter::ParameterChoice;
use perfbench::proto::inference::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use perfbench::proto::inference::{InferParameter, InferTensorContents};
use perfbench::server::serve::{self, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestCaseResult, TestRunner};
use serde_json::{json, Map, Value};
use tokio::runtime::Runtime;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::common::Region;

/// A request that takes longer than this counts as a hang.
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(20);
const MAX_REQUEST_BYTES: usize = 1 << 20;
/// Small, so that absurd shapes hit it.
const MAX_TENSOR_ELEMENTS: usize = 1 << 16;

/// The repository the fuzzed server serves: small instances of every backend, so a generated
/// request that happens to be valid computes quickly.
const MODELS: &[(&str, &str)] = &[
    (
        "identity",
        r#"backend: "identity" max_batch_size: 8
           input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
           output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
           dynamic_batching { max_queue_delay_microseconds: 100 }"#,
    ),
    (
        "identity_bytes",
        r#"backend: "identity" max_batch_size: 8
           input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
           output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]"#,
    ),
    (
        "identity_fp16",
        r#"backend: "identity" max_batch_size: 0
           input [ { name: "INPUT0" data_type: TYPE_FP16 dims: [ -1 ] } ]
           output [ { name: "OUTPUT0" data_type: TYPE_FP16 dims: [ -1 ] } ]"#,
    ),
    (
        "multi",
        r#"backend: "identity" max_batch_size: 4
           input [ { name: "INPUT0" data_type: TYPE_INT8 dims: [ 2, -1 ] },
                   { name: "INPUT1" data_type: TYPE_BOOL dims: [ 3 ] } ]
           output [ { name: "OUTPUT0" data_type: TYPE_INT8 dims: [ 2, -1 ] },
                    { name: "OUTPUT1" data_type: TYPE_BOOL dims: [ 3 ] } ]
           dynamic_batching { }
           instance_group [ { count: 2 } ]"#,
    ),
    (
        "delay",
        r#"backend: "delay" max_batch_size: 8
           input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
           output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
           parameters { key: "delay_us" value { string_value: "50" } }"#,
    ),
    (
        "bert",
        r#"backend: "bert" max_batch_size: 4
           input [ { name: "input__0" data_type: TYPE_INT32 dims: [ 8 ] },
                   { name: "input__1" data_type: TYPE_INT32 dims: [ 8 ] },
                   { name: "input__2" data_type: TYPE_INT32 dims: [ 8 ] } ]
           output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 8 ] },
                    { name: "output__1" data_type: TYPE_FP32 dims: [ 8 ] } ]
           dynamic_batching { }
           parameters { key: "layers" value { string_value: "1" } }
           parameters { key: "hidden" value { string_value: "8" } }
           parameters { key: "heads" value { string_value: "2" } }
           parameters { key: "ffn" value { string_value: "16" } }
           parameters { key: "vocab" value { string_value: "20" } }
           parameters { key: "seq" value { string_value: "8" } }"#,
    ),
    (
        "dlrm",
        r#"backend: "dlrm" max_batch_size: 16
           input [ { name: "numerical_features" data_type: TYPE_FP32 dims: [ 2 ] },
                   { name: "categorical_features" data_type: TYPE_INT64 dims: [ 3 ] } ]
           output [ { name: "click_probability" data_type: TYPE_FP32 dims: [ 1 ] } ]
           parameters { key: "table_rows" value { string_value: "5" } }
           parameters { key: "embedding_dim" value { string_value: "4" } }
           parameters { key: "bottom_mlp" value { string_value: "8" } }
           parameters { key: "top_mlp" value { string_value: "8" } }"#,
    ),
];

/// Every test's fixture: a runtime, a server over [`MODELS`], clients, and a registered
/// shared-memory region (`fz_region`, 256 bytes) that generated requests may point into.
struct Fixture {
    rt: Runtime,
    server: RunningServer,
    http: reqwest::Client,
    grpc: Channel,
    _repository: tempfile::TempDir,
    _region: Region,
}

impl Fixture {
    fn start(tag: &str) -> Fixture {
        let repository = tempfile::tempdir().unwrap();
        for (name, text) in MODELS {
            std::fs::create_dir_all(repository.path().join(name)).unwrap();
            std::fs::write(repository.path().join(name).join("config.pbtxt"), text).unwrap();
        }
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let options = ServerOptions {
            model_repository: Some(repository.path().to_path_buf()),
            max_request_bytes: MAX_REQUEST_BYTES,
            max_tensor_elements: MAX_TENSOR_ELEMENTS,
            max_shm_bytes: 1 << 20,
            request_timeout: Some(Duration::from_secs(10)),
            ..Default::default()
        };
        let server = rt.block_on(serve::start(ServeConfig { options, ..Default::default() })).expect("server starts");
        let region = Region::new(tag, 256);
        server.core.shm.register("fz_region", &region.key, 0, 256).expect("registers the fuzz region");
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let grpc = rt.block_on(Channel::from_shared(server.grpc_url()).unwrap().connect()).expect("gRPC connects");
        Fixture { rt, server, http, grpc, _repository: repository, _region: region }
    }

    fn grpc_client(&self) -> GrpcInferenceServiceClient<Channel> {
        GrpcInferenceServiceClient::new(self.grpc.clone())
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    /// A good request over each protocol still works.
    fn assert_still_serves(&self) {
        self.rt.block_on(async {
            let body = json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}]});
            let url = format!("{}/v2/models/identity/infer", self.server.http_url());
            let r = self.http.post(url).body(body.to_string()).send().await.expect("HTTP answers");
            assert_eq!(r.status(), 200, "a good HTTP request still works");
            let request = pb::ModelInferRequest {
                model_name: "identity".into(),
                inputs: vec![InferInputTensor {
                    name: "INPUT0".into(),
                    datatype: "FP32".into(),
                    shape: vec![1, 1],
                    ..Default::default()
                }],
                raw_input_contents: vec![vec![0u8; 4].into()],
                ..Default::default()
            };
            self.grpc_client().model_infer(request).await.expect("a good gRPC request still works");
        });
    }
}

/// Case count: `base`, times `PERFBENCH_FUZZ_CASES` in the long mode.
pub(crate) fn runner(base: u32) -> TestRunner {
    let factor: u32 = std::env::var("PERFBENCH_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let seed: u64 = std::env::var("PERFBENCH_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(13);
    TestRunner::new(Config {
        cases: base.saturating_mul(factor.max(1)),
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_iters: 512,
        ..Config::default()
    })
}

/// Runs `runner` and panics with the shrunk case, ready to be pasted into a fixed test.
pub(crate) fn check<S: Strategy>(mut runner: TestRunner, strategy: S, test: impl Fn(S::Value) -> TestCaseResult)
where
    S::Value: std::fmt::Debug,
{
    let count = std::sync::atomic::AtomicU32::new(0);
    let counted = |value| {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        test(value)
    };
    if let Err(e) = runner.run(&strategy, counted) {
        panic!("{e}");
    }
    eprintln!("{} generated cases", count.into_inner());
}

// ---------------------------------------------------------------------------------------------
// What a good answer is.

/// The status and body of `request`'s answer, which must come in time on a live connection.
pub(crate) async fn answered_in_time(
    request: reqwest::RequestBuilder,
) -> Result<(reqwest::StatusCode, bytes::Bytes), TestCaseError> {
    let send = async {
        let response = request.send().await?;
        let status = response.status();
        let body = response.bytes().await?;
        Ok::<_, reqwest::Error>((status, body))
    };
    match tokio::time::timeout(ANSWER_WITHIN, send).await {
        Err(_) => Err(TestCaseError::fail("no answer in time (hang)")),
        Ok(Err(e)) => Err(TestCaseError::fail(format!("no answer: {}", error_chain(&e)))),
        Ok(Ok(pair)) => Ok(pair),
    }
}

/// An HTTP answer: in time, on a live connection, not a 5xx, and an error that is a KServe
/// `{"error": "..."}` body. 501 is allowed only where `unsupported_ok` (Triton's UNSUPPORTED:
/// a feature the server does not have, such as changing trace settings).
async fn http_answer(request: reqwest::RequestBuilder, unsupported_ok: bool) -> Result<u16, TestCaseError> {
    let (status, body) = answered_in_time(request).await?;
    let text = String::from_utf8_lossy(&body);
    if status.is_server_error() && !(unsupported_ok && status == 501) {
        return Err(TestCaseError::fail(format!("server error {status}: {text}")));
    }
    if !status.is_success() && status != 405 {
        let parsed: Option<Value> = serde_json::from_slice(&body).ok();
        if !parsed.as_ref().is_some_and(|v| v["error"].is_string()) {
            return Err(TestCaseError::fail(format!("{status} without a KServe error body: {text}")));
        }
    }
    Ok(status.as_u16())
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// gRPC codes that are a client's mistake or a limit, never the server's fault.
const CLIENT_CODES: &[Code] = &[
    Code::InvalidArgument,
    Code::NotFound,
    Code::AlreadyExists,
    Code::ResourceExhausted,
    Code::PermissionDenied,
    Code::FailedPrecondition,
    Code::OutOfRange,
];

pub(crate) fn grpc_verdict<T>(result: Result<Result<T, Status>, tokio::time::error::Elapsed>) -> TestCaseResult {
    match result {
        Err(_) => Err(TestCaseError::fail("no answer in time (hang)")),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) if CLIENT_CODES.contains(&status.code()) && !status.message().is_empty() => Ok(()),
        Ok(Err(status)) => Err(TestCaseError::fail(format!(
            "{:?}: {} {}",
            status.code(),
            status.message(),
            std::error::Error::source(&status).map(error_chain).unwrap_or_default()
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// Generators.

const MODEL_NAMES: &[&str] =
    &["identity", "identity_bytes", "identity_fp16", "multi", "delay", "bert", "dlrm", "nope", "", "identity/../x"];
const TENSOR_NAMES: &[&str] = &[
    "INPUT0",
    "INPUT1",
    "OUTPUT0",
    "OUTPUT1",
    "input__0",
    "input__1",
    "input__2",
    "output__0",
    "numerical_features",
    "categorical_features",
    "click_probability",
    "",
    "x",
];
pub(crate) const DATATYPES: &[&str] = &[
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64", "BYTES",
    "BF16", "fp32", "STRING", "", "FP8",
];
const PARAMETER_KEYS: &[&str] = &[
    "binary_data_size",
    "binary_data",
    "binary_data_output",
    "shared_memory_region",
    "shared_memory_byte_size",
    "shared_memory_offset",
    "priority",
    "timeout",
    "sequence_id",
    "triton_x",
];
const JSON_KEYS: &[&str] =
    &["id", "inputs", "outputs", "parameters", "name", "datatype", "shape", "data", "key", "offset", "byte_size"];

/// A dimension: mostly small, sometimes zero, negative or absurd.
fn dim() -> impl Strategy<Value = i64> {
    prop_oneof![
        6 => 1i64..5,
        1 => Just(0i64),
        1 => -3i64..0,
        1 => prop::sample::select(vec![1 << 16, 1 << 31, 1 << 40, i64::MAX, i64::MIN, 3_000_000_007]),
    ]
}

pub(crate) fn shape() -> impl Strategy<Value = Vec<i64>> {
    prop::collection::vec(dim(), 0..5)
}

pub(crate) fn pick(list: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop_oneof![8 => prop::sample::select(list).prop_map(str::to_string), 1 => "\\PC{0,10}"]
}

pub(crate) fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..70).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        pick(TENSOR_NAMES).prop_map(Value::from),
        pick(DATATYPES).prop_map(Value::from),
        Just(Value::from("fz_region")),
    ]
}

pub(crate) fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((pick(JSON_KEYS), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

fn parameters() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((pick(PARAMETER_KEYS), json_leaf()), 0..4).prop_map(|kv| kv.into_iter().collect())
}

/// `data` for a shape: the right count of numbers, a wrong count, or any JSON.
fn json_data(shape: &[i64]) -> BoxedStrategy<Option<Value>> {
    let count = shape.iter().try_fold(1usize, |a, &d| usize::try_from(d).ok().and_then(|d| a.checked_mul(d)));
    let right = match count {
        Some(n) if n <= 64 => prop::collection::vec(json_leaf(), n).prop_map(|v| Some(Value::Array(v))).boxed(),
        _ => Just(None).boxed(),
    };
    prop_oneof![
        3 => right,
        2 => prop::collection::vec((-5i64..300).prop_map(Value::from), 0..12).prop_map(|v| Some(Value::Array(v))),
        2 => json_value().prop_map(Some),
        1 => Just(None),
    ]
    .boxed()
}

fn json_input() -> impl Strategy<Value = Value> {
    (pick(TENSOR_NAMES), pick(DATATYPES), shape(), parameters()).prop_flat_map(|(name, datatype, shape, params)| {
        json_data(&shape).prop_map(move |data| {
            let mut input = json!({"name": name, "datatype": datatype, "shape": shape});
            if let Some(data) = data {
                input["data"] = data;
            }
            if !params.is_empty() {
                input["parameters"] = Value::Object(params.clone());
            }
            input
        })
    })
}

fn json_output() -> impl Strategy<Value = Value> {
    (pick(TENSOR_NAMES), parameters()).prop_map(|(name, params)| json!({"name": name, "parameters": params}))
}

/// An inference header: mostly the right structure with wrong content, sometimes any JSON.
fn infer_json() -> impl Strategy<Value = Value> {
    let structured = (
        prop::collection::vec(json_input(), 0..4),
        prop::option::of(prop::collection::vec(json_output(), 0..3)),
        prop::option::of(parameters()),
        prop::option::of(json_leaf()),
    )
        .prop_map(|(inputs, outputs, params, id)| {
            let mut body = json!({ "inputs": inputs });
            if let Some(o) = outputs {
                body["outputs"] = Value::Array(o);
            }
            if let Some(p) = params {
                body["parameters"] = Value::Object(p);
            }
            if let Some(id) = id {
                body["id"] = id;
            }
            body
        });
    prop_oneof![5 => structured, 1 => json_value()]
}

/// Bytes of an HTTP JSON body: serialised JSON, sometimes cut short or with junk around it.
fn json_body() -> impl Strategy<Value = Vec<u8>> {
    (infer_json(), 0u8..8, prop::collection::vec(any::<u8>(), 0..16)).prop_map(|(v, how, junk)| {
        let mut bytes = v.to_string().into_bytes();
        match how {
            0 => bytes.truncate(bytes.len() / 2),
            1 => bytes.extend_from_slice(&junk),
            2 => bytes = junk,
            _ => {}
        }
        bytes
    })
}

#[derive(Debug, Clone)]
struct HttpCase {
    model: String,
    version: Option<String>,
    body: Vec<u8>,
    header_len: Option<String>,
    encoding: Option<String>,
}

fn header_len(json_len: usize) -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        4 => Just(Some(json_len.to_string())),
        1 => Just(None),
        1 => Just(Some("0".to_string())),
        1 => (0..json_len + 16).prop_map(|n| Some(n.to_string())),
        1 => prop::sample::select(vec!["-1", "", " 12 ", "1e3", "abc", "18446744073709551616", "4294967296"])
            .prop_map(|s| Some(s.to_string())),
    ]
}

/// A binary-extension body: a JSON header (with `binary_data_size`s right or wrong), then
/// tensor bytes of a right or wrong length.
fn binary_case() -> impl Strategy<Value = HttpCase> {
    (pick(MODEL_NAMES), infer_json(), prop::collection::vec(0usize..48, 0..4), any::<u8>())
        .prop_flat_map(|(model, mut header, sizes, how)| {
            // Give some inputs binary sizes, the way real clients send them.
            if let Some(inputs) = header.get_mut("inputs").and_then(Value::as_array_mut) {
                for (input, size) in inputs.iter_mut().zip(&sizes) {
                    if let Some(obj) = input.as_object_mut() {
                        obj.remove("data");
                        obj.insert("parameters".into(), json!({ "binary_data_size": size }));
                    }
                }
            }
            let json = header.to_string();
            let tail: usize = sizes.iter().sum::<usize>();
            let data = match how % 3 {
                0 => prop::collection::vec(any::<u8>(), tail).boxed(),
                1 => prop::collection::vec(any::<u8>(), 0..tail + 8).boxed(),
                _ => prop::collection::vec(any::<u8>(), 0..64).boxed(),
            };
            (Just(model), Just(json.clone()), data, header_len(json.len()))
        })
        .prop_map(|(model, json, data, header_len)| {
            let mut body = json.into_bytes();
            body.extend_from_slice(&data);
            HttpCase { model, version: None, body, header_len, encoding: None }
        })
}

fn json_case() -> impl Strategy<Value = HttpCase> {
    (
        pick(MODEL_NAMES),
        prop::option::of(prop::sample::select(vec!["1", "2", "0", "-1", "latest"]).prop_map(str::to_string)),
        json_body(),
        prop_oneof![8 => Just(None), 1 => prop::sample::select(vec!["gzip", "deflate", "br", "identity", "x"]).prop_map(|s| Some(s.to_string()))],
    )
        .prop_map(|(model, version, body, encoding)| HttpCase { model, version, body, header_len: None, encoding })
}

async fn send_http(f: &Fixture, case: &HttpCase) -> Result<u16, TestCaseError> {
    let mut path = format!("/v2/models/{}", urlencode(&case.model));
    if let Some(v) = &case.version {
        path.push_str(&format!("/versions/{v}"));
    }
    path.push_str("/infer");
    let mut request = f.http.post(format!("{}{path}", f.server.http_url())).body(case.body.clone());
    if let Some(n) = &case.header_len {
        request = request.header("Inference-Header-Content-Length", n.as_str());
    }
    if let Some(e) = &case.encoding {
        request = request.header("Content-Encoding", e.as_str());
    }
    http_answer(request, false).await
}

fn urlencode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// HTTP.

#[test]
fn http_json_bodies() {
    let f = Fixture::start("fz_json");
    check(runner(600), json_case(), |case| f.rt.block_on(send_http(&f, &case)).map(|_| ()));
    f.assert_still_serves();
}

#[test]
fn http_binary_extension() {
    let f = Fixture::start("fz_binary");
    check(runner(400), binary_case(), |case| f.rt.block_on(send_http(&f, &case)).map(|_| ()));
    f.assert_still_serves();
}

const PATH_SEGMENTS: &[&str] = &[
    "v2",
    "models",
    "identity",
    "multi",
    "nope",
    "versions",
    "1",
    "ready",
    "config",
    "stats",
    "infer",
    "health",
    "live",
    "repository",
    "index",
    "load",
    "unload",
    "systemsharedmemory",
    "cudasharedmemory",
    "region",
    "fz_region",
    "register",
    "unregister",
    "status",
    "trace",
    "setting",
    "logging",
];

/// Every other endpoint: paths from known segments, GET or POST, JSON or junk bodies. Register
/// bodies point at keys that exist, do not, or are not names at all.
fn endpoint_case() -> impl Strategy<Value = (bool, String, Vec<u8>)> {
    let key = prop_oneof![
        Just(Value::from("/pb_fuzz_server_fz_endpoints_PID")),
        pick(&["/nope", "", "/", "/dev/shm/x", "../../etc/passwd", "/a/b", "x\u{0}y"]).prop_map(Value::from),
        json_leaf(),
    ];
    let register = (key, json_leaf(), json_leaf()).prop_map(|(key, offset, byte_size)| {
        json!({"key": key, "offset": offset, "byte_size": byte_size}).to_string().into_bytes()
    });
    let load = (json_leaf(), prop::option::of(json_value())).prop_map(|(config, extra)| {
        let mut params = json!({ "config": config });
        if let Some(extra) = extra {
            params["x"] = extra;
        }
        json!({ "parameters": params }).to_string().into_bytes()
    });
    let body = prop_oneof![
        Just(Vec::new()),
        register,
        load,
        json_value().prop_map(|v| v.to_string().into_bytes()),
        prop::collection::vec(any::<u8>(), 0..32),
    ];
    (any::<bool>(), prop::collection::vec(pick(PATH_SEGMENTS), 1..7), body).prop_map(|(post, segments, body)| {
        (post, format!("/{}", segments.iter().map(|s| urlencode(s)).collect::<Vec<_>>().join("/")), body)
    })
}

#[test]
fn http_every_endpoint() {
    let f = Fixture::start("fz_endpoints");
    let key = f._region.key.clone();
    check(runner(250), endpoint_case(), |(post, path, body)| {
        // Generated load requests must not replace the model that the liveness check uses.
        if path.contains("identity") && path.contains("load") {
            return Ok(());
        }
        let body = String::from_utf8_lossy(&body).replace("/pb_fuzz_server_fz_endpoints_PID", &key).into_bytes();
        let url = format!("{}{path}", f.server.http_url());
        let request = if post { f.http.post(url).body(body) } else { f.http.get(url) };
        f.rt.block_on(http_answer(request, true)).map(|_| ())
    });
    // Generated requests may have unloaded identity: load it back for the liveness check.
    f.server.core.repository.load("identity", None).unwrap();
    f.assert_still_serves();
}

// ---------------------------------------------------------------------------------------------
// gRPC.

fn parameter() -> impl Strategy<Value = InferParameter> {
    prop_oneof![
        any::<bool>().prop_map(ParameterChoice::BoolParam),
        prop_oneof![any::<i64>(), -4i64..300].prop_map(ParameterChoice::Int64Param),
        any::<u64>().prop_map(ParameterChoice::Uint64Param),
        any::<f64>().prop_map(ParameterChoice::DoubleParam),
        pick(&["fz_region", "nope", "", "FP32"]).prop_map(ParameterChoice::StringParam),
    ]
    .prop_map(|c| InferParameter { parameter_choice: Some(c) })
}

/// Tensor parameters: mostly none, sometimes shared-memory ones pointing anywhere.
fn tensor_parameters() -> impl Strategy<Value = HashMap<String, InferParameter>> {
    let shm = (
        pick(&["fz_region", "nope", ""]),
        prop_oneof![0i64..300, any::<i64>()],
        prop::option::of(prop_oneof![0i64..300, any::<i64>()]),
    )
        .prop_map(|(region, size, offset)| {
            let p = |c| InferParameter { parameter_choice: Some(c) };
            let mut m = HashMap::from([
                ("shared_memory_region".to_string(), p(ParameterChoice::StringParam(region))),
                ("shared_memory_byte_size".to_string(), p(ParameterChoice::Int64Param(size))),
            ]);
            if let Some(o) = offset {
                m.insert("shared_memory_offset".into(), p(ParameterChoice::Int64Param(o)));
            }
            m
        });
    prop_oneof![
        4 => Just(HashMap::new()),
        3 => shm,
        1 => prop::collection::hash_map(pick(PARAMETER_KEYS), parameter(), 0..3),
    ]
}

fn contents() -> impl Strategy<Value = InferTensorContents> {
    let n = 0usize..10;
    prop_oneof![
        prop::collection::vec(any::<bool>(), n.clone())
            .prop_map(|v| InferTensorContents { bool_contents: v, ..Default::default() }),
        prop::collection::vec(any::<i32>(), n.clone())
            .prop_map(|v| InferTensorContents { int_contents: v, ..Default::default() }),
        prop::collection::vec(any::<i64>(), n.clone())
            .prop_map(|v| InferTensorContents { int64_contents: v, ..Default::default() }),
        prop::collection::vec(any::<u32>(), n.clone())
            .prop_map(|v| InferTensorContents { uint_contents: v, ..Default::default() }),
        prop::collection::vec(any::<f32>(), n.clone())
            .prop_map(|v| InferTensorContents { fp32_contents: v, ..Default::default() }),
        prop::collection::vec(any::<f64>(), n.clone())
            .prop_map(|v| InferTensorContents { fp64_contents: v, ..Default::default() }),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..6), n)
            .prop_map(|v| InferTensorContents { bytes_contents: v, ..Default::default() }),
    ]
}

fn grpc_input() -> impl Strategy<Value = InferInputTensor> {
    (pick(TENSOR_NAMES), pick(DATATYPES), shape(), tensor_parameters(), prop::option::weighted(0.2, contents()))
        .prop_map(|(name, datatype, shape, parameters, contents)| InferInputTensor {
            name,
            datatype,
            shape,
            parameters,
            contents,
        })
}

/// Raw contents: sized to fit a tensor's shape and dtype (the case real clients send), or
/// any length.
fn raw_for(inputs: &[InferInputTensor]) -> BoxedStrategy<Vec<Vec<u8>>> {
    let fitted: Vec<BoxedStrategy<Vec<u8>>> = inputs
        .iter()
        .map(|i| {
            let size = match i.datatype.as_str() {
                "BOOL" | "INT8" | "UINT8" => 1,
                "INT16" | "UINT16" | "FP16" | "BF16" => 2,
                "INT64" | "UINT64" | "FP64" => 8,
                _ => 4,
            };
            let count = i.shape.iter().try_fold(1usize, |a, &d| usize::try_from(d).ok().and_then(|d| a.checked_mul(d)));
            match count.and_then(|n| n.checked_mul(size)) {
                Some(n) if n <= 4096 => prop::collection::vec(any::<u8>(), n).boxed(),
                _ => prop::collection::vec(any::<u8>(), 0..16).boxed(),
            }
        })
        .collect();
    prop_oneof![
        3 => fitted,
        1 => prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..4),
    ]
    .boxed()
}

fn grpc_request() -> impl Strategy<Value = pb::ModelInferRequest> {
    let outputs = prop::collection::vec(
        (pick(TENSOR_NAMES), tensor_parameters())
            .prop_map(|(name, parameters)| InferRequestedOutputTensor { name, parameters }),
        0..3,
    );
    (
        pick(MODEL_NAMES),
        prop::sample::select(vec!["", "1", "2", "x"]),
        "\\PC{0,6}",
        prop::collection::hash_map(pick(PARAMETER_KEYS), parameter(), 0..2),
        prop::collection::vec(grpc_input(), 0..4),
        outputs,
    )
        .prop_flat_map(|(model_name, version, id, parameters, inputs, outputs)| {
            let raw = raw_for(&inputs);
            (
                Just(pb::ModelInferRequest {
                    model_name,
                    model_version: version.to_string(),
                    id,
                    parameters,
                    inputs,
                    outputs,
                    raw_input_contents: vec![],
                }),
                raw,
            )
        })
        .prop_map(|(mut request, raw)| {
            request.raw_input_contents = raw.into_iter().map(Into::into).collect();
            request
        })
}

#[test]
fn grpc_infer_requests() {
    let f = Fixture::start("fz_grpc");
    check(runner(600), grpc_request(), |request| {
        f.rt.block_on(async {
            let mut client = f.grpc_client();
            grpc_verdict(tokio::time::timeout(ANSWER_WITHIN, client.model_infer(request)).await)
        })
    });
    f.assert_still_serves();
}

/// The same requests on one `ModelStreamInfer` stream each: every answer comes back on the
/// stream, errors in `error_message`, and the stream stays usable.
#[test]
fn grpc_stream_requests() {
    let f = Fixture::start("fz_stream");
    check(runner(100), prop::collection::vec(grpc_request(), 1..4), |requests| {
        f.rt.block_on(async {
            let mut client = f.grpc_client();
            let n = requests.len();
            let call = client.model_stream_infer(futures::stream::iter(requests));
            let answered = tokio::time::timeout(ANSWER_WITHIN, async {
                let mut stream = call.await?.into_inner();
                let mut count = 0;
                while let Some(message) = stream.message().await? {
                    if message.infer_response.is_none() {
                        return Err(Status::internal("a stream answer without infer_response"));
                    }
                    count += 1;
                }
                Ok(count)
            })
            .await;
            match answered {
                Ok(Ok(count)) if count == n => Ok(()),
                Ok(Ok(count)) => Err(TestCaseError::fail(format!("{count} answers to {n} requests"))),
                other => grpc_verdict(other),
            }
        })
    });
    f.assert_still_serves();
}

/// Sends bytes as they are, as the ModelInfer message.
#[derive(Clone, Default)]
struct RawCodec;
struct RawEncoder;
struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;
    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }
    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// Bytes that are not a ModelInferRequest: random, or a real encoding with bytes flipped,
/// cut, or spliced (invalid UTF-8 in names, wrong wire types, lengths past the end).
fn protobuf_junk() -> impl Strategy<Value = Vec<u8>> {
    let mutated =
        (grpc_request(), prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4), any::<u8>())
            .prop_map(|(request, flips, cut)| {
                let mut bytes = prost::Message::encode_to_vec(&request);
                if bytes.is_empty() {
                    return vec![0xff];
                }
                for (at, value) in flips {
                    let i = at.index(bytes.len());
                    bytes[i] = value;
                }
                if cut % 4 == 0 {
                    bytes.truncate(bytes.len() - bytes.len() / 3);
                }
                bytes
            });
    prop_oneof![2 => mutated, 1 => prop::collection::vec(any::<u8>(), 0..256)]
}

#[test]
fn grpc_bytes_that_are_not_protobuf() {
    let f = Fixture::start("fz_protobuf");
    check(runner(250), protobuf_junk(), |bytes| {
        f.rt.block_on(async {
            let mut grpc = tonic::client::Grpc::new(f.grpc.clone());
            grpc.ready().await.map_err(|e| TestCaseError::fail(format!("channel not ready: {e}")))?;
            let path =
                tonic::codegen::http::uri::PathAndQuery::from_static("/inference.GRPCInferenceService/ModelInfer");
            let call = grpc.unary(tonic::Request::new(Bytes::from(bytes)), path, RawCodec);
            grpc_verdict(tokio::time::timeout(ANSWER_WITHIN, call).await)
        })
    });
    f.assert_still_serves();
}

// ---------------------------------------------------------------------------------------------
// config.pbtxt, through the server's config loader.

const BACKENDS: &[&str] = &["identity", "delay", "bert", "wide_deep", "dlrm", "nope"];
const CONFIG_TYPES: &[&str] = &[
    "TYPE_FP32",
    "TYPE_INT32",
    "TYPE_INT64",
    "TYPE_STRING",
    "TYPE_FP16",
    "TYPE_BOOL",
    "TYPE_INVALID",
    "TYPE_NOPE",
    "7",
];
/// Parameter values: small ones that build quickly, or ones that must be refused.
const PARAMETER_VALUES: &[&str] = &[
    "1",
    "2",
    "4",
    "8",
    "0",
    "-1",
    "",
    "abc",
    "1.5",
    "NaN",
    "inf",
    "1e300",
    "4,4",
    "8,0",
    "1099511627776",
    "18446744073709551615",
    "99999999999999999999999",
];
const CONFIG_NUMBERS: &[&str] = &[
    "0",
    "1",
    "4",
    "-1",
    "-2",
    "65536",
    "2147483647",
    "-2147483648",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "1.5",
    "abc",
];

fn config_tensor(kind: &'static str) -> impl Strategy<Value = String> {
    let names: &'static [&'static str] = &[
        "INPUT0",
        "OUTPUT0",
        "input__0",
        "input__1",
        "input__2",
        "output__0",
        "output__1",
        "numerical_features",
        "categorical_features",
        "click_probability",
        "",
    ];
    (
        prop::sample::select(names),
        prop::sample::select(CONFIG_TYPES),
        prop::collection::vec(prop_oneof![4 => (1i64..9).prop_map(|d| d.to_string()), 1 => prop::sample::select(CONFIG_NUMBERS).prop_map(str::to_string)], 0..3),
    )
        .prop_map(move |(name, dtype, dims)| {
            format!("{kind} [ {{ name: \"{name}\" data_type: {dtype} dims: [ {} ] }} ]", dims.join(", "))
        })
}

fn structured_config() -> impl Strategy<Value = String> {
    let params = prop::collection::vec(
        (
            prop::sample::select(vec![
                "layers",
                "hidden",
                "heads",
                "ffn",
                "vocab",
                "seq",
                "table_rows",
                "embedding_dim",
                "bottom_mlp",
                "top_mlp",
                "deep_mlp",
                "delay_us",
                "delay_per_item_us",
                // Not `fail_every`: it asks the delay model to fail (INTERNAL) on purpose.
                "seed",
            ]),
            prop::sample::select(PARAMETER_VALUES),
        ),
        0..5,
    );
    (
        prop::sample::select(BACKENDS),
        prop::sample::select(CONFIG_NUMBERS),
        prop::collection::vec(config_tensor("input"), 0..4),
        prop::collection::vec(config_tensor("output"), 0..3),
        prop::option::of((prop::sample::select(CONFIG_NUMBERS), prop::sample::select(CONFIG_NUMBERS))),
        prop::option::of(prop::sample::select(CONFIG_NUMBERS)),
        params,
    )
        .prop_map(|(backend, max_batch, inputs, outputs, batching, instances, params)| {
            let mut text = format!("backend: \"{backend}\"\nmax_batch_size: {max_batch}\n");
            for t in inputs.iter().chain(&outputs) {
                text.push_str(t);
                text.push('\n');
            }
            if let Some((delay, preferred)) = batching {
                text.push_str(&format!(
                    "dynamic_batching {{ max_queue_delay_microseconds: {delay} preferred_batch_size: [ {preferred} ] }}\n"
                ));
            }
            if let Some(count) = instances {
                text.push_str(&format!("instance_group [ {{ count: {count} kind: KIND_CPU }} ]\n"));
            }
            for (k, v) in params {
                text.push_str(&format!("parameters {{ key: \"{k}\" value {{ string_value: \"{v}\" }} }}\n"));
            }
            text
        })
}

/// A known-good config with a few edits: numbers swapped, text cut out, junk spliced in.
fn mutated_config() -> impl Strategy<Value = String> {
    let snippets =
        &["[", "]", "{", "}", ":", "\"", "#", "\\", "input [", "dims: [ -1 ]", "max_batch_size: 0", "\n", "TYPE_FP32"];
    let edit = (any::<prop::sample::Index>(), 1usize..24, 0u8..4, pick(snippets), prop::sample::select(CONFIG_NUMBERS));
    (prop::sample::select(MODELS.iter().map(|(_, t)| *t).collect::<Vec<_>>()), prop::collection::vec(edit, 1..4))
        .prop_map(|(text, edits)| {
            let mut chars: Vec<char> = text.chars().collect();
            for (at, len, how, snippet, number) in edits {
                let i = at.index(chars.len() + 1);
                match how {
                    0 => {
                        chars.splice(i..i, snippet.chars());
                    }
                    1 => {
                        chars.drain(i..(i + len).min(chars.len()));
                    }
                    _ => {
                        // Replace the next number token with another.
                        if let Some(start) = (i..chars.len()).find(|&k| chars[k].is_ascii_digit()) {
                            let end = (start..chars.len()).find(|&k| !chars[k].is_ascii_digit()).unwrap_or(chars.len());
                            chars.splice(start..end, number.chars());
                        }
                    }
                }
            }
            chars.into_iter().collect()
        })
}

/// A request shaped after a (possibly strange) config: every input with its dims (-1 as 2,
/// batch 1 first when batching) and random bytes of the size that implies.
fn request_for(config: &pb::ModelConfig, seed: u64) -> Option<pb::ModelInferRequest> {
    // A batch that can still grow waits for the configured queue delay: skip the long ones,
    // since the loader is what this test is after.
    if let Some(pb::model_config::SchedulingChoice::DynamicBatching(d)) = &config.scheduling_choice {
        if d.max_queue_delay_microseconds > 100_000 && config.max_batch_size > 1 {
            return None;
        }
    }
    let mut raw = Vec::new();
    let mut inputs = Vec::new();
    let mut state = seed | 1;
    for input in &config.input {
        let dtype = perfbench::tensor::DataType::from_config_enum(input.data_type)?;
        let mut shape: Vec<i64> = input.dims.iter().map(|&d| if d == -1 { 2 } else { d }).collect();
        if config.max_batch_size > 0 {
            shape.insert(0, 1);
        }
        let count = perfbench::tensor::element_count(&shape).filter(|&n| n <= 4096)?;
        let bytes: Vec<u8> = match dtype.element_size() {
            Some(size) => (0..count * size)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % 7) as u8
                })
                .collect(),
            None => (0..count).flat_map(|_| 1u32.to_le_bytes().into_iter().chain([b'a'])).collect(),
        };
        raw.push(bytes);
        inputs.push(InferInputTensor {
            name: input.name.clone(),
            datatype: dtype.as_str().into(),
            shape,
            ..Default::default()
        });
    }
    Some(pb::ModelInferRequest {
        model_name: config.name.clone(),
        inputs,
        raw_input_contents: raw.into_iter().map(Into::into).collect(),
        ..Default::default()
    })
}

/// Loads each config as model `fz_config`: the loader must refuse it with a client error or
/// serve it, and a request shaped after it must then get a client error or an answer.
#[test]
fn config_pbtxt_through_the_loader() {
    let f = Fixture::start("fz_config");
    let strategy = (prop_oneof![structured_config(), mutated_config()], any::<u64>());
    check(runner(150), strategy, |(text, seed)| {
        let loaded = f.server.core.repository.load_pbtxt("fz_config", &text);
        let config = match loaded {
            Err(e)
                if e.kind == perfbench::server::ErrorKind::InvalidArg
                    || e.kind == perfbench::server::ErrorKind::NotFound =>
            {
                return Ok(())
            }
            Err(e) => return Err(TestCaseError::fail(format!("{:?} loading: {}", e.kind, e.message))),
            Ok(()) => f.server.core.model_config("fz_config", "").expect("loaded"),
        };
        let verdict = match request_for(&config, seed) {
            None => Ok(()),
            Some(request) => f.rt.block_on(async {
                let mut client = f.grpc_client();
                grpc_verdict(tokio::time::timeout(ANSWER_WITHIN, client.model_infer(request)).await)
            }),
        };
        let _ = f.server.core.repository.unload("fz_config");
        verdict
    });
    f.assert_still_serves();
}

// ---------------------------------------------------------------------------------------------
// Scenario TOML, through `Scenario::parse`.

const SCENARIOS: &[&str] = &[
    include_str!("../../scenarios/bert.toml"),
    include_str!("../../scenarios/dlrm.toml"),
    include_str!("../../scenarios/wide_deep.toml"),
    include_str!("../../scenarios/dcnv2.toml"),
    include_str!("../../scenarios/fastpitch.toml"),
    include_str!("../../scenarios/nnunet.toml"),
];

/// Values a scenario key may get.
const TOML_VALUES: &[&str] = &[
    "1",
    "0",
    "-1",
    "18446744073709551616",
    "1.5",
    "nan",
    "inf",
    "true",
    "\"\"",
    "\"1..8\"",
    "\"1..64:8\"",
    "\"8..1\"",
    "\"1..1000:0\"",
    "\"0..4\"",
    "\"1,2,x\"",
    "\"1..999999:1\"",
    "[]",
    "[0]",
    "[1, 2]",
    "[\"a\"]",
    "{}",
    "\"grpc\"",
    "\"system\"",
    "\"time_windows\"",
    "'''\nbackend: \"identity\"\n'''",
];

fn mutated_scenario() -> impl Strategy<Value = String> {
    let edit = (
        any::<prop::sample::Index>(),
        0u8..3,
        prop::sample::select(TOML_VALUES),
        pick(&[
            "[offline]",
            "[online]",
            "[profiles.x.online]",
            "[gate]",
            "=",
            "\"",
            "[",
            "]]",
            "\n",
            "concurrency = ",
            "batch_sizes = ",
            "p99_ms = ",
        ]),
    );
    (prop::sample::select(SCENARIOS), prop::collection::vec(edit, 1..5)).prop_map(|(text, edits)| {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        for (at, how, value, snippet) in edits {
            if lines.is_empty() {
                lines.push(String::new());
            }
            let i = at.index(lines.len());
            match how {
                0 => {
                    // Replace the value of a `key = value` line.
                    if let Some((key, _)) = lines[i].split_once('=') {
                        lines[i] = format!("{key}= {value}");
                    }
                }
                1 => lines.insert(i, format!("{snippet}{value}")),
                _ => {
                    lines.remove(i);
                }
            }
        }
        lines.join("\n")
    })
}

/// An explanation as the CLI prints it: one non-empty line, starting with what it is about.
fn explains(err: &impl std::fmt::Display, about: &str) -> TestCaseResult {
    let text = err.to_string();
    prop_assert!(text.starts_with(about), "{text:?} does not start with {about:?}");
    prop_assert!(text.len() > about.len() && !text.contains('\n'), "not a one-line reason: {text:?}");
    Ok(())
}

/// Text either parses into a scenario or is refused with a one-line reason naming the file; a
/// parsed scenario either resolves into a plan that survives its own TOML (what `run plan.toml`
/// reads back) or is refused naming the scenario; an unknown profile is named in its refusal.
fn check_scenario(text: &str) -> TestCaseResult {
    let out = Path::new("/nonexistent/fuzz-out");
    let scenario = match Scenario::parse(text, Path::new("fuzz.toml")) {
        Ok(scenario) => scenario,
        Err(e) => return explains(&e, "scenario fuzz.toml: ").or_else(|_| explains(&e, "scenario '")),
    };
    let about = format!("scenario '{}'", scenario.name);
    let embedded = || Target::Embedded { model_repository: None };
    let profiles = scenario.profiles.keys().map(|p| Some(p.as_str()));
    for (profile, target) in std::iter::once((None, embedded()))
        .chain(std::iter::once((None, Target::Remote { url: "localhost:1".into() })))
        .chain(profiles.map(|p| (p, embedded())))
    {
        match scenario.plan(profile, target, out) {
            Ok(plan) => match Plan::from_toml(&plan.to_toml()) {
                Ok(back) => prop_assert_eq!(back, plan),
                Err(e) => prop_assert!(false, "the plan does not read back: {e}"),
            },
            Err(e) => explains(&e, &about)?,
        }
    }
    let runnable = scenario.offline.is_some() || scenario.online.is_some();
    match scenario.plan(Some("no such profile"), embedded(), out) {
        Ok(_) => prop_assert!(false, "an unknown profile was accepted"),
        Err(e) if runnable => {
            explains(&e, &about)?;
            prop_assert!(e.to_string().contains("no profile 'no such profile'"), "{e}");
        }
        Err(e) => explains(&e, &about)?,
    }
    Ok(())
}

#[test]
fn scenario_toml_parses_or_explains() {
    check(runner(300), prop_oneof![4 => mutated_scenario(), 1 => "\\PC{0,200}"], |text| check_scenario(&text));
}

// ---------------------------------------------------------------------------------------------
// Fixed cases: shrunk failures the generators found, kept so they stay fixed.

/// A client whose connection drops or answers 5xx fails here with the reason.
fn expect_client_error(f: &Fixture, case: HttpCase) -> u16 {
    f.rt.block_on(send_http(f, &case)).unwrap_or_else(|e| panic!("{case:?}: {e}"))
}

#[test]
fn fixed_http_cases() {
    let f = Fixture::start("fz_fixed_http");
    let infer = |model: &str, body: Value| HttpCase {
        model: model.into(),
        version: None,
        body: body.to_string().into_bytes(),
        header_len: None,
        encoding: None,
    };
    // bert with a token id outside its vocabulary: the model's own check, a 400 (was a 500).
    let ids = json!({"inputs": [
        {"name": "input__0", "datatype": "INT32", "shape": [1, 8], "data": [0, 1, 2, 3, 4, 5, 6, 999]},
        {"name": "input__1", "datatype": "INT32", "shape": [1, 8], "data": [0, 0, 0, 0, 1, 1, 1, 1]},
        {"name": "input__2", "datatype": "INT32", "shape": [1, 8], "data": [1, 1, 1, 1, 1, 1, 1, 1]}]});
    assert_eq!(expect_client_error(&f, infer("bert", ids)), 400);
    // A shape whose byte size overflows while its element count does not (was admitted via shm).
    let huge = json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4611686018427387904i64],
        "parameters": {"shared_memory_region": "fz_region", "shared_memory_byte_size": 8}}]});
    assert_eq!(expect_client_error(&f, infer("identity", huge)), 429);
    // BYTES held in shared memory that are not length-prefixed, asked back as JSON (was a 500).
    f._region.write(0, &[0xff; 8]);
    let bytes = json!({"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 1],
        "parameters": {"shared_memory_region": "fz_region", "shared_memory_byte_size": 8}}]});
    assert_eq!(expect_client_error(&f, infer("identity_bytes", bytes)), 400);
    // Garbage declared as gzip: the decompressor's error is the client's (400), not a reset.
    let gz = HttpCase { encoding: Some("gzip".into()), ..infer("identity", json!({"x": 1})) };
    assert_eq!(expect_client_error(&f, gz), 400);
    f.assert_still_serves();
}

#[test]
fn fixed_grpc_cases() {
    let f = Fixture::start("fz_fixed_grpc");
    // A model name that is not UTF-8 (was INTERNAL from tonic's codec).
    let mut bytes =
        prost::Message::encode_to_vec(&pb::ModelInferRequest { model_name: "ab".into(), ..Default::default() });
    let at = bytes.iter().position(|&b| b == b'a').unwrap();
    bytes[at] = 0xff;
    f.rt.block_on(async {
        let mut grpc = tonic::client::Grpc::new(f.grpc.clone());
        grpc.ready().await.unwrap();
        let path = tonic::codegen::http::uri::PathAndQuery::from_static("/inference.GRPCInferenceService/ModelInfer");
        let status = grpc.unary(tonic::Request::new(Bytes::from(bytes)), path, RawCodec).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    });
    f.assert_still_serves();
}

#[test]
fn fixed_config_cases() {
    let f = Fixture::start("fz_fixed_config");
    let refused = |text: &str| {
        let e = f.server.core.repository.load_pbtxt("fz_config", text).unwrap_err();
        assert_eq!(e.kind, perfbench::server::ErrorKind::InvalidArg, "{}", e.message);
        e.message
    };
    let identity = |extra: &str| {
        format!(
            r#"backend: "identity" max_batch_size: 4
               input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
               output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ] {extra}"#
        )
    };
    // A thread per instance: two billion of them was a panic in the loader.
    assert!(refused(&identity("instance_group [ { count: 2147483647 } ]")).contains("instances"));
    // Weights no machine holds were an abort on allocation.
    let big = MODELS[5].1.replace("\"20\"", "\"1099511627776\"");
    assert!(refused(&big).contains("floats"));
    // A delay of 1e12 µs wedged the instance for ever.
    let delay = MODELS[4].1.replace("\"50\"", "\"1000000000000\"");
    assert!(refused(&delay).contains("delay_us"));
    // A queue delay past what an Instant can add (was a panic in the batcher thread, which left
    // the model with no instance). The lone request waits; a full batch behind it makes it go.
    let text = identity("dynamic_batching { max_queue_delay_microseconds: 18446744073709551615 }");
    f.server.core.repository.load_pbtxt("fz_config", &text).unwrap();
    f.rt.block_on(async {
        let request = |batch: i64| pb::ModelInferRequest {
            model_name: "fz_config".into(),
            inputs: vec![InferInputTensor {
                name: "INPUT0".into(),
                datatype: "FP32".into(),
                shape: vec![batch, 1],
                ..Default::default()
            }],
            raw_input_contents: vec![vec![0u8; 4 * batch as usize].into()],
            ..Default::default()
        };
        let mut lone = f.grpc_client();
        let waiting = tokio::spawn(async move { lone.model_infer(request(1)).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        f.grpc_client().model_infer(request(4)).await.expect("a full batch runs at once");
        waiting.await.unwrap().expect("the waiting request ran when the batch could not grow");
    });
    // A raw request to a model whose fixed dims overflow an i64 product (was a panic).
    let text = r#"backend: "identity" max_batch_size: 0
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 9223372036854775807, 4 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 9223372036854775807, 4 ] } ]"#;
    f.server.core.repository.load_pbtxt("fz_config", text).unwrap();
    let raw = HttpCase {
        model: "fz_config".into(),
        version: None,
        body: vec![0; 16],
        header_len: Some("0".into()),
        encoding: None,
    };
    assert_eq!(expect_client_error(&f, raw), 429);
    f.assert_still_serves();
}

/// `1..1000000000000` would be a plan of a trillion concurrency levels, which a run would collect
/// (`Levels::values`) until allocation aborts: it is refused when read, with the reason.
#[test]
fn fixed_concurrency_range_of_a_trillion_points() {
    let e = "1..1000000000000".parse::<perfbench::plan::Levels>().unwrap_err().to_string();
    assert!(e.contains("raise the step"), "{e}");
    assert!("1:1000000000000:1".parse::<perfbench::plan::Levels>().is_err());
    assert!("1..10000:1".parse::<perfbench::plan::Levels>().is_ok(), "10,000 points are allowed");
    assert!("1..10001:1".parse::<perfbench::plan::Levels>().is_err());
}
