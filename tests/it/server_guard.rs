//! The server's limits and access rules (issue 13): `--restricted-api` over HTTP and gRPC (and
//! perfbench's own client passing the key with `-H`), elements per tensor, registered shared
//! memory (size, existence, an object shrunk behind the server's back), open connections and
//! the request timeout. Hitting a limit is a clear error and the server keeps serving.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use perfbench::client::grpc::GrpcClient;
use perfbench::client::http::HttpClient;
use perfbench::client::{ConnectOptions, InferClient};
use perfbench::proto::inference as pb;
use perfbench::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use perfbench::proto::inference::model_infer_request::InferInputTensor;
use perfbench::server::access::{RestrictedApi, Restriction};
use perfbench::server::serve::{self, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tonic::transport::Channel;
use tonic::Code;

use crate::common::{perfbench, stderr, Region};

fn restricted(spec: &str) -> RestrictedApi {
    RestrictedApi::new(vec![spec.parse::<Restriction>().unwrap()]).unwrap()
}

fn with(options: ServerOptions) -> ServeConfig {
    ServeConfig { options, ..Default::default() }
}

async fn start(config: ServeConfig) -> RunningServer {
    serve::start(config).await.expect("server starts")
}

async fn grpc(server: &RunningServer) -> GrpcInferenceServiceClient<Channel> {
    GrpcInferenceServiceClient::connect(server.grpc_url()).await.expect("connects")
}

async fn get(url: String, header: Option<(&str, &str)>) -> (StatusCode, Value) {
    let client = reqwest::Client::new();
    let mut request = client.get(url);
    if let Some((k, v)) = header {
        request = request.header(k, v);
    }
    let response = request.send().await.expect("answers");
    let status = response.status();
    let body = response.bytes().await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn identity_json(values: &[f32]) -> Value {
    json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, values.len()], "data": values}]})
}

fn identity_grpc(n: usize) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: "identity".into(),
        inputs: vec![InferInputTensor {
            name: "INPUT0".into(),
            datatype: "FP32".into(),
            shape: vec![1, n as i64],
            ..Default::default()
        }],
        raw_input_contents: vec![vec![0u8; 4 * n].into()],
        ..Default::default()
    }
}

async fn post_json(server: &RunningServer, path: &str, body: &Value) -> (StatusCode, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", server.http_url()))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, serde_json::from_slice(&response.bytes().await.unwrap()).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_groups_need_the_header_over_http() {
    let config = with(ServerOptions {
        restricted: restricted("shared-memory,model-repository,statistics:X-Admin-Key=s3cret"),
        ..Default::default()
    });
    let server = start(config).await;
    let base = server.http_url();
    for path in ["/v2/models/stats", "/v2/models/identity/stats", "/v2/systemsharedmemory/status"] {
        let (status, body) = get(format!("{base}{path}"), None).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        let message = body["error"].as_str().unwrap();
        assert!(message.contains("x-admin-key") && !message.contains("s3cret"), "{message}");
        assert_eq!(get(format!("{base}{path}"), Some(("x-admin-key", "wrong"))).await.0, StatusCode::FORBIDDEN);
        assert_eq!(get(format!("{base}{path}"), Some(("X-Admin-Key", "s3cret"))).await.0, StatusCode::OK, "{path}");
    }
    let index = reqwest::Client::new().post(format!("{base}/v2/repository/index"));
    assert_eq!(index.send().await.unwrap().status(), StatusCode::FORBIDDEN);
    let index = reqwest::Client::new().post(format!("{base}/v2/repository/index")).header("x-admin-key", "s3cret");
    assert_eq!(index.send().await.unwrap().status(), StatusCode::OK);
    // Groups not named stay open.
    assert_eq!(get(format!("{base}/v2/models/identity"), None).await.0, StatusCode::OK);
    assert_eq!(post_json(&server, "/v2/models/identity/infer", &identity_json(&[1.0])).await.0, StatusCode::OK);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restricted_groups_need_the_header_over_grpc() {
    let config = with(ServerOptions {
        restricted: restricted("statistics,shared-memory:x-admin-key=s3cret"),
        ..Default::default()
    });
    let server = start(config).await;
    let mut client = grpc(&server).await;
    let keyed = |value: &str| {
        let mut r = tonic::Request::new(pb::ModelStatisticsRequest::default());
        r.metadata_mut().insert("x-admin-key", value.parse().unwrap());
        r
    };
    let e = client.model_statistics(pb::ModelStatisticsRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("x-admin-key"), "{e:?}");
    assert_eq!(client.model_statistics(keyed("nope")).await.unwrap_err().code(), Code::PermissionDenied);
    assert!(client.model_statistics(keyed("s3cret")).await.is_ok());
    let status = pb::SystemSharedMemoryStatusRequest::default();
    assert_eq!(client.system_shared_memory_status(status).await.unwrap_err().code(), Code::PermissionDenied);
    // Inference is not restricted.
    client.model_infer(identity_grpc(2)).await.expect("inference is open");
    server.shutdown().await;
}

/// perfbench's own clients pass the key with `-H` (ConnectOptions::headers), on both protocols.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_passes_the_key_with_headers() {
    let config = with(ServerOptions {
        restricted: restricted("statistics,shared-memory:x-admin-key=s3cret"),
        ..Default::default()
    });
    let server = start(config).await;
    let bare = ConnectOptions::default();
    let keyed = ConnectOptions { headers: vec![("x-admin-key".into(), "s3cret".into())], ..Default::default() };
    let e = HttpClient::new(&server.http_url(), &bare).unwrap().statistics("identity", "").await.unwrap_err();
    assert!(e.to_string().contains("restricted"), "{e}");
    HttpClient::new(&server.http_url(), &keyed).unwrap().statistics("identity", "").await.unwrap();
    let e = GrpcClient::new(&server.grpc_url(), &bare).unwrap().statistics("identity", "").await.unwrap_err();
    assert!(e.to_string().contains("restricted"), "{e}");
    GrpcClient::new(&server.grpc_url(), &keyed).unwrap().statistics("identity", "").await.unwrap();
    server.shutdown().await;
}

