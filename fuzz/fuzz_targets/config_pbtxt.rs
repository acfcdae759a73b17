//! config.pbtxt text through the parser and Triton's defaults.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(config) = perfbench::server::config::parse_pbtxt(text, "fuzz") {
            let _ = perfbench::server::config::to_json(&config);
        }
    }
});
