//! Every check of a plan that needs no server, in one place: a plan that passes runs, or fails
//! only on the target's account (exit 3) or on data the server judges (exit 2). Checks that need
//! run-time facts (the model's config and metadata) live where those facts are read, each
//! commented as such.

use std::fmt;
use std::path::Path;

use super::search::{Objective, Search, SearchPlan};
use super::{
    Levels, Load, Model, Plan, PlanError, Protocol, Sweep, SweepKind, Target, WindowKind, MAX_OPEN_CONCURRENCY,
};
use crate::client::shm::SharedMemoryKind;
use crate::client::tls::TlsOptions;

/// Bad input: a plan's check failed (exit 2), with its one-line reason.
pub(crate) fn invalid(msg: impl Into<String>) -> PlanError {
    PlanError::Invalid(msg.into())
}

/// The model has a name (a plan file may leave it empty).
pub(super) fn check_model_named(model: &Model) -> Result<(), PlanError> {
    if model.name.trim().is_empty() {
        return Err(invalid("-m needs a model name"));
    }
    Ok(())
}

/// A model defined by config text exists only in the bundled server.
pub(super) fn check_config_served(model: &Model, target: &Target) -> Result<(), PlanError> {
    if model.config.is_some() && !matches!(target, Target::Embedded { .. }) {
        return Err(invalid("a model defined by config text needs the embedded server: drop -u"));
    }
    Ok(())
}

/// `-u` and `--model-repository` agree with `--service-kind` (the kind itself is checked as the
/// target is built).
pub(crate) fn check_target_flags(service_kind: &str, url: bool, repository: bool) -> Result<(), PlanError> {
    match (service_kind, url) {
        ("triton", true) if repository => {
            Err(invalid("--model-repository is for the bundled server: drop -u to use it"))
        }
        ("inprocess", true) => Err(invalid("-u has no meaning with --service-kind inprocess")),
        _ => Ok(()),
    }
}

/// A number an engine's environment variable gives for sharding (`name` is the variable).
pub(crate) fn env_whole_number(name: &str, value: &str) -> Result<u64, PlanError> {
    value.trim().parse::<u64>().map_err(|_| invalid(format!("bad {name} '{value}': not a whole number")))
}

/// A shard read from the environment (`source` names the variables and values) is in range
/// (`checked`: the shard's own range check).
pub(crate) fn check_env_shard(checked: Result<(), String>, source: &str) -> Result<(), PlanError> {
    checked.map_err(|why| invalid(format!("bad {source}: {why}")))
}

/// `JOB_COMPLETION_INDEX` needs the shard count from `shards_env` when `--shards` is not given.
pub(crate) fn job_shard_count(count: Option<u64>, shards_env: &str) -> Result<u64, PlanError> {
    count.ok_or_else(|| {
        invalid(format!("JOB_COMPLETION_INDEX is set: give the shard count with --shards N or {shards_env}"))
    })
}

/// `--start-at` and `--point-slot` line up shards: without a shard neither is given; a slot
/// needs a start and is at least 1 ms.
pub(crate) fn check_shard_clock(
    sharded: bool,
    start_at: Option<u64>,
    point_slot: Option<u64>,
) -> Result<(), PlanError> {
    if !sharded {
        if start_at.is_some() || point_slot.is_some() {
            return Err(invalid("--start-at lines up shards: give --shard K/N"));
        }
        return Ok(());
    }
    if point_slot.is_some() && start_at.is_none() {
        return Err(invalid("--point-slot is the slot of --start-at: give --start-at"));
    }
    if point_slot == Some(0) {
        return Err(invalid("--point-slot must be at least 1 ms"));
    }
    Ok(())
}

/// What a shard (`shard`, one of `count`) checks of its plan before anything starts: a server
/// of its own would not share the load, so it needs `-u`; and each sweep splits
/// ([`check_shard_sweep`]).
pub(crate) fn check_shard_plan(shard: impl fmt::Display, count: u64, plan: &Plan) -> Result<(), PlanError> {
    if !matches!(plan.target, Target::Remote { .. }) {
        return Err(invalid(format!(
            "--shard {shard}: give the server's address (-u): each shard would start a bundled server of its own"
        )));
    }
    for sweep in &plan.sweeps {
        check_shard_sweep(&shard, count, sweep)?;
    }
    Ok(())
}