/// `perfbench profile -H` against a `perfbench serve --restricted-api` profiles normally, over
/// HTTP with shared memory (so the shm group is exercised too) and over gRPC.
#[test]
fn profile_with_the_key_against_a_restricted_server() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let config = with(ServerOptions {
        restricted: restricted("statistics,shared-memory,model-repository:x-admin-key=s3cret"),
        ..Default::default()
    });
    let server = runtime.block_on(start(config));
    let dir = tempfile::tempdir().unwrap();
    for (protocol, addr, shm) in
        [("http", server.http_addr, "system"), ("grpc", server.grpc_addr, "none"), ("http", server.http_addr, "none")]
    {
        let csv = dir.path().join(format!("{protocol}-{shm}.csv"));
        let addr = addr.to_string();
        let args = [
            "profile",
            "-m",
            "identity",
            "-u",
            &addr,
            "-i",
            protocol,
            "--shape",
            "INPUT0:4",
            "--shared-memory",
            shm,
            "-H",
            "x-admin-key: s3cret",
            "--measurement-mode",
            "count_windows",
            "--measurement-request-count",
            "20",
            "-s",
            "100",
            "-f",
            csv.to_str().unwrap(),
        ];
        let out = perfbench(&args);
        assert!(out.status.success(), "{protocol}/{shm}: {}", stderr(&out));
        assert_eq!(std::fs::read_to_string(&csv).unwrap().lines().count(), 2, "{protocol}/{shm}: one row");
    }
    // Without the key, a run that needs shared memory is refused with the reason.
    let addr = server.http_addr.to_string();
    let out =
        perfbench(&["profile", "-m", "identity", "-u", &addr, "--shape", "INPUT0:4", "--shared-memory", "system"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("restricted"), "{}", stderr(&out));
    runtime.block_on(server.shutdown());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elements_per_tensor_are_limited() {
    let options = ServerOptions { max_tensor_elements: 16, ..Default::default() };
    let server = start(ServeConfig { options, ..Default::default() }).await;
    let (status, body) = post_json(&server, "/v2/models/identity/infer", &identity_json(&[0.0; 17])).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body["error"].as_str().unwrap().contains("--max-tensor-elements"), "{body}");
    assert_eq!(post_json(&server, "/v2/models/identity/infer", &identity_json(&[0.0; 16])).await.0, StatusCode::OK);
    let mut client = grpc(&server).await;
    let e = client.model_infer(identity_grpc(17)).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    client.model_infer(identity_grpc(16)).await.expect("within the limit");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_shared_memory_is_checked_and_limited() {
    let options = ServerOptions { max_shm_bytes: 100, ..Default::default() };
    let server = start(ServeConfig { options, ..Default::default() }).await;
    let region = Region::new("limit", 64);
    let register = |name: &str, key: &str, offset: u64, size: u64| {
        let body = json!({"key": key, "offset": offset, "byte_size": size});
        let path = format!("/v2/systemsharedmemory/region/{name}/register");
        let server = &server;
        async move { post_json(server, &path, &body).await }
    };
    // The object must exist and hold offset + size.
    let (status, body) = register("a", "/pb_guard_no_such_object", 0, 8).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().contains("Unable to open"), "{body}");
    let (status, body) = register("a", &region.key, 60, 8).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().contains("exceed the 64-byte object"), "{body}");
    // The total registered is limited.
    assert_eq!(register("a", &region.key, 0, 64).await.0, StatusCode::OK);
    let (status, body) = register("b", &region.key, 0, 64).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body["error"].as_str().unwrap().contains("--max-shm-bytes"), "{body}");
    let mut client = grpc(&server).await;
    let e = client
        .system_shared_memory_register(pb::SystemSharedMemoryRegisterRequest {
            name: "b".into(),
            key: region.key.clone(),
            offset: 0,
            byte_size: 64,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    server.shutdown().await;
}

/// The client shrinks its object after registering it: the server answers a client error where
/// touching the mapping would have been SIGBUS, and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_shrunk_after_registration_is_a_client_error() {
    let server = start(ServeConfig::default()).await;
    let region = Region::new("shrink", 4096);
    server.core.shm.register("in", &region.key, 0, 4096).unwrap();
    let c_key = std::ffi::CString::new(region.key.as_str()).unwrap();
    // SAFETY: plain libc calls on an object this test created.
    unsafe {
        let fd = libc::shm_open(c_key.as_ptr(), libc::O_RDWR, 0);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, 8), 0);
        libc::close(fd);
    }
    let body = json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1024],
        "parameters": {"shared_memory_region": "in", "shared_memory_byte_size": 4096}}]});
    let (status, body) = post_json(&server, "/v2/models/identity/infer", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"].as_str().unwrap().contains("shrunk"), "{body}");
    assert_eq!(post_json(&server, "/v2/models/identity/infer", &identity_json(&[1.0])).await.0, StatusCode::OK);
    server.shutdown().await;
}

