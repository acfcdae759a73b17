//! How to send: one trait over every transport (HTTP, gRPC, in-process). The load engine is
//! generic over [`InferClient`] and never sees a wire format.

pub(crate) mod connect;
pub mod deadline;
pub mod grpc;
pub mod http;
pub mod inprocess;
pub mod scrape;
pub mod shm;
pub mod tls;

use std::future::Future;
use std::time::Duration;

use crate::proto::inference::{ModelConfig, ModelMetadataResponse, ModelStatistics};
pub use crate::server::infer::{CorrelationId, SequenceFlags};
use crate::tensor::{DataType, Tensor};

/// Client-side failures, each with a one-line reason.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// The server could not be reached, or the connection broke: the run cannot go on.
    #[error("server unreachable at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The server answered this request with an error; the run goes on and counts it.
    #[error("server error: {0}")]
    Server(String),
    /// A response we could not make sense of.
    #[error("bad response: {0}")]
    Protocol(String),
    /// The request itself is wrong (shape, shm setup, ...).
    #[error("{0}")]
    Invalid(String),
    /// Requests were in flight and none was answered for [`STALL_TIMEOUT`] (or for
    /// `--request-timeout`): the server hangs.
    #[error("the server stopped answering: {0}")]
    Stalled(String),
    /// This call had no answer within `--request-timeout`; the run counts it and goes on.
    #[error("no answer within --request-timeout ({}s)", after.as_secs_f64())]
    TimedOut { after: Duration },
}

/// How long requests may be in flight with none of them answered before the run gives up on
/// the server ([`ClientError::Stalled`]). Far beyond any one execution (the `delay` model's
/// longest is 60 s), so only a server that hangs meets it.
pub const STALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// `call`, or [`ClientError::Stalled`] when it takes longer than [`STALL_TIMEOUT`]: for the
/// single calls around a load (probe, statistics), which have no other bound.
pub async fn within_stall_timeout<T>(
    what: &str,
    call: impl std::future::Future<Output = ClientResult<T>>,
) -> ClientResult<T> {
    tokio::time::timeout(STALL_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| Err(ClientError::Stalled(format!("no answer to {what} in {}s", STALL_TIMEOUT.as_secs()))))
}

impl ClientError {
    /// What kind of failure this is, for the per-row counts. Transport errors reach us as text
    /// (hyper's and h2's errors, with their io causes), so they are told apart by it.
    pub fn failure_kind(&self) -> crate::results::FailureKind {
        use crate::results::FailureKind;
        let text = match self {
            ClientError::TimedOut { .. } | ClientError::Stalled(_) => return FailureKind::Timeout,
            ClientError::Invalid(_) => return FailureKind::Other,
            ClientError::Unreachable { reason, .. } => reason.to_ascii_lowercase(),
            ClientError::Server(text) | ClientError::Protocol(text) => text.to_ascii_lowercase(),
        };
        if text.contains("refused") {
            FailureKind::Refused
        } else if text.contains("timed out") || text.contains("deadline") {
            FailureKind::Timeout
        } else if ["reset", "broken pipe", "closed", "aborted", "eof", "incomplete", "connection error"]
            .iter()
            .any(|needle| text.contains(needle))
        {
            FailureKind::Reset
        } else {
            FailureKind::Other
        }
    }

    /// True when the server is gone and further requests are pointless.
    pub fn is_fatal(&self) -> bool {
        matches!(self, ClientError::Unreachable { .. } | ClientError::Stalled(_))
    }

    /// True when the connection broke or could not be made (the server went away, perhaps to
    /// restart): a sweep may wait for the server and reconnect. A silent server is not lost.
    pub fn is_connection_lost(&self) -> bool {
        matches!(self, ClientError::Unreachable { .. })
    }
}

pub type ClientResult<T> = Result<T, ClientError>;

