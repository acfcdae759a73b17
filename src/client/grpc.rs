//! KServe v2 over gRPC (tonic), as perf_analyzer's gRPC client sends it: inline tensors in
//! `raw_input_contents` (one entry per non-shm input, in input order), every output listed,
//! output bytes taken from `raw_output_contents` by index, message limits at `i32::MAX`.
//!
//! Infer requests are protobuf-encoded (and compressed) once in [`InferClient::prepare`] and
//! written as they are, so the hot loop neither clones tensors nor re-encodes them. Unary calls
//! go on HTTP/2 connections of our own ([`unary`] over [`connection`]); `--streaming` and the
//! control calls go through tonic. Concurrent requests multiplex over HTTP/2 on a small pool of
//! connections.

mod connection;
mod message;
pub mod stream;
mod unary;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use http::Uri;
use prost::Message;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use super::connect::{Dialer, Wire, CONNECT_TIMEOUT};
use super::tls::{https_url, GrpcCompression, TlsOptions};
use super::{
    base_url, error_chain, ClientError, ClientResult, ConnectOptions, CorrelationId, InferClient, InferResult,
    InputSource, OutputTarget, ParameterValue, RequestSpec, RequestTiming, SequenceFlags, ServerInfo,
};
use crate::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use crate::proto::inference::model_infer_request::{InferInputTensor, InferRequestedOutputTensor};
use crate::proto::inference::{
    infer_parameter::ParameterChoice, CudaSharedMemoryUnregisterRequest, InferParameter, ModelConfig,
    ModelConfigRequest, ModelInferRequest, ModelInferResponse, ModelMetadataRequest, ModelMetadataResponse,
    ModelStatistics, ModelStatisticsRequest, ServerMetadataRequest, SystemSharedMemoryRegisterRequest,
    SystemSharedMemoryUnregisterRequest,
};
use crate::tensor::{DataType, Tensor};

/// Triton's clients allow messages up to `INT32_MAX` bytes both ways.
const MAX_MESSAGE_BYTES: usize = i32::MAX as usize;
const MODEL_INFER_PATH: &str = "/inference.GRPCInferenceService/ModelInfer";
/// Concurrent requests per HTTP/2 connection before another is opened: one connection is
/// driven by one task, which becomes the bottleneck when many streams share it.
const STREAMS_PER_CONNECTION: usize = 16;
const MAX_CONNECTIONS: usize = 8;

/// A gRPC client for one server.
pub struct GrpcClient {
    base: String,
    /// Rebuilt by [`InferClient::drop_connections`] (after a server restart), hence the lock.
    channels: parking_lot::RwLock<Vec<Channel>>,
    /// Makes one lazily connecting channel to the server, as `new` made the first ones.
    make_channel: Box<dyn Fn() -> Channel + Send + Sync>,
    next: AtomicUsize,
    metadata: MetadataMap,
    /// `Some` with `--streaming`: requests go over `ModelStreamInfer` streams.
    streams: Option<stream::StreamPool>,
    /// `--grpc-compression-algorithm`: how requests are compressed.
    compression: GrpcCompression,
    /// Unary inference calls.
    unary: unary::Unary,
    /// Opens every connection (tonic's too): explains their failures.
    dialer: Dialer,
    /// `--request-parameter`s, added to every prepared request.
    parameters: std::collections::HashMap<String, InferParameter>,
}

/// A `ModelInferRequest`, protobuf-encoded once, and as a unary call sends it.
pub struct GrpcRequest {
    encoded: Bytes,
    message: message::Message,
    /// A decoupled model's request: on a stream it ends with the response flagged final.
    decoupled: bool,
}

impl GrpcClient {
    /// Connects lazily: an unreachable server shows up on the first call, as
    /// [`ClientError::Unreachable`].
    pub fn new(url: &str, options: &ConnectOptions) -> ClientResult<Self> {
        Self::with_tls(url, options, &TlsOptions::default())
    }

