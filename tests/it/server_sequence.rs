//! Stateful sequence models on the bundled server (issue 15): the zoo's `accumulate` (a running
//! sum per sequence) over HTTP, gRPC and a gRPC stream, with several sequences interleaved and
//! sent concurrently, under the `direct` and the `oldest` strategies; string ids; Triton's
//! refusals; and an abandoned sequence's slot coming free after the idle timeout.

use std::collections::HashMap;

use perfbench::proto::inference as pb;
use perfbench::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use perfbench::proto::inference::infer_parameter::ParameterChoice;
use perfbench::proto::inference::model_infer_request::InferInputTensor;
use perfbench::proto::inference::InferParameter;
use perfbench::server::serve::{self, RunningServer, ServeConfig};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tonic::Code;

/// `accumulate` with the `oldest` strategy: one instance, four candidate sequences, batches of
/// up to four.
const OLDEST: &str = r#"
backend: "accumulate"
max_batch_size: 4
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  oldest { max_candidate_sequences: 4 preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 1000 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
  ]
}
"#;

/// `accumulate` with a single direct slot and a 1 s idle timeout (long beside the gap between
/// two requests of a client, short for a test to wait out).
const ONE_SLOT: &str = r#"
backend: "accumulate"
max_batch_size: 1
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 1000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
"#;

async fn start() -> RunningServer {
    let server = serve::start(ServeConfig::default()).await.expect("server starts");
    server.core.repository.load_pbtxt("acc_oldest", OLDEST).expect("oldest model loads");
    server.core.repository.load_pbtxt("acc_one_slot", ONE_SLOT).expect("one-slot model loads");
    server
}

/// A sequence id as the tests send it: numbers, or strings for `Text`.
#[derive(Clone, Debug)]
enum Id {
    Num(u64),
    Text(String),
}

impl Id {
    fn json(&self) -> Value {
        match self {
            Id::Num(n) => json!(n),
            Id::Text(t) => json!(t),
        }
    }
    fn grpc(&self) -> InferParameter {
        let choice = match self {
            Id::Num(n) => ParameterChoice::Uint64Param(*n),
            Id::Text(t) => ParameterChoice::StringParam(t.clone()),
        };
        InferParameter { parameter_choice: Some(choice) }
    }
}

/// The values of sequence `k`: distinct per sequence and per step, so a request routed to
/// another sequence or run out of order changes the sums.
fn values(k: usize, len: usize) -> Vec<i32> {
    (0..len).map(|i| (k as i32 + 1) * 100 + i as i32 * 7 + 1).collect()
}

fn running_sums(v: &[i32]) -> Vec<i32> {
    v.iter()
        .scan(0, |s, x| {
            Some({
                *s += x;
                *s
            })
        })
        .collect()
}

// ---- HTTP ----

async fn http_infer(client: &reqwest::Client, base: &str, model: &str, params: Value, x: i32) -> (StatusCode, Value) {
    let body = json!({
        "parameters": params,
        "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "data": [x]}]
    });
    let response =
        client.post(format!("{base}/v2/models/{model}/infer")).body(body.to_string()).send().await.expect("reaches");
    let status = response.status();
    let body = response.bytes().await.expect("body");
    (status, serde_json::from_slice(&body).expect("JSON body"))
}

async fn http_sequence(base: String, model: &'static str, id: Id, v: Vec<i32>) -> Vec<i32> {
    let client = reqwest::Client::new();
    let mut out = Vec::new();
    for (i, &x) in v.iter().enumerate() {
        let params = json!({"sequence_id": id.json(), "sequence_start": i == 0, "sequence_end": i + 1 == v.len()});
        let (status, body) = http_infer(&client, &base, model, params, x).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        out.push(body["outputs"][0]["data"][0].as_i64().expect("an INT32 sum") as i32);
    }
    out
}

#[tokio::test]
async fn http_interleaved_sequences_get_their_running_sums() {
    let server = start().await;
    for model in ["accumulate", "acc_oldest"] {
        let calls: Vec<_> = (0..6)
            .map(|k| {
                // The zoo's CORRID is a UINT64; acc_oldest's a string, which takes both kinds.
                let id = match (model, k % 2) {
                    ("acc_oldest", 1) => Id::Text(format!("seq-{k}")),
                    _ => Id::Num(1000 + k as u64),
                };
                let v = values(k, 5 + k % 3);
                let base = server.http_url();
                tokio::spawn(async move { (http_sequence(base, model, id, v.clone()).await, v) })
            })
            .collect();
        for call in calls {
            let (got, v) = call.await.expect("task");
            assert_eq!(got, running_sums(&v), "{model}");
        }
    }
    let stats = server.core.statistics("accumulate", "").unwrap().remove(0);
    let requests: u64 = (0..6).map(|k| 5 + k % 3).sum();
    assert_eq!(stats.inference_count, requests);
    assert!(stats.execution_count >= 1 && stats.execution_count <= requests);
    let inference = stats.inference_stats.unwrap();
    assert_eq!(inference.success.unwrap().count, requests);
    assert_eq!(inference.queue.unwrap().count, requests);
    assert!(inference.compute_infer.unwrap().ns > 0);
    server.shutdown().await;
}

