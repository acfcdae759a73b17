//! The gRPC front end of `perfbench serve`, started in-process on ephemeral ports and driven with
//! the generated tonic client: raw and typed inputs, streaming, every bad input of issue 2 (each
//! followed by a good request), system shared memory, statistics, repository and health.

use std::collections::HashMap;

use perfbench::proto::health::health_check_response::ServingStatus;
use perfbench::proto::health::health_client::HealthClient;
use perfbench::proto::health::HealthCheckRequest;
use perfbench::proto::inference as pb;
use perfbench::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use perfbench::proto::inference::infer_parameter::ParameterChoice;
use perfbench::proto::inference::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use perfbench::proto::inference::InferParameter;
use perfbench::server::serve::{self, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;
use tonic::transport::Channel;
use tonic::Code;

use crate::common::{f32_bytes, Region};

const MAX_REQUEST_BYTES: usize = 1 << 20;

type Client = GrpcInferenceServiceClient<Channel>;

async fn start() -> (RunningServer, Client) {
    let options = ServerOptions { max_request_bytes: MAX_REQUEST_BYTES, ..Default::default() };
    let server = serve::start(ServeConfig { options, ..Default::default() }).await.expect("server starts");
    let client = GrpcInferenceServiceClient::connect(server.grpc_url())
        .await
        .expect("connect")
        .max_decoding_message_size(i32::MAX as usize)
        .max_encoding_message_size(i32::MAX as usize);
    (server, client)
}

fn input(name: &str, datatype: &str, shape: &[i64]) -> InferInputTensor {
    InferInputTensor { name: name.into(), datatype: datatype.into(), shape: shape.to_vec(), ..Default::default() }
}

/// An identity request with raw FP32 data.
fn raw_request(values: &[f32]) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: "identity".into(),
        inputs: vec![input("INPUT0", "FP32", &[1, values.len() as i64])],
        raw_input_contents: vec![f32_bytes(values).into()],
        ..Default::default()
    }
}

fn shm_params(region: &str, byte_size: i64, offset: i64) -> HashMap<String, InferParameter> {
    let p = |c| InferParameter { parameter_choice: Some(c) };
    let mut params = HashMap::from([
        ("shared_memory_region".to_string(), p(ParameterChoice::StringParam(region.into()))),
        ("shared_memory_byte_size".to_string(), p(ParameterChoice::Int64Param(byte_size))),
    ]);
    if offset != 0 {
        params.insert("shared_memory_offset".into(), p(ParameterChoice::Int64Param(offset)));
    }
    params
}

/// The request must fail with `code`; returns the message.
async fn expect_error(client: &mut Client, request: pb::ModelInferRequest, code: Code) -> String {
    let status = client.model_infer(request).await.expect_err("the request fails");
    assert_eq!(status.code(), code, "{}", status.message());
    status.message().to_string()
}

async fn assert_still_serves(client: &mut Client) {
    let response = client.model_infer(raw_request(&[1.0, 2.0])).await.expect("a good request works").into_inner();
    assert_eq!(response.raw_output_contents[0], f32_bytes(&[1.0, 2.0]));
}