    /// A client over TLS with `tls.grpc.use_ssl` (perf_analyzer's `--ssl-grpc-*`), compressing
    /// requests as `tls.grpc_compression` says.
    pub fn with_tls(url: &str, options: &ConnectOptions, tls: &TlsOptions) -> ClientResult<Self> {
        crate::proto::install_crypto_provider();
        let tls_config = tls.grpc.client_config()?;
        let bad_url = |e: &dyn std::fmt::Display| ClientError::Invalid(format!("bad server URL '{url}': {e}"));
        let plain = base_url(url);
        // Requests over TLS say `https`.
        let base = if tls_config.is_some() { https_url(&plain) } else { plain.clone() };
        let parsed: Uri = base.parse().map_err(|e| bad_url(&e))?;
        let authority = parsed.authority().ok_or_else(|| bad_url(&"no host"))?.clone();
        let port = authority.port_u16().unwrap_or(if tls_config.is_some() { 443 } else { 80 });
        // TLS runs in our dialer rather than tonic's connector, whose verifier cannot be
        // replaced and refuses X.509 v1 certificates.
        let dialer = Dialer::new(url, authority.host(), port, tls_config, Wire::Grpc)?;
        // tonic's own TLS is off (the URL it connects to says `http`); the origin it writes in
        // requests says `https` where TLS is on.
        let endpoint = Endpoint::from_shared(plain)
            .map_err(|e| bad_url(&error_chain(&e)))?
            .origin(parsed.clone())
            .connect_timeout(CONNECT_TIMEOUT);
        let connector = {
            let dialer = dialer.clone();
            tower::service_fn(move |_: Uri| {
                let dialer = dialer.clone();
                async move { dialer.dial().await.map(hyper_util::rt::TokioIo::new) }
            })
        };
        let make_channel: Box<dyn Fn() -> Channel + Send + Sync> =
            Box::new(move || endpoint.connect_with_connector_lazy(connector.clone()));
        let connections = options.concurrency.div_ceil(STREAMS_PER_CONNECTION).clamp(1, MAX_CONNECTIONS);
        // Streams need as many channels as the load has connections; control calls need one.
        let channel_count = if options.streaming { connections } else { 1 };
        let channels = parking_lot::RwLock::new((0..channel_count).map(|_| make_channel()).collect());
        let mut metadata = MetadataMap::new();
        for (name, value) in &options.headers {
            let bad = || ClientError::Invalid(format!("bad header '{name}: {value}'"));
            let key = MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes()).map_err(|_| bad())?;
            let value = MetadataValue::try_from(value.as_str()).map_err(|_| bad())?;
            metadata.append(key, value);
        }
        let header_block = unary::Unary::header_block(
            parsed.scheme_str() == Some("https"),
            authority.as_str(),
            MODEL_INFER_PATH,
            &metadata,
            tls.grpc_compression.name(),
        );
        let unary = unary::Unary::new(base.clone(), dialer.clone(), header_block, connections);
        Ok(GrpcClient {
            base,
            channels,
            make_channel,
            next: AtomicUsize::new(0),
            metadata,
            streams: options.streaming.then(|| stream::StreamPool::new(tls.grpc_compression.encoding())),
            compression: tls.grpc_compression,
            unary,
            dialer,
            parameters: options
                .request_parameters
                .iter()
                .map(|p| (p.name.clone(), infer_parameter(&p.value)))
                .collect(),
        })
    }

    fn channel(&self) -> Channel {
        let channels = self.channels.read();
        channels[self.next.fetch_add(1, Ordering::Relaxed) % channels.len()].clone()
    }

    fn client(&self) -> GrpcInferenceServiceClient<Channel> {
        let client = GrpcInferenceServiceClient::new(self.channel())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        match self.compression.encoding() {
            Some(encoding) => client.send_compressed(encoding),
            None => client,
        }
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        *request.metadata_mut() = self.metadata.clone();
        request
    }

    /// Statuses that tonic made from a transport failure carry their cause as `source`; a
    /// status the server sent has none.
    fn status_error(&self, status: Status) -> ClientError {
        if std::error::Error::source(&status).is_some() && status.code() != Code::Cancelled {
            ClientError::Unreachable { url: self.base.clone(), reason: self.dialer.explain(&status) }
        } else {
            ClientError::Server(status.message().to_string())
        }
    }

    /// A control call's answer, or [`GrpcClient::status_error`] of its failure, where a
    /// transport failure that names no cause (tonic's `transport error`, or `operation was
    /// canceled`) gets the one a probe connection finds (a TLS alert after the handshake).
    async fn answer<T>(&self, response: Result<tonic::Response<T>, Status>) -> ClientResult<T> {
        let status = match response {
            Ok(response) => return Ok(response.into_inner()),
            Err(status) => status,
        };
        if std::error::Error::source(&status).is_some() {
            if let Some(reason) = self.dialer.cause(&status).await {
                return Err(ClientError::Unreachable { url: self.base.clone(), reason });
            }
        }
        Err(self.status_error(status))
    }
}