#[tokio::test]
async fn http_refusals_use_tritons_words_and_the_server_keeps_serving() {
    let server = start().await;
    let client = reqwest::Client::new();
    let base = server.http_url();
    let (status, body) = http_infer(&client, &base, "accumulate", json!({}), 1).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"],
        "inference request to model 'accumulate' must specify a non-zero or non-empty correlation ID"
    );
    let (status, body) =
        http_infer(&client, &base, "accumulate", json!({"sequence_id": 0, "sequence_start": true}), 1).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "id 0 is no sequence: {body}");
    let (status, body) = http_infer(&client, &base, "accumulate", json!({"sequence_id": 77}), 1).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body["error"],
        "inference request for sequence 77 to model 'accumulate' must specify the START flag on the first request of the sequence"
    );
    for (params, word) in [
        (json!({"sequence_id": -3}), "Unable to parse 'sequence_id'"),
        (json!({"sequence_id": 5, "sequence_start": "yes"}), "Unable to parse 'sequence_start'"),
        (json!({"sequence_id": 5, "sequence_end": 1}), "Unable to parse 'sequence_end'"),
    ] {
        let (status, body) = http_infer(&client, &base, "accumulate", params, 1).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body["error"].as_str().unwrap().starts_with(word), "{body}");
    }
    // The string id of the refused request can still start; a non-sequence model ignores ids.
    assert_eq!(http_sequence(base.clone(), "accumulate", Id::Num(77), vec![4, 5]).await, [4, 9]);
    assert_eq!(http_sequence(base.clone(), "acc_oldest", Id::Text("77".into()), vec![4, 5]).await, [4, 9]);
    let body = json!({
        "parameters": {"sequence_id": 9, "sequence_start": true},
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.5]}]
    });
    let reply = client.post(format!("{base}/v2/models/identity/infer")).body(body.to_string()).send().await.unwrap();
    assert_eq!(reply.status(), StatusCode::OK);
    server.shutdown().await;
}

/// The binary tensor-data extension carries the same parameters in its JSON header.
#[tokio::test]
async fn http_binary_requests_carry_the_sequence_too() {
    let server = start().await;
    let client = reqwest::Client::new();
    let mut sums = vec![];
    for (i, x) in [3i32, 4, 5].into_iter().enumerate() {
        let header = json!({
            "parameters": {"sequence_id": 4242, "sequence_start": i == 0, "sequence_end": i == 2},
            "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 1], "parameters": {"binary_data_size": 4}}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": true}}]
        })
        .to_string();
        let mut body = header.clone().into_bytes();
        body.extend_from_slice(&x.to_le_bytes());
        let reply = client
            .post(format!("{}/v2/models/accumulate/infer", server.http_url()))
            .header("Inference-Header-Content-Length", header.len())
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), StatusCode::OK);
        let bytes = reply.bytes().await.unwrap();
        sums.push(i32::from_le_bytes(bytes[bytes.len() - 4..].try_into().unwrap()));
    }
    assert_eq!(sums, [3, 7, 12]);
    server.shutdown().await;
}

// ---- gRPC ----

type Client = GrpcInferenceServiceClient<tonic::transport::Channel>;

fn grpc_request(model: &str, id: &Id, start: bool, end: bool, x: i32, tag: String) -> pb::ModelInferRequest {
    let mut parameters = HashMap::from([("sequence_id".to_string(), id.grpc())]);
    let flag = |b| InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(b)) };
    parameters.insert("sequence_start".into(), flag(start));
    parameters.insert("sequence_end".into(), flag(end));
    pb::ModelInferRequest {
        model_name: model.into(),
        id: tag,
        parameters,
        inputs: vec![InferInputTensor {
            name: "INPUT0".into(),
            datatype: "INT32".into(),
            shape: vec![1, 1],
            ..Default::default()
        }],
        raw_input_contents: vec![x.to_le_bytes().to_vec().into()],
        ..Default::default()
    }
}

fn sum_of(response: &pb::ModelInferResponse) -> i32 {
    i32::from_le_bytes(response.raw_output_contents[0][..4].try_into().unwrap())
}

async fn grpc_sequence(mut client: Client, model: &'static str, id: Id, v: Vec<i32>) -> Vec<i32> {
    let mut out = vec![];
    for (i, &x) in v.iter().enumerate() {
        let request = grpc_request(model, &id, i == 0, i + 1 == v.len(), x, String::new());
        out.push(sum_of(&client.model_infer(request).await.expect("infer").into_inner()));
    }
    out
}