/// The load a shard checks before anything starts: every shard must get at least one request
/// in flight at every concurrency level, and writes its own results folder.
fn check_shard_sweep(shard: &impl fmt::Display, count: u64, sweep: &Sweep) -> Result<(), PlanError> {
    if let Some(requests) = sweep.generative.as_ref().and_then(|g| g.request_count) {
        if requests < count {
            return Err(invalid(format!(
                "--shard {shard}: --request-count {requests} leaves a shard with no request (give at least {count})"
            )));
        }
    }
    if let Load::Concurrency { levels } = &sweep.load {
        let lowest = levels.first();
        if lowest < count {
            return Err(invalid(format!(
                "--shard {shard}: concurrency {lowest} leaves a shard with no request in flight (give at least \
                 {count} per level)"
            )));
        }
    }
    if let Load::Periodic(_) = &sweep.load {
        return Err(invalid("--shard does not split --periodic-concurrency-range"));
    }
    if sweep.output.dir.is_none() {
        return Err(invalid(format!("--shard {shard} needs a results folder (--out DIR) for its shard files")));
    }
    Ok(())
}

/// `-m` was given: perf_analyzer's words when it was not.
pub(crate) fn check_model_given(model: Option<&str>) -> Result<&str, PlanError> {
    model.ok_or_else(|| invalid("Failed to parse -m (model name). The value must be specified."))
}

/// `--service-kind openai` on flags that resolve to a plan of their own.
pub(crate) fn not_openai() -> PlanError {
    invalid("--service-kind openai: not an OpenAI run")
}

/// What perf_analyzer 2.50 refuses with `--service-kind openai`, in its words: gRPC, and
/// shared memory.
pub(crate) fn check_openai_call(grpc: bool, shared_memory: bool) -> Result<(), PlanError> {
    if grpc {
        return Err(invalid(
            "failed to create triton client backend: perf_analyzer does not support gRPC protocol with OpenAI \
             endpoints",
        ));
    }
    if shared_memory {
        return Err(invalid(
            "Unable to init infer data manager: client backend of kind OPENAI does not support \
             CreateSharedMemoryRegion()",
        ));
    }
    Ok(())
}

/// `--input-data` of an OpenAI run names a file that exists (perf_analyzer's words otherwise).
pub(crate) fn check_openai_input_data(path: &Path) -> Result<(), PlanError> {
    if !path.exists() {
        return Err(invalid(format!(
            "Failed to parse --input-data. Unsupported type provided: '{}'. The available options are 'zero', \
             'random', path to a directory, or a json file.",
            path.display()
        )));
    }
    Ok(())
}

/// A file named on the command line, read once, here; a file that cannot be read is bad input.
pub(crate) fn read_named_file(path: &Path) -> Result<String, PlanError> {
    std::fs::read_to_string(path).map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))
}

/// A TOML file that does not parse, in one line.
pub(crate) fn bad_toml(e: &toml::de::Error) -> PlanError {
    invalid(e.message().replace('\n', " "))
}

/// An error found in the file `path` (`kind` says what the file is: plan, search plan).
pub(crate) fn in_file(kind: &str, path: &Path, e: impl fmt::Display) -> PlanError {
    invalid(format!("{kind} {}: {e}", path.display()))
}

/// A scenario that does not parse or has no search table, in its own words.
pub(crate) fn bad_scenario(e: impl fmt::Display) -> PlanError {
    invalid(e.to_string())
}

/// `search` was given a plan of sweeps.
pub(crate) fn sweeps_given_to_search(path: &Path) -> PlanError {
    invalid(format!("{} is a plan of sweeps: run it with `perfbench run {0}`", path.display()))
}

/// `run` was given a search plan.
pub(crate) fn search_plan_given_to_run(path: &Path) -> PlanError {
    invalid(format!("{} is a search plan: run it with `perfbench search {0}`", path.display()))
}

/// The plan a results folder keeps (`run --resume DIR`), read once, here.
pub(crate) fn read_kept_plan(dir: &Path, plan_file: &str) -> Result<String, PlanError> {
    std::fs::read_to_string(dir.join(plan_file))
        .map_err(|e| invalid(format!("cannot resume {}: no {plan_file} there ({e})", dir.display())))
}

