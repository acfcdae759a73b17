//! The zoo models of issue 21 on `perfbench serve` (in-process, ephemeral ports): the decoupled
//! `repeat` over gRPC streaming (zero or more responses per request, Triton's final flag) and its
//! refusal on unary gRPC and HTTP; `add_sub`; the `optional` input; `var_shape`;
//! `identity_nobatch`; and the trace settings perf_analyzer's `--trace-*` flags change.

use std::collections::HashMap;

use perfbench::proto::inference as pb;
use perfbench::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use perfbench::proto::inference::infer_parameter::ParameterChoice;
use perfbench::proto::inference::model_infer_request::InferInputTensor;
use perfbench::proto::inference::InferParameter;
use perfbench::server::serve::{self, RunningServer, ServeConfig};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::transport::Channel;
use tonic::Code;

type Client = GrpcInferenceServiceClient<Channel>;

async fn json_of(r: reqwest::Response) -> Value {
    serde_json::from_slice(&r.bytes().await.expect("body")).expect("a JSON body")
}

async fn get_json(url: String) -> Value {
    json_of(reqwest::get(url).await.expect("request reaches the server")).await
}

async fn start() -> (RunningServer, Client) {
    let server = serve::start(ServeConfig::default()).await.expect("server starts");
    let client = GrpcInferenceServiceClient::connect(server.grpc_url()).await.expect("connect");
    (server, client)
}

fn le_bytes<T: Copy, const N: usize>(values: &[T], to: fn(T) -> [u8; N]) -> bytes::Bytes {
    values.iter().flat_map(|&v| to(v)).collect::<Vec<u8>>().into()
}

fn input(name: &str, datatype: &str, shape: &[i64]) -> InferInputTensor {
    InferInputTensor { name: name.into(), datatype: datatype.into(), shape: shape.to_vec(), ..Default::default() }
}

/// A `repeat` request: one response per element of `values`, `delays` ms apart, final after `wait` ms.
fn repeat_request(id: &str, values: &[i32], delays: &[u32], wait: u32, empty_final: bool) -> pb::ModelInferRequest {
    let mut parameters = HashMap::new();
    if empty_final {
        parameters.insert(
            "triton_enable_empty_final_response".to_string(),
            InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(true)) },
        );
    }
    pb::ModelInferRequest {
        model_name: "repeat".into(),
        id: id.into(),
        parameters,
        inputs: vec![
            input("IN", "INT32", &[values.len() as i64]),
            input("DELAY", "UINT32", &[delays.len() as i64]),
            input("WAIT", "UINT32", &[1]),
        ],
        raw_input_contents: vec![
            le_bytes(values, i32::to_le_bytes),
            le_bytes(delays, u32::to_le_bytes),
            le_bytes(&[wait], u32::to_le_bytes),
        ],
        ..Default::default()
    }
}

fn final_flag(r: &pb::ModelInferResponse) -> Option<bool> {
    match r.parameters.get("triton_final_response")?.parameter_choice {
        Some(ParameterChoice::BoolParam(b)) => Some(b),
        _ => None,
    }
}

/// Sends `requests` on one stream, closes it, and returns every streamed message.
async fn stream(client: &mut Client, requests: Vec<pb::ModelInferRequest>) -> Vec<pb::ModelStreamInferResponse> {
    let (tx, rx) = mpsc::channel(16);
    for r in requests {
        tx.send(r).await.unwrap();
    }
    drop(tx);
    let mut responses = client.model_stream_infer(ReceiverStream::new(rx)).await.expect("stream opens").into_inner();
    let mut out = Vec::new();
    while let Some(message) = responses.next().await {
        out.push(message.expect("stream stays healthy"));
    }
    out
}