#[tokio::test]
async fn metadata_config_health_and_raw_inference() {
    let (server, mut client) = start().await;
    assert!(client.server_live(pb::ServerLiveRequest {}).await.unwrap().into_inner().live);
    assert!(client.server_ready(pb::ServerReadyRequest {}).await.unwrap().into_inner().ready);
    let ready = |name: &str| pb::ModelReadyRequest { name: name.into(), version: String::new() };
    assert!(client.model_ready(ready("identity")).await.unwrap().into_inner().ready);
    assert!(!client.model_ready(ready("nope")).await.unwrap().into_inner().ready);

    let meta = client.server_metadata(pb::ServerMetadataRequest {}).await.unwrap().into_inner();
    assert!(meta.extensions.iter().any(|e| e == "statistics"));
    let model = client
        .model_metadata(pb::ModelMetadataRequest { name: "identity".into(), version: "1".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(model.inputs[0].shape, vec![-1, -1]);
    let status = client
        .model_metadata(pb::ModelMetadataRequest { name: "nope".into(), version: String::new() })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let config = client
        .model_config(pb::ModelConfigRequest { name: "identity".into(), version: String::new() })
        .await
        .unwrap()
        .into_inner()
        .config
        .unwrap();
    assert_eq!(config.max_batch_size, 64);

    let mut health = HealthClient::connect(server.grpc_url()).await.unwrap();
    let check = health.check(HealthCheckRequest { service: String::new() }).await.unwrap().into_inner();
    assert_eq!(check.status, ServingStatus::Serving as i32);
    let check = health.check(HealthCheckRequest { service: "inference.GRPCInferenceService".into() }).await.unwrap();
    assert_eq!(check.into_inner().status, ServingStatus::Serving as i32);
    assert_eq!(health.check(HealthCheckRequest { service: "other".into() }).await.unwrap_err().code(), Code::NotFound);

    let mut request = raw_request(&[1.0, -2.0, 3.5]);
    request.id = "g1".into();
    request.outputs = vec![InferRequestedOutputTensor { name: "OUTPUT0".into(), parameters: HashMap::new() }];
    let response = client.model_infer(request).await.unwrap().into_inner();
    assert_eq!(response.id, "g1");
    assert_eq!(response.model_name, "identity");
    assert_eq!(response.model_version, "1");
    assert_eq!(response.outputs[0].name, "OUTPUT0");
    assert_eq!(response.outputs[0].datatype, "FP32");
    assert_eq!(response.outputs[0].shape, vec![1, 3]);
    assert!(response.outputs[0].contents.is_none(), "data travels raw");
    assert_eq!(response.raw_output_contents, vec![f32_bytes(&[1.0, -2.0, 3.5])]);

    let trace = client.trace_setting(pb::TraceSettingRequest::default()).await.unwrap().into_inner();
    assert_eq!(trace.settings["trace_level"].value, vec!["OFF".to_string()]);
    let log = client.log_settings(pb::LogSettingsRequest::default()).await.unwrap().into_inner();
    assert!(log.settings.contains_key("log_verbose_level"));
    server.shutdown().await;
}

#[tokio::test]
async fn typed_contents_are_converted() {
    let (server, mut client) = start().await;
    let mut typed = input("INPUT0", "FP32", &[1, 2]);
    typed.contents = Some(pb::InferTensorContents { fp32_contents: vec![4.0, 5.5], ..Default::default() });
    let request = pb::ModelInferRequest { model_name: "identity".into(), inputs: vec![typed], ..Default::default() };
    let response = client.model_infer(request).await.unwrap().into_inner();
    assert_eq!(response.raw_output_contents[0], f32_bytes(&[4.0, 5.5]));

    // BYTES elements are re-encoded with their length prefixes.
    let mut strings = input("INPUT0", "BYTES", &[1, 2]);
    strings.contents =
        Some(pb::InferTensorContents { bytes_contents: vec![b"ab".to_vec(), vec![]], ..Default::default() });
    let request =
        pb::ModelInferRequest { model_name: "identity_bytes".into(), inputs: vec![strings], ..Default::default() };
    let response = client.model_infer(request).await.unwrap().into_inner();
    assert_eq!(response.raw_output_contents[0], vec![2, 0, 0, 0, b'a', b'b', 0, 0, 0, 0]);

    // The populated field must be the datatype's.
    let mut wrong = input("INPUT0", "FP32", &[1, 1]);
    wrong.contents = Some(pb::InferTensorContents { int_contents: vec![1], ..Default::default() });
    let request = pb::ModelInferRequest { model_name: "identity".into(), inputs: vec![wrong], ..Default::default() };
    let e = expect_error(&mut client, request, Code::InvalidArgument).await;
    assert!(e.contains("fp32_contents") && e.contains("int_contents"), "{e}");
    assert_still_serves(&mut client).await;
    server.shutdown().await;
}

#[tokio::test]
async fn stream_reports_errors_inline_and_keeps_going() {
    let (server, mut client) = start().await;
    let mut good1 = raw_request(&[1.0]);
    good1.id = "a".into();
    let mut bad = raw_request(&[1.0]);
    bad.id = "b".into();
    bad.model_name = "nope".into();
    let mut good2 = raw_request(&[2.0, 3.0]);
    good2.id = "c".into();
    let requests = futures::stream::iter(vec![good1, bad, good2]);
    let mut stream = client.model_stream_infer(requests).await.unwrap().into_inner();
    let mut by_id = HashMap::new();
    while let Some(message) = stream.message().await.unwrap() {
        let response = message.infer_response.clone().expect("every message has its response");
        // As Triton: answers are flagged final; a request refused before any model saw it
        // carries only its id.
        let flag = response.parameters.get("triton_final_response").and_then(|p| p.parameter_choice.clone());
        let expected = if message.error_message.is_empty() { Some(ParameterChoice::BoolParam(true)) } else { None };
        assert_eq!(flag, expected);
        by_id.insert(response.id.clone(), message);
    }
    assert_eq!(by_id.len(), 3);
    assert!(by_id["a"].error_message.is_empty());
    assert_eq!(by_id["a"].infer_response.as_ref().unwrap().raw_output_contents[0], f32_bytes(&[1.0]));
    assert!(by_id["b"].error_message.contains("'nope'"), "{}", by_id["b"].error_message);
    assert_eq!(by_id["b"].infer_response.as_ref().unwrap().model_name, "");
    assert_eq!(by_id["c"].infer_response.as_ref().unwrap().raw_output_contents[0], f32_bytes(&[2.0, 3.0]));
    server.shutdown().await;
}

fn register(name: &str, key: &str, offset: u64, byte_size: u64) -> pb::SystemSharedMemoryRegisterRequest {
    pb::SystemSharedMemoryRegisterRequest { name: name.into(), key: key.into(), offset, byte_size }
}

#[tokio::test]
async fn every_bad_input_names_the_problem_and_the_server_keeps_serving() {
    let (server, mut client) = start().await;

    let mut r = raw_request(&[1.0]);
    r.model_name = "nope".into();
    let e = expect_error(&mut client, r, Code::NotFound).await;
    assert!(e.contains("unknown model") && e.contains("'nope'"), "{e}");
    assert_still_serves(&mut client).await;

    let mut r = raw_request(&[1.0]);
    r.model_version = "7".into();
    let e = expect_error(&mut client, r, Code::NotFound).await;
    assert!(e.contains("version 7"), "{e}");
    assert_still_serves(&mut client).await;

    let mut r = raw_request(&[1.0]);
    r.inputs[0].name = "WRONG".into();
    let e = expect_error(&mut client, r, Code::InvalidArgument).await;
    assert!(e.contains("unexpected inference input 'WRONG'"), "{e}");
    assert_still_serves(&mut client).await;

    let mut r = raw_request(&[1.0]);
    r.inputs[0].datatype = "INT32".into();
    let e = expect_error(&mut client, r, Code::InvalidArgument).await;
    assert!(e.contains("data-type is 'INT32'"), "{e}");
    assert_still_serves(&mut client).await;

    let mut r = raw_request(&[1.0]);
    r.inputs[0].shape = vec![1, 1, 1];
    let e = expect_error(&mut client, r, Code::InvalidArgument).await;
    assert!(e.contains("unexpected shape for input 'INPUT0'"), "{e}");
    assert_still_serves(&mut client).await;

    // Byte size not matching the shape (the gRPC form of a truncated binary body too).
    let mut r = raw_request(&[1.0, 2.0, 3.0]);
    r.raw_input_contents[0].truncate(8);
    let e = expect_error(&mut client, r, Code::InvalidArgument).await;
    assert!(e.contains("expecting 12 bytes but got 8"), "{e}");
    assert_still_serves(&mut client).await;

    let mut r = raw_request(&[1.0]);
    r.raw_input_contents.clear();
    let e = expect_error(&mut client, r, Code::InvalidArgument).await;
    assert!(e.contains("unable to find data for input tensor 'INPUT0'"), "{e}");
    assert_still_serves(&mut client).await;

    let mut r = raw_request(&[1.0]);
    r.raw_input_contents.push(vec![0u8; 4].into());
    let e = expect_error(&mut client, r, Code::InvalidArgument).await;
    assert!(e.contains("raw_input_contents has 2 entries"), "{e}");
    assert_still_serves(&mut client).await;

    // Oversized message: refused by the decoder with the limit in the message.
    let big = raw_request(&vec![0.0; MAX_REQUEST_BYTES / 4 + 16]);
    let status = client.model_infer(big).await.unwrap_err();
    assert!(
        status.message().contains("too large") && status.message().contains(&MAX_REQUEST_BYTES.to_string()),
        "{status:?}"
    );
    assert_still_serves(&mut client).await;

    // Bad JSON over gRPC: a config override that does not parse.
    let load = pb::RepositoryModelLoadRequest {
        model_name: "delay".into(),
        parameters: HashMap::from([(
            "config".to_string(),
            pb::ModelRepositoryParameter {
                parameter_choice: Some(pb::model_repository_parameter::ParameterChoice::StringParam(
                    "{not json".into(),
                )),
            },
        )]),
        ..Default::default()
    };
    let status = client.repository_model_load(load).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("bad config JSON"), "{status:?}");
    assert_still_serves(&mut client).await;

    let mut r = raw_request(&[1.0, 2.0]);
    r.raw_input_contents.clear();
    r.inputs[0].parameters = shm_params("never_registered", 8, 0);
    let e = expect_error(&mut client, r, Code::InvalidArgument).await;
    assert!(e.contains("Unable to find system shared memory region: 'never_registered'"), "{e}");
    assert_still_serves(&mut client).await;

    let region = Region::new("bad", 64);
    client.system_shared_memory_register(register("bad", &region.key, 0, 64)).await.unwrap();
    let status = client.system_shared_memory_register(register("bad", &region.key, 0, 64)).await.unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists);
    assert!(status.message().contains("'bad' already in manager"), "{status:?}");
    assert_still_serves(&mut client).await;

    let mut r = raw_request(&[1.0, 2.0, 3.0, 4.0]);
    r.raw_input_contents.clear();
    r.inputs[0].parameters = shm_params("bad", 16, 56);
    let e = expect_error(&mut client, r, Code::InvalidArgument).await;
    assert!(e.contains("Invalid offset + byte size for shared memory region: 'bad'"), "{e}");
    assert_still_serves(&mut client).await;

    let status = client.system_shared_memory_register(register("bad2", &region.key, 32, 64)).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("Invalid offset + byte size"), "{status:?}");

    // Shared memory and contents on one input.
    let mut r = raw_request(&[1.0]);
    r.raw_input_contents.clear();
    r.inputs[0].parameters = shm_params("bad", 4, 0);
    r.inputs[0].contents = Some(pb::InferTensorContents { fp32_contents: vec![1.0], ..Default::default() });
    let e = expect_error(&mut client, r, Code::InvalidArgument).await;
    assert!(e.contains("'contents' must not be set"), "{e}");

    // Region without byte size.
    let mut r = raw_request(&[1.0]);
    r.raw_input_contents.clear();
    r.inputs[0].parameters = shm_params("bad", 4, 0);
    r.inputs[0].parameters.remove("shared_memory_byte_size");
    let e = expect_error(&mut client, r, Code::InvalidArgument).await;
    assert!(e.contains("must be given together"), "{e}");
    assert_still_serves(&mut client).await;

    client.system_shared_memory_unregister(pb::SystemSharedMemoryUnregisterRequest::default()).await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn system_shared_memory_round_trip() {
    let (server, mut client) = start().await;
    let input_region = Region::new("in", 64);
    let output_region = Region::new("out", 64);
    let data = f32_bytes(&[0.25, -8.0, 3.0]);
    input_region.write(4, &data);
    client.system_shared_memory_register(register("in", &input_region.key, 0, 64)).await.unwrap();
    client.system_shared_memory_register(register("out", &output_region.key, 16, 48)).await.unwrap();
    let status = client
        .system_shared_memory_status(pb::SystemSharedMemoryStatusRequest { name: "out".into() })
        .await
        .unwrap()
        .into_inner();
    let out = &status.regions["out"];
    assert_eq!((out.key.as_str(), out.offset, out.byte_size), (output_region.key.as_str(), 16, 48));

    let mut shm_input = input("INPUT0", "FP32", &[1, 3]);
    shm_input.parameters = shm_params("in", 12, 4);
    let request = pb::ModelInferRequest {
        model_name: "identity".into(),
        inputs: vec![shm_input],
        outputs: vec![InferRequestedOutputTensor { name: "OUTPUT0".into(), parameters: shm_params("out", 12, 0) }],
        ..Default::default()
    };
    let response = client.model_infer(request).await.unwrap().into_inner();
    assert_eq!(response.outputs[0].shape, vec![1, 3]);
    assert_eq!(response.raw_output_contents, vec![Vec::<u8>::new()], "an empty raw entry for a shm output");
    assert_eq!(output_region.read(16, 12), data);

    client
        .system_shared_memory_unregister(pb::SystemSharedMemoryUnregisterRequest { name: "in".into() })
        .await
        .unwrap();
    let all =
        client.system_shared_memory_status(pb::SystemSharedMemoryStatusRequest::default()).await.unwrap().into_inner();
    assert_eq!(all.regions.len(), 1);
    client.system_shared_memory_unregister(pb::SystemSharedMemoryUnregisterRequest::default()).await.unwrap();

    // CUDA: nothing registered, unregister is fine, registering needs a GPU.
    let cuda =
        client.cuda_shared_memory_status(pb::CudaSharedMemoryStatusRequest::default()).await.unwrap().into_inner();
    assert!(cuda.regions.is_empty());
    client.cuda_shared_memory_unregister(pb::CudaSharedMemoryUnregisterRequest::default()).await.unwrap();
    let status = client.cuda_shared_memory_register(pb::CudaSharedMemoryRegisterRequest::default()).await.unwrap_err();
    assert!(status.message().contains("no GPU"), "{status:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn statistics_and_repository() {
    let (server, mut client) = start().await;
    const N: u64 = 4;
    for _ in 0..N {
        assert_still_serves(&mut client).await;
    }
    let stats = client
        .model_statistics(pb::ModelStatisticsRequest { name: "identity".into(), version: String::new() })
        .await
        .unwrap()
        .into_inner();
    let m = &stats.model_stats[0];
    assert_eq!(m.version, "1");
    let inference = m.inference_stats.as_ref().unwrap();
    assert_eq!(inference.success.unwrap().count, N);
    assert_eq!(m.inference_count, N);
    assert_eq!(m.execution_count, N);
    assert_eq!(m.batch_stats[0].batch_size, 1);
    assert_eq!(m.batch_stats[0].compute_infer.unwrap().count, N);
    let all = client.model_statistics(pb::ModelStatisticsRequest::default()).await.unwrap().into_inner();
    assert!(all.model_stats.len() >= 2);

    let index = client.repository_index(pb::RepositoryIndexRequest::default()).await.unwrap().into_inner();
    assert!(index.models.iter().any(|m| m.name == "delay" && m.state == "READY"));
    let unload = pb::RepositoryModelUnloadRequest { model_name: "delay".into(), ..Default::default() };
    client.repository_model_unload(unload).await.unwrap();
    let ready = pb::ModelReadyRequest { name: "delay".into(), version: String::new() };
    assert!(!client.model_ready(ready.clone()).await.unwrap().into_inner().ready);
    let load = pb::RepositoryModelLoadRequest { model_name: "delay".into(), ..Default::default() };
    client.repository_model_load(load).await.unwrap();
    assert!(client.model_ready(ready).await.unwrap().into_inner().ready);
    let named = pb::RepositoryModelLoadRequest {
        repository_name: "x".into(),
        model_name: "delay".into(),
        ..Default::default()
    };
    assert_eq!(client.repository_model_load(named).await.unwrap_err().code(), Code::Unimplemented);
    server.shutdown().await;
}
