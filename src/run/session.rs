//! The connection context of one sweep: one client (its connection pool), the model's metadata
//! and config fetched once, and the shared-memory regions registered once and re-registered only
//! when a batch size needs a bigger one. Each batch size gets its prepared requests from here,
//! checked by one probe request before any load starts.

use std::future::Future;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::composing::composing_models;
use super::RunError;
use crate::client::shm::{has_variable_outputs, output_byte_sizes, SharedMemoryKind, ShmRegistration, ShmSet};
use crate::client::{
    within_stall_timeout, ClientError, ClientResult, CorrelationId, InferClient, InferResult, InputSource, RequestSpec,
    SequenceFlags,
};
use crate::input::{build_request_set, InputOptions};
use crate::load::{ResponseCheck, SequenceSpec};
use crate::plan::{Model, ModelRef, Sweep};
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::{ModelConfig, ModelMetadataResponse};
use crate::results::ComposingModel;
use crate::tensor::Tensor;

/// How long releasing shared memory may take when the run ends (the server may be gone).
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Session<C: InferClient> {
    pub client: Arc<C>,
    pub model: String,
    pub version: String,
    pub meta: ModelMetadataResponse,
    pub config: ModelConfig,
    /// Whether the server lists the `statistics` extension.
    pub server_stats: bool,
    /// An ensemble's composing models, and `--bls-composing-models` (empty for any other model).
    pub composing: Vec<ComposingModel>,
    /// The model answers zero or more responses per request (streamed only).
    pub decoupled: bool,
    /// The model has a sequence batcher: requests go out as steps of sequences.
    pub sequence: bool,
    /// `--validate-outputs`: answers that did not match, over the whole sweep.
    pub mismatches: Arc<AtomicU64>,
    shm: Option<ShmSet>,
    /// The start-up's deadline, until the first batch's probe request is answered.
    start_up: Option<StartUp>,
}

/// The start-up's one deadline: the server's and the model's metadata, the config(s) and the
/// first request share the stall limit, so a server that accepts connections and never
/// answers ends the run within it ([`ClientError::Stalled`], exit 3), naming the call it left
/// unanswered. A call that waits shows a progress line on stderr.
struct StartUp {
    until: tokio::time::Instant,
    limit: Duration,
}

/// How long a start-up call waits before its progress line shows.
const SHOW_WAITING_AFTER: Duration = Duration::from_secs(1);

impl StartUp {
    fn new(limit: Duration) -> StartUp {
        StartUp { until: tokio::time::Instant::now() + limit, limit }
    }

    /// `call` (`what` names it), bounded by what is left of the start-up's deadline.
    async fn call<T>(&self, what: &str, call: impl Future<Output = ClientResult<T>>) -> ClientResult<T> {
        let mut call = std::pin::pin!(tokio::time::timeout_at(self.until, call));
        let answered = match tokio::time::timeout(SHOW_WAITING_AFTER, &mut call).await {
            Ok(answered) => answered,
            Err(_) => {
                let waiting = waiting_line(what, self.limit);
                let answered = call.await;
                waiting.finish_and_clear();
                answered
            }
        };
        answered.unwrap_or_else(|_| {
            Err(ClientError::Stalled(format!(
                "no answer to {what} within the start-up's {}s (the stall limit; --stall-timeout sets it)",
                self.limit.as_secs_f64()
            )))
        })
    }
}

/// The line shown while a start-up call waits: a spinner on a terminal; elsewhere (a CI log,
/// a pipe) one plain line.
fn waiting_line(what: &str, limit: Duration) -> ProgressBar {
    let text =
        format!("waiting for the server to answer {what} (gives up after {}s, --stall-timeout)", limit.as_secs_f64());
    if !std::io::stderr().is_terminal() {
        eprintln!("perfbench: {text}");
        return ProgressBar::hidden();
    }
    let line = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    line.set_style(ProgressStyle::with_template("{spinner} {elapsed} {msg}").expect("static template"));
    line.set_message(text);
    line.enable_steady_tick(Duration::from_millis(200));
    line
}

