//! An HTTP infer body (JSON header, binary tensors) through the decoder and admission.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perfbench::server::config::parse_pbtxt;
use perfbench::server::http_json::decode_request;
use perfbench::server::infer::{admit, Limits};
use perfbench::server::shm::SharedMemoryManager;

const CONFIG: &str = r#"backend: "identity" max_batch_size: 8
    input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
    output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]"#;

fuzz_target!(|data: &[u8]| {
    // The first two bytes choose the Inference-Header-Content-Length: none, or a length.
    let (header, body) = data.split_at(data.len().min(2));
    let header_len = match header {
        [0xff, _] | [] | [_] => None,
        [a, b] => Some(usize::from(u16::from_le_bytes([*a, *b]))),
        _ => None,
    };
    let config = parse_pbtxt(CONFIG, "identity").unwrap();
    if let Ok(decoded) = decode_request(&config, "", bytes::Bytes::copy_from_slice(body), header_len) {
        let limits = Limits { max_tensor_elements: 1 << 20 };
        let _ = admit(&config, "1", decoded.request, &SharedMemoryManager::default(), &limits, std::time::Instant::now());
    }
});