fn string_param(s: &str) -> InferParameter {
    InferParameter { parameter_choice: Some(ParameterChoice::StringParam(s.to_string())) }
}

fn int64_param(v: u64) -> InferParameter {
    InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(v as i64)) }
}

/// Shared-memory tensor parameters; the offset only when non-zero, as Triton's clients send it.
fn shm_parameters(region: &str, offset: u64, byte_size: u64) -> std::collections::HashMap<String, InferParameter> {
    let mut p = std::collections::HashMap::new();
    p.insert("shared_memory_region".to_string(), string_param(region));
    p.insert("shared_memory_byte_size".to_string(), int64_param(byte_size));
    if offset != 0 {
        p.insert("shared_memory_offset".to_string(), int64_param(offset));
    }
    p
}

/// A sequence step's parameters as an encoded `ModelInferRequest` holding only them, as
/// perf_analyzer sets them (`sequence_id` as int64_param, or string_param for a string id;
/// both flags always). Appended to a prepared request's bytes, protobuf merges the map entries
/// into its `parameters`, so the prepared request is never decoded or re-encoded.
pub(crate) fn sequence_parameters(sequence: &SequenceFlags) -> Bytes {
    let id = match &sequence.id {
        CorrelationId::Number(n) => ParameterChoice::Int64Param(*n as i64),
        CorrelationId::Text(t) => ParameterChoice::StringParam(t.clone()),
    };
    let param = |choice| InferParameter { parameter_choice: Some(choice) };
    let mut request = ModelInferRequest::default();
    request.parameters.insert("sequence_id".into(), param(id));
    request.parameters.insert("sequence_start".into(), param(ParameterChoice::BoolParam(sequence.start)));
    request.parameters.insert("sequence_end".into(), param(ParameterChoice::BoolParam(sequence.end)));
    request.encode_to_vec().into()
}

/// A `--request-parameter` value as the `InferParameter` perf_analyzer's client sends.
fn infer_parameter(value: &ParameterValue) -> InferParameter {
    let choice = match value {
        ParameterValue::Bool(b) => ParameterChoice::BoolParam(*b),
        ParameterValue::Int(n) => ParameterChoice::Int64Param(*n),
        ParameterValue::String(s) => ParameterChoice::StringParam(s.clone()),
    };
    InferParameter { parameter_choice: Some(choice) }
}

/// A prepared request's bytes and what follows them on the wire (a sequence step's
/// parameters, or nothing).
pub(crate) type Encoded = (Bytes, Bytes);

fn to_proto(spec: &RequestSpec) -> ModelInferRequest {
    let mut request = ModelInferRequest {
        model_name: spec.model_name.clone(),
        model_version: spec.model_version.clone(),
        ..Default::default()
    };
    for (name, source) in &spec.inputs {
        let (datatype, shape, parameters) = match source {
            InputSource::Inline(t) => {
                request.raw_input_contents.push(t.data.clone());
                (t.dtype, t.shape.clone(), Default::default())
            }
            InputSource::SystemShm { region, offset, byte_size, dtype, shape } => {
                (*dtype, shape.clone(), shm_parameters(region, *offset, *byte_size))
            }
        };
        request.inputs.push(InferInputTensor {
            name: name.clone(),
            datatype: datatype.as_str().to_string(),
            shape,
            parameters,
            contents: None,
        });
    }
    for (name, target) in &spec.outputs {
        let parameters = match target {
            OutputTarget::Inline => Default::default(),
            OutputTarget::SystemShm { region, offset, byte_size } => shm_parameters(region, *offset, *byte_size),
        };
        request.outputs.push(InferRequestedOutputTensor { name: name.clone(), parameters });
    }
    if spec.decoupled {
        // As perf_analyzer: without it Triton sends no response for a request that ends with
        // zero outputs, and the client could not tell when a request is complete.
        request.parameters.insert(
            "triton_enable_empty_final_response".into(),
            InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(true)) },
        );
    }
    request
}

