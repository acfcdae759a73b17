//! Property-based fuzzing of the generative routes (the OpenAI routes and Triton's generate
//! extension) with the generators and verdicts of `fuzz_server`: generated bodies (well-formed
//! requests with wrong field values, any JSON, junk bytes) to every route. Every request gets an
//! answer in time: a success whose body is read to its end, or a 4xx with the route's error
//! shape (OpenAI's `{"error": {"message": ...}}` under /v1, `{"error": "..."}` under /v2) and a
//! one-line message; never a 5xx, a hang or a dropped connection. The decoupled model's gRPC
//! `ModelStreamInfer` gets the same treatment with generated tensors: every request on a stream
//! ends once, with its final response or a one-line `error_message`, and the stream stays usable.

use std::time::Duration;

use perfbench::proto::inference as pb;
use perfbench::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use perfbench::proto::inference::infer_parameter::ParameterChoice;
use perfbench::proto::inference::model_infer_request::InferInputTensor;
use perfbench::proto::inference::InferTensorContents;
use perfbench::server::serve::{self, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Map, Value};
use tokio::runtime::Runtime;
use tonic::Status;

use crate::fuzz_server::{
    answered_in_time, check, grpc_verdict, json_leaf, json_value, pick, runner, shape, ANSWER_WITHIN, DATATYPES,
};

/// Fast steps and a short context, so that a generated request that happens to be valid ends
/// quickly even when it asks for every token the context allows.
const LLM: &str = r#"backend: "llm" max_batch_size: 0
    model_transaction_policy { decoupled: true }
    input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
    output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
    parameters { key: "step_us" value { string_value: "50" } }
    parameters { key: "max_model_len" value { string_value: "256" } }
    parameters { key: "num_kv_blocks" value { string_value: "64" } }"#;

const ROUTES: &[&str] = &[
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/models",
    "/v1/messages",
    "/v1/responses",
    "/v2/models/llm/generate",
    "/v2/models/llm/generate_stream",
    "/v2/models/llm/versions/1/generate_stream",
    "/v2/models/nope/generate",
];

const FIELDS: &[&str] = &[
    "model",
    "messages",
    "prompt",
    "input",
    "text_input",
    "parameters",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "ignore_eos",
    "stream",
    "stream_options",
    "n",
    "seed",
    "temperature",
    "sampling_parameters",
    "exclude_input_in_output",
    "encoding_format",
    "system",
    "instructions",
    "max_output_tokens",
    "stop_sequences",
];

fn text() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::from("the night train")),
        Just(Value::from("")),
        "\\PC{0,40}".prop_map(Value::from),
        Just(Value::from("word ".repeat(300))),
    ]
}

/// A field's value: a plausible one or anything.
fn field_value(field: &'static str) -> BoxedStrategy<Value> {
    let plausible: BoxedStrategy<Value> = match field {
        "model" => pick(&["llm", "nope", ""]).prop_map(Value::from).boxed(),
        "messages" => prop::collection::vec(
            (pick(&["user", "system", "assistant"]), prop_oneof![text(), json_value()])
                .prop_map(|(role, content)| json!({"role": role, "content": content})),
            0..3,
        )
        .prop_map(Value::Array)
        .boxed(),
        "prompt" | "input" | "text_input" | "system" | "instructions" => {
            prop_oneof![text(), prop::collection::vec(text(), 0..3).prop_map(Value::Array)].boxed()
        }
        "max_tokens" | "max_completion_tokens" | "max_output_tokens" | "min_tokens" | "n" => {
            (-2i64..40).prop_map(Value::from).boxed()
        }
        "stream_options" => any::<bool>().prop_map(|b| json!({"include_usage": b})).boxed(),
        "sampling_parameters" => (-2i64..40, any::<bool>())
            .prop_map(|(n, eos)| Value::from(json!({"max_tokens": n, "ignore_eos": eos}).to_string()))
            .boxed(),
        "parameters" => prop::collection::vec((pick(FIELDS), json_leaf()), 0..4)
            .prop_map(|kv| Value::Object(kv.into_iter().collect()))
            .boxed(),
        _ => json_leaf().boxed(),
    };
    prop_oneof![4 => plausible, 1 => json_value()].boxed()
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let fields = prop::sample::subsequence(FIELDS, 0..=FIELDS.len()).prop_flat_map(|names| {
        names.into_iter().map(|n| field_value(n).prop_map(move |v| (n.to_string(), v))).collect::<Vec<_>>()
    });
    prop_oneof![
        6 => fields.prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>()).to_string().into_bytes()),
        1 => json_value().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..48),
    ]
}

