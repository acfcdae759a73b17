//! perf_analyzer's `--service-kind openai` (and genai-perf's runs of `perf_analyzer`): resolved here from
//! [`ProfileArgs`] (`ProfileArgs::openai`), run by [`crate::genai::pa_openai`], reported in
//! perf_analyzer's words.

use std::path::PathBuf;
use std::process::ExitCode;

use super::profile::ProfileArgs;
use crate::client::shm::SharedMemoryKind;
use crate::genai::pa_data;
use crate::genai::pa_openai::{self, Limit, PaLoad, PaOpenAi, Walk};
use crate::plan::settings::resolve;
use crate::plan::validate::{self, invalid};
use crate::plan::{Distribution, Levels, Load, PlanError, Protocol, SweepKind, Target};
use crate::run::{EXIT_BAD_INPUT, EXIT_TARGET};

/// Runs the resolved line (or prints why it cannot run).
pub fn run(config: Result<PaOpenAi, PlanError>) -> ExitCode {
    let bad_input = |e: &dyn std::fmt::Display| {
        eprintln!("error: {e}");
        ExitCode::from(EXIT_BAD_INPUT)
    };
    let config = match config {
        Ok(config) => config,
        Err(e) => return bad_input(&e),
    };
    let payloads = match pa_data::read(&config.input_data) {
        Ok(payloads) => payloads,
        Err(e) => return bad_input(&super::one_line(&e)),
    };
    println!("{}", payloads.read_line());
    let streamed = payloads.bodies.iter().any(|p| p.contains("\"stream\":true") || p.contains("\"stream\": true"));
    let (levels, info) = match pa_openai::run(&config, &payloads) {
        Ok(run) => run,
        Err(e) => return bad_input(&super::one_line(&e)),
    };
    println!("{}", pa_openai::settings(&config));
    for level in &levels {
        print!("{}", pa_openai::summary(level));
        if let (false, Some(limit)) = (level.within_limit, config.limit) {
            eprintln!("Measured latency went over the set limit of {} msec. ", limit.latency_ms);
        }
    }
    print!("{}", pa_openai::closing(&levels));
    if let Some(path) = &config.csv {
        if let Err(e) = std::fs::write(path, pa_openai::csv(&levels, config.verbose_csv)) {
            return bad_input(&format!("cannot write {}: {e}", path.display()));
        }
    }
    if let Some(path) = &config.export {
        let export = pa_openai::export(&config, &levels, &info, &payloads, streamed);
        if let Err(e) = std::fs::write(path, serde_json::to_string(&export).expect("JSON")) {
            return bad_input(&format!("cannot write {}: {e}", path.display()));
        }
    }
    if let Some(error) = levels.iter().find(|l| l.ok() == 0).and_then(|l| l.first_error()) {
        eprintln!("Thread [0] had error: {error}");
        return ExitCode::from(EXIT_TARGET);
    }
    ExitCode::SUCCESS
}

/// A concurrency range as perf_analyzer walks it (end 0, kept as no end: until `-l` is missed).
fn concurrency_walk(levels: &Levels, binary: bool) -> Walk {
    match levels {
        Levels::List(values) => Walk::List(values.iter().map(|&v| v as f64).collect()),
        Levels::Range { start, end, step } => {
            Walk::Range { start: *start as f64, end: end.map(|e| e as f64), step: (*step).max(1) as f64, binary }
        }
    }
}

/// `--service-kind openai`: perf_analyzer 2.50's checks (the plan's, in its words), then the
/// run of [`crate::genai::pa_openai`].
impl ProfileArgs {
    pub fn openai(&self) -> Result<PaOpenAi, PlanError> {
        match self.plan() {
            Err(PlanError::NotSupported(what)) if what == "--service-kind openai" => {}
            Err(e) => return Err(e),
            Ok(_) => return Err(validate::not_openai()),
        }
        validate::check_openai_call(
            self.common.call.protocol == Some(Protocol::Grpc),
            self.common.input.shared_memory.is_some_and(|m| m != SharedMemoryKind::None),
        )?;
        let url = self.common.url.clone().unwrap_or_else(|| "localhost:8000".into());
        // The plan's own resolution, against the server as any remote one: the load, the
        // windows and the outputs as a Triton line would have them.
        let mut settings = self.common.settings(&self.sections.load, &self.sections.output);
        self.pa.apply(&mut settings, self.common.model_repository.is_some())?;
        let sweep = resolve(SweepKind::Profile, &settings, &Target::Remote { url: url.clone() })?;
        let load = match &sweep.load {
            Load::Concurrency { levels } => PaLoad::Concurrency(concurrency_walk(levels, sweep.binary_search)),
            Load::RequestRate { start, end, step, distribution, seed } => {
                // perf_analyzer's end 0 is no end (the plan keeps the start alone).
                let open = settings.load.request_rate.is_some_and(|r| r.end == Some(0.0));
                PaLoad::Rate {
                    walk: Walk::Range {
                        start: *start,
                        end: (!open).then_some(*end),
                        step: *step,
                        binary: sweep.binary_search,
                    },
                    poisson: *distribution == Distribution::Poisson,
                    seed: *seed,
                }
            }
            Load::Trace { intervals } => {
                if std::fs::metadata(intervals).is_ok_and(|m| m.len() == 0) {
                    return Err(invalid(format!("file '{}' is empty", intervals.display())));
                }
                let gaps = crate::load::pacer::read_intervals(intervals).map_err(|e| invalid(e.to_string()))?;
                PaLoad::Intervals(gaps.to_vec())
            }
            Load::Periodic(_) => {
                return Err(invalid("The --periodic-concurrency-range option requires bi-directional gRPC streaming."))
            }
        };
        let input_data: Vec<PathBuf> = self
            .pa
            .input_data(&self.common.settings(&self.sections.load, &self.sections.output))
            .into_iter()
            .filter(|d| d != "zero" && d != "random")
            .map(PathBuf::from)
            .collect();
        for path in &input_data {
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
        Ok(PaOpenAi {
            url,
            endpoint: self.pa.endpoint.clone().unwrap_or_default(),
            input_data,
            load,
            limit: sweep
                .latency_limit_ms
                .map(|latency_ms| Limit { latency_ms, percentile: sweep.measurement.percentile }),
            request_count: sweep.measurement.total_requests,
            measurement: std::time::Duration::from_millis(sweep.measurement.interval_ms),
            warmup: sweep.measurement.warmup_requests,
            headers,
            export: sweep.output.profile_export_file.clone(),
            csv: sweep.output.latency_report_file.clone(),
            verbose_csv: sweep.output.verbose_csv,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_ranges_walk_as_perf_analyzer_walks_them() {
        let range = |text: &str| concurrency_walk(&Levels::parse_colon(text).unwrap(), false);
        assert_eq!(range("2:8:2"), Walk::Range { start: 2.0, end: Some(8.0), step: 2.0, binary: false });
        assert_eq!(range("1:0"), Walk::Range { start: 1.0, end: None, step: 1.0, binary: false });
    }
}