/// A streamed request's responses as one result: the answer is the last response that carried
/// outputs (a decoupled model's empty final one carries none); a decoupled request also keeps
/// every response with its arrival time.
fn from_stream(responses: stream::Responses, decoupled: bool) -> ClientResult<InferResult> {
    if !decoupled {
        // One response: its outputs, as a unary call returns them.
        return responses.into_iter().last().map_or_else(|| Ok(InferResult::default()), |(_, r)| from_proto(r));
    }
    let mut each = Vec::with_capacity(responses.len());
    for (at, response) in responses {
        each.push((at, from_proto(response)?.outputs));
    }
    let answer = each.iter().rev().find(|(_, outputs)| !outputs.is_empty()).or(each.last());
    let outputs = answer.map(|(_, outputs)| outputs.clone()).unwrap_or_default();
    Ok(InferResult { outputs, responses: each })
}

/// Outputs by position: `outputs[i]` owns `raw_output_contents[i]` (empty for shm outputs).
fn from_proto(response: ModelInferResponse) -> ClientResult<InferResult> {
    let mut raw = response.raw_output_contents.into_iter();
    let mut outputs = Vec::with_capacity(response.outputs.len());
    for o in response.outputs {
        let dtype =
            DataType::parse(&o.datatype).or_else(|| (o.datatype == "STRING").then_some(DataType::Bytes)).ok_or_else(
                || ClientError::Protocol(format!("output '{}' has unknown datatype '{}'", o.name, o.datatype)),
            )?;
        let data = raw.next().unwrap_or_default();
        outputs.push((o.name, Tensor { dtype, shape: o.shape, data }));
    }
    Ok(InferResult { outputs, ..Default::default() })
}

impl InferClient for GrpcClient {
    type Prepared = GrpcRequest;

    fn drop_connections(&self) {
        let mut channels = self.channels.write();
        let fresh = (0..channels.len()).map(|_| (self.make_channel)()).collect();
        *channels = fresh;
        self.unary.drop_connections();
        if let Some(streams) = &self.streams {
            streams.drop_idle();
        }
    }

    async fn server_metadata(&self) -> ClientResult<ServerInfo> {
        let response = self.client().server_metadata(self.request(ServerMetadataRequest {})).await;
        let m = self.answer(response).await?;
        Ok(ServerInfo { name: m.name, version: m.version, extensions: m.extensions })
    }

    async fn model_metadata(&self, model: &str, version: &str) -> ClientResult<ModelMetadataResponse> {
        let request = ModelMetadataRequest { name: model.to_string(), version: version.to_string() };
        let response = self.client().model_metadata(self.request(request)).await;
        self.answer(response).await
    }

    async fn model_config(&self, model: &str, version: &str) -> ClientResult<ModelConfig> {
        let request = ModelConfigRequest { name: model.to_string(), version: version.to_string() };
        let response = self.client().model_config(self.request(request)).await;
        self.answer(response)
            .await?
            .config
            .ok_or_else(|| ClientError::Protocol(format!("model '{model}': ModelConfig response has no config")))
    }

    async fn statistics(&self, model: &str, version: &str) -> ClientResult<Vec<ModelStatistics>> {
        let request = ModelStatisticsRequest { name: model.to_string(), version: version.to_string() };
        let response = self.client().model_statistics(self.request(request)).await;
        Ok(self.answer(response).await?.model_stats)
    }

    fn prepare(&self, spec: &RequestSpec) -> ClientResult<GrpcRequest> {
        let mut request = to_proto(spec);
        request.parameters.extend(self.parameters.iter().map(|(k, v)| (k.clone(), v.clone())));
        let encoded: Bytes = request.encode_to_vec().into();
        let message = message::message(&encoded, Bytes::new(), self.compression)?;
        Ok(GrpcRequest { encoded, message, decoupled: spec.decoupled })
    }

    /// Timing, measured on our side of the connection:
    /// - `send`: from the call until the encoded request is written into the HTTP/2 stream's
    ///   buffer (channel readiness, headers, copying the pre-encoded message);
    /// - `recv`: from the moment the complete response message reaches the decoder until it is
    ///   decoded and turned into outputs. HTTP/2 framing runs in tonic's connection task and is
    ///   not separable, so it counts as network + server time;
    /// - `total`: from the call to the end of `recv`.
    async fn infer_step(
        &self,
        request: &GrpcRequest,
        sequence: Option<&SequenceFlags>,
        keep_outputs: bool,
    ) -> (ClientResult<InferResult>, RequestTiming) {
        self.exchange(request, sequence.map_or_else(Bytes::new, sequence_parameters), keep_outputs, None).await
    }