/// A plan file (`kind`: plan, search plan) runs as written: `changed` says whether a flag that
/// would change it was given (`flags`: those that are for scenarios).
pub(crate) fn check_runs_as_written(path: &Path, kind: &str, flags: &str, changed: bool) -> Result<(), PlanError> {
    if changed {
        return Err(invalid(format!("{} is a {kind}: it runs as written ({flags} are for scenarios)", path.display())));
    }
    Ok(())
}

/// A search's latency budget is given (flag or `[search]` key).
pub(crate) fn budget_given(budget: Option<&str>) -> Result<&str, PlanError> {
    budget.ok_or_else(|| {
        invalid("a search needs a latency budget: --latency-budget p99=20ms (or latency_budget in [search])")
    })
}

/// A search sends one client batch size: the online settings give `-b`, not a list.
pub(crate) fn check_search_batch(batch_sizes: Option<&Levels>) -> Result<(), PlanError> {
    if batch_sizes.is_some_and(|b| b.max() != Some(b.first())) {
        return Err(invalid("a search sends one client batch size: give batch (-b), not batch_sizes"));
    }
    Ok(())
}

/// A value whose parser gives the reason it is refused, in the parser's words.
pub(crate) fn unparsed(e: impl fmt::Display) -> PlanError {
    invalid(e.to_string())
}

/// `--sequence-id-range start[:end]` (end excluded), as perf_analyzer reads it.
pub(crate) fn parse_id_range(text: &str) -> Result<(u64, Option<u64>), PlanError> {
    let bad = |why: &str| invalid(format!("Failed to parse --sequence-id-range. {why} (got '{text}')"));
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() > 2 {
        return Err(bad("The value does not match <start:end>."));
    }
    let num = |s: &str| s.trim().parse::<u64>().map_err(|_| bad("The range values must be >= 0."));
    let start = num(parts[0])?;
    let end = parts.get(1).map(|s| num(s)).transpose()?;
    if end.is_some_and(|end| start > end) {
        return Err(bad("The 'end' value must be greater than 'start' value."));
    }
    Ok((start, end))
}

/// `--sequence-length`, when given, is above 0.
pub(crate) fn check_sequence_length(length: Option<u64>) -> Result<(), PlanError> {
    if length == Some(0) {
        return Err(invalid("Failed to parse --sequence-length. The value must be > 0."));
    }
    Ok(())
}

/// `--sequence-length-variation` is a percentage >= 0.
pub(crate) fn check_sequence_length_variation(variation: f64) -> Result<(), PlanError> {
    if !(variation.is_finite() && variation >= 0.0) {
        return Err(invalid("Failed to parse --sequence-length-variation. The value must be >= 0.0."));
    }
    Ok(())
}

/// The sequence-id range holds at least one id (its end is excluded).
pub(crate) fn check_id_range_holds(start: u64, end: Option<u64>) -> Result<(), PlanError> {
    if end == Some(start) {
        return Err(invalid("Failed to parse --sequence-id-range. The range holds no sequence id."));
    }
    Ok(())
}

/// `--num-of-sequences`, when given, is above 0.
pub(crate) fn check_num_of_sequences(count: Option<u64>) -> Result<(), PlanError> {
    if count == Some(0) {
        return Err(invalid("Failed to parse --num-of-sequences. The value must be > 0."));
    }
    Ok(())
}

/// Batch sizes or one batch (`-b`, above 0), not both.
pub(crate) fn check_batch(sizes_given: bool, batch: Option<u64>) -> Result<(), PlanError> {
    match (sizes_given, batch) {
        (true, Some(_)) => Err(invalid("give batch sizes or one batch, not both")),
        (false, Some(0)) => Err(invalid("Failed to parse -b (batch size). The value must be > 0.")),
        _ => Ok(()),
    }
}

/// perf_analyzer's load-mode conflict, in its words (its spelling included: scripts grep them).
const TWO_LOAD_MODES: &str = "Cannot specify more then one inference load mode. Please choose only one of the \
    following modes: --concurrency-range, --periodic-concurrency-range, --request-rate-range, or --request-intervals.";

/// At most one load mode is given (`given`: one flag per mode).
pub(crate) fn check_one_load_mode(given: &[bool]) -> Result<(), PlanError> {
    if given.iter().filter(|&&g| g).count() > 1 {
        return Err(invalid(TWO_LOAD_MODES));
    }
    Ok(())
}

