//! `--service-kind inprocess`: calls an embedded [`InferenceServer`] directly, like
//! perf_analyzer's `triton_c_api` mode. No sockets and no encoding; shared-memory regions are
//! registered with the same server object, so they go through the server's real shm path.

use std::sync::Arc;
use std::time::Instant;

use super::{
    ClientError, ClientResult, InferClient, InferResult, InputSource, OutputTarget, RequestSpec, RequestTiming,
    SequenceFlags, ServerInfo,
};
use crate::proto::inference::{ModelConfig, ModelMetadataResponse, ModelStatistics};
use crate::server::core::{EXTENSIONS, SERVER_NAME, SERVER_VERSION};
use crate::server::infer::{InferRequest, InputData, InputTensor, OutputData, RequestedOutput, ShmRef};
use crate::server::{InferenceServer, ServerError};
use crate::tensor::Tensor;

/// A client bound to one in-process server.
#[derive(Clone)]
pub struct InProcessClient {
    server: Arc<InferenceServer>,
}

impl InProcessClient {
    pub fn new(server: Arc<InferenceServer>) -> Self {
        InProcessClient { server }
    }

    pub fn server(&self) -> &Arc<InferenceServer> {
        &self.server
    }
}

fn server_err(e: ServerError) -> ClientError {
    ClientError::Server(e.message)
}

/// The request as the server core takes it; inputs share the spec's bytes.
fn to_request(spec: &RequestSpec) -> InferRequest {
    let inputs = spec
        .inputs
        .iter()
        .map(|(name, source)| match source {
            InputSource::Inline(t) => InputTensor {
                name: name.clone(),
                datatype: t.dtype.as_str().to_string(),
                shape: t.shape.clone(),
                data: InputData::Raw(t.data.clone()),
            },
            InputSource::SystemShm { region, offset, byte_size, dtype, shape } => InputTensor {
                name: name.clone(),
                datatype: dtype.as_str().to_string(),
                shape: shape.clone(),
                data: InputData::Shm(ShmRef { region: region.clone(), offset: *offset, byte_size: *byte_size }),
            },
        })
        .collect();
    let outputs = spec
        .outputs
        .iter()
        .map(|(name, target)| RequestedOutput {
            name: name.clone(),
            shm: match target {
                OutputTarget::Inline => None,
                OutputTarget::SystemShm { region, offset, byte_size } => {
                    Some(ShmRef { region: region.clone(), offset: *offset, byte_size: *byte_size })
                }
            },
        })
        .collect();
    InferRequest {
        model_name: spec.model_name.clone(),
        model_version: spec.model_version.clone(),
        id: String::new(),
        inputs,
        outputs,
        sequence: None,
    }
}

impl InferClient for InProcessClient {
    type Prepared = InferRequest;

    async fn server_metadata(&self) -> ClientResult<ServerInfo> {
        Ok(ServerInfo {
            name: SERVER_NAME.to_string(),
            version: SERVER_VERSION.to_string(),
            extensions: EXTENSIONS.iter().map(|e| e.to_string()).collect(),
        })
    }

    async fn model_metadata(&self, model: &str, version: &str) -> ClientResult<ModelMetadataResponse> {
        self.server.model_metadata(model, version).map_err(server_err)
    }

    async fn model_config(&self, model: &str, version: &str) -> ClientResult<ModelConfig> {
        self.server.model_config(model, version).map_err(server_err)
    }

    async fn statistics(&self, model: &str, version: &str) -> ClientResult<Vec<ModelStatistics>> {
        self.server.statistics(model, version).map_err(server_err)
    }

    fn prepare(&self, spec: &RequestSpec) -> ClientResult<InferRequest> {
        Ok(to_request(spec))
    }

    /// Timing: `send` is cloning the prepared request (reference-counted bytes, no copy) up to
    /// the call into the server; `recv` is turning the server's response into an [`InferResult`]
    /// (zero when outputs are not kept). There is no wire, so both are tiny by design.
    async fn infer_step(
        &self,
        request: &InferRequest,
        sequence: Option<&SequenceFlags>,
        keep_outputs: bool,
    ) -> (ClientResult<InferResult>, RequestTiming) {
        self.call(request, sequence, keep_outputs).await
    }

    async fn repository_load(&self, model: &str, config: Option<&str>) -> ClientResult<()> {
        let (server, model, config) = (self.server.clone(), model.to_string(), config.map(str::to_string));
        let loaded = tokio::task::spawn_blocking(move || server.load_model(&model, config.as_deref())).await;
        loaded.map_err(|e| ClientError::Invalid(e.to_string()))?.map_err(server_err)
    }

    async fn register_system_shm(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> ClientResult<()> {
        self.server.shm.register(name, key, offset, byte_size).map_err(server_err)
    }

    async fn unregister_system_shm(&self, name: &str) -> ClientResult<()> {
        self.server.shm.unregister(name);
        Ok(())
    }

    /// The embedded server has no CUDA regions; like Triton without a GPU, unregistering
    /// succeeds.
    async fn unregister_cuda_shm(&self, _name: &str) -> ClientResult<()> {
        Ok(())
    }

    async fn trace_setting(&self, _model: &str, _settings: &[(String, Vec<String>)]) -> ClientResult<()> {
        Err(ClientError::Invalid("trace settings need a server reached over HTTP or gRPC".into()))
    }
}

impl InProcessClient {
    /// One call into the server, as a step of `sequence` when given.
    async fn call(
        &self,
        request: &InferRequest,
        sequence: Option<&SequenceFlags>,
        keep_outputs: bool,
    ) -> (ClientResult<InferResult>, RequestTiming) {
        let start = Instant::now();
        let mut request = request.clone();
        request.sequence = sequence.cloned();
        let sent = Instant::now();
        let response = self.server.infer(request).await;
        let received = Instant::now();
        let result = match response {
            Err(e) => Err(server_err(e)),
            Ok(_) if !keep_outputs => Ok(InferResult::default()),
            Ok(r) => Ok(InferResult {
                outputs: r
                    .outputs
                    .into_iter()
                    .map(|o| {
                        let data = match o.data {
                            OutputData::Raw(b) => b,
                            OutputData::InShm => bytes::Bytes::new(),
                        };
                        (o.name, Tensor { dtype: o.datatype, shape: o.shape, data })
                    })
                    .collect(),
                ..Default::default()
            }),
        };
        let end = Instant::now();
        let timing = RequestTiming { send: sent - start, recv: end - received, total: end - start };
        (result, timing)
    }
}