/// The requests of one batch size.
pub struct BatchRequests<C: InferClient> {
    /// One prepared request per input data step, sent in turn.
    pub prepared: Arc<[C::Prepared]>,
    /// The inline input values of each step (for `--profile-export-file`; empty otherwise).
    pub step_inputs: Vec<Vec<(String, Tensor)>>,
    /// Checks each answer against `validation_data`, when the data has it, or with
    /// `--validate-outputs` against the `accumulate` model's running sums.
    pub check: Option<ResponseCheck>,
    /// A sequence model: how the load forms sequences.
    pub sequences: Option<SequenceSpec>,
    /// The shared-memory regions the requests use (`--shared-memory system`), to register
    /// again after a server restart; empty otherwise.
    pub shm_regions: Vec<ShmRegistration>,
}

impl<C: InferClient> Session<C> {
    /// Reads the server's and the model's metadata and the model config, once. `streaming`: the
    /// sweep sends over gRPC streams, which a decoupled model needs. `bls`: the models a BLS
    /// model calls, reported as its composing models.
    /// Its calls and the first batch's probe request share one deadline, `stall_limit`.
    pub async fn open(
        client: C,
        model: &Model,
        streaming: bool,
        bls: &[ModelRef],
        stall_limit: Duration,
    ) -> Result<Session<C>, RunError> {
        let (name, version) = (model.name.as_str(), model.version.as_str());
        let start_up = StartUp::new(stall_limit);
        let info =
            start_up.call("the server metadata request", client.server_metadata()).await.map_err(RunError::client)?;
        let meta = start_up
            .call("the model metadata request", client.model_metadata(name, version))
            .await
            .map_err(|e| RunError::client(e).context(format!("model '{name}'")))?;
        let config = start_up
            .call("the model config request", client.model_config(name, version))
            .await
            .map_err(|e| RunError::client(e).context(format!("model '{name}'")))?;
        let composing =
            {
                let client = &client;
                let configs = composing_models(&config, bls, |step, version| async move {
                    client.model_config(&step, &version).await
                });
                start_up
                    .call("the composing models' config requests", configs)
                    .await
                    .map_err(|e| RunError::client(e).context(format!("composing models of '{name}'")))?
            };
        let sequence = matches!(config.scheduling_choice, Some(SchedulingChoice::SequenceBatching(_)));
        let decoupled = config.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled);
        if decoupled && !streaming {
            // perf_analyzer's words (the C API does not apply here).
            return Err(RunError::bad_input(anyhow::anyhow!(
                "Decoupled models must be run with `--async` and `--streaming` and either `-i grpc` or \
                 `--service-kind=triton_c_api`: model '{name}' is decoupled"
            )));
        }
        Ok(Session {
            decoupled,
            sequence,
            mismatches: Arc::new(AtomicU64::new(0)),
            client: Arc::new(client),
            model: name.to_string(),
            version: version.to_string(),
            meta,
            config,
            server_stats: info.extensions.iter().any(|e| e == "statistics"),
            composing,
            shm: None,
            start_up: Some(start_up),
        })
    }

    /// Builds, places (inline or in shared memory) and prepares the requests of `batch`, then
    /// sends the first one with its answer checked: a wrong shape or input fails here with the
    /// server's reason, instead of as a sweep of failed requests.
    pub async fn requests(&mut self, sweep: &Sweep, batch: u64) -> Result<BatchRequests<C>, RunError> {
        if self.sequence && batch > 1 {
            // perf_analyzer's words: a sequence's steps go one request at a time.
            return Err(RunError::bad_input(anyhow::anyhow!(
                "can not specify batch size > 1 when using a sequence model ('{}', -b {batch})",
                self.model
            )));
        }
        let options = InputOptions {
            data: sweep.input.data.clone(),
            shapes: sweep.input.shapes.clone(),
            batch_size: batch,
            string_length: sweep.input.string_length,
            string_data: sweep.input.string_data.clone(),
            ..InputOptions::default()
        };
        let set = build_request_set(&self.meta, &self.config, &options, &self.version).map_err(RunError::bad_input)?;
        let mut specs = set.specs;
        specs.iter_mut().for_each(|s| s.decoupled = self.decoupled);
        let step_inputs = match sweep.output.profile_export_file {
            Some(_) => specs.iter().map(inline_inputs).collect(),
            None => Vec::new(),
        };
        let kind = sweep.input.shared_memory;
        if kind != SharedMemoryKind::None && set.expected.is_some() {
            return Err(RunError::bad_input(anyhow::anyhow!(
                "Output size doesn't match expected size: validation_data cannot be checked with --shared-memory, \
                 whose answers are not read back (perf_analyzer fails the same way)"
            )));
        }
        if kind != SharedMemoryKind::None {
            kind.check_available().map_err(RunError::bad_input)?;
            // Outputs whose size the config leaves open are sized from one inline request's
            // answer, so a large --shape works without guessing --output-shared-memory-size;
            // a size the user gave is kept as given.
            let given = sweep.input.output_shared_memory_size;
            let probe = if given.is_none() && has_variable_outputs(&self.meta, &self.config) {
                Some(self.probe(&self.client.prepare(&specs[0]).map_err(RunError::client)?).await?)
            } else {
                None
            };
            let sizes = output_byte_sizes(
                &self.meta,
                &self.config,
                batch,
                given.unwrap_or(crate::plan::defaults::OUTPUT_SHM_BYTES),
                probe.as_ref(),
            );
            let prefix = format!("perfbench_{}_", std::process::id());
            specs = match &mut self.shm {
                Some(set) => set.update(&*self.client, &specs, &sizes, &prefix).await.map_err(RunError::client)?,
                None => {
                    let (set, specs) =
                        ShmSet::setup(&*self.client, &specs, &sizes, &prefix).await.map_err(RunError::client)?;
                    self.shm = Some(set);
                    specs
                }
            };
        }
        let prepared =
            specs.iter().map(|s| self.client.prepare(s)).collect::<Result<Vec<_>, _>>().map_err(RunError::client)?;
        // `accumulate`: each answer is the running sum of the summed input over its sequence.
        let accumulate = match self.accumulate_io() {
            Some((input, output)) if sweep.validate_outputs => Some((sums_of(&specs, &input)?, output)),
            _ => None,
        };
        if sweep.validate_outputs && accumulate.is_none() && set.expected.is_none() {
            return Err(RunError::bad_input(anyhow::anyhow!(
                "--validate-outputs has nothing to validate against: model '{}' is not the `accumulate` sequence \
                 model and the --input-data has no validation_data",
                self.model
            )));
        }
        let expected = set.expected.map(Arc::new);
        let sums = accumulate.as_ref().map(|(sums, _)| sums.clone());
        // perf_analyzer 2.50 validates a decoupled model's request on the response that ends it,
        // Triton's empty final one, so validation_data there always fails with "Output size
        // doesn't match expected size"; so does ours.
        let decoupled = self.decoupled;
        let check = match (expected, accumulate) {
            (Some(expected), _) => Some(Arc::new(move |index: usize, _: Option<&[i64]>, answer: &InferResult| {
                let final_response = InferResult::default();
                expected[index].check(if decoupled { &final_response } else { answer })
            }) as ResponseCheck),
            (None, Some((_, output))) => Some(Arc::new(move |_: usize, sum: Option<&[i64]>, answer: &InferResult| {
                check_running_sum(&output, sum, answer)
            }) as ResponseCheck),
            (None, None) => None,
        };
        // With --validate-outputs a mismatch is a failed request, counted for the exit status.
        let check = match check {
            Some(check) if sweep.validate_outputs => {
                let mismatches = self.mismatches.clone();
                Some(Arc::new(move |index: usize, sum: Option<&[i64]>, answer: &InferResult| {
                    let verdict = check(index, sum, answer);
                    if verdict.is_err() {
                        mismatches.fetch_add(1, Ordering::Relaxed);
                    }
                    verdict
                }) as ResponseCheck)
            }
            other => other,
        };
        let sequences = self.sequence.then(|| {
            let q = &sweep.sequences;
            SequenceSpec {
                length: q.length,
                length_given: q.length_given,
                variation_pct: q.length_variation_pct,
                id_start: q.id_start,
                id_range: q.id_range(),
                count: q.count,
                serial: q.serial,
                seed: match &sweep.load {
                    crate::plan::Load::RequestRate { seed, .. } => *seed,
                    _ => crate::plan::defaults::PROFILE.seed,
                },
                streams: set.streams.clone().into(),
                sums: sums.clone(),
            }
        });
        // The probe of a sequence model is a sequence of one request (start and end).
        let probe_sequence = self.sequence.then_some(SequenceFlags {
            id: CorrelationId::Number(sweep.sequences.id_start),
            start: true,
            end: true,
        });
        let answer = self.probe_step(&prepared[0], probe_sequence.as_ref()).await?;
        // The start-up ends with the first answer: later batches' probes have their own limit.
        self.start_up = None;
        if let Some(check) = &check {
            let sum = sums.as_ref().map(|s| s[0].as_slice());
            check(0, sum, &answer).map_err(|reason| RunError::bad_input(anyhow::anyhow!(reason)))?;
        }
        let shm_regions = self.shm.as_ref().map(ShmSet::registrations).unwrap_or_default();
        Ok(BatchRequests { prepared: prepared.into(), step_inputs, check, sequences, shm_regions })
    }

    /// The `accumulate` model's summed input and its output: a sequence model of that name
    /// with one INT32 input and one INT32 output.
    fn accumulate_io(&self) -> Option<(String, String)> {
        if !self.sequence || self.model != "accumulate" {
            return None;
        }
        match (self.meta.inputs.as_slice(), self.meta.outputs.as_slice()) {
            ([i], [o]) if i.datatype == "INT32" && o.datatype == "INT32" => Some((i.name.clone(), o.name.clone())),
            _ => None,
        }
    }

    /// Sends one request and reads its answer, bounded like the load's requests: a refusal
    /// fails here with the server's reason, a silent server with [`ClientError::Stalled`].
    ///
    /// [`ClientError::Stalled`]: crate::client::ClientError::Stalled
    async fn probe(&self, request: &C::Prepared) -> Result<crate::client::InferResult, RunError> {
        let sequence = self.sequence.then_some(SequenceFlags { id: CorrelationId::Number(1), start: true, end: true });
        self.probe_step(request, sequence.as_ref()).await
    }

    /// [`probe`](Self::probe), as a step of `sequence` when given.
    async fn probe_step(
        &self,
        request: &C::Prepared,
        sequence: Option<&SequenceFlags>,
    ) -> Result<crate::client::InferResult, RunError> {
        tracing::debug!("probe request sent");
        let probe = async { self.client.infer_step(request, sequence, true).await.0 };
        let answer = match &self.start_up {
            Some(start_up) => start_up.call("the first inference request", probe).await,
            None => within_stall_timeout("the first request", probe).await,
        };
        tracing::debug!(ok = answer.is_ok(), "probe answered");
        answer.map_err(|e| RunError::client(e).context("the server rejected the first request"))
    }

    /// Unregisters and unlinks the shared-memory regions (unlinking even if the server is gone).
    pub async fn close(mut self) {
        if let Some(set) = self.shm.take() {
            match tokio::time::timeout(RELEASE_TIMEOUT, set.release(&*self.client)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("releasing shared memory: {e}"),
                Err(_) => tracing::warn!("releasing shared memory: the server did not answer"),
            }
        }
    }
}