/// A sweep's shape: [`check_shape_of`] its load; a rate series is `perfbench llm`'s alone so far.
pub(crate) fn check_shape(shape: &super::shape::Shape, load: &Load) -> Result<(), PlanError> {
    check_shape_of(shape, matches!(load, Load::RequestRate { .. }), matches!(load, Load::Concurrency { .. }))?;
    if shape.request_rate_series.is_some() {
        return Err(invalid("--request-rate-series: only perfbench llm follows a rate series so far"));
    }
    Ok(())
}

/// Ramp durations are seconds > 0; a rate ramp shapes an open loop (`open`), a concurrency ramp
/// a closed one (`closed`); a series replaces the rate, so it is not ramped as well.
pub(crate) fn check_shape_of(shape: &super::shape::Shape, open: bool, closed: bool) -> Result<(), PlanError> {
    check_ramp_durations(shape)?;
    if shape.request_rate_ramp_duration.is_some() && !open {
        return Err(invalid("--request-rate-ramp-duration ramps an open loop: give a request rate too"));
    }
    if shape.concurrency_ramp_duration.is_some() && !closed {
        return Err(invalid("--concurrency-ramp-duration ramps a closed loop: give --concurrency, not a rate"));
    }
    if shape.request_rate_series.is_some() && shape.request_rate_ramp_duration.is_some() {
        return Err(invalid("--request-rate-series and --request-rate-ramp-duration: give one or the other"));
    }
    Ok(())
}

/// Ramp durations are seconds > 0.
fn check_ramp_durations(shape: &super::shape::Shape) -> Result<(), PlanError> {
    for (seconds, flag) in [
        (shape.request_rate_ramp_duration, "--request-rate-ramp-duration"),
        (shape.concurrency_ramp_duration, "--concurrency-ramp-duration"),
    ] {
        if let Some(s) = seconds.filter(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(invalid(format!("{flag} must be a number of seconds > 0, got {s}")));
        }
    }
    Ok(())
}

/// An offline sweep runs at concurrency 1 only.
pub(crate) fn check_offline_load(kind: SweepKind, load: &Load) -> Result<(), PlanError> {
    if kind == SweepKind::Offline && !matches!(load, Load::Concurrency { levels } if *levels == Levels::one(1)) {
        return Err(invalid("an offline sweep runs at concurrency 1: use an online sweep for other loads"));
    }
    Ok(())
}

/// `-l`, when given, is a number of milliseconds >= 0 (0: no limit).
pub(crate) fn check_latency_threshold(ms: Option<f64>) -> Result<(), PlanError> {
    match ms {
        Some(l) if l.is_nan() || l < 0.0 => Err(invalid("-l must be a number of milliseconds >= 0")),
        _ => Ok(()),
    }
}

/// `--request-timeout`, when given, is a number of seconds > 0.
pub(crate) fn check_request_timeout(seconds: Option<f64>) -> Result<(), PlanError> {
    if let Some(t) = seconds.filter(|t| !(t.is_finite() && *t > 0.0)) {
        return Err(invalid(format!("--request-timeout must be a number of seconds > 0, got {t}")));
    }
    Ok(())
}

/// `--stall-timeout`, when given, is a number of seconds > 0.
pub(crate) fn check_stall_timeout(seconds: Option<f64>) -> Result<(), PlanError> {
    if let Some(t) = seconds.filter(|t| !(t.is_finite() && *t > 0.0)) {
        return Err(invalid(format!("--stall-timeout must be a number of seconds > 0, got {t}")));
    }
    Ok(())
}

/// The TLS flags agree (a key with its certificate, files given where asked).
pub(crate) fn check_tls(tls: &TlsOptions) -> Result<(), PlanError> {
    tls.check().map_err(invalid)
}

/// `--metrics-url` comes with `--collect-metrics`; in-process, metrics need their URL.
pub(crate) fn check_metrics(url_given: bool, collect: bool, target: &Target) -> Result<(), PlanError> {
    if url_given && !collect {
        return Err(invalid("Must specify --collect-metrics when using the --metrics-url option."));
    }
    if collect && !url_given && matches!(target, Target::InProcess { .. }) {
        return Err(invalid("--collect-metrics needs --metrics-url with --service-kind inprocess"));
    }
    Ok(())
}

