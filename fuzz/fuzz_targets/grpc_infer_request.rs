//! A protobuf ModelInferRequest through the gRPC decoder and admission.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfbench::proto::inference::ModelInferRequest;
use perfbench::server::config::parse_pbtxt;
use perfbench::server::grpc::decode_request;
use perfbench::server::infer::{admit, Limits};
use perfbench::server::shm::SharedMemoryManager;
use prost::Message;

const CONFIG: &str = r#"backend: "identity" max_batch_size: 4
    input [ { name: "INPUT0" data_type: TYPE_INT8 dims: [ 2, -1 ] }, { name: "INPUT1" data_type: TYPE_STRING dims: [ -1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_INT8 dims: [ 2, -1 ] }, { name: "OUTPUT1" data_type: TYPE_STRING dims: [ -1 ] } ]"#;

fuzz_target!(|data: &[u8]| {
    let Ok(request) = ModelInferRequest::decode(data) else {
        return;
    };
    let config = parse_pbtxt(CONFIG, "multi").unwrap();
    if let Ok(request) = decode_request(request) {
        let limits = Limits { max_tensor_elements: 1 << 20 };
        let _ = admit(&config, "1", request, &SharedMemoryManager::default(), &limits, std::time::Instant::now());
    }
});
