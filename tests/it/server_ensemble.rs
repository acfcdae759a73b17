//! Ensembles on the bundled server (issue G): a chain and a diamond of composing models over
//! HTTP (JSON and binary), gRPC (unary and streaming) and system shared memory; statistics that
//! add up as Triton's do; configs refused at load with their reason while the rest serves; a
//! failing step's message; steps of concurrent ensemble calls batching inside a composing model;
//! composing models loaded as dependencies; the bundled BLS model, which calls `identity`.

use std::path::PathBuf;

use perfbench::proto::inference as pb;
use perfbench::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use perfbench::proto::inference::model_infer_request::InferInputTensor;
use perfbench::server::serve::{self, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{f32_bytes, Region};

/// A second identity model, so each step of the chain has its own statistics.
const IDENTITY_B: &str = r#"
backend: "identity" max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
"#;

/// identity → identity_b.
const CHAIN: &str = r#"
platform: "ensemble" max_batch_size: 64
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "identity" model_version: -1
    input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "mid" } },
  { model_name: "identity_b" model_version: -1
    input_map { key: "INPUT0" value: "mid" } output_map { key: "OUTPUT0" value: "OUT" } }
] }
"#;

/// FP32 add_sub: SUM = a + b, DIFF = a - b.
const ADD_FP32: &str = r#"
backend: "add_sub" max_batch_size: 64
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] } ]
"#;

/// IN feeds two independent steps, whose outputs meet in a third (listed first).
const DIAMOND: &str = r#"
platform: "ensemble" max_batch_size: 64
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "DIFF" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling { step [
  { model_name: "add_fp32"
    input_map { key: "INPUT0" value: "a" } input_map { key: "INPUT1" value: "b" }
    output_map { key: "OUTPUT0" value: "SUM" } output_map { key: "OUTPUT1" value: "DIFF" } },
  { model_name: "identity" input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "a" } },
  { model_name: "identity_b" input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "b" } }
] }
"#;

/// Fails every second execution.
const FLAKY: &str = r#"
backend: "delay" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
parameters { key: "delay_us" value { string_value: "0" } }
parameters { key: "fail_every" value { string_value: "2" } }
"#;

/// One instance that waits up to 2 s for a batch of 8: concurrent requests batch together.
const BATCHER: &str = r#"
backend: "delay" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 2000000 }
parameters { key: "delay_us" value { string_value: "1000" } }
"#;

fn chain_through(model: &str) -> String {
    CHAIN.replace("\"identity_b\"", &format!("\"{model}\""))
}

async fn start() -> RunningServer {
    let server = serve::start(ServeConfig::default()).await.expect("server starts");
    let repo = &server.core.repository;
    for (name, text) in [
        ("identity_b", IDENTITY_B),
        ("add_fp32", ADD_FP32),
        ("flaky", FLAKY),
        ("batcher", BATCHER),
        ("chain", CHAIN),
        ("diamond", DIAMOND),
    ] {
        repo.load_pbtxt(name, text).unwrap_or_else(|e| panic!("{name} loads: {}", e.message));
    }
    repo.load_pbtxt("fails", &chain_through("flaky")).expect("fails loads");
    repo.load_pbtxt("batched", &chain_through("batcher")).expect("batched loads");
    server
}

async fn infer_json(server: &RunningServer, model: &str, body: Value) -> (StatusCode, Value) {
    let reply = reqwest::Client::new()
        .post(format!("{}/v2/models/{model}/infer", server.http_url()))
        .body((body).to_string())
        .send()
        .await
        .unwrap();
    (reply.status(), serde_json::from_slice(&reply.bytes().await.unwrap()).unwrap())
}

async fn get(server: &RunningServer, path: &str) -> (StatusCode, Value) {
    let reply = reqwest::Client::new().get(format!("{}{path}", server.http_url())).send().await.unwrap();
    let status = reply.status();
    (status, serde_json::from_slice(&reply.bytes().await.unwrap()).unwrap_or(Value::Null))
}