/// Per request, the values of input `name` (INT32), which `accumulate` sums.
fn sums_of(specs: &[RequestSpec], name: &str) -> Result<Arc<[Vec<i64>]>, RunError> {
    specs
        .iter()
        .map(|spec| match spec.inputs.iter().find(|(n, _)| n == name) {
            Some((_, InputSource::Inline(t))) => Ok(t.to_i32().into_iter().map(i64::from).collect()),
            _ => Err(RunError::bad_input(anyhow::anyhow!(
                "not supported: --validate-outputs needs input '{name}' sent inline (not in shared memory)"
            ))),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Into::into)
}

/// `accumulate`'s answer: output `output` holds the running sum of the sequence so far.
fn check_running_sum(output: &str, sum: Option<&[i64]>, answer: &InferResult) -> Result<(), String> {
    let Some(want) = sum else { return Ok(()) };
    let got = match answer.outputs.iter().find(|(n, _)| n == output) {
        Some((_, t)) => t.to_i32(),
        None => return Err(format!("Output doesn't match expected output: the answer has no output '{output}'")),
    };
    let want: Vec<i32> = want.iter().map(|&v| v as i32).collect();
    if got != want {
        return Err(format!(
            "Output doesn't match expected output: output '{output}' is {got:?}, the sequence's running sum {want:?}"
        ));
    }
    Ok(())
}

fn inline_inputs(spec: &RequestSpec) -> Vec<(String, Tensor)> {
    spec.inputs
        .iter()
        .filter_map(|(name, source)| match source {
            InputSource::Inline(tensor) => Some((name.clone(), tensor.clone())),
            InputSource::SystemShm { .. } => None,
        })
        .collect()
}