/// Sends one keep-alive request on a raw connection and returns the response head and body.
fn raw_request(stream: &mut TcpStream, path: &str) -> String {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut buf = vec![0u8; 4096];
    let mut text = String::new();
    // Read until the (small) body is complete: headers end and the JSON closes, or EOF.
    while !(text.contains("\r\n\r\n") && (text.ends_with('}') || text.ends_with("\r\n\r\n") && text.contains(" 200 ")))
    {
        let n = stream.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    text
}

#[test]
fn connections_over_the_limit_are_told_so_and_closed() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = runtime.block_on(start(with(ServerOptions { max_connections: 2, ..Default::default() })));
    let open = |addr| {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    };
    let mut a = open(server.http_addr);
    let mut b = open(server.http_addr);
    assert!(raw_request(&mut a, "/v2/health/ready").starts_with("HTTP/1.1 200"));
    assert!(raw_request(&mut b, "/v2/health/ready").starts_with("HTTP/1.1 200"));
    let mut c = open(server.http_addr);
    let answer = raw_request(&mut c, "/v2/models/identity");
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
    assert!(answer.contains("--max-connections"), "{answer}");
    // The connections inside the limit are unharmed; closing one makes room.
    assert!(raw_request(&mut a, "/v2/health/ready").starts_with("HTTP/1.1 200"));
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut d = open(server.http_addr);
        if raw_request(&mut d, "/v2/health/ready").starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "a closed connection never freed its place");
        std::thread::sleep(Duration::from_millis(50));
    }

    // gRPC: the second connection's calls are RESOURCE_EXHAUSTED.
    runtime.block_on(async {
        let server = start(with(ServerOptions { max_connections: 1, ..Default::default() })).await;
        let mut first = grpc(&server).await;
        first.model_infer(identity_grpc(1)).await.expect("the first connection is served");
        let mut second = grpc(&server).await;
        let e = second.model_infer(identity_grpc(1)).await.unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(e.message().contains("--max-connections"), "{e:?}");
        first.model_infer(identity_grpc(1)).await.expect("the first connection is unharmed");
        server.shutdown().await;
    });
    runtime.block_on(server.shutdown());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_timeout_are_answered_and_the_server_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("slow")).unwrap();
    std::fs::write(
        dir.path().join("slow/config.pbtxt"),
        r#"backend: "delay" max_batch_size: 0
           input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
           output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
           instance_group [ { count: 4 } ]
           parameters { key: "delay_us" value { string_value: "3000000" } }"#,
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("identity")).unwrap();
    std::fs::write(
        dir.path().join("identity/config.pbtxt"),
        perfbench::server::repository::ZOO.iter().find(|(n, _)| *n == "identity").unwrap().1,
    )
    .unwrap();
    let options = ServerOptions {
        model_repository: Some(dir.path().to_path_buf()),
        request_timeout: Some(Duration::from_millis(300)),
        ..Default::default()
    };
    let server = start(ServeConfig { options, ..Default::default() }).await;
    let slow = json!({"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}]});
    let (status, body) = post_json(&server, "/v2/models/slow/infer", &slow).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body["error"].as_str().unwrap().contains("timeout"), "{body}");
    let mut client = grpc(&server).await;
    let mut request = pb::ModelInferRequest { model_name: "slow".into(), ..identity_grpc(1) };
    request.inputs[0].shape = vec![1];
    let e = client.model_infer(request).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(e.message().contains("timeout"), "{e:?}");
    client.model_infer(identity_grpc(1)).await.expect("other models are served");

    // A body that never finishes arriving is cut off by the same timeout.
    let addr = server.http_addr;
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(s, "POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{\"in").unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        text
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert_eq!(post_json(&server, "/v2/models/identity/infer", &identity_json(&[1.0])).await.0, StatusCode::OK);
    server.shutdown().await;
}

#[test]
fn serve_flags_are_checked() {
    let out = perfbench(&["serve", "--restricted-api", "bogus:x=y"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("unknown endpoint group 'bogus'"), "{}", stderr(&out));
    let out = perfbench(&["serve", "--restricted-api", "statistics:x=1", "--restricted-api", "statistics:y=2"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("more than once"), "{}", stderr(&out));
    let out = perfbench(&["serve", "--request-timeout", "-1"]);
    assert!(!out.status.success());
}