impl Plan {
    /// Reads a plan file (as `--print-plan` writes it) and checks it.
    pub fn load(path: &Path) -> Result<Plan, PlanError> {
        let text = read_named_file(path)?;
        Plan::from_toml(&text).map_err(|e| in_file("plan", path, e))
    }

    pub fn from_toml(text: &str) -> Result<Plan, PlanError> {
        let plan: Plan = toml::from_str(text).map_err(|e| bad_toml(&e))?;
        plan.validate()?;
        Ok(plan)
    }

    /// Every check that does not need the server. A plan that passes runs or fails only on the
    /// target's account (exit 3) or on data the server judges (exit 2).
    pub fn validate(&self) -> Result<(), PlanError> {
        check_model_named(&self.model)?;
        if self.sweeps.is_empty() {
            return Err(invalid("the plan has no sweep"));
        }
        check_config_served(&self.model, &self.target)?;
        for sweep in &self.sweeps {
            sweep.validate(&self.target)?;
        }
        if let Some(gate) = &self.gate {
            gate.thresholds.validate().map_err(|e| invalid(e.to_string()))?;
        }
        Ok(())
    }
}

/// The over-saturation stop watches a queue that only an open loop can grow: a closed loop
/// keeps its requests in flight fixed.
pub(crate) fn check_over_saturation(asked: bool, open_loop: bool) -> Result<(), PlanError> {
    if asked && !open_loop {
        return Err(invalid(
            "--over-saturation watches an open loop (--request-rate, --request-rate-range or a rate series): a closed loop's \
             requests in flight cannot grow",
        ));
    }
    Ok(())
}

/// A generative sweep's settings agree with the rest: an online sweep of one prompt per request
/// (`one_prompt`), on the endpoint type's protocol, with none of the tensor settings in `given`.
pub(super) fn check_generative(
    kind: SweepKind,
    endpoint_type: super::generative::EndpointType,
    protocol: Option<Protocol>,
    one_prompt: bool,
    given: &[(bool, &str)],
) -> Result<(), PlanError> {
    if kind != SweepKind::Online {
        return Err(invalid(format!(
            "--endpoint-type makes an online sweep (perfbench online, a scenario's [online]), not {}",
            kind.name()
        )));
    }
    let wire = if endpoint_type == super::generative::EndpointType::Kserve { Protocol::Grpc } else { Protocol::Http };
    if protocol.is_some_and(|p| p != wire) {
        return Err(invalid(format!("--endpoint-type {endpoint_type} is sent over {wire}: drop -i")));
    }
    if !one_prompt {
        return Err(invalid("a generative request carries one prompt: drop -b / --batch-sizes"));
    }
    if let Some((_, flag)) = given.iter().find(|(given, _)| *given) {
        return Err(PlanError::NotSupported(format!("{flag} with --endpoint-type")));
    }
    Ok(())
}

