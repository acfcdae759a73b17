//! Scenario TOML through `Scenario::parse` and the sweep plans.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(scenario) = perfbench::scenario::Scenario::parse(text, Path::new("fuzz.toml")) {
            let _ = scenario.sections(None);
        }
    }
});