/// An answer in time, never a 5xx, and an error in the route's shape.
async fn answer(http: &reqwest::Client, url: String, body: Vec<u8>, openai: bool) -> Result<(), TestCaseError> {
    let (status, body) = answered_in_time(http.post(url).body(body)).await?;
    let text = String::from_utf8_lossy(&body);
    if status.is_server_error() {
        return Err(TestCaseError::fail(format!("server error {status}: {text}")));
    }
    if status.is_success() || status == 405 {
        return Ok(());
    }
    let parsed: Value =
        serde_json::from_slice(&body).map_err(|_| TestCaseError::fail(format!("{status}: not JSON: {text}")))?;
    let message = if openai { &parsed["error"]["message"] } else { &parsed["error"] };
    match message.as_str() {
        Some(m) if !m.is_empty() && !m.contains('\n') => Ok(()),
        _ => Err(TestCaseError::fail(format!("{status} without a one-line error in the route's shape: {text}"))),
    }
}

fn start(rt: &Runtime) -> (RunningServer, tempfile::TempDir) {
    let repository = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repository.path().join("llm")).unwrap();
    std::fs::write(repository.path().join("llm/config.pbtxt"), LLM).unwrap();
    let options = ServerOptions {
        model_repository: Some(repository.path().to_path_buf()),
        max_request_bytes: 1 << 16,
        request_timeout: Some(Duration::from_secs(10)),
        ..Default::default()
    };
    let server = rt.block_on(serve::start(ServeConfig { options, ..Default::default() })).expect("server starts");
    (server, repository)
}

#[test]
fn generative_routes() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (server, _repository) = start(&rt);
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    check(runner(2000), (prop::sample::select(ROUTES), body()), |(route, body)| {
        let url = format!("{}{route}", server.http_url());
        rt.block_on(answer(&http, url, body, route.starts_with("/v1")))
    });
    // Still serving: a good request is answered in full.
    let good = json!({"model": "llm", "prompt": "hello", "max_tokens": 3, "ignore_eos": true});
    let url = format!("{}/v1/completions", server.http_url());
    let reply: Value = rt.block_on(async {
        http.post(url)
            .header("content-type", "application/json")
            .body(good.to_string())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
            .parse()
            .unwrap()
    });
    assert_eq!(reply["usage"]["completion_tokens"], 3);
}

/// The decoupled model's inputs, as Triton's vLLM backend names them, with their types.
const STREAM_INPUTS: &[(&str, &str)] = &[
    ("text_input", "BYTES"),
    ("stream", "BOOL"),
    ("max_tokens", "INT32"),
    ("sampling_parameters", "BYTES"),
    ("exclude_input_in_output", "BOOL"),
    ("ignore_eos", "BOOL"),
    ("INPUT0", "FP32"),
];