#[tokio::test]
async fn grpc_unary_and_streamed_sequences_get_their_running_sums() {
    let server = start().await;
    let client = GrpcInferenceServiceClient::connect(server.grpc_url()).await.unwrap();
    for model in ["accumulate", "acc_oldest"] {
        let calls: Vec<_> = (0..5)
            .map(|k| {
                let id = match (model, k % 2) {
                    ("acc_oldest", 1) => Id::Text(format!("g{k}")),
                    _ => Id::Num(7 + k as u64),
                };
                let v = values(k, 4 + k);
                let client = client.clone();
                tokio::spawn(async move { (grpc_sequence(client, model, id, v.clone()).await, v) })
            })
            .collect();
        for call in calls {
            let (got, v) = call.await.expect("task");
            assert_eq!(got, running_sums(&v), "{model}");
        }

        // One stream, three sequences interleaved, every request sent at once: the stream keeps
        // their order, the batcher each sequence's.
        let seqs: Vec<(Id, Vec<i32>)> = (0..3)
            .map(|k| {
                (
                    if model == "acc_oldest" && k == 1 { Id::Text("s1".into()) } else { Id::Num(50 + k as u64) },
                    values(k, 4),
                )
            })
            .collect();
        let mut requests = vec![];
        for step in 0..4 {
            for (k, (id, v)) in seqs.iter().enumerate() {
                requests.push(grpc_request(model, id, step == 0, step == 3, v[step], format!("{k}:{step}")));
            }
        }
        let mut stream = client.clone().model_stream_infer(futures::stream::iter(requests)).await.unwrap().into_inner();
        let mut got: HashMap<String, i32> = HashMap::new();
        while let Some(message) = stream.message().await.unwrap() {
            assert!(message.error_message.is_empty(), "{}", message.error_message);
            let response = message.infer_response.unwrap();
            got.insert(response.id.clone(), sum_of(&response));
        }
        for (k, (_, v)) in seqs.iter().enumerate() {
            for (step, sum) in running_sums(v).into_iter().enumerate() {
                assert_eq!(got[&format!("{k}:{step}")], sum, "{model} sequence {k} step {step}");
            }
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn grpc_refusals_are_invalid_argument_and_the_server_keeps_serving() {
    let server = start().await;
    let mut client = GrpcInferenceServiceClient::connect(server.grpc_url()).await.unwrap();
    let mut no_id = grpc_request("accumulate", &Id::Num(1), true, false, 1, String::new());
    no_id.parameters.remove("sequence_id");
    let status = client.model_infer(no_id).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("must specify a non-zero or non-empty correlation ID"), "{}", status.message());

    let unknown = grpc_request("accumulate", &Id::Text("ghost".into()), false, false, 1, String::new());
    let status = client.model_infer(unknown).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "inference request for sequence ghost to model 'accumulate' must specify the START flag on the first request of the sequence"
    );

    let mut bad_type = grpc_request("accumulate", &Id::Num(1), true, false, 1, String::new());
    bad_type
        .parameters
        .insert("sequence_id".into(), InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(true)) });
    let status = client.model_infer(bad_type).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("'sequence_id'"), "{}", status.message());

    // A string id on a model whose CORRID control is a number cannot be carried.
    let one_slot_text = grpc_request("acc_one_slot", &Id::Text("x".into()), true, true, 1, String::new());
    assert_eq!(client.model_infer(one_slot_text).await.unwrap_err().code(), Code::InvalidArgument);

    // An int64_param id works like the uint64 one.
    let mut first = grpc_request("accumulate", &Id::Num(0), true, false, 6, String::new());
    first
        .parameters
        .insert("sequence_id".into(), InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(31)) });
    assert_eq!(sum_of(&client.model_infer(first).await.unwrap().into_inner()), 6);
    let second = grpc_request("accumulate", &Id::Num(31), false, true, 1, String::new());
    assert_eq!(sum_of(&client.model_infer(second).await.unwrap().into_inner()), 7);
    server.shutdown().await;
}

/// A sequence abandoned without END holds its slot until the idle timeout; then the slot serves
/// a waiting sequence, and the abandoned one is unknown.
#[tokio::test]
async fn an_idle_sequence_frees_its_slot_and_is_forgotten() {
    let server = start().await;
    let client = GrpcInferenceServiceClient::connect(server.grpc_url()).await.unwrap();
    let mut c = client.clone();
    let first = grpc_request("acc_one_slot", &Id::Num(1), true, false, 5, String::new());
    assert_eq!(sum_of(&c.model_infer(first).await.unwrap().into_inner()), 5);
    // The only slot is taken: sequence 2 waits in the backlog until sequence 1 is released.
    let second = grpc_sequence(client.clone(), "acc_one_slot", Id::Num(2), vec![10, 20, 30]).await;
    assert_eq!(second, [10, 30, 60]);
    let late = grpc_request("acc_one_slot", &Id::Num(1), false, true, 1, String::new());
    let status = c.model_infer(late).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("must specify the START flag"), "{}", status.message());
    server.shutdown().await;
}