#[tokio::test]
async fn repeat_streams_one_response_per_element_then_the_final_flag() {
    let (server, mut client) = start().await;
    let messages = stream(
        &mut client,
        vec![
            repeat_request("three", &[4, 5, 6], &[2, 0, 1], 1, true),
            repeat_request("none", &[], &[], 0, true),
            repeat_request("quiet", &[9], &[0], 0, false),
        ],
    )
    .await;
    let mut by_id: HashMap<String, Vec<pb::ModelInferResponse>> = HashMap::new();
    for m in messages {
        assert_eq!(m.error_message, "");
        let r = m.infer_response.expect("a response");
        by_id.entry(r.id.clone()).or_default().push(r);
    }

    let three = &by_id["three"];
    assert_eq!(three.len(), 4, "three responses and the empty final one");
    for (i, r) in three[..3].iter().enumerate() {
        assert_eq!(final_flag(r), Some(false));
        assert_eq!(r.outputs.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["OUT", "IDX"]);
        assert_eq!(r.outputs[0].shape, [1]);
        assert_eq!(r.raw_output_contents[0][..], (4 + i as i32).to_le_bytes());
        assert_eq!(r.raw_output_contents[1][..], (i as u32).to_le_bytes());
    }
    assert_eq!(final_flag(&three[3]), Some(true));
    assert!(three[3].outputs.is_empty() && three[3].model_name == "repeat");

    // No element: only the final flag. Without asking for it: only the responses.
    let none = &by_id["none"];
    assert_eq!((none.len(), final_flag(&none[0])), (1, Some(true)));
    let quiet = &by_id["quiet"];
    assert_eq!((quiet.len(), final_flag(&quiet[0])), (1, Some(false)));
    server.shutdown().await;
}

#[tokio::test]
async fn repeat_failures_come_back_on_the_stream_and_unary_calls_are_refused() {
    let (server, mut client) = start().await;
    let messages = stream(&mut client, vec![repeat_request("bad", &[1, 2], &[0], 0, true)]).await;
    assert_eq!(messages.len(), 1);
    assert!(messages[0].error_message.contains("IN and DELAY shape"), "{}", messages[0].error_message);

    let status = client.model_infer(repeat_request("u", &[1], &[0], 0, false)).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    assert_eq!(status.message(), "ModelInfer RPC doesn't support models with decoupled transaction policy");

    let body = json!({"inputs": [
        {"name": "IN", "datatype": "INT32", "shape": [1], "data": [1]},
        {"name": "DELAY", "datatype": "UINT32", "shape": [1], "data": [0]},
        {"name": "WAIT", "datatype": "UINT32", "shape": [1], "data": [0]}
    ]});
    let r = reqwest::Client::new()
        .post(format!("{}/v2/models/repeat/infer", server.http_url()))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_IMPLEMENTED);
    let error = json_of(r).await;
    assert_eq!(error["error"], "HTTP end point doesn't support models with decoupled transaction policy");

    let config: Value = get_json(format!("{}/v2/models/repeat/config", server.http_url())).await;
    assert_eq!(config["model_transaction_policy"]["decoupled"], true);
    server.shutdown().await;
}

#[tokio::test]
async fn a_stream_to_a_model_that_is_not_decoupled_marks_its_one_response_final() {
    let (server, mut client) = start().await;
    let request = pb::ModelInferRequest {
        model_name: "identity".into(),
        id: "x".into(),
        inputs: vec![input("INPUT0", "FP32", &[1, 2])],
        raw_input_contents: vec![le_bytes(&[1.0f32, 2.0], f32::to_le_bytes)],
        ..Default::default()
    };
    let messages = stream(&mut client, vec![request]).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(final_flag(messages[0].infer_response.as_ref().unwrap()), Some(true));
    server.shutdown().await;
}

async fn infer_json(server: &RunningServer, model: &str, body: Value) -> (StatusCode, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/v2/models/{model}/infer", server.http_url()))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (r.status(), json_of(r).await)
}