fn fp32_body(values: &[f32]) -> Value {
    json!({"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, values.len()], "data": values}]})
}

async fn stats(server: &RunningServer, model: &str) -> Value {
    let (status, body) = get(server, &format!("/v2/models/{model}/stats")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["model_stats"][0].clone()
}

fn count(stats: &Value, key: &str) -> u64 {
    stats["inference_stats"][key]["count"].as_u64().unwrap()
}

#[tokio::test]
async fn http_chain_and_diamond_compute_through_their_steps() {
    let server = start().await;
    let (status, body) = infer_json(&server, "chain", fp32_body(&[1.5, -2.0, 3.0])).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["model_name"], "chain");
    assert_eq!(body["outputs"][0]["name"], "OUT");
    assert_eq!(body["outputs"][0]["shape"], json!([1, 3]));
    assert_eq!(body["outputs"][0]["data"], json!([1.5, -2.0, 3.0]));

    let (status, body) = infer_json(&server, "diamond", fp32_body(&[1.0, 2.5])).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let out =
        |name: &str| body["outputs"].as_array().unwrap().iter().find(|o| o["name"] == name).unwrap()["data"].clone();
    assert_eq!(out("SUM"), json!([2.0, 5.0]));
    assert_eq!(out("DIFF"), json!([0.0, 0.0]));

    // Binary data in and out, asking for one output only.
    let header = json!({
        "inputs": [{"name": "IN", "datatype": "FP32", "shape": [2, 2], "parameters": {"binary_data_size": 16}}],
        "outputs": [{"name": "DIFF", "parameters": {"binary_data": true}}]
    })
    .to_string();
    let mut request = header.clone().into_bytes();
    request.extend(f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
    let reply = reqwest::Client::new()
        .post(format!("{}/v2/models/diamond/infer", server.http_url()))
        .header("Inference-Header-Content-Length", header.len())
        .body(request)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::OK);
    let json_len: usize = reply.headers()["Inference-Header-Content-Length"].to_str().unwrap().parse().unwrap();
    let bytes = reply.bytes().await.unwrap();
    let head: Value = serde_json::from_slice(&bytes[..json_len]).unwrap();
    assert_eq!(head["outputs"].as_array().unwrap().len(), 1);
    assert_eq!(head["outputs"][0]["shape"], json!([2, 2]));
    assert_eq!(&bytes[json_len..], &f32_bytes(&[0.0; 4])[..]);
    server.shutdown().await;
}

#[tokio::test]
async fn metadata_config_and_readiness_describe_the_ensemble() {
    let server = start().await;
    let (status, meta) = get(&server, "/v2/models/chain").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(meta["platform"], "ensemble");
    assert_eq!(meta["inputs"][0], json!({"name": "IN", "datatype": "FP32", "shape": [-1, -1]}));
    let (_, config) = get(&server, "/v2/models/chain/config").await;
    assert_eq!(config["platform"], "ensemble");
    let steps = config["ensemble_scheduling"]["step"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[1]["model_name"], "identity_b");
    assert_eq!(steps[1]["input_map"]["INPUT0"], "mid");
    assert_eq!(get(&server, "/v2/models/chain/ready").await.0, StatusCode::OK);

    let mut client = GrpcInferenceServiceClient::connect(server.grpc_url()).await.unwrap();
    let config = client
        .model_config(pb::ModelConfigRequest { name: "chain".into(), version: String::new() })
        .await
        .unwrap()
        .into_inner()
        .config
        .unwrap();
    assert_eq!(config.platform, "ensemble");
    server.shutdown().await;
}

#[tokio::test]
async fn statistics_add_up_like_tritons() {
    let server = start().await;
    let before = [stats(&server, "identity").await, stats(&server, "identity_b").await];
    for i in 0..10 {
        let (status, body) = infer_json(&server, "chain", fp32_body(&[i as f32])).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let ensemble = stats(&server, "chain").await;
    assert_eq!(ensemble["inference_count"], 10);
    assert_eq!(ensemble["execution_count"], 10, "one execution per ensemble request, as Triton counts");
    for key in ["success", "queue", "compute_input", "compute_infer", "compute_output"] {
        assert_eq!(count(&ensemble, key), 10, "{key}");
    }
    assert_eq!(count(&ensemble, "fail"), 0);
    assert_eq!(ensemble["batch_stats"][0]["batch_size"], 1);
    assert_eq!(ensemble["batch_stats"][0]["compute_infer"]["count"], 10);
    // The whole request takes at least the steps' compute it sums up.
    let ns = |s: &Value, k: &str| s["inference_stats"][k]["ns"].as_u64().unwrap();
    assert!(ns(&ensemble, "success") >= ns(&ensemble, "compute_infer"));
    for (name, before) in ["identity", "identity_b"].into_iter().zip(before) {
        let after = stats(&server, name).await;
        assert_eq!(count(&after, "success") - count(&before, "success"), 10, "{name}");
        assert_eq!(
            after["inference_count"].as_u64().unwrap() - before["inference_count"].as_u64().unwrap(),
            10,
            "{name}"
        );
    }
    // Every model, the ensemble included, in the list of all.
    let (_, all) = get(&server, "/v2/models/stats").await;
    assert!(all["model_stats"].as_array().unwrap().iter().any(|m| m["name"] == "chain"));
    server.shutdown().await;
}

fn grpc_request(values: &[f32]) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: "chain".into(),
        id: "g".into(),
        inputs: vec![InferInputTensor {
            name: "IN".into(),
            datatype: "FP32".into(),
            shape: vec![1, values.len() as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![f32_bytes(values).into()],
        ..Default::default()
    }
}

#[tokio::test]
async fn grpc_unary_and_streaming_run_the_chain() {
    let server = start().await;
    let mut client = GrpcInferenceServiceClient::connect(server.grpc_url()).await.unwrap();
    let response = client.model_infer(grpc_request(&[4.0, 5.0])).await.unwrap().into_inner();
    assert_eq!(response.model_name, "chain");
    assert_eq!(response.id, "g");
    assert_eq!(response.outputs[0].name, "OUT");
    assert_eq!(response.raw_output_contents[0], f32_bytes(&[4.0, 5.0]));

    let requests = futures::stream::iter(vec![grpc_request(&[6.0]), grpc_request(&[7.0, 8.0])]);
    let mut stream = client.model_stream_infer(requests).await.unwrap().into_inner();
    let mut outputs = vec![];
    while let Some(message) = stream.message().await.unwrap() {
        assert!(message.error_message.is_empty(), "{}", message.error_message);
        outputs.push(message.infer_response.unwrap().raw_output_contents[0].clone());
    }
    outputs.sort();
    let mut expected = vec![f32_bytes(&[6.0]), f32_bytes(&[7.0, 8.0])];
    expected.sort();
    assert_eq!(outputs, expected);
    server.shutdown().await;
}

#[tokio::test]
async fn shared_memory_inputs_and_outputs_pass_through_the_ensemble() {
    let server = start().await;
    let input = Region::new("ens_in", 64);
    let output = Region::new("ens_out", 64);
    let data = f32_bytes(&[0.25, -8.0, 3.5, 1e6]);
    input.write(8, &data);
    let client = reqwest::Client::new();
    for (name, key) in [("ens_in", &input.key), ("ens_out", &output.key)] {
        let r = client
            .post(format!("{}/v2/systemsharedmemory/region/{name}/register", server.http_url()))
            .body((json!({"key": key, "offset": 0, "byte_size": 64})).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    let body = json!({
        "inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 4],
            "parameters": {"shared_memory_region": "ens_in", "shared_memory_byte_size": 16, "shared_memory_offset": 8}}],
        "outputs": [{"name": "OUT",
            "parameters": {"shared_memory_region": "ens_out", "shared_memory_byte_size": 16, "shared_memory_offset": 4}}]
    });
    let (status, reply) = infer_json(&server, "chain", body).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["outputs"][0], json!({"name": "OUT", "datatype": "FP32", "shape": [1, 4]}));
    assert_eq!(output.read(4, 16), data);
    let r = client.post(format!("{}/v2/systemsharedmemory/unregister", server.http_url())).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    server.shutdown().await;
}

#[tokio::test]
async fn bad_configs_are_refused_at_load_with_their_reason_and_the_rest_serves() {
    let server = start().await;
    let repo = &server.core.repository;
    let refused = |name: &str, text: &str| repo.load_pbtxt(name, text).unwrap_err().message;
    let missing = refused("missing", &chain_through("nope"));
    assert!(missing.contains("composing model 'nope' is not in the repository"), "{missing}");
    let unknown =
        refused("unknown", &CHAIN.replace("key: \"INPUT0\" value: \"mid\"", "key: \"INPUT0\" value: \"other\""));
    assert!(unknown.contains("reads tensor 'other', which no ensemble input or step output provides"), "{unknown}");
    let cycle = refused("cycle", &CHAIN.replace("key: \"INPUT0\" value: \"IN\"", "key: \"INPUT0\" value: \"OUT\""));
    assert!(cycle.contains("cycle"), "{cycle}");
    let wrong_name = refused("wrong", &CHAIN.replace("key: \"INPUT0\" value: \"mid\"", "key: \"X\" value: \"mid\""));
    assert!(wrong_name.contains("step 1 maps input 'X', which model 'identity_b' does not have"), "{wrong_name}");
    for message in [&missing, &unknown, &cycle, &wrong_name] {
        assert!(!message.contains('\n'), "one line: {message}");
    }

    // Through the repository API the reason reaches the client too.
    let config = perfbench::server::config::to_json(
        &perfbench::server::config::parse_pbtxt(&chain_through("nope"), "missing").unwrap(),
    );
    let r = reqwest::Client::new()
        .post(format!("{}/v2/repository/models/missing/load", server.http_url()))
        .body((json!({"parameters": {"config": config.to_string()}})).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("'nope' is not in the repository"));

    assert_eq!(get(&server, "/v2/models/missing/ready").await.0, StatusCode::BAD_REQUEST);
    let (status, body) = infer_json(&server, "chain", fp32_body(&[1.0])).await;
    assert_eq!((status, &body["outputs"][0]["data"]), (StatusCode::OK, &json!([1.0])));
    let (status, _) = infer_json(
        &server,
        "identity",
        json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    server.shutdown().await;
}

#[tokio::test]
async fn a_failing_step_fails_the_request_with_its_message_and_the_server_keeps_serving() {
    let server = start().await;
    let (status, _) = infer_json(&server, "fails", fp32_body(&[1.0])).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = infer_json(&server, "fails", fp32_body(&[2.0])).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("model 'flaky' failed: injected failure: execution 2"), "{error}");
    let (status, body) = infer_json(&server, "fails", fp32_body(&[3.0])).await;
    assert_eq!((status, &body["outputs"][0]["data"]), (StatusCode::OK, &json!([3.0])));

    let ensemble = stats(&server, "fails").await;
    assert_eq!((count(&ensemble, "success"), count(&ensemble, "fail")), (2, 1));
    assert_eq!(ensemble["inference_count"], 2);
    let flaky = stats(&server, "flaky").await;
    assert_eq!((count(&flaky, "success"), count(&flaky, "fail")), (2, 1));
    server.shutdown().await;
}

#[tokio::test]
async fn steps_of_concurrent_ensemble_calls_batch_inside_a_composing_model() {
    let server = start().await;
    let calls: Vec<_> = (0..8)
        .map(|i| {
            let url = format!("{}/v2/models/batched/infer", server.http_url());
            tokio::spawn(async move {
                let r = reqwest::Client::new().post(url).body(fp32_body(&[i as f32]).to_string()).send().await.unwrap();
                assert_eq!(r.status(), StatusCode::OK);
                serde_json::from_slice::<Value>(&r.bytes().await.unwrap()).unwrap()["outputs"][0]["data"].clone()
            })
        })
        .collect();
    for (i, call) in calls.into_iter().enumerate() {
        assert_eq!(call.await.unwrap(), json!([i as f32]));
    }
    let batcher = stats(&server, "batcher").await;
    assert_eq!(batcher["inference_count"], 8);
    let executions = batcher["execution_count"].as_u64().unwrap();
    assert!(executions < 8, "8 concurrent calls ran in {executions} executions of the composing model");
    let ensemble = stats(&server, "batched").await;
    assert_eq!((ensemble["inference_count"].as_u64(), ensemble["execution_count"].as_u64()), (Some(8), Some(8)));
    server.shutdown().await;
}

#[tokio::test]
async fn composing_models_load_as_dependencies() {
    // A --model-repository with the interop suite's ensemble over a bundled-kind identity.
    let root = std::env::temp_dir().join(format!("pb_ensemble_repo_{}", std::process::id()));
    let interop = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/models");
    for (model, text) in [
        ("ensemble", std::fs::read_to_string(interop.join("ensemble/config.pbtxt")).unwrap()),
        ("identity", IDENTITY_B.to_string()),
        ("other", IDENTITY_B.to_string()),
    ] {
        std::fs::create_dir_all(root.join(model)).unwrap();
        std::fs::write(root.join(model).join("config.pbtxt"), text).unwrap();
    }
    let options =
        ServerOptions { model_repository: Some(root.clone()), models: vec!["ensemble".into()], ..Default::default() };
    let server = serve::start(ServeConfig { options, ..Default::default() }).await.expect("server starts");
    assert_eq!(get(&server, "/v2/models/identity/ready").await.0, StatusCode::OK);
    assert_eq!(get(&server, "/v2/models/other/ready").await.0, StatusCode::BAD_REQUEST);
    let body = json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]}]});
    let (status, reply) = infer_json(&server, "ensemble", body).await;
    assert_eq!((status, &reply["outputs"][0]["data"]), (StatusCode::OK, &json!([1.0, 2.0])));
    assert_eq!(count(&stats(&server, "identity").await, "success"), 2, "two steps on identity");
    server.shutdown().await;
    std::fs::remove_dir_all(root).unwrap();
}