/// One BYTES element on the wire: its length (u32, little-endian), then its bytes.
fn bytes_element(text: &[u8]) -> Vec<u8> {
    let mut out = (text.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(text);
    out
}

/// A value of the input's own type, serialized as raw contents; or any bytes.
fn raw_value(name: &'static str, datatype: &'static str) -> BoxedStrategy<Vec<u8>> {
    let plausible: BoxedStrategy<Vec<u8>> = match (name, datatype) {
        ("sampling_parameters", _) => (-2i64..40, any::<bool>())
            .prop_map(|(n, eos)| bytes_element(json!({"max_tokens": n, "ignore_eos": eos}).to_string().as_bytes()))
            .boxed(),
        (_, "BYTES") => text().prop_map(|t| bytes_element(t.as_str().unwrap_or_default().as_bytes())).boxed(),
        (_, "BOOL") => any::<bool>().prop_map(|b| vec![u8::from(b)]).boxed(),
        (_, "INT32") => (-2i32..40).prop_map(|n| n.to_le_bytes().to_vec()).boxed(),
        _ => prop::collection::vec(any::<u8>(), 4).boxed(),
    };
    prop_oneof![5 => plausible, 1 => prop::collection::vec(any::<u8>(), 0..12)].boxed()
}

/// An input tensor: mostly the model's own name, type and shape [1]; sometimes any type or shape.
fn stream_input() -> impl Strategy<Value = (InferInputTensor, Vec<u8>)> {
    prop::sample::select(STREAM_INPUTS).prop_flat_map(|(name, own)| {
        let datatype =
            prop_oneof![6 => Just(own.to_string()), 1 => prop::sample::select(DATATYPES).prop_map(str::to_string)];
        let shape = prop_oneof![6 => Just(vec![1i64]), 1 => shape()];
        (datatype, shape, raw_value(name, own)).prop_map(move |(datatype, shape, raw)| {
            (InferInputTensor { name: name.to_string(), datatype, shape, ..Default::default() }, raw)
        })
    })
}

/// Raw contents as Triton's clients send them, or the same values in the typed `contents` field.
fn typed(input: &mut InferInputTensor, raw: &[u8]) {
    let mut contents = InferTensorContents::default();
    match input.datatype.as_str() {
        "BOOL" => contents.bool_contents = raw.iter().map(|b| *b != 0).collect(),
        "INT32" => {
            contents.int_contents = raw.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
        }
        _ => contents.bytes_contents = vec![raw.get(4..).unwrap_or_default().to_vec()],
    }
    input.contents = Some(contents);
}

fn stream_request() -> impl Strategy<Value = pb::ModelInferRequest> {
    (
        prop_oneof![6 => Just("llm".to_string()), 1 => pick(&["nope", "", "identity"])],
        prop::sample::select(vec!["", "1", "2"]),
        "[a-z0-9]{0,6}",
        prop::collection::vec(stream_input(), 0..5),
        prop_oneof![4 => Just(false), 1 => Just(true)],
    )
        .prop_map(|(model_name, version, id, inputs, use_contents)| {
            let (mut inputs, raw): (Vec<_>, Vec<_>) = inputs.into_iter().unzip();
            let mut request =
                pb::ModelInferRequest { model_name, model_version: version.into(), id, ..Default::default() };
            if use_contents {
                inputs.iter_mut().zip(&raw).for_each(|(input, raw)| typed(input, raw));
            } else {
                request.raw_input_contents = raw.into_iter().map(Into::into).collect();
            }
            request.inputs = inputs;
            request
        })
}

/// Whether a streamed response is its request's last: flagged final, or an error.
fn ends_its_request(message: &pb::ModelStreamInferResponse) -> bool {
    let flagged = message.infer_response.as_ref().and_then(|r| r.parameters.get("triton_final_response"));
    !message.error_message.is_empty()
        || matches!(flagged.and_then(|p| p.parameter_choice.as_ref()), Some(ParameterChoice::BoolParam(true)))
}

#[test]
fn grpc_streams_to_the_decoupled_model() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (server, _repository) = start(&rt);
    let channel = rt.block_on(tonic::transport::Channel::from_shared(server.grpc_url()).unwrap().connect()).unwrap();
    check(runner(2000), prop::collection::vec(stream_request(), 1..4), |requests| {
        rt.block_on(async {
            let mut client = GrpcInferenceServiceClient::new(channel.clone());
            let n = requests.len();
            let answered = tokio::time::timeout(ANSWER_WITHIN, async {
                let mut stream = client.model_stream_infer(futures::stream::iter(requests)).await?.into_inner();
                let (mut ended, mut bad) = (0, None);
                while let Some(message) = stream.message().await? {
                    if message.infer_response.is_none() || message.error_message.contains('\n') {
                        bad.get_or_insert(format!("{message:?}"));
                    }
                    ended += usize::from(ends_its_request(&message));
                }
                Ok::<_, Status>((ended, bad))
            })
            .await;
            match answered {
                Ok(Ok((_, Some(bad)))) => Err(TestCaseError::fail(format!("a malformed stream answer: {bad}"))),
                Ok(Ok((ended, None))) if ended == n => Ok(()),
                Ok(Ok((ended, None))) => Err(TestCaseError::fail(format!("{ended} of {n} requests ended"))),
                other => grpc_verdict(other),
            }
        })
    });
    // Unary ModelInfer is refused on a decoupled model, and a good stream still answers in full.
    let mut client = GrpcInferenceServiceClient::new(channel);
    let request = |id: &str| pb::ModelInferRequest {
        model_name: "llm".into(),
        id: id.into(),
        inputs: vec![
            InferInputTensor {
                name: "text_input".into(),
                datatype: "BYTES".into(),
                shape: vec![1],
                ..Default::default()
            },
            InferInputTensor {
                name: "sampling_parameters".into(),
                datatype: "BYTES".into(),
                shape: vec![1],
                ..Default::default()
            },
        ],
        raw_input_contents: vec![
            bytes_element(b"hello").into(),
            bytes_element(br#"{"max_tokens": 3, "ignore_eos": true}"#).into(),
        ],
        ..Default::default()
    };
    let refused = rt.block_on(client.model_infer(request("unary"))).unwrap_err();
    assert!(refused.message().contains("decoupled"), "{refused:?}");
    let answers = rt.block_on(async {
        let mut stream =
            client.model_stream_infer(futures::stream::iter([request("good")])).await.unwrap().into_inner();
        let mut answers = Vec::new();
        while let Some(message) = stream.message().await.unwrap() {
            answers.push(message);
        }
        answers
    });
    assert!(answers.iter().all(|m| m.error_message.is_empty()), "{answers:?}");
    assert_eq!(answers.iter().filter(|m| ends_its_request(m)).count(), 1, "{answers:?}");
    assert!(ends_its_request(answers.last().unwrap()));
}
