//! `InferenceServer`: the protocol-neutral server API. The HTTP and gRPC front ends and the
//! in-process client all call these methods, so every path shares one behaviour.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::access::RestrictedApi;
use super::config;
use super::error::{ServerError, ServerResult};
use super::infer::{admit, AdmittedRequest, Answer, InferRequest, InferResponse, Limits};
use super::listen::TlsFiles;
use super::llm::{LlmEngine, RequestLog};
use super::repository::{IndexEntry, LoadedModel, ModelRepository, Runner, MODEL_VERSION};
use super::scheduler::Inline;
use super::shm::SharedMemoryManager;
use super::stats::ModelStats;
use super::trace::TraceSettings;
use crate::proto::inference::{
    model_metadata_response::TensorMetadata, ModelConfig, ModelMetadataResponse, ModelStatistics,
};
use crate::tensor::DataType;

pub const SERVER_NAME: &str = "perfbench";
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Extensions listed in server metadata. perf_analyzer reads server statistics only when
/// `statistics` is listed.
pub const EXTENSIONS: &[&str] =
    &["model_repository", "model_configuration", "system_shared_memory", "binary_tensor_data", "statistics", "trace"];

/// What the server serves, before any socket is opened.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// `None`: the bundled model zoo.
    pub model_repository: Option<PathBuf>,
    /// Load only these models; empty loads all.
    pub models: Vec<String>,
    /// Largest request body accepted, in bytes (HTTP body, gRPC message).
    pub max_request_bytes: usize,
    /// Most elements one input tensor may have (its shape's product), inline or in shm.
    pub max_tensor_elements: usize,
    /// Most bytes all registered system shared-memory regions may span together.
    pub max_shm_bytes: u64,
    /// Most bytes of HTTP request bodies held at once (0: no limit); more wait their turn.
    pub max_body_bytes_in_flight: u64,
    /// Longest an inference may take from arrival to answer, queueing included; `None`: no limit.
    /// The HTTP and gRPC front ends apply it to whole requests too (body upload included).
    pub request_timeout: Option<Duration>,
    /// Open connections per front end (HTTP, gRPC); 0: no limit.
    pub max_connections: usize,
    /// Endpoint groups that need a header (`--restricted-api`).
    pub restricted: RestrictedApi,
    /// HTTPS and gRPC over TLS when set; metrics stay plain HTTP.
    pub tls: Option<TlsFiles>,
    /// Where generative models write one JSON line per request (`--record-requests`).
    pub record_requests: Option<PathBuf>,
    /// Where generative models send one OpenTelemetry span per request (OTLP/HTTP).
    pub otlp_traces_endpoint: Option<String>,
}

/// Default `--max-connections`, per protocol.
pub const DEFAULT_MAX_CONNECTIONS: usize = 2048;

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            model_repository: None,
            models: vec![],
            max_request_bytes: 256 << 20,
            max_tensor_elements: 1 << 28,
            max_shm_bytes: 64 << 30,
            max_body_bytes_in_flight: crate::server::body_budget::DEFAULT_BODY_BYTES_IN_FLIGHT,
            request_timeout: Some(Duration::from_secs(300)),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            restricted: RestrictedApi::default(),
            tls: None,
            record_requests: None,
            otlp_traces_endpoint: None,
        }
    }
}

/// Triton's refusal of a decoupled model on the unary gRPC call (the in-process client says the same).
pub const DECOUPLED_UNARY: &str = "ModelInfer RPC doesn't support models with decoupled transaction policy";
/// Triton's refusal of a decoupled model on HTTP.
pub const DECOUPLED_HTTP: &str = "HTTP end point doesn't support models with decoupled transaction policy";

pub struct InferenceServer {
    pub options: ServerOptions,
    pub repository: ModelRepository,
    pub shm: SharedMemoryManager,
    pub trace: TraceSettings,
    /// The `--record-requests` file, open.
    pub request_log: Option<Arc<RequestLog>>,
    /// `max_body_bytes_in_flight`, shared by the HTTP requests in flight.
    pub body_budget: crate::server::body_budget::BodyBudget,
    /// Model metadata requests answered since start (a sweep should ask once).
    metadata_requests: std::sync::atomic::AtomicU64,
}