    /// On a stream, `watch` sees each response as it arrives; unary, once the answer is in.
    async fn infer_watched(
        &self,
        request: &GrpcRequest,
        keep_outputs: bool,
        watch: &(dyn Fn(usize) + Sync),
    ) -> (ClientResult<InferResult>, RequestTiming) {
        if self.streams.is_none() {
            let (result, timing) = self.exchange(request, Bytes::new(), keep_outputs, None).await;
            if result.is_ok() {
                watch(1);
            }
            return (result, timing);
        }
        self.exchange(request, Bytes::new(), keep_outputs, Some(watch)).await
    }

    async fn register_system_shm(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> ClientResult<()> {
        let request = SystemSharedMemoryRegisterRequest { name: name.into(), key: key.into(), offset, byte_size };
        let response = self.client().system_shared_memory_register(self.request(request)).await;
        self.answer(response).await.map(|_| ())
    }

    async fn unregister_system_shm(&self, name: &str) -> ClientResult<()> {
        let request = SystemSharedMemoryUnregisterRequest { name: name.into() };
        let response = self.client().system_shared_memory_unregister(self.request(request)).await;
        self.answer(response).await.map(|_| ())
    }

    async fn unregister_cuda_shm(&self, name: &str) -> ClientResult<()> {
        let request = CudaSharedMemoryUnregisterRequest { name: name.into() };
        let response = self.client().cuda_shared_memory_unregister(self.request(request)).await;
        self.answer(response).await.map(|_| ())
    }

    async fn repository_load(&self, model: &str, config: Option<&str>) -> ClientResult<()> {
        use crate::proto::inference::model_repository_parameter::ParameterChoice;
        use crate::proto::inference::{ModelRepositoryParameter, RepositoryModelLoadRequest};
        let parameters = config
            .map(|json| {
                let value =
                    ModelRepositoryParameter { parameter_choice: Some(ParameterChoice::StringParam(json.into())) };
                ("config".to_string(), value)
            })
            .into_iter()
            .collect();
        let request =
            RepositoryModelLoadRequest { repository_name: String::new(), model_name: model.into(), parameters };
        let response = self.client().repository_model_load(self.request(request)).await;
        self.answer(response).await.map(|_| ())
    }

    async fn trace_setting(&self, model: &str, settings: &[(String, Vec<String>)]) -> ClientResult<()> {
        use crate::proto::inference::trace_setting_request::SettingValue;
        let settings =
            settings.iter().map(|(key, values)| (key.clone(), SettingValue { value: values.clone() })).collect();
        let request = crate::proto::inference::TraceSettingRequest { settings, model_name: model.into() };
        let response = self.client().trace_setting(self.request(request)).await;
        self.answer(response).await.map(|_| ())
    }
}

impl GrpcClient {
    /// [`InferClient::infer`] of a request sent with `id` as its `ModelInferRequest.id`, so a
    /// server's log names it. The id goes as an encoded request holding only it, appended to the
    /// prepared bytes (protobuf keeps a field's last value), as sequence parameters do.
    pub async fn infer_with_id(
        &self,
        request: &GrpcRequest,
        id: &str,
        keep_outputs: bool,
    ) -> (ClientResult<InferResult>, RequestTiming) {
        let tail = ModelInferRequest { id: id.to_string(), ..Default::default() }.encode_to_vec().into();
        self.exchange(request, tail, keep_outputs, None).await
    }