impl Sweep {
    pub(super) fn validate(&self, target: &Target) -> Result<(), PlanError> {
        if self.generative.is_some() && matches!(target, Target::InProcess { .. }) {
            return Err(PlanError::NotSupported("--endpoint-type with --service-kind inprocess".into()));
        }
        if self.call.streaming && self.protocol != Protocol::Grpc && self.generative.is_none() {
            return Err(invalid("Streaming is only allowed with gRPC protocol and Triton C API: add -i grpc."));
        }
        if self.call.tls.grpc_compression != crate::client::tls::GrpcCompression::None
            && self.protocol != Protocol::Grpc
        {
            return Err(invalid("Using compression algorithm is only allowed with gRPC protocol."));
        }
        check_tls(&self.call.tls)?;
        if !self.call.request_parameters.is_empty() {
            if self.protocol != Protocol::Grpc {
                return Err(invalid("The --request-parameter option is currently only supported by gRPC protocol."));
            }
            if matches!(target, Target::InProcess { .. }) {
                return Err(PlanError::NotSupported("--request-parameter with --service-kind inprocess".into()));
            }
        }
        for level in self.trace.iter().filter(|t| t.key == "trace_level").flat_map(|t| &t.values) {
            if !["OFF", "TIMESTAMPS", "TENSORS"].contains(&level.to_ascii_uppercase().as_str()) {
                return Err(invalid(format!(
                    "Failed to parse --trace-level. Unsupported type provided: '{level}'. \
                     The available options are 'OFF', 'TIMESTAMPS', or 'TENSORS'."
                )));
            }
        }
        if self.call.tls.grpc.use_ssl && !matches!(target, Target::Remote { .. }) {
            return Err(invalid("--ssl-grpc-use-ssl needs -u: the bundled server listens without TLS"));
        }
        self.batch_sizes.check().map_err(|e| invalid(format!("bad batch sizes {e}")))?;
        if let Some(limit) = self.latency_limit_ms {
            if !(limit.is_finite() && limit > 0.0) {
                return Err(invalid("-l must be a number of milliseconds > 0"));
            }
        }
        if self.binary_search && self.latency_limit_ms.is_none() {
            return Err(invalid(
                "The --latency-threshold cannot be 0 for binary search mode. (--binary-search needs -l, the latency limit to search for)",
            ));
        }
        match &self.load {
            Load::Concurrency { levels } => {
                levels.check().map_err(|e| invalid(format!("bad concurrency {e}")))?;
                let open = matches!(levels, Levels::Range { end: None, .. });
                // perf_analyzer's words, then which concurrency has the open end (0, or -d).
                if open && self.latency_limit_ms.is_none() {
                    return Err(invalid(format!(
                        "The end of the search range and the latency limit can not be both 0 (or 0.0) \
                         simultaneously: concurrency '{levels}' has no end, so it needs -l"
                    )));
                }
                if open && self.binary_search {
                    return Err(invalid(format!(
                        "The end of the range can not be 0 (or 0.0) for binary search mode: concurrency '{levels}'"
                    )));
                }
                if self.binary_search && matches!(levels, Levels::List(_)) {
                    return Err(invalid("--binary-search needs a concurrency range, not a list"));
                }
            }
            Load::RequestRate { start, end, step, .. } => {
                let valid = *start > 0.0 && end >= start && *step > 0.0 && end.is_finite();
                if !valid {
                    return Err(invalid(format!(
                        "bad --request-rate-range '{start}:{end}:{step}': need 0 < start <= end and step > 0"
                    )));
                }
            }
            Load::Trace { intervals } => {
                crate::load::read_intervals(intervals).map_err(|e| invalid(e.to_string()))?;
            }
            Load::Periodic(p) => {
                if p.start == 0 || p.step == 0 || p.start > p.end || p.request_period == 0 {
                    return Err(invalid(format!(
                        "bad periodic concurrency {}:{}:{} with request period {}: need 0 < start <= end, \
                         step > 0 and request period > 0",
                        p.start, p.end, p.step, p.request_period
                    )));
                }
                if !self.call.streaming {
                    return Err(invalid(
                        "The --periodic-concurrency-range option requires bi-directional gRPC streaming.",
                    ));
                }
                if self.output.profile_export_file.is_none() {
                    return Err(invalid(
                        "Must provide --profile-export-file when using the --periodic-concurrency-range option.",
                    ));
                }
            }
        }
        if let Some(p) = self.call.max_threads {
            if p == 0 {
                return Err(invalid("--max-threads must be at least 1"));
            }
        }
        let m = &self.measurement;
        if let Some(p) = m.percentile {
            if p.is_nan() || p <= 0.0 || p >= 100.0 {
                return Err(invalid(format!(
                    "Failed to parse --percentile. The value must be -1 for not reporting or in range (0, 100). (got {p})"
                )));
            }
        }
        if m.stability_percentage.is_nan() || m.stability_percentage <= 0.0 {
            return Err(invalid("-s must be a positive percentage"));
        }
        if m.max_trials == 0 {
            return Err(invalid("Failed to parse --max-trials (-r). The value must be > 0."));
        }
        if m.mode == WindowKind::TimeWindows && m.interval_ms == 0 {
            return Err(invalid("Failed to parse --measurement-interval (-p). The value must be > 0 msec."));
        }
        if m.mode == WindowKind::CountWindows && m.request_count == 0 {
            return Err(invalid("Failed to parse --measurement-request-count. The value must be > 0."));
        }
        if m.total_requests == Some(0) {
            return Err(invalid("--request-count must be at least 1"));
        }
        if self.input.shared_memory != SharedMemoryKind::None && matches!(target, Target::InProcess { .. }) {
            return Err(invalid(
                "--shared-memory needs a server over the network; --service-kind inprocess shares memory already",
            ));
        }
        // perf_analyzer's check: a range smaller than the sequences alive at once would reuse
        // an id still in use.
        let alive = match &self.load {
            Load::Concurrency { levels } => levels.max().unwrap_or(MAX_OPEN_CONCURRENCY),
            _ => self.sequences.count,
        };
        if self.sequences.id_end.is_some() && self.sequences.id_range() < alive {
            return Err(invalid(format!(
                "sequence id range specified is smaller than the maximum possible {}, sequence id collision may \
                 occur. (--sequence-id-range {}:{} holds {} ids)",
                if matches!(self.load, Load::Concurrency { .. }) { "concurrency" } else { "number of sequences" },
                self.sequences.id_start,
                self.sequences.id_end.unwrap_or_default(),
                self.sequences.id_range()
            )));
        }
        if self.kind != SweepKind::Profile && self.output.dir.is_none() {
            return Err(invalid(format!("the {} sweep needs an output folder", self.kind.name())));
        }
        Ok(())
    }
}