impl InferenceServer {
    pub fn new(options: ServerOptions) -> ServerResult<Arc<Self>> {
        let repository = ModelRepository::open(options.model_repository.clone(), &options.models)?;
        let shm = SharedMemoryManager::with_limit(options.max_shm_bytes);
        let request_log = RequestLog::open(options.record_requests.as_deref(), options.otlp_traces_endpoint.as_deref())
            .map_err(ServerError::invalid_arg)?
            .map(Arc::new);
        let body_budget = crate::server::body_budget::BodyBudget::new(options.max_body_bytes_in_flight);
        Ok(Arc::new(InferenceServer {
            body_budget,
            options,
            repository,
            shm,
            trace: TraceSettings::default(),
            request_log,
            metadata_requests: Default::default(),
        }))
    }

    pub fn is_live(&self) -> bool {
        true
    }

    pub fn is_ready(&self) -> bool {
        true
    }

    pub fn model_ready(&self, name: &str, version: &str) -> bool {
        self.repository.get(name, version).is_ok()
    }

    pub fn model_config(&self, name: &str, version: &str) -> ServerResult<ModelConfig> {
        Ok(self.repository.get(name, version)?.config.clone())
    }

    /// Model metadata. Shapes of batching models carry a leading -1 for the batch dimension.
    pub fn model_metadata(&self, name: &str, version: &str) -> ServerResult<ModelMetadataResponse> {
        self.metadata_requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let model = self.repository.get(name, version)?;
        let c = &model.config;
        let batch_dim: &[i64] = if c.max_batch_size > 0 { &[-1] } else { &[] };
        let tensor = |name: &str, dtype: i32, dims: &[i64]| TensorMetadata {
            name: name.to_string(),
            datatype: DataType::from_config_enum(dtype).map(|d| d.as_str()).unwrap_or("").to_string(),
            shape: batch_dim.iter().chain(dims).copied().collect(),
        };
        Ok(ModelMetadataResponse {
            name: c.name.clone(),
            versions: vec![MODEL_VERSION.to_string()],
            platform: if c.backend.is_empty() { c.platform.clone() } else { c.backend.clone() },
            inputs: c.input.iter().map(|i| tensor(&i.name, i.data_type, &i.dims)).collect(),
            outputs: c.output.iter().map(|o| tensor(&o.name, o.data_type, &o.dims)).collect(),
        })
    }