/// How long [`server_answers`] gives the server to answer its metadata request.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the server answers a metadata request within [`PROBE_TIMEOUT`], after a request's
/// connection was lost: a restart or a crash leaves nothing listening, a reset on the way leaves
/// the server up. Tried a few times: the first call may still meet the connection that was just
/// reset (a gRPC channel learns of it and reconnects on its own).
pub async fn server_answers<C: InferClient>(client: &C) -> bool {
    let deadline = tokio::time::Instant::now() + PROBE_TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        if let Ok(Ok(_)) = tokio::time::timeout_at(deadline, client.server_metadata()).await {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
}

/// How a network client connects (HTTP and gRPC).
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// Requests the load keeps in flight: sizes the connection pool.
    pub concurrency: usize,
    /// Extra headers sent with every request (`-H`); gRPC sends them as metadata.
    pub headers: Vec<(String, String)>,
    /// gRPC only: send requests on `ModelStreamInfer` streams (`--streaming`).
    pub streaming: bool,
    /// HTTP only: inputs as JSON `data` instead of binary (`--input-tensor-format json`).
    pub json_inputs: bool,
    /// HTTP only: ask for outputs as JSON `data` (`--output-tensor-format json`).
    pub json_outputs: bool,
    /// gRPC only: extra request parameters sent with every inference request
    /// (`--request-parameter`).
    pub request_parameters: Vec<RequestParameter>,
}

/// One `--request-parameter name:value:type`: a request-level parameter a backend may read
/// (`ModelInferRequest.parameters`), typed as perf_analyzer types it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestParameter {
    pub name: String,
    pub value: ParameterValue,
}

/// The value of a [`RequestParameter`]: perf_analyzer's `int` (an `int64_param`), `bool` and
/// `string`. In a plan file it is written as a TOML integer, boolean or string.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum ParameterValue {
    Bool(bool),
    Int(i64),
    String(String),
}

impl std::str::FromStr for RequestParameter {
    type Err = String;
    /// `name:value:type`, split on every `:` as perf_analyzer splits it (so a value holds no
    /// `:`); the type is read case-insensitively. perf_analyzer sends an `int` through
    /// `std::stoi` (which aborts on a non-number), any bool other than `true` as false, and
    /// drops an unknown type silently: those three are refused here instead.
    fn from_str(text: &str) -> Result<RequestParameter, String> {
        let parts: Vec<&str> = text.split(':').collect();
        let [name, value, kind] = parts[..] else {
            return Err("Failed to parse --request-parameter. The value does not match <name:value:type>.".into());
        };
        let bad = |why: String| format!("Failed to parse --request-parameter '{text}'. {why}");
        let value = match kind.to_ascii_lowercase().as_str() {
            "int" => ParameterValue::Int(
                value.trim().parse().map_err(|_| bad(format!("The value '{value}' is not an int.")))?,
            ),
            "bool" => match value {
                "true" => ParameterValue::Bool(true),
                "false" => ParameterValue::Bool(false),
                _ => return Err(bad(format!("The value '{value}' is not a bool (true or false)."))),
            },
            "string" => ParameterValue::String(value.to_string()),
            _ => {
                return Err(bad(format!(
                    "Unsupported type provided: '{kind}'. The available options are 'int', 'bool' or 'string'."
                )))
            }
        };
        Ok(RequestParameter { name: name.to_string(), value })
    }
}

/// `--request-parameter` values in order, a later one replacing an earlier one of the same
/// name (perf_analyzer keeps them in a map by name).
pub fn parse_request_parameters(texts: &[String]) -> Result<Vec<RequestParameter>, String> {
    let mut out: Vec<RequestParameter> = Vec::new();
    for text in texts {
        let p: RequestParameter = text.parse()?;
        out.retain(|q| q.name != p.name);
        out.push(p);
    }
    Ok(out)
}

