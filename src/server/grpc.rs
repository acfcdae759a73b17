//! The gRPC front end (KSERVE_V2.md §6): `inference.GRPCInferenceService` and
//! `grpc.health.v1.Health` over [`InferenceServer`]. Inputs come as `raw_input_contents` or typed
//! `contents`; outputs always go back in `raw_output_contents` (empty for shm outputs), as Triton
//! does. Streamed inference reports each failure in its response and keeps the stream open; a
//! decoupled model's responses are played out on the stream at their scheduled times.

/// The decoupled `llm` model's ModelStreamInfer: one response per chunk.
mod llm;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{BoxStream, SelectAll};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::CompressionEncoding;
use tonic::{Request, Response, Status, Streaming};

use super::core::{InferenceServer, EXTENSIONS, SERVER_NAME, SERVER_VERSION};
use super::error::{ErrorKind, ServerError, ServerResult};
use super::http::{blocking, no_repository_name};
use super::infer::{
    Answer, CorrelationId, DecoupledResponses, InferRequest, InferResponse, InputData, InputTensor, OutputData,
    RequestedOutput, SequenceFlags, ShmRef,
};
use crate::proto::health::health_check_response::ServingStatus;
use crate::proto::health::health_server::{Health, HealthServer};
use crate::proto::health::{HealthCheckRequest, HealthCheckResponse};
use crate::proto::inference as pb;
use crate::proto::inference::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};
use crate::proto::inference::infer_parameter::ParameterChoice;
use crate::proto::inference::model_infer_request::InferInputTensor;
use crate::proto::inference::{InferParameter, InferTensorContents};
use crate::tensor::DataType;

/// The KServe v2 gRPC service.
#[derive(Clone)]
pub struct GrpcService {
    core: Arc<InferenceServer>,
}

/// The inference service, with message limits raised (decode: the server's request limit;
/// encode: what Triton's clients accept) and gzip or deflate requests accepted. Responses go uncompressed,
/// as Triton's do: gRPC clients advertise gzip by default, and compressing every small response
/// would cost more than it saves on the links a load generator uses.
pub fn inference_service(core: Arc<InferenceServer>) -> GrpcInferenceServiceServer<GrpcService> {
    let max_request_bytes = core.options.max_request_bytes;
    GrpcInferenceServiceServer::new(GrpcService { core })
        .max_decoding_message_size(max_request_bytes)
        .max_encoding_message_size(i32::MAX as usize)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate)
}

/// The standard health service, answering for the whole server and for the inference service.
pub fn health_service(core: Arc<InferenceServer>) -> HealthServer<HealthService> {
    HealthServer::new(HealthService { core })
}

fn string_param(p: &InferParameter, key: &str, tensor: &str) -> ServerResult<String> {
    match &p.parameter_choice {
        Some(ParameterChoice::StringParam(s)) => Ok(s.clone()),
        _ => Err(ServerError::invalid_arg(format!("tensor '{tensor}': parameter '{key}' must be a string_param"))),
    }
}

fn size_param(p: &InferParameter, key: &str, tensor: &str) -> ServerResult<u64> {
    match p.parameter_choice {
        Some(ParameterChoice::Int64Param(v)) if v >= 0 => Ok(v as u64),
        Some(ParameterChoice::Uint64Param(v)) => Ok(v),
        _ => Err(ServerError::invalid_arg(format!(
            "tensor '{tensor}': parameter '{key}' must be a non-negative int64_param"
        ))),
    }
}

/// The shared-memory parameters of an input or requested output (§6.4), if any.
fn shm_ref(params: &HashMap<String, InferParameter>, tensor: &str) -> ServerResult<Option<ShmRef>> {
    let region =
        params.get("shared_memory_region").map(|p| string_param(p, "shared_memory_region", tensor)).transpose()?;
    let byte_size =
        params.get("shared_memory_byte_size").map(|p| size_param(p, "shared_memory_byte_size", tensor)).transpose()?;
    let offset =
        params.get("shared_memory_offset").map(|p| size_param(p, "shared_memory_offset", tensor)).transpose()?;
    match (region, byte_size) {
        (None, None) if offset.is_none() => Ok(None),
        (Some(region), Some(byte_size)) => Ok(Some(ShmRef { region, offset: offset.unwrap_or(0), byte_size })),
        _ => Err(ServerError::invalid_arg(format!(
            "tensor '{tensor}': 'shared_memory_region' and 'shared_memory_byte_size' must be given together"
        ))),
    }
}