#[tokio::test]
async fn add_sub_var_shape_and_nobatch_models() {
    let (server, _) = start().await;
    let a: Vec<i32> = (0..16).collect();
    let (status, out) = infer_json(
        &server,
        "add_sub",
        json!({"inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": a},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": vec![1; 16]}
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["outputs"][0]["data"], json!((1..17).collect::<Vec<i32>>()));
    assert_eq!(out["outputs"][1]["data"], json!((-1..15).collect::<Vec<i32>>()));

    let (status, out) = infer_json(
        &server,
        "var_shape",
        json!({"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [2, 2, 3], "data": (0..12).collect::<Vec<i32>>()}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["outputs"][0]["shape"], json!([2, 2, 3]));

    // No batch dimension: the shape is the tensor's own.
    let (status, out) = infer_json(
        &server,
        "identity_nobatch",
        json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [3], "data": [1.0, 2.0, 3.0]}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    assert_eq!(out["outputs"][0]["shape"], json!([3]));
    server.shutdown().await;
}

#[tokio::test]
async fn optional_input_may_be_left_out_and_never_batches_with_requests_that_carry_it() {
    let (server, _) = start().await;
    let with = |i: usize| {
        json!({"id": format!("w{i}"), "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [10.0, 10.0, 10.0, 10.0]}
        ]})
    };
    let without = |i: usize| {
        json!({"id": format!("o{i}"), "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]}
        ]})
    };
    // Many of both at once, so the batcher sees them queued together.
    let calls: Vec<_> = (0..16)
        .map(|i| {
            let body = if i % 2 == 0 { with(i) } else { without(i) };
            let server = &server;
            async move { infer_json(server, "optional", body).await }
        })
        .collect();
    for (status, out) in futures::future::join_all(calls).await {
        assert_eq!(status, StatusCode::OK, "{out}");
        let expected = if out["id"].as_str().unwrap().starts_with('w') {
            json!([11.0, 12.0, 13.0, 14.0])
        } else {
            json!([1.0, 2.0, 3.0, 4.0])
        };
        assert_eq!(out["outputs"][0]["data"], expected, "{out}");
    }
    // The required input still is.
    let (status, out) = infer_json(
        &server,
        "optional",
        json!({"inputs": [{"name": "INPUT1", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(out["error"].as_str().unwrap().contains("'INPUT0' is missing"), "{out}");
    let config: Value = get_json(format!("{}/v2/models/optional/config", server.http_url())).await;
    assert_eq!(config["input"][1]["optional"], true);
    server.shutdown().await;
}

#[tokio::test]
async fn trace_settings_are_kept_globally_and_per_model() {
    let (server, mut client) = start().await;
    let http = reqwest::Client::new();
    let post =
        |path: &str, body: Value| http.post(format!("{}{path}", server.http_url())).body(body.to_string()).send();
    // What perf_analyzer sends for --trace-level TIMESTAMPS --trace-rate 100 --trace-count 20 --log-frequency 0.
    let r = post(
        "/v2/models/identity/trace/setting",
        json!({"trace_level": ["TIMESTAMPS"], "trace_rate": "100", "trace_count": "20", "log_frequency": "0"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let settings = json_of(r).await;
    assert_eq!(settings["trace_level"], json!(["TIMESTAMPS"]));
    assert_eq!(settings["trace_rate"], "100");
    let global: Value = get_json(format!("{}/v2/trace/setting", server.http_url())).await;
    assert_eq!(global["trace_level"], json!(["OFF"]));
    assert_eq!(global["trace_mode"], "triton");

    // gRPC sees the same store; an empty value list clears a model's setting.
    let clear = pb::TraceSettingRequest {
        model_name: "identity".into(),
        settings: [("trace_level".to_string(), Default::default())].into(),
    };
    let r = client.trace_setting(clear).await.unwrap().into_inner();
    assert_eq!(r.settings["trace_level"].value, ["OFF"]);
    assert_eq!(r.settings["trace_rate"].value, ["100"]);

    let r = post("/v2/trace/setting", json!({"trace_count": "many"})).await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = post("/v2/models/no_such_model/trace/setting", json!({"trace_rate": "1"})).await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    server.shutdown().await;
}