/// `localhost:8000` or `http://localhost:8000` → `http://localhost:8000`.
pub fn base_url(url: &str) -> String {
    // A trailing '/' is kept, as perf_analyzer keeps it: the paths then begin with "//", which
    // Triton answers with 404 Not Found, so such a -u fails here as it fails there.
    let url = url.trim();
    if url.contains("://") {
        url.to_string()
    } else {
        format!("http://{url}")
    }
}

/// An error and its sources on one line (transport errors hide the cause in `source()`).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// Server metadata as the profiler needs it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerInfo {
    pub name: String,
    pub version: String,
    pub extensions: Vec<String>,
}

/// Where one input's data comes from in each request.
#[derive(Clone, Debug, PartialEq)]
pub enum InputSource {
    /// Sent inline with every request (HTTP binary extension, gRPC raw contents).
    Inline(Tensor),
    /// Already in a registered system shared-memory region.
    SystemShm { region: String, offset: u64, byte_size: u64, dtype: DataType, shape: Vec<i64> },
}

/// Where one requested output goes.
#[derive(Clone, Debug, PartialEq)]
pub enum OutputTarget {
    /// Returned in the response body.
    Inline,
    /// Written by the server into a registered region of `byte_size` bytes.
    SystemShm { region: String, offset: u64, byte_size: u64 },
}

/// Everything needed to build one inference request, independent of the transport.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestSpec {
    pub model_name: String,
    pub model_version: String,
    pub inputs: Vec<(String, InputSource)>,
    pub outputs: Vec<(String, OutputTarget)>,
    /// The model is decoupled (zero or more responses per request): streamed requests ask for
    /// Triton's empty final response and complete on the response flagged final.
    pub decoupled: bool,
}

/// Client-side timing of one completed request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RequestTiming {
    /// Building and writing the request (serialisation, headers, body).
    pub send: Duration,
    /// Reading and decoding the response.
    pub recv: Duration,
    /// From the start of send to the end of recv.
    pub total: Duration,
}

/// A decoded response: output name, dtype, shape and bytes (empty for shm outputs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InferResult {
    /// The answer: for a decoupled model, its last response that carried outputs.
    pub outputs: Vec<(String, Tensor)>,
    /// A decoupled model's streamed request: every response in arrival order (the empty final
    /// one included), with its arrival time and outputs, as perf_analyzer's profile export
    /// lists them. Empty for a request answered once. Kept only when outputs are kept.
    pub responses: Vec<(std::time::Instant, Vec<(String, Tensor)>)>,
}