impl Search {
    pub(super) fn validate(&self) -> Result<(), PlanError> {
        if self.max_configs == Some(0) {
            return Err(invalid("--max-configs must be at least 1"));
        }
        if self.max_minutes.is_some_and(|m| !(m.is_finite() && m > 0.0)) {
            return Err(invalid("--max-minutes must be > 0"));
        }
        if !(self.improvement_pct.is_finite() && self.improvement_pct >= 0.0) {
            return Err(invalid("improvement_pct must be a percentage >= 0"));
        }
        if !(self.budget.limit_us.is_finite() && self.budget.limit_us > 0.0) {
            return Err(invalid("the latency budget must be a time > 0"));
        }
        let space = &self.space;
        // Empty: the model's own value (a scheduler dimension), never for the ramp.
        let climbing = |flag: &str, v: &[u64], min: u64, empty: bool| {
            if (v.is_empty() && !empty) || v.first().is_some_and(|&f| f < min) || v.windows(2).any(|w| w[0] >= w[1]) {
                return Err(invalid(format!("{flag}: needs values >= {min}, smallest first, each once")));
            }
            Ok(())
        };
        let wide = |v: &[u32]| v.iter().map(|&x| u64::from(x)).collect::<Vec<_>>();
        climbing("--instances", &wide(&space.instances), 1, true)?;
        climbing("--max-batch-size", &wide(&space.max_batch_sizes), 0, true)?;
        climbing("--concurrency", &space.concurrency, 1, false)?;
        if space.instances.iter().any(|&n| n > 64) {
            return Err(invalid("--instances: at most 64"));
        }
        for (i, p) in space.parameters.iter().enumerate() {
            if p.values.is_empty() || space.parameters[..i].iter().any(|q| q.name == p.name) {
                return Err(invalid(format!("--parameter {}: give each parameter once, with values", p.name)));
            }
        }
        Ok(())
    }
}

impl SearchPlan {
    /// Reads a search plan (as `--print-plan` writes it) and checks it.
    pub fn from_toml(text: &str) -> Result<SearchPlan, PlanError> {
        let plan: SearchPlan = toml::from_str(text).map_err(|e| bad_toml(&e))?;
        plan.validate()?;
        Ok(plan)
    }

    /// Every check that does not need the server.
    pub fn validate(&self) -> Result<(), PlanError> {
        check_model_named(&self.model)?;
        if let Target::InProcess { .. } = &self.target {
            return Err(invalid("search needs a server: drop --service-kind inprocess"));
        }
        check_config_served(&self.model, &self.target)?;
        self.search.validate()?;
        self.sweep.validate(&self.target)?;
        if self.sweep.kind != SweepKind::Online || !matches!(self.sweep.load, Load::Concurrency { .. }) {
            return Err(invalid("a search measures with an online sweep over concurrency"));
        }
        if self.sweep.batch_sizes.max() != Some(self.sweep.batch_sizes.first()) {
            return Err(invalid("a search sends one client batch size"));
        }
        if self.sweep.generative.is_none() {
            let budget = self.search.budget.statistic;
            if budget.of_tokens() {
                return Err(invalid(format!(
                    "a {} budget needs a generative sweep (--endpoint-type): only it measures tokens",
                    budget.name()
                )));
            }
            if self.search.objective == Objective::Tokens {
                return Err(invalid("--objective tokens needs a generative sweep (--endpoint-type)"));
            }
        }
        Ok(())
    }
}