/// Typed `contents` to the raw layout of §2.2. The populated field must be the one the
/// datatype uses; INT8/INT16 and UINT8/UINT16 are narrowed from their 32-bit carriers.
fn contents_to_bytes(input: &InferInputTensor, contents: &InferTensorContents) -> ServerResult<Bytes> {
    let name = &input.name;
    let dtype = DataType::parse(&input.datatype)
        .ok_or_else(|| ServerError::invalid_arg(format!("input '{name}' has unknown datatype '{}'", input.datatype)))?;
    let c = contents;
    let filled = [
        ("bool_contents", !c.bool_contents.is_empty()),
        ("int_contents", !c.int_contents.is_empty()),
        ("int64_contents", !c.int64_contents.is_empty()),
        ("uint_contents", !c.uint_contents.is_empty()),
        ("uint64_contents", !c.uint64_contents.is_empty()),
        ("fp32_contents", !c.fp32_contents.is_empty()),
        ("fp64_contents", !c.fp64_contents.is_empty()),
        ("bytes_contents", !c.bytes_contents.is_empty()),
    ];
    let expected_field = match dtype {
        DataType::Bool => "bool_contents",
        DataType::Int8 | DataType::Int16 | DataType::Int32 => "int_contents",
        DataType::Int64 => "int64_contents",
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 => "uint_contents",
        DataType::Uint64 => "uint64_contents",
        DataType::Fp32 => "fp32_contents",
        DataType::Fp64 => "fp64_contents",
        DataType::Bytes => "bytes_contents",
        DataType::Fp16 | DataType::Bf16 => {
            return Err(ServerError::invalid_arg(format!(
                "input '{name}': {dtype} data cannot be sent in typed contents, use raw_input_contents"
            )))
        }
    };
    if let Some((field, _)) = filled.iter().find(|(field, set)| *set && *field != expected_field) {
        return Err(ServerError::invalid_arg(format!(
            "input '{name}' is {dtype}, so its data belongs in contents.{expected_field}, not contents.{field}"
        )));
    }
    let mut out = Vec::new();
    macro_rules! put {
        ($values:expr, $t:ty) => {
            for &v in $values.iter() {
                // Narrowing, as Triton does, from the protocol's wider carrier type.
                out.extend_from_slice(&(v as $t).to_le_bytes());
            }
        };
    }
    match dtype {
        DataType::Bool => out.extend(c.bool_contents.iter().map(|&b| b as u8)),
        DataType::Int8 => put!(c.int_contents, i8),
        DataType::Int16 => put!(c.int_contents, i16),
        DataType::Int32 => put!(c.int_contents, i32),
        DataType::Int64 => put!(c.int64_contents, i64),
        DataType::Uint8 => put!(c.uint_contents, u8),
        DataType::Uint16 => put!(c.uint_contents, u16),
        DataType::Uint32 => put!(c.uint_contents, u32),
        DataType::Uint64 => put!(c.uint64_contents, u64),
        DataType::Fp32 => put!(c.fp32_contents, f32),
        DataType::Fp64 => put!(c.fp64_contents, f64),
        DataType::Bytes => {
            for element in &c.bytes_contents {
                let len = u32::try_from(element.len()).map_err(|_| {
                    ServerError::invalid_arg(format!("input '{name}': a BYTES element is longer than 4 GiB"))
                })?;
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(element);
            }
        }
        DataType::Fp16 | DataType::Bf16 => unreachable!("rejected above"),
    }
    Ok(out.into())
}

