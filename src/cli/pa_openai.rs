//! perf_analyzer's `--service-kind openai` (and genai-perf's runs of `perf_analyzer`): resolved here from
//! [`ProfileArgs`] (`ProfileArgs::openai`), run by [`crate::genai::pa_openai`], reported in
//! perf_analyzer's words.

use std::process::ExitCode;

use std::path::PathBuf;

use super::pa_compat::concurrency_range;
use super::profile::ProfileArgs;
use crate::client::shm::SharedMemoryKind;
use crate::plan::{validate, PlanError, Protocol};
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

/// `--service-kind openai`: perf_analyzer 2.50's checks (the plan's, in its words), then the
/// run of [`crate::genai::pa_openai`].
impl ProfileArgs {
    pub fn openai(&self) -> Result<crate::genai::pa_openai::PaOpenAi, PlanError> {
        match self.plan() {
            Err(PlanError::NotSupported(what)) if what == "--service-kind openai" => {}
            Err(e) => return Err(e),
            Ok(_) => return Err(validate::not_openai()),
        }
        validate::check_openai_call(
            self.common.call.protocol == Some(Protocol::Grpc),
            self.common.input.shared_memory.is_some_and(|m| m != SharedMemoryKind::None),
        )?;
        if self.sections.load.request_rate.is_some()
            || self.sections.load.request_intervals.is_some()
            || self.pa.periodic_concurrency_range.is_some()
        {
            return Err(PlanError::NotSupported(
                "--service-kind openai with a load other than --concurrency-range".into(),
            ));
        }
        let levels = match &self.pa.concurrency_range {
            Some(text) => concurrency_range(text)?.values(1),
            None => vec![1],
        };
        let input_data = self
            .pa
            .input_data(&self.common.settings(&self.sections.load, &self.sections.output))
            .into_iter()
            .find(|d| d != "zero" && d != "random")
            .map(PathBuf::from);
        if let Some(path) = input_data.as_ref() {
            validate::check_openai_input_data(path)?;
        }
        let headers = self
            .common
            .call
            .headers
            .iter()
            .flatten()
            .filter_map(|h| h.split_once(':').map(|(k, v)| (k.trim().to_string(), v.trim().to_string())))
            .collect();
        Ok(crate::genai::pa_openai::PaOpenAi {
            url: self.common.url.clone().unwrap_or_else(|| "localhost:8000".into()),
            endpoint: self.pa.endpoint.clone().unwrap_or_default(),
            input_data: input_data.unwrap_or_default(),
            levels: levels.into_iter().map(|l| l.max(1) as usize).collect(),
            request_count: self.common.measurement.request_count.filter(|&n| n > 0),
            measurement: std::time::Duration::from_millis(
                self.common.measurement.measurement_interval_ms.unwrap_or(5000),
            ),
            warmup: self.common.measurement.warmup_request_count.unwrap_or(0),
            headers,
            export: self.sections.output.profile_export_file.clone(),
        })
    }
}