fn data_of(reply: &Value, output: &str) -> Vec<f64> {
    let outputs = reply["outputs"].as_array().unwrap();
    let o = outputs.iter().find(|o| o["name"] == output).unwrap_or_else(|| panic!("{output} in {reply}"));
    o["data"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
}

#[tokio::test]
async fn dlrm_hps_takes_dlrms_inputs_and_chains_its_two_halves() {
    let server = start().await;
    let numerical: Vec<f32> = (0..2 * 13).map(|i| (i % 7) as f32 / 3.0 - 1.0).collect();
    let categorical: Vec<i64> = (0..2 * 26).map(|i| i * 7919 - 40_000).collect();
    let inputs = json!([
        {"name": "numerical_features", "datatype": "FP32", "shape": [2, 13], "data": numerical},
        {"name": "categorical_features", "datatype": "INT64", "shape": [2, 26], "data": categorical}
    ]);
    // The same request dlrm takes.
    let (status, dlrm) = infer_json(&server, "dlrm", json!({"inputs": inputs})).await;
    assert_eq!(status, StatusCode::OK, "{dlrm}");
    let (status, hps) = infer_json(&server, "dlrm_hps", json!({"inputs": inputs})).await;
    assert_eq!(status, StatusCode::OK, "{hps}");
    assert_eq!(hps["outputs"][0]["shape"], json!([2, 1]));
    let probabilities = data_of(&hps, "click_probability");
    assert!(probabilities.iter().all(|p| *p > 0.0 && *p < 1.0), "{probabilities:?}");

    // By hand: the lookup, then the dense half on its embeddings.
    let lookup = json!({"inputs": [inputs[1]]});
    let (status, embeddings) = infer_json(&server, "embedding_lookup", lookup).await;
    assert_eq!(status, StatusCode::OK, "{embeddings}");
    assert_eq!(embeddings["outputs"][0]["shape"], json!([2, 26, 128]));
    let dense = json!({"inputs": [inputs[0],
        {"name": "embeddings", "datatype": "FP32", "shape": [2, 26, 128], "data": data_of(&embeddings, "embeddings")}]});
    let (status, by_hand) = infer_json(&server, "dlrm_dense", dense).await;
    assert_eq!(status, StatusCode::OK, "{by_hand}");
    assert_eq!(data_of(&by_hand, "click_probability"), probabilities);

    for model in ["embedding_lookup", "dlrm_dense"] {
        assert_eq!(count(&stats(&server, model).await, "success"), 2, "{model}: the ensemble's call and ours");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn the_bls_model_answers_through_the_model_it_calls_and_both_keep_statistics() {
    let server = start().await;
    let before = stats(&server, "identity").await;
    let body = json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 3], "data": [1.0, -2.5, 3.0]}]});
    for _ in 0..4 {
        let (status, reply) = infer_json(&server, "bls", body.clone()).await;
        assert_eq!((status, &reply["outputs"][0]["data"]), (StatusCode::OK, &json!([1.0, -2.5, 3.0])), "{reply}");
        assert_eq!(reply["model_name"], "bls");
    }
    let bls = stats(&server, "bls").await;
    assert_eq!((bls["inference_count"].as_u64(), bls["execution_count"].as_u64()), (Some(4), Some(4)));
    assert_eq!(count(&bls, "success"), 4);
    // Its compute is the whole call, so it covers the called model's compute.
    let called = stats(&server, "identity").await;
    assert_eq!(count(&called, "success") - count(&before, "success"), 4, "each request called identity once");
    let ns = |s: &Value, k: &str| s["inference_stats"][k]["ns"].as_u64().unwrap();
    assert!(ns(&bls, "compute_infer") >= ns(&called, "compute_infer") - ns(&before, "compute_infer"));
    // A BLS config that calls nothing, or a model the repository lacks, is refused with its reason.
    let bad = r#"backend: "bls" max_batch_size: 8
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]"#;
    let err = server.core.repository.load_pbtxt("nothing", bad).unwrap_err();
    assert!(err.message.contains("parameter 'bls_model' must name another model"), "{}", err.message);
    let missing = format!(r#"{bad} parameters {{ key: "bls_model" value {{ string_value: "nosuch" }} }}"#);
    let err = server.core.repository.load_pbtxt("missing", &missing).unwrap_err();
    assert_eq!(err.message, "BLS model 'missing': composing model 'nosuch' is not in the repository");
    // A BLS model cannot be called by another, nor be an ensemble's step: it has no scheduler.
    let nested = format!(r#"{bad} parameters {{ key: "bls_model" value {{ string_value: "bls" }} }}"#);
    let err = server.core.repository.load_pbtxt("nested", &nested).unwrap_err();
    assert_eq!(
        err.message,
        "BLS model 'nested': composing model 'bls' is a BLS model; a step must be a model that executes"
    );
    let err = server.core.repository.load_pbtxt("ens_bls", &chain_through("bls")).unwrap_err();
    assert!(err.message.contains("composing model 'bls' is a BLS model"), "{}", err.message);
    server.shutdown().await;
}

/// A BLS model with one instance over a 200 ms model.
const SLOW_BLS: &str = r#"
backend: "bls" max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "bls_model" value { string_value: "slow" } }
"#;

#[tokio::test]
async fn a_bls_model_executes_one_request_per_instance_and_the_rest_queue() {
    let server = start().await;
    let slow = r#"backend: "delay" max_batch_size: 8
        input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
        instance_group [ { count: 4 kind: KIND_CPU } ]
        parameters { key: "delay_us" value { string_value: "200000" } }"#;
    server.core.repository.load_pbtxt("slow", slow).expect("slow loads");
    server.core.repository.load_pbtxt("slow_bls", SLOW_BLS).expect("slow_bls loads");
    let body = json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]}]});
    let calls = (0..4).map(|_| infer_json(&server, "slow_bls", body.clone()));
    for (status, reply) in futures::future::join_all(calls).await {
        assert_eq!(status, StatusCode::OK, "{reply}");
    }
    // `slow` has 4 instances, so only the BLS model's single instance makes requests wait: at
    // least one of the four waited for a whole 200 ms call.
    let bls = stats(&server, "slow_bls").await;
    assert_eq!(count(&bls, "success"), 4);
    assert!(bls["inference_stats"]["queue"]["ns"].as_u64().unwrap() >= 200_000_000, "{bls}");
    server.shutdown().await;
}