/// A gRPC request to the core's protocol-neutral request (input resolution order of §6.4).
pub fn decode_request(request: pb::ModelInferRequest) -> ServerResult<InferRequest> {
    let mut raw = request.raw_input_contents.into_iter();
    let raw_count = raw.len();
    let mut raw_used = 0;
    let mut inputs = Vec::with_capacity(request.inputs.len());
    for input in request.inputs {
        let data = if let Some(r) = shm_ref(&input.parameters, &input.name)? {
            if input.contents.is_some() {
                return Err(ServerError::invalid_arg(format!(
                    "input '{}' takes its data from shared memory, so 'contents' must not be set",
                    input.name
                )));
            }
            InputData::Shm(r)
        } else if let Some(contents) = &input.contents {
            if raw_count > 0 {
                return Err(ServerError::invalid_arg(format!(
                    "contents field must not be specified when using raw_input_contents for '{}' for model '{}'",
                    input.name, request.model_name
                )));
            }
            InputData::Raw(contents_to_bytes(&input, contents)?)
        } else if let Some(bytes) = raw.next() {
            raw_used += 1;
            InputData::Raw(bytes)
        } else {
            return Err(ServerError::invalid_arg(format!(
                "unable to find data for input tensor '{}' for model '{}'",
                input.name, request.model_name
            )));
        };
        inputs.push(InputTensor { name: input.name, datatype: input.datatype, shape: input.shape, data });
    }
    if raw_used < raw_count {
        return Err(ServerError::invalid_arg(format!(
            "raw_input_contents has {raw_count} entries but only {raw_used} inputs take raw data, for model '{}'",
            request.model_name
        )));
    }
    let outputs = request
        .outputs
        .into_iter()
        .map(|o| {
            if o.parameters.contains_key("classification") {
                return Err(ServerError::unsupported(format!(
                    "output '{}': the classification extension is not supported by this server",
                    o.name
                )));
            }
            Ok(RequestedOutput { shm: shm_ref(&o.parameters, &o.name)?, name: o.name })
        })
        .collect::<ServerResult<Vec<_>>>()?;
    let sequence = sequence_params(&request.parameters)?;
    Ok(InferRequest {
        model_name: request.model_name,
        model_version: request.model_version,
        id: request.id,
        inputs,
        outputs,
        sequence,
    })
}

/// The request's sequence parameters, as Triton reads them: `sequence_id` an int64_param (taken
/// as its uint64 bits), a uint64_param or a string_param; `sequence_start` and `sequence_end`
/// bool_params.
fn sequence_params(params: &HashMap<String, InferParameter>) -> ServerResult<Option<SequenceFlags>> {
    let id = match params.get("sequence_id").map(|p| &p.parameter_choice) {
        None => None,
        Some(Some(ParameterChoice::Int64Param(n))) => Some(CorrelationId::Number(*n as u64)),
        Some(Some(ParameterChoice::Uint64Param(n))) => Some(CorrelationId::Number(*n)),
        Some(Some(ParameterChoice::StringParam(s))) => Some(CorrelationId::Text(s.clone())),
        Some(_) => {
            return Err(ServerError::invalid_arg(
                "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
            ))
        }
    };
    let flag = |key: &str| match params.get(key).map(|p| &p.parameter_choice) {
        None => Ok(false),
        Some(Some(ParameterChoice::BoolParam(b))) => Ok(*b),
        Some(_) => {
            Err(ServerError::invalid_arg(format!("invalid value type for '{key}' parameter, expected bool_param.")))
        }
    };
    let (start, end) = (flag("sequence_start")?, flag("sequence_end")?);
    Ok(SequenceFlags::from_parts(id, start, end))
}

/// The core's response as a `ModelInferResponse`: data always in `raw_output_contents`.
pub fn encode_response(response: InferResponse) -> pb::ModelInferResponse {
    let mut outputs = Vec::with_capacity(response.outputs.len());
    let mut raw = Vec::with_capacity(response.outputs.len());
    for output in response.outputs {
        raw.push(match output.data {
            OutputData::Raw(bytes) => bytes,
            OutputData::InShm => Bytes::new(),
        });
        outputs.push(pb::model_infer_response::InferOutputTensor {
            name: output.name,
            datatype: output.datatype.as_str().to_string(),
            shape: output.shape,
            parameters: HashMap::new(),
            contents: None,
        });
    }
    pb::ModelInferResponse {
        model_name: response.model_name,
        model_version: response.model_version,
        id: response.id,
        parameters: HashMap::new(),
        outputs,
        raw_output_contents: raw,
    }
}

impl GrpcService {
    async fn infer(&self, request: pb::ModelInferRequest) -> ServerResult<pb::ModelInferResponse> {
        let request = decode_request(request)?;
        Ok(encode_response(self.core.infer(request).await?))
    }
}

/// Marks a streamed response final or not, as Triton does on every streamed response.
pub(super) fn with_final_flag(mut response: pb::ModelInferResponse, last: bool) -> pb::ModelStreamInferResponse {
    response.parameters.insert(
        "triton_final_response".to_string(),
        InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(last)) },
    );
    pb::ModelStreamInferResponse { error_message: String::new(), infer_response: Some(response) }
}