    /// One inference call (unary, or on a stream with `--streaming`) of the prepared bytes
    /// followed by `tail`; see [`InferClient::infer_step`] for what the timing covers.
    async fn exchange(
        &self,
        request: &GrpcRequest,
        tail: Bytes,
        keep_outputs: bool,
        watch: Option<&(dyn Fn(usize) + Sync)>,
    ) -> (ClientResult<InferResult>, RequestTiming) {
        if let Some(streams) = &self.streams {
            let (response, timing) = streams
                .infer(
                    self.channel(),
                    self.metadata.clone(),
                    MAX_MESSAGE_BYTES,
                    ((request.encoded.clone(), tail), request.decoupled),
                    |s| self.status_error(s),
                    watch,
                )
                .await;
            let result = match response {
                Ok(responses) if keep_outputs => from_stream(responses, request.decoupled),
                Ok(_) => Ok(InferResult::default()),
                Err(e) => Err(e),
            };
            return (result, timing);
        }
        let start = Instant::now();
        let message = match tail.is_empty() {
            true => Ok(request.message.clone()),
            false => message::message(&request.encoded, tail, self.compression),
        };
        let answer = match message {
            Ok(message) => self.unary.call(&message).await,
            Err(e) => Err(e),
        };
        let answered = Instant::now();
        let (result, sent, received) = match answer {
            Err(e) => (Err(e), answered, answered),
            Ok(answer) if !keep_outputs => (Ok(InferResult::default()), answer.sent_at, answer.received_at),
            Ok(answer) => {
                let result = ModelInferResponse::decode(answer.message)
                    .map_err(|e| ClientError::Protocol(format!("bad ModelInferResponse: {e}")))
                    .and_then(from_proto);
                (result, answer.sent_at, answer.received_at)
            }
        };
        let end = Instant::now();
        let timing = RequestTiming { send: sent - start, recv: end - received, total: end - start };
        (result, timing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::inference::model_infer_response::InferOutputTensor;

    #[test]
    fn raw_contents_only_for_inline_inputs() {
        let spec = RequestSpec {
            model_name: "m".into(),
            model_version: "1".into(),
            inputs: vec![
                (
                    "S".into(),
                    InputSource::SystemShm {
                        region: "S_0_0".into(),
                        offset: 4,
                        byte_size: 8,
                        dtype: DataType::Int32,
                        shape: vec![2],
                    },
                ),
                ("A".into(), InputSource::Inline(Tensor::from_i32(vec![1], &[7]))),
            ],
            outputs: vec![("X".into(), OutputTarget::Inline)],
            decoupled: false,
        };
        let p = to_proto(&spec);
        assert_eq!(p.raw_input_contents, vec![Bytes::from(7i32.to_le_bytes().to_vec())]);
        assert_eq!(p.inputs[0].parameters["shared_memory_offset"], int64_param(4));
        assert!(p.inputs[1].parameters.is_empty());
        assert_eq!(p.outputs[0].name, "X");
        // The pre-encoded bytes decode back to the same message.
        assert_eq!(ModelInferRequest::decode(&p.encode_to_vec()[..]).unwrap(), p);
    }

    #[test]
    fn sequence_parameters_merge_into_the_prepared_request() {
        let spec = RequestSpec {
            model_name: "m".into(),
            model_version: String::new(),
            inputs: vec![("A".into(), InputSource::Inline(Tensor::from_i32(vec![1], &[7])))],
            outputs: vec![],
            decoupled: true,
        };
        let prepared = to_proto(&spec);
        let mut wire = prepared.encode_to_vec();
        let flags = SequenceFlags { id: CorrelationId::Number(9), start: false, end: true };
        wire.extend_from_slice(&sequence_parameters(&flags));
        let got = ModelInferRequest::decode(&wire[..]).unwrap();
        let choice = |k: &str| got.parameters[k].parameter_choice.clone().unwrap();
        assert_eq!(choice("sequence_id"), ParameterChoice::Int64Param(9));
        assert_eq!(choice("sequence_start"), ParameterChoice::BoolParam(false));
        assert_eq!(choice("sequence_end"), ParameterChoice::BoolParam(true));
        assert_eq!(choice("triton_enable_empty_final_response"), ParameterChoice::BoolParam(true));
        assert_eq!(got.raw_input_contents, prepared.raw_input_contents);
        let text = SequenceFlags { id: CorrelationId::Text("s1".into()), start: true, end: false };
        let got = ModelInferRequest::decode(&sequence_parameters(&text)[..]).unwrap();
        assert_eq!(got.parameters["sequence_id"].parameter_choice, Some(ParameterChoice::StringParam("s1".into())));
    }

    #[test]
    fn outputs_map_raw_contents_by_index() {
        let t = |n: &str| InferOutputTensor {
            name: n.into(),
            datatype: "INT32".into(),
            shape: vec![1],
            ..Default::default()
        };
        let r = ModelInferResponse {
            outputs: vec![t("A"), t("B")],
            raw_output_contents: vec![Bytes::new(), Bytes::from(5i32.to_le_bytes().to_vec())],
            ..Default::default()
        };
        let out = from_proto(r).unwrap();
        assert!(out.outputs[0].1.data.is_empty());
        assert_eq!(out.outputs[1].1.to_i32(), vec![5]);
    }
}
