//! The connection context of one sweep: one client (its connection pool), the model's metadata
//! and config fetched once, and the shared-memory regions registered once and re-registered only
//! when a batch size needs a bigger one. Each batch size gets its prepared requests from here,
//! checked by one probe request before any load starts.

use std::sync::Arc;
use std::time::Duration;

use super::RunError;
use crate::client::shm::{has_variable_outputs, output_byte_sizes, SharedMemoryKind, ShmSet};
use crate::client::{within_stall_timeout, InferClient, InputSource, RequestSpec};
use crate::input::{build_request_set, InputOptions};
use crate::load::ResponseCheck;
use crate::plan::{Model, Sweep};
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::{ModelConfig, ModelMetadataResponse};
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
    /// The model answers zero or more responses per request (streamed only).
    pub decoupled: bool,
    shm: Option<ShmSet>,
}

/// The requests of one batch size.
pub struct BatchRequests<C: InferClient> {
    /// One prepared request per input data step, sent in turn.
    pub prepared: Arc<[C::Prepared]>,
    /// The inline input values of each step (for `--profile-export-file`; empty otherwise).
    pub step_inputs: Vec<Vec<(String, Tensor)>>,
    /// Checks each answer against `validation_data`, when the data has it.
    pub check: Option<ResponseCheck>,
}

impl<C: InferClient> Session<C> {
    /// Reads the server's and the model's metadata and the model config, once. `streaming`: the
    /// sweep sends over gRPC streams, which a decoupled model needs.
    pub async fn open(client: C, model: &Model, streaming: bool) -> Result<Session<C>, RunError> {
        let (name, version) = (model.name.as_str(), model.version.as_str());
        let info = client.server_metadata().await.map_err(RunError::client)?;
        let meta = client
            .model_metadata(name, version)
            .await
            .map_err(|e| RunError::client(e).context(format!("model '{name}'")))?;
        let config = client
            .model_config(name, version)
            .await
            .map_err(|e| RunError::client(e).context(format!("model '{name}'")))?;
        if matches!(config.scheduling_choice, Some(SchedulingChoice::SequenceBatching(_))) {
            return Err(RunError::bad_input(anyhow::anyhow!(
                "not supported: model '{name}' uses the sequence batcher, and perfbench does not drive stateful sequences yet"
            )));
        }
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
            client: Arc::new(client),
            model: name.to_string(),
            version: version.to_string(),
            meta,
            config,
            server_stats: info.extensions.iter().any(|e| e == "statistics"),
            shm: None,
        })
    }

    /// Builds, places (inline or in shared memory) and prepares the requests of `batch`, then
    /// sends the first one with its answer checked: a wrong shape or input fails here with the
    /// server's reason, instead of as a sweep of failed requests.
    pub async fn requests(&mut self, sweep: &Sweep, batch: u64) -> Result<BatchRequests<C>, RunError> {
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
        let answer = self.probe(&prepared[0]).await?;
        let check = set.expected.map(|expected| {
            let expected = Arc::new(expected);
            Arc::new(move |index: usize, answer: &crate::client::InferResult| expected[index].check(answer))
                as ResponseCheck
        });
        if let Some(check) = &check {
            check(0, &answer).map_err(|reason| RunError::bad_input(anyhow::anyhow!(reason)))?;
        }
        Ok(BatchRequests { prepared: prepared.into(), step_inputs, check })
    }

    /// Sends one request and reads its answer, bounded like the load's requests: a refusal
    /// fails here with the server's reason, a silent server with [`ClientError::Stalled`].
    ///
    /// [`ClientError::Stalled`]: crate::client::ClientError::Stalled
    async fn probe(&self, request: &C::Prepared) -> Result<crate::client::InferResult, RunError> {
        tracing::debug!("probe request sent");
        let answer =
            within_stall_timeout("the first request", async { self.client.infer(request, true).await.0 }).await;
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

fn inline_inputs(spec: &RequestSpec) -> Vec<(String, Tensor)> {
    spec.inputs
        .iter()
        .filter_map(|(name, source)| match source {
            InputSource::Inline(tensor) => Some((name.clone(), tensor.clone())),
            InputSource::SystemShm { .. } => None,
        })
        .collect()
}