/// Whether the request asked for an empty response carrying the final flag of a decoupled
/// model (Triton sends it only then; perf_analyzer asks, to know when a request is complete).
fn wants_empty_final(request: &pb::ModelInferRequest) -> bool {
    matches!(
        request.parameters.get("triton_enable_empty_final_response").and_then(|p| p.parameter_choice.as_ref()),
        Some(ParameterChoice::BoolParam(true))
    )
}

/// A decoupled model's responses, each at its time, then (if asked for) the empty final one.
fn decoupled_stream(answer: DecoupledResponses, empty_final: bool) -> BoxStream<'static, pb::ModelStreamInferResponse> {
    let DecoupledResponses { model_name, model_version, id, responses, final_after } = answer;
    let body = futures::stream::iter(responses).then(|(after, response)| async move {
        tokio::time::sleep(after).await;
        with_final_flag(encode_response(response), false)
    });
    let last = futures::stream::once(async move {
        tokio::time::sleep(final_after).await;
        empty_final.then(|| {
            with_final_flag(pb::ModelInferResponse { id, model_name, model_version, ..Default::default() }, true)
        })
    })
    .filter_map(|last| async move { last });
    body.chain(last).boxed()
}

/// Everything one streamed request gets back.
fn answer_stream(
    service: GrpcService,
    request: pb::ModelInferRequest,
) -> BoxStream<'static, pb::ModelStreamInferResponse> {
    if let Ok(engine) = service.core.llm(&request.model_name, &request.model_version) {
        return llm::answer(service.core.clone(), engine, request);
    }
    futures::stream::once(async move {
        let (id, name, version) = (request.id.clone(), request.model_name.clone(), request.model_version.clone());
        let empty_final = wants_empty_final(&request);
        let answer = match decode_request(request) {
            Ok(request) => service.core.infer_stream(request).await,
            Err(e) => return futures::stream::once(async move { rejected(e, id) }).boxed(),
        };
        match answer {
            Ok(Answer::Decoupled(answer)) => decoupled_stream(answer, empty_final),
            Ok(Answer::Single(response)) => {
                futures::stream::once(async move { with_final_flag(encode_response(response), true) }).boxed()
            }
            Err(e) if e.kind == ErrorKind::NotFound => futures::stream::once(async move { rejected(e, id) }).boxed(),
            Err(e) => futures::stream::once(async move { stream_error(e, id, name, version) }).boxed(),
        }
    })
    .flatten()
    .boxed()
}

/// A streamed request the server refused before a model saw it (an unknown model, a malformed
/// request): as Triton, the error with only the request's id, no model and no final flag.
pub(super) fn rejected(error: ServerError, id: String) -> pb::ModelStreamInferResponse {
    let response = pb::ModelInferResponse { id, ..Default::default() };
    pb::ModelStreamInferResponse { error_message: error.message, infer_response: Some(response) }
}

/// A failed streamed request: the error with the request's identity, marked final.
pub(super) fn stream_error(
    error: ServerError,
    id: String,
    model_name: String,
    model_version: String,
) -> pb::ModelStreamInferResponse {
    let response = pb::ModelInferResponse { id, model_name, model_version, ..Default::default() };
    pb::ModelStreamInferResponse { error_message: error.message, ..with_final_flag(response, true) }
}

type GrpcResult<T> = Result<Response<T>, Status>;

fn reply<T>(result: ServerResult<T>) -> GrpcResult<T> {
    result.map(Response::new).map_err(Status::from)
}

fn trace_response(settings: crate::server::trace::Settings) -> pb::TraceSettingResponse {
    pb::TraceSettingResponse {
        settings: settings
            .into_iter()
            .map(|(k, value)| (k, pb::trace_setting_response::SettingValue { value }))
            .collect(),
    }
}

fn log_defaults() -> pb::LogSettingsResponse {
    use pb::log_settings_response::setting_value::ParameterChoice as P;
    use pb::log_settings_response::SettingValue;
    let v = |p: P| SettingValue { parameter_choice: Some(p) };
    let settings = [
        ("log_file", v(P::StringParam(String::new()))),
        ("log_info", v(P::BoolParam(true))),
        ("log_warning", v(P::BoolParam(true))),
        ("log_error", v(P::BoolParam(true))),
        ("log_verbose_level", v(P::Uint32Param(0))),
        ("log_format", v(P::StringParam("default".into()))),
    ];
    pb::LogSettingsResponse { settings: settings.into_iter().map(|(k, v)| (k.to_string(), v)).collect() }
}