/// One transport. `Prepared` is a request encoded once and sent many times, so the hot loop
/// does no per-request encoding work beyond what the wire demands.
pub trait InferClient: Send + Sync + 'static {
    type Prepared: Send + Sync + 'static;

    fn server_metadata(&self) -> impl Future<Output = ClientResult<ServerInfo>> + Send;
    fn model_metadata(
        &self,
        model: &str,
        version: &str,
    ) -> impl Future<Output = ClientResult<ModelMetadataResponse>> + Send;
    fn model_config(&self, model: &str, version: &str) -> impl Future<Output = ClientResult<ModelConfig>> + Send;
    /// Statistics of one model; an empty `model` asks for all models.
    fn statistics(&self, model: &str, version: &str)
        -> impl Future<Output = ClientResult<Vec<ModelStatistics>>> + Send;

    fn prepare(&self, spec: &RequestSpec) -> ClientResult<Self::Prepared>;
    /// Sends one request and waits for its response. `keep_outputs` asks for decoded outputs
    /// (tests, validation); the load loop passes false and only times the exchange. With a
    /// `sequence`, the request is one step of a stateful sequence and also carries
    /// `sequence_id`, `sequence_start` and `sequence_end` (as perf_analyzer sends them): only
    /// those parameters are encoded per call, the prepared body is reused as it is.
    fn infer_step(
        &self,
        request: &Self::Prepared,
        sequence: Option<&SequenceFlags>,
        keep_outputs: bool,
    ) -> impl Future<Output = (ClientResult<InferResult>, RequestTiming)> + Send;
    /// [`infer_step`](Self::infer_step) outside any sequence.
    fn infer(
        &self,
        request: &Self::Prepared,
        keep_outputs: bool,
    ) -> impl Future<Output = (ClientResult<InferResult>, RequestTiming)> + Send {
        self.infer_step(request, None, keep_outputs)
    }

    /// [`infer`](Self::infer), calling `watch(n)` as the `n`-th response (1-based) of the
    /// request arrives: for perf_analyzer's periodic concurrency, which grows the load when
    /// requests in flight have had so many responses. A streaming client calls it on arrival;
    /// any other (one response per call) calls it once the answer is in.
    fn infer_watched(
        &self,
        request: &Self::Prepared,
        keep_outputs: bool,
        watch: &(dyn Fn(usize) + Sync),
    ) -> impl Future<Output = (ClientResult<InferResult>, RequestTiming)> + Send {
        async move {
            let (result, timing) = self.infer(request, keep_outputs).await;
            if let Ok(answer) = &result {
                (1..=answer.responses.len().max(1)).for_each(watch);
            }
            (result, timing)
        }
    }

    /// Forgets every pooled connection and idle stream, so the next requests connect afresh:
    /// after the server restarted, none of them leads anywhere.
    fn drop_connections(&self) {}

    fn register_system_shm(
        &self,
        name: &str,
        key: &str,
        offset: u64,
        byte_size: u64,
    ) -> impl Future<Output = ClientResult<()>> + Send;
    /// Unregisters one region, or all with an empty name.
    fn unregister_system_shm(&self, name: &str) -> impl Future<Output = ClientResult<()>> + Send;
    /// Unregisters CUDA regions (perf_analyzer always calls this, even for system shm).
    fn unregister_cuda_shm(&self, name: &str) -> impl Future<Output = ClientResult<()>> + Send;
    /// Changes the trace settings of `model` (the trace extension): each setting's name and
    /// values, as perf_analyzer's `--trace-*` flags send them.
    fn trace_setting(
        &self,
        model: &str,
        settings: &[(String, Vec<String>)],
    ) -> impl Future<Output = ClientResult<()>> + Send;
    /// Loads (or reloads) `model` through the repository extension; `config` (Triton's config
    /// JSON) replaces its config.pbtxt when given, as in Triton's explicit model-control mode.
    /// A client without the extension refuses.
    fn repository_load(&self, model: &str, config: Option<&str>) -> impl Future<Output = ClientResult<()>> + Send {
        let _ = config;
        let reason = format!("cannot load '{model}': this client has no repository extension");
        async move { Err(ClientError::Invalid(reason)) }
    }
}

#[cfg(test)]
mod failure_kind_tests {
    use super::ClientError;
    use crate::results::FailureKind;

    #[test]
    fn failures_are_told_apart_by_kind() {
        let unreachable = |reason: &str| ClientError::Unreachable { url: "u".into(), reason: reason.into() };
        let kind = |e: ClientError| e.failure_kind();
        assert_eq!(kind(unreachable("tcp connect error: Connection refused (os error 111)")), FailureKind::Refused);
        assert_eq!(kind(unreachable("connection error: Connection reset by peer (os error 104)")), FailureKind::Reset);
        assert_eq!(kind(unreachable("connection closed before message completed")), FailureKind::Reset);
        assert_eq!(kind(ClientError::TimedOut { after: std::time::Duration::from_secs(1) }), FailureKind::Timeout);
        assert_eq!(kind(ClientError::Stalled("no answer".into())), FailureKind::Timeout);
        assert_eq!(kind(ClientError::Server("HTTP 400: unknown model".into())), FailureKind::Other);
        assert_eq!(kind(ClientError::Invalid("reset the shape".into())), FailureKind::Other, "our own mistake");
    }
}
