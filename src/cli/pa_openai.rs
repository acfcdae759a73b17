//! perf_analyzer's `--service-kind openai` (and genai-perf's runs of `perf_analyzer`): resolved by
//! [`super::profile::ProfileArgs::openai`], run by [`crate::genai::pa_openai`], reported in
//! perf_analyzer's words.

use std::process::ExitCode;

use crate::run::{EXIT_BAD_INPUT, EXIT_TARGET};

/// Runs the resolved line (or prints why it cannot run).
pub fn run(config: Result<crate::genai::pa_openai::PaOpenAi, crate::plan::PlanError>) -> ExitCode {
    use crate::genai::pa_openai;
    let config = match config {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let streamed = pa_openai::read_payloads(&config.input_data)
        .map(|p| p.iter().any(|p| p.contains("\"stream\":true") || p.contains("\"stream\": true")));
    let (levels, info, payloads) = match pa_openai::run(&config) {
        Ok(run) => run,
        Err(e) => {
            eprintln!("error: {}", super::one_line(&e));
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    println!("*** Measurement Settings ***\n  Service Kind: OPENAI\n  Endpoint: {}\n", config.endpoint);
    for level in &levels {
        print!("{}", pa_openai::summary(level));
    }
    if let Some(path) = &config.export {
        let export = pa_openai::export(&config, &levels, &info, &payloads, streamed.unwrap_or(false));
        if let Err(e) = std::fs::write(path, serde_json::to_string(&export).expect("JSON")) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    if let Some(error) = levels.iter().find(|l| l.ok() == 0).and_then(|l| l.first_error()) {
        eprintln!("Thread [0] had error: {error}");
        return ExitCode::from(EXIT_TARGET);
    }
    ExitCode::SUCCESS
}
