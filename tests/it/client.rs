//! The client transports against real servers: our own server embedded in-process, and a real
//! Triton when `PERFBENCH_TRITON_HTTP` / `PERFBENCH_TRITON_GRPC` name one (e.g.
//! `127.0.0.1:22000`, a server started with `shared/interop/start-triton.sh`).
//!
//! Each check is one generic function over [`InferClient`], so every transport runs the same
//! assertions: byte-exact identity round trips (inline and system shared memory), error
//! mapping, statistics, and input data from a perf_analyzer JSON file.

use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};

use perfbench::client::grpc::GrpcClient;
use perfbench::client::http::HttpClient;
use perfbench::client::inprocess::InProcessClient;
use perfbench::client::shm::{output_byte_sizes, ShmSet, DEFAULT_OUTPUT_SHM_BYTES};
use perfbench::client::{ClientError, ConnectOptions, InferClient, InputSource, RequestSpec};
use perfbench::input::{build_requests, InputData, InputOptions};
use perfbench::server::{InferenceServer, ServerOptions};

fn in_process() -> InProcessClient {
    InProcessClient::new(InferenceServer::new(ServerOptions::default()).expect("bundled zoo loads"))
}

/// A region prefix no other test (or process) uses, so parallel tests never collide.
fn unique_prefix() -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!("pbtest{}_{}_", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

async fn specs_for<C: InferClient>(client: &C, model: &str, options: &InputOptions) -> Vec<RequestSpec> {
    let meta = client.model_metadata(model, "").await.expect("metadata");
    let config = client.model_config(model, "").await.expect("config");
    build_requests(&meta, &config, options, "").expect("requests")
}

fn random_input(shape: &str, batch_size: u64) -> InputOptions {
    InputOptions {
        data: vec![InputData::Random],
        shapes: vec![shape.parse().unwrap()],
        batch_size,
        seed: 42,
        ..Default::default()
    }
}

/// The identity model returns its input: same dtype, shape and bytes.
async fn assert_identity<C: InferClient>(client: &C, spec: &RequestSpec) {
    let prepared = client.prepare(spec).expect("prepare");
    let (result, timing) = client.infer(&prepared, true).await;
    let result = result.expect("infer");
    assert!(timing.total >= timing.send && timing.total >= timing.recv, "{timing:?}");
    let InputSource::Inline(input) = &spec.inputs[0].1 else { panic!("inline input expected") };
    assert_eq!(result.outputs.len(), 1);
    assert_eq!(&result.outputs[0].1, input, "output {} differs from the input", result.outputs[0].0);
}

async fn identity_round_trip<C: InferClient>(client: &C, model: &str, shape: &str, batch_size: u64) {
    let specs = specs_for(client, model, &random_input(shape, batch_size)).await;
    assert_identity(client, &specs[0]).await;
    // A prepared request can be sent again and again.
    let prepared = client.prepare(&specs[0]).unwrap();
    for _ in 0..3 {
        let (result, _) = client.infer(&prepared, false).await;
        assert!(result.expect("repeat infer").outputs.is_empty(), "outputs not kept when not asked");
    }
}

async fn shm_round_trip<C: InferClient>(client: &C, model: &str, shape: &str, batch_size: u64) {
    let options = random_input(shape, batch_size);
    let meta = client.model_metadata(model, "").await.unwrap();
    let config = client.model_config(model, "").await.unwrap();
    let specs = build_requests(&meta, &config, &options, "").unwrap();
    let sizes = output_byte_sizes(&meta, &config, batch_size, DEFAULT_OUTPUT_SHM_BYTES, None);
    let prefix = unique_prefix();
    let (set, shm_specs) = ShmSet::setup(client, &specs, &sizes, &prefix).await.expect("shm setup");
    let keys: Vec<String> = shm_specs[0]
        .inputs
        .iter()
        .map(|(_, s)| match s {
            InputSource::SystemShm { region, .. } => set.region(region).expect("input region").key.clone(),
            other => panic!("input not moved to shm: {other:?}"),
        })
        .collect();
    // perf_analyzer's region naming after our prefix, with the pid and a random part in the key.
    assert!(keys[0].starts_with(&format!("/{prefix}")) && keys[0].ends_with("_INPUT0_0_0"), "{}", keys[0]);

    let prepared = client.prepare(&shm_specs[0]).unwrap();
    let (result, _) = client.infer(&prepared, true).await;
    let mut result = result.expect("shm infer");
    assert!(result.outputs[0].1.data.is_empty(), "shm outputs come back without data");
    set.read_outputs(&shm_specs[0], &mut result).unwrap();
    let InputSource::Inline(input) = &specs[0].inputs[0].1 else { unreachable!() };
    assert_eq!(&result.outputs[0].1, input);

    set.release(client).await.expect("release");
    for key in keys {
        assert!(!std::path::Path::new(&format!("/dev/shm{key}")).exists(), "{key} still linked");
    }
}

async fn unknown_model_is_a_server_error<C: InferClient>(client: &C) {
    match client.model_metadata("no_such_model", "").await {
        Err(ClientError::Server(message)) => assert!(message.contains("no_such_model"), "{message}"),
        other => panic!("expected a server error, got {other:?}"),
    }
    let mut spec = specs_for(client, "identity", &random_input("INPUT0:4", 1)).await.remove(0);
    spec.model_name = "no_such_model".into();
    let (result, _) = client.infer(&client.prepare(&spec).unwrap(), false).await;
    let err = result.unwrap_err();
    assert!(matches!(&err, ClientError::Server(m) if m.contains("no_such_model")), "{err}");
    assert!(!err.is_fatal());
}

async fn statistics_count_requests<C: InferClient>(client: &C) {
    let before = client.statistics("identity", "").await.expect("stats");
    let count = |s: &[perfbench::proto::inference::ModelStatistics]| {
        let s = s.iter().find(|m| m.name == "identity").expect("identity stats");
        let success = s.inference_stats.as_ref().and_then(|i| i.success.as_ref()).map_or(0, |d| d.count);
        (s.inference_count, success)
    };
    let (inferences_before, success_before) = count(&before[..]);
    let spec = specs_for(client, "identity", &random_input("INPUT0:8", 2)).await.remove(0);
    let prepared = client.prepare(&spec).unwrap();
    for _ in 0..5 {
        client.infer(&prepared, false).await.0.expect("infer");
    }
    let after = client.statistics("identity", "").await.expect("stats");
    let (inferences_after, success_after) = count(&after[..]);
    assert!(
        inferences_after >= inferences_before + 10,
        "batch 2 × 5 requests: {inferences_before} → {inferences_after}"
    );
    assert!(success_after >= success_before + 5);
    let all = client.statistics("", "").await.expect("stats of all models");
    assert!(all.iter().any(|m| m.name == "identity"));
    let info = client.server_metadata().await.expect("server metadata");
    assert!(info.extensions.iter().any(|e| e == "statistics"), "{info:?}");
}

async fn json_file_data<C: InferClient>(client: &C) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.json");
    std::fs::write(&path, r#"{"data":[{"INPUT0":[1,2,3,4]},{"INPUT0":{"content":[[5,6],[7,8]],"shape":[4]}}]}"#)
        .unwrap();
    // A bare array takes the model's shape, as perf_analyzer 2.50 reads it: INPUT0 is [-1], so
    // its length comes from --shape; the second step carries its own.
    let options = InputOptions {
        data: vec![InputData::File(path)],
        shapes: vec!["INPUT0:4".parse().unwrap()],
        ..Default::default()
    };
    let specs = specs_for(client, "identity", &options).await;
    assert_eq!(specs.len(), 2);
    for spec in &specs {
        assert_identity(client, spec).await;
    }
    let prepared = client.prepare(&specs[1]).unwrap();
    let result = client.infer(&prepared, true).await.0.unwrap();
    assert_eq!(result.outputs[0].1.to_f32(), vec![5.0, 6.0, 7.0, 8.0]);
    assert_eq!(result.outputs[0].1.shape, vec![1, 4]);
}

/// A port nothing listens on: bound, then released.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn assert_unreachable(result: Result<impl std::fmt::Debug, ClientError>) {
    match result {
        Err(e @ ClientError::Unreachable { .. }) => {
            assert!(e.is_fatal());
            assert!(!e.to_string().contains('\n'), "one line: {e}");
        }
        other => panic!("expected Unreachable, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inprocess_identity_round_trips() {
    let client = in_process();
    identity_round_trip(&client, "identity", "INPUT0:16", 4).await;
    identity_round_trip(&client, "identity_fp16", "INPUT0:7", 1).await;
    identity_round_trip(&client, "identity_bytes", "INPUT0:3", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inprocess_shared_memory_round_trip() {
    let client = in_process();
    shm_round_trip(&client, "identity", "INPUT0:16", 2).await;
    shm_round_trip(&client, "identity_bytes", "INPUT0:3", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inprocess_errors_statistics_and_data_file() {
    let client = in_process();
    unknown_model_is_a_server_error(&client).await;
    statistics_count_requests(&client).await;
    json_file_data(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connection_is_unreachable() {
    let url = format!("127.0.0.1:{}", closed_port());
    let http = HttpClient::new(&url, &ConnectOptions::default()).unwrap();
    assert_unreachable(http.server_metadata().await);
    let spec = specs_for(&in_process(), "identity", &random_input("INPUT0:4", 1)).await.remove(0);
    assert_unreachable(http.infer(&http.prepare(&spec).unwrap(), false).await.0);
    let grpc = GrpcClient::new(&url, &ConnectOptions::default()).unwrap();
    assert_unreachable(grpc.server_metadata().await);
    assert_unreachable(grpc.infer(&grpc.prepare(&spec).unwrap(), false).await.0);
}

#[test]
fn bad_urls_and_headers_are_clear_errors() {
    let bad_header =
        ConnectOptions { concurrency: 1, headers: vec![("bad header".into(), "x".into())], ..Default::default() };
    assert!(HttpClient::new("localhost:1", &bad_header).err().unwrap().to_string().contains("bad header"));
    assert!(HttpClient::new("bad host:1", &ConnectOptions::default())
        .err()
        .unwrap()
        .to_string()
        .contains("bad server URL"));
}

/// The same checks against a real Triton serving pytriton's `identity` (FP32, batching).
async fn against_triton<C: InferClient>(client: C) {
    identity_round_trip(&client, "identity", "INPUT0:16", 4).await;
    shm_round_trip(&client, "identity", "INPUT0:16", 2).await;
    unknown_model_is_a_server_error(&client).await;
    statistics_count_requests(&client).await;
    json_file_data(&client).await;
}

/// One test for both protocols: shared-memory setup unregisters every region on the server (as
/// perf_analyzer does), so two runs against one server must not overlap. The interop suite runs
/// it against its Triton (tests/interop/test_client_vs_triton.py), naming the server's ports in
/// PERFBENCH_TRITON_HTTP and PERFBENCH_TRITON_GRPC; run without them, it fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a real Triton: tests/interop/test_client_vs_triton.py runs it"]
async fn real_triton_http_and_grpc() {
    let address = |var: &str| {
        std::env::var(var)
            .unwrap_or_else(|_| panic!("{var} must name a real Triton's host:port (the interop suite sets it)"))
    };
    let (http, grpc) = (address("PERFBENCH_TRITON_HTTP"), address("PERFBENCH_TRITON_GRPC"));
    against_triton(HttpClient::new(&http, &ConnectOptions::default()).unwrap()).await;
    against_triton(GrpcClient::new(&grpc, &ConnectOptions::default()).unwrap()).await;
}

/// Our own server over the network, started in-process on ephemeral loopback ports.
mod own_server {
    use super::*;
    use perfbench::server::serve::{start, ServeConfig};

    async fn all_checks<C: InferClient>(client: &C) {
        identity_round_trip(client, "identity", "INPUT0:16", 4).await;
        // 256 KiB each way: past the gRPC client's request-sized and 1 KiB response buffers,
        // and across many HTTP/2 frames.
        identity_round_trip(client, "identity", "INPUT0:65536", 1).await;
        identity_round_trip(client, "identity_fp16", "INPUT0:7", 1).await;
        identity_round_trip(client, "identity_bytes", "INPUT0:3", 2).await;
        shm_round_trip(client, "identity", "INPUT0:16", 2).await;
        shm_round_trip(client, "identity_bytes", "INPUT0:3", 1).await;
        unknown_model_is_a_server_error(client).await;
        statistics_count_requests(client).await;
        json_file_data(client).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn http_transport() {
        let server = start(ServeConfig::default()).await.expect("server starts");
        all_checks(&HttpClient::new(&server.http_url(), &ConnectOptions::default()).unwrap()).await;
        server.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn grpc_transport() {
        let server = start(ServeConfig::default()).await.expect("server starts");
        all_checks(&GrpcClient::new(&server.grpc_url(), &ConnectOptions::default()).unwrap()).await;
        server.shutdown().await;
    }

    /// Many requests in flight on one client: every response matches its own request.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_requests_multiplex() {
        let server = start(ServeConfig::default()).await.expect("server starts");
        let options = ConnectOptions { concurrency: 32, ..Default::default() };
        let http = HttpClient::new(&server.http_url(), &options).unwrap();
        let grpc = GrpcClient::new(&server.grpc_url(), &options).unwrap();
        async fn burst<C: InferClient>(client: &C) {
            let specs: Vec<RequestSpec> = futures::future::join_all((0..32).map(|seed| async move {
                let options = InputOptions { seed, ..random_input("INPUT0:64", 1) };
                specs_for(client, "identity", &options).await.remove(0)
            }))
            .await;
            futures::future::join_all(specs.iter().map(|spec| assert_identity(client, spec))).await;
        }
        burst(&http).await;
        burst(&grpc).await;
        server.shutdown().await;
    }

    /// A server that goes away turns into `Unreachable`, which ends a run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stopped_server_is_unreachable() {
        let server = start(ServeConfig::default()).await.expect("server starts");
        let http = HttpClient::new(&server.http_url(), &ConnectOptions::default()).unwrap();
        let grpc = GrpcClient::new(&server.grpc_url(), &ConnectOptions::default()).unwrap();
        let spec = specs_for(&http, "identity", &random_input("INPUT0:4", 1)).await.remove(0);
        let (h, g) = (http.prepare(&spec).unwrap(), grpc.prepare(&spec).unwrap());
        http.infer(&h, false).await.0.expect("http works while the server runs");
        grpc.infer(&g, false).await.0.expect("grpc works while the server runs");
        server.shutdown().await;
        assert_unreachable(http.infer(&h, false).await.0);
        assert_unreachable(grpc.infer(&g, false).await.0);
    }
}

/// `--request-parameter`s reach the server: our real gRPC service runs behind a layer that
/// decodes every `ModelInferRequest` on its way in (unary and `ModelStreamInfer`) and keeps its
/// parameters, so the test sees exactly what went over the wire.
mod request_parameters {
    use std::collections::HashMap;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use bytes::{Buf, BytesMut};
    use hyper::body::{Body, Frame};
    use perfbench::client::grpc::GrpcClient;
    use perfbench::client::{parse_request_parameters, ConnectOptions, InferClient};
    use perfbench::proto::inference::infer_parameter::ParameterChoice;
    use perfbench::proto::inference::ModelInferRequest;
    use perfbench::server::{InferenceServer, ServerOptions};
    use prost::Message;

    use super::{random_input, specs_for};

    type Seen = Arc<Mutex<Vec<HashMap<String, Option<ParameterChoice>>>>>;

    /// A request body that decodes the gRPC messages passing through it.
    struct Capture {
        inner: tonic::body::Body,
        buf: BytesMut,
        seen: Seen,
    }

    impl Body for Capture {
        type Data = bytes::Bytes;
        type Error = tonic::Status;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
            let frame = Pin::new(&mut self.inner).poll_frame(cx);
            if let Poll::Ready(Some(Ok(frame))) = &frame {
                if let Some(data) = frame.data_ref() {
                    let this = &mut *self;
                    this.buf.extend_from_slice(data);
                    // Length-prefixed messages: flag byte, u32 length, message.
                    while this.buf.len() >= 5 {
                        let len = u32::from_be_bytes(this.buf[1..5].try_into().unwrap()) as usize;
                        if this.buf.len() < 5 + len {
                            break;
                        }
                        this.buf.advance(5);
                        let message = this.buf.split_to(len);
                        let request = ModelInferRequest::decode(&message[..]).expect("a ModelInferRequest");
                        let params = request.parameters.into_iter().map(|(k, v)| (k, v.parameter_choice)).collect();
                        this.seen.lock().unwrap().push(params);
                    }
                }
            }
            frame
        }
    }

    /// Our gRPC service on a free port, with every inference request's parameters kept.
    async fn capturing_server() -> (String, Seen) {
        let seen: Seen = Default::default();
        let core = InferenceServer::new(ServerOptions::default()).expect("zoo loads");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("127.0.0.1:{}", listener.local_addr().unwrap().port());
        let keep = seen.clone();
        let layer = tower::ServiceBuilder::new().map_request(
            move |request: tonic::codegen::http::Request<tonic::body::Body>| {
                let infer = request.uri().path().ends_with("/ModelInfer")
                    || request.uri().path().ends_with("/ModelStreamInfer");
                let seen = keep.clone();
                request.map(|inner| match infer {
                    true => tonic::body::Body::new(Capture { inner, buf: BytesMut::new(), seen }),
                    false => inner,
                })
            },
        );
        let server = tonic::transport::Server::builder()
            .layer(layer)
            .add_service(perfbench::server::grpc::inference_service(core))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
        tokio::spawn(server);
        (url, seen)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn request_parameters_reach_the_server_unary_and_streamed() {
        let (url, seen) = capturing_server().await;
        let texts = ["max_tokens:256:int", "greedy:true:BOOL", "tag:a b:string", "max_tokens:7:int"].map(String::from);
        let request_parameters = parse_request_parameters(&texts).unwrap();
        for streaming in [false, true] {
            seen.lock().unwrap().clear();
            let options =
                ConnectOptions { request_parameters: request_parameters.clone(), streaming, ..Default::default() };
            let client = GrpcClient::new(&url, &options).unwrap();
            let spec = specs_for(&client, "identity", &random_input("INPUT0:4", 1)).await.remove(0);
            let prepared = client.prepare(&spec).unwrap();
            for _ in 0..2 {
                client.infer(&prepared, false).await.0.expect("the server keeps parameters it does not use");
            }
            let seen = seen.lock().unwrap().clone();
            assert_eq!(seen.len(), 2, "streaming {streaming}: {seen:?}");
            for params in seen {
                let expected: HashMap<_, _> = [
                    ("max_tokens".to_string(), Some(ParameterChoice::Int64Param(7))),
                    ("greedy".to_string(), Some(ParameterChoice::BoolParam(true))),
                    ("tag".to_string(), Some(ParameterChoice::StringParam("a b".into()))),
                ]
                .into_iter()
                .collect();
                assert_eq!(params, expected, "streaming {streaming}");
            }
        }
    }
}