    /// How many model metadata requests were answered since start.
    pub fn metadata_requests(&self) -> u64 {
        self.metadata_requests.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Config JSON as Triton prints it.
    pub fn model_config_json(&self, name: &str, version: &str) -> ServerResult<serde_json::Value> {
        Ok(config::to_json(&self.model_config(name, version)?))
    }

    /// Runs one inference through the model's batcher, within `request_timeout`, for a protocol
    /// that carries one response per request: a decoupled model is refused, as Triton's
    /// ModelInfer refuses it.
    pub async fn infer(&self, request: InferRequest) -> ServerResult<InferResponse> {
        let model = self.repository.get(&request.model_name, &request.model_version)?;
        self.infer_on(&model, request).await
    }

    /// [`infer`](Self::infer) on the model the request names, already looked up by the caller
    /// (the HTTP front end needs its config to decode the body), within `request_timeout`.
    pub async fn infer_on(&self, model: &LoadedModel, request: InferRequest) -> ServerResult<InferResponse> {
        if model.decoupled() {
            return Err(ServerError::unsupported(DECOUPLED_UNARY));
        }
        match self.answer(model, request).await? {
            Answer::Single(response) => Ok(response),
            Answer::Decoupled(_) => unreachable!("only decoupled models answer so, and they are refused above"),
        }
    }

    /// Runs one inference for a stream, which also carries a decoupled model's responses.
    pub async fn infer_stream(&self, request: InferRequest) -> ServerResult<Answer> {
        let model = self.repository.get(&request.model_name, &request.model_version)?;
        self.answer(&model, request).await
    }

    async fn answer(&self, model: &LoadedModel, request: InferRequest) -> ServerResult<Answer> {
        let received = Instant::now();
        let limits = Limits { max_tensor_elements: self.options.max_tensor_elements };
        let admitted = admit(&model.config, request, &self.shm, &limits, received)?;
        // A request an idle instance runs at once is answered here, with nothing to wait for
        // and so no timeout. The rest waits in a boxed future: this one stays small, and it is
        // moved through every caller's future on the common path.
        let admitted = match &model.runner {
            Runner::Scheduler(scheduler) => match scheduler.try_inline(admitted) {
                Inline::Answered(answer) => return answer,
                Inline::Declined(admitted) => admitted,
            },
            _ => admitted,
        };
        Box::pin(self.wait_for_answer(model, admitted)).await
    }

    /// A request that waits (queued, or running other models' steps), within `request_timeout`.
    async fn wait_for_answer(&self, model: &LoadedModel, admitted: AdmittedRequest) -> ServerResult<Answer> {
        let run = async {
            match &model.runner {
                Runner::Scheduler(scheduler) => scheduler.enqueue(admitted).await,
                Runner::Ensemble(ensemble) => ensemble
                    .run(admitted, &model.stats, |step, context| self.step(step, context))
                    .await
                    .map(Answer::Single),
                Runner::Bls(bls) => {
                    bls.run(admitted, &model.stats, |call, context| self.step(call, context)).await.map(Answer::Single)
                }
                Runner::Llm(_) => Err(ServerError::unsupported(format!(
                    "model '{}' is generative: use its generate or OpenAI endpoints",
                    model.config.name
                ))),
            }
        };
        let Some(limit) = self.options.request_timeout else {
            return run.await;
        };
        tokio::time::timeout(limit, run).await.unwrap_or_else(|_| {
            Err(ServerError::timeout(format!(
                "inference on '{}' did not finish within the server's request timeout of {limit:?}",
                model.config.name
            )))
        })
    }

    /// One step of an ensemble on its composing model's scheduler, its statistics also recorded
    /// into the ensemble request's `context`.
    async fn step(&self, request: InferRequest, context: Arc<ModelStats>) -> ServerResult<InferResponse> {
        let model = self.repository.get(&request.model_name, &request.model_version)?;
        let Runner::Scheduler(scheduler) = &model.runner else {
            return Err(ServerError::invalid_arg(format!(
                "model '{}' runs other models: it cannot be a step",
                model.config.name
            )));
        };
        let limits = Limits { max_tensor_elements: self.options.max_tensor_elements };
        let mut admitted = admit(&model.config, request, &self.shm, &limits, Instant::now())?;
        admitted.also_record = Some(context);
        match scheduler.infer(admitted).await? {
            Answer::Single(response) => Ok(response),
            Answer::Decoupled(_) => Err(ServerError::unsupported(format!(
                "model '{}' is decoupled: it cannot be an ensemble step",
                model.config.name
            ))),
        }
    }

    /// Statistics of one model (all its versions) or, with an empty name, of every model.
    pub fn statistics(&self, name: &str, version: &str) -> ServerResult<Vec<ModelStatistics>> {
        if name.is_empty() {
            return Ok(self
                .repository
                .loaded()
                .iter()
                .map(|m| m.stats.snapshot(&m.config.name, MODEL_VERSION))
                .collect());
        }
        let model = self.repository.get(name, version)?;
        Ok(vec![model.stats.snapshot(name, MODEL_VERSION)])
    }

    /// The generative model `name` names (any version), for the generation front ends.
    pub fn llm(&self, name: &str, version: &str) -> ServerResult<Arc<LlmEngine>> {
        let model = self.repository.get(name, version)?;
        match &model.runner {
            Runner::Llm(engine) => Ok(engine.clone()),
            _ => Err(ServerError::invalid_arg(format!("model '{name}' is not a generative model (backend 'llm')"))),
        }
    }

    /// Every loaded generative model.
    pub fn llms(&self) -> Vec<Arc<LlmEngine>> {
        let models = self.repository.loaded();
        models.iter().filter_map(|m| if let Runner::Llm(e) = &m.runner { Some(e.clone()) } else { None }).collect()
    }

    pub fn repository_index(&self, ready_only: bool) -> ServerResult<Vec<IndexEntry>> {
        self.repository.index(ready_only)
    }

    pub fn load_model(&self, name: &str, config_json: Option<&str>) -> ServerResult<()> {
        self.repository.load(name, config_json)
    }

    pub fn unload_model(&self, name: &str) -> ServerResult<()> {
        self.repository.unload(name)
    }
}