#[tonic::async_trait]
impl GrpcInferenceService for GrpcService {
    async fn server_live(&self, _: Request<pb::ServerLiveRequest>) -> GrpcResult<pb::ServerLiveResponse> {
        Ok(Response::new(pb::ServerLiveResponse { live: self.core.is_live() }))
    }

    async fn server_ready(&self, _: Request<pb::ServerReadyRequest>) -> GrpcResult<pb::ServerReadyResponse> {
        Ok(Response::new(pb::ServerReadyResponse { ready: self.core.is_ready() }))
    }

    async fn model_ready(&self, request: Request<pb::ModelReadyRequest>) -> GrpcResult<pb::ModelReadyResponse> {
        let r = request.into_inner();
        Ok(Response::new(pb::ModelReadyResponse { ready: self.core.model_ready(&r.name, &r.version) }))
    }

    async fn server_metadata(&self, _: Request<pb::ServerMetadataRequest>) -> GrpcResult<pb::ServerMetadataResponse> {
        Ok(Response::new(pb::ServerMetadataResponse {
            name: SERVER_NAME.to_string(),
            version: SERVER_VERSION.to_string(),
            extensions: EXTENSIONS.iter().map(|e| e.to_string()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        request: Request<pb::ModelMetadataRequest>,
    ) -> GrpcResult<pb::ModelMetadataResponse> {
        let r = request.into_inner();
        reply(self.core.model_metadata(&r.name, &r.version))
    }

    async fn model_infer(&self, request: Request<pb::ModelInferRequest>) -> GrpcResult<pb::ModelInferResponse> {
        reply(self.infer(request.into_inner()).await)
    }

    type ModelStreamInferStream = ReceiverStream<Result<pb::ModelStreamInferResponse, Status>>;

    /// Each request runs as soon as it arrives, so responses may interleave; clients match them
    /// by `id`. A bad request answers with `error_message` and the stream goes on. A decoupled
    /// model's request gets its responses (each flagged not final) and, when asked for with
    /// `triton_enable_empty_final_response`, an empty response flagged final.
    async fn model_stream_infer(
        &self,
        request: Request<Streaming<pb::ModelInferRequest>>,
    ) -> GrpcResult<Self::ModelStreamInferStream> {
        let mut incoming = request.into_inner();
        let (tx, rx) = mpsc::channel(64);
        let service = self.clone();
        tokio::spawn(async move {
            let mut in_flight: SelectAll<BoxStream<'static, pb::ModelStreamInferResponse>> = SelectAll::new();
            loop {
                tokio::select! {
                    next = incoming.next() => match next {
                        Some(Ok(request)) => in_flight.push(answer_stream(service.clone(), request)),
                        Some(Err(status)) => {
                            // The transport itself failed (e.g. an oversized message): end the stream with it.
                            while let Some(done) = in_flight.next().await {
                                let _ = tx.send(Ok(done)).await;
                            }
                            let _ = tx.send(Err(status)).await;
                            return;
                        }
                        None => break,
                    },
                    Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                        if tx.send(Ok(done)).await.is_err() {
                            return;
                        }
                    }
                }
            }
            while let Some(done) = in_flight.next().await {
                if tx.send(Ok(done)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn model_config(&self, request: Request<pb::ModelConfigRequest>) -> GrpcResult<pb::ModelConfigResponse> {
        let r = request.into_inner();
        reply(self.core.model_config(&r.name, &r.version).map(|c| pb::ModelConfigResponse { config: Some(c) }))
    }

    async fn model_statistics(
        &self,
        request: Request<pb::ModelStatisticsRequest>,
    ) -> GrpcResult<pb::ModelStatisticsResponse> {
        let r = request.into_inner();
        reply(self.core.statistics(&r.name, &r.version).map(|model_stats| pb::ModelStatisticsResponse { model_stats }))
    }

    async fn repository_index(
        &self,
        request: Request<pb::RepositoryIndexRequest>,
    ) -> GrpcResult<pb::RepositoryIndexResponse> {
        let r = request.into_inner();
        reply(self.core.repository_index(r.ready).map(|entries| {
            pb::RepositoryIndexResponse {
                models: entries
                    .into_iter()
                    .map(|e| pb::repository_index_response::ModelIndex {
                        name: e.name,
                        version: e.version,
                        state: e.state,
                        reason: e.reason,
                    })
                    .collect(),
            }
        }))
    }

    async fn repository_model_load(
        &self,
        request: Request<pb::RepositoryModelLoadRequest>,
    ) -> GrpcResult<pb::RepositoryModelLoadResponse> {
        use pb::model_repository_parameter::ParameterChoice as P;
        let r = request.into_inner();
        no_repository_name(&r.repository_name)?;
        let mut config = None;
        for (key, value) in &r.parameters {
            match (key.as_str(), &value.parameter_choice) {
                ("config", Some(P::StringParam(json))) => config = Some(json.clone()),
                ("config", _) => {
                    return Err(ServerError::invalid_arg("load parameter 'config' must be a string_param").into())
                }
                (k, _) if k.starts_with("file:") => {
                    return Err(ServerError::unsupported(format!(
                    "load parameter '{k}': model file overrides are not supported; models are built from their config"
                ))
                    .into())
                }
                _ => {}
            }
        }
        let core = self.core.clone();
        reply(blocking(move || core.load_model(&r.model_name, config.as_deref())).await.map(|_| Default::default()))
    }

    async fn repository_model_unload(
        &self,
        request: Request<pb::RepositoryModelUnloadRequest>,
    ) -> GrpcResult<pb::RepositoryModelUnloadResponse> {
        let r = request.into_inner();
        no_repository_name(&r.repository_name)?;
        let core = self.core.clone();
        reply(blocking(move || core.unload_model(&r.model_name)).await.map(|_| Default::default()))
    }

    async fn system_shared_memory_status(
        &self,
        request: Request<pb::SystemSharedMemoryStatusRequest>,
    ) -> GrpcResult<pb::SystemSharedMemoryStatusResponse> {
        let r = request.into_inner();
        reply(self.core.shm.status(&r.name).map(|regions| {
            pb::SystemSharedMemoryStatusResponse {
                regions: regions
                    .iter()
                    .map(|r| {
                        let status = pb::system_shared_memory_status_response::RegionStatus {
                            name: r.name.clone(),
                            key: r.key.clone(),
                            offset: r.offset,
                            byte_size: r.byte_size,
                        };
                        (r.name.clone(), status)
                    })
                    .collect(),
            }
        }))
    }

    async fn system_shared_memory_register(
        &self,
        request: Request<pb::SystemSharedMemoryRegisterRequest>,
    ) -> GrpcResult<pb::SystemSharedMemoryRegisterResponse> {
        let r = request.into_inner();
        reply(self.core.shm.register(&r.name, &r.key, r.offset, r.byte_size).map(|_| Default::default()))
    }

    async fn system_shared_memory_unregister(
        &self,
        request: Request<pb::SystemSharedMemoryUnregisterRequest>,
    ) -> GrpcResult<pb::SystemSharedMemoryUnregisterResponse> {
        self.core.shm.unregister(&request.into_inner().name);
        Ok(Response::new(Default::default()))
    }

    async fn cuda_shared_memory_status(
        &self,
        request: Request<pb::CudaSharedMemoryStatusRequest>,
    ) -> GrpcResult<pb::CudaSharedMemoryStatusResponse> {
        let name = request.into_inner().name;
        if name.is_empty() {
            return Ok(Response::new(Default::default()));
        }
        Err(ServerError::invalid_arg(format!("Unable to find cuda shared memory region: '{name}'")).into())
    }

    async fn cuda_shared_memory_register(
        &self,
        _: Request<pb::CudaSharedMemoryRegisterRequest>,
    ) -> GrpcResult<pb::CudaSharedMemoryRegisterResponse> {
        Err(ServerError::invalid_arg("CUDA shared memory is not available: no GPU").into())
    }

    async fn cuda_shared_memory_unregister(
        &self,
        _: Request<pb::CudaSharedMemoryUnregisterRequest>,
    ) -> GrpcResult<pb::CudaSharedMemoryUnregisterResponse> {
        Ok(Response::new(Default::default()))
    }

    /// Reads, or with settings changes, the trace settings; an empty value list clears a setting.
    async fn trace_setting(&self, request: Request<pb::TraceSettingRequest>) -> GrpcResult<pb::TraceSettingResponse> {
        let r = request.into_inner();
        if !r.model_name.is_empty() {
            self.core.repository.get(&r.model_name, "")?;
        }
        let updates: Vec<_> =
            r.settings.into_iter().map(|(k, v)| (k, (!v.value.is_empty()).then_some(v.value))).collect();
        let settings = if updates.is_empty() {
            Ok(self.core.trace.get(&r.model_name))
        } else {
            self.core.trace.update(&r.model_name, updates)
        };
        reply(settings.map(trace_response))
    }

    async fn log_settings(&self, request: Request<pb::LogSettingsRequest>) -> GrpcResult<pb::LogSettingsResponse> {
        if request.into_inner().settings.is_empty() {
            return Ok(Response::new(log_defaults()));
        }
        Err(ServerError::unsupported(
            "log settings cannot be changed over the network; use --log when starting perfbench",
        )
        .into())
    }
}

/// `grpc.health.v1.Health`: SERVING for the server ("") and the inference service.
#[derive(Clone)]
pub struct HealthService {
    core: Arc<InferenceServer>,
}

impl HealthService {
    fn status(&self, service: &str) -> Result<HealthCheckResponse, Status> {
        if !service.is_empty() && service != "inference.GRPCInferenceService" {
            return Err(Status::not_found(format!("unknown service '{service}'")));
        }
        let serving = self.core.is_ready();
        let status = if serving { ServingStatus::Serving } else { ServingStatus::NotServing };
        Ok(HealthCheckResponse { status: status as i32 })
    }
}

#[tonic::async_trait]
impl Health for HealthService {
    async fn check(&self, request: Request<HealthCheckRequest>) -> GrpcResult<HealthCheckResponse> {
        self.status(&request.into_inner().service).map(Response::new)
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    /// The status never changes while the server runs: send it once and hold the stream open.
    async fn watch(&self, request: Request<HealthCheckRequest>) -> GrpcResult<Self::WatchStream> {
        let status = self.status(&request.into_inner().service)?;
        let stream = futures::stream::once(async move { Ok(status) }).chain(futures::stream::pending());
        Ok(Response::new(Box::pin(stream)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(datatype: &str, contents: InferTensorContents) -> InferInputTensor {
        InferInputTensor {
            name: "X".into(),
            datatype: datatype.into(),
            shape: vec![2],
            parameters: HashMap::new(),
            contents: Some(contents),
        }
    }

    #[test]
    fn typed_contents_narrow_and_length_prefix() {
        let i8s = input("INT8", InferTensorContents { int_contents: vec![-1, 5], ..Default::default() });
        assert_eq!(&contents_to_bytes(&i8s, i8s.contents.as_ref().unwrap()).unwrap()[..], &[0xff, 5]);
        let u16s = input("UINT16", InferTensorContents { uint_contents: vec![1, 258], ..Default::default() });
        assert_eq!(&contents_to_bytes(&u16s, u16s.contents.as_ref().unwrap()).unwrap()[..], &[1, 0, 2, 1]);
        let strs = input("BYTES", InferTensorContents { bytes_contents: vec![b"ab".to_vec()], ..Default::default() });
        assert_eq!(&contents_to_bytes(&strs, strs.contents.as_ref().unwrap()).unwrap()[..], &[2, 0, 0, 0, b'a', b'b']);
        let wrong = input("INT32", InferTensorContents { fp32_contents: vec![1.0], ..Default::default() });
        let e = contents_to_bytes(&wrong, wrong.contents.as_ref().unwrap()).unwrap_err();
        assert!(e.message.contains("int_contents") && e.message.contains("fp32_contents"), "{e}");
    }

    #[test]
    fn raw_entries_belong_to_non_shm_inputs_in_order() {
        let shm_params: HashMap<String, InferParameter> = [
            (
                "shared_memory_region".to_string(),
                InferParameter { parameter_choice: Some(ParameterChoice::StringParam("r".into())) },
            ),
            (
                "shared_memory_byte_size".to_string(),
                InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(8)) },
            ),
        ]
        .into();
        let tensor = |name: &str, parameters| InferInputTensor {
            name: name.into(),
            datatype: "FP32".into(),
            shape: vec![2],
            parameters,
            contents: None,
        };
        let request = pb::ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![tensor("A", shm_params), tensor("B", HashMap::new())],
            raw_input_contents: vec![Bytes::from(vec![0; 8])],
            ..Default::default()
        };
        let decoded = decode_request(request).unwrap();
        assert!(matches!(decoded.inputs[0].data, InputData::Shm(ref r) if r.region == "r" && r.byte_size == 8));
        assert!(matches!(decoded.inputs[1].data, InputData::Raw(ref b) if b.len() == 8));
    }
}
