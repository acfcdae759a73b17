//! KServe v2 over HTTP/1.1, encoded the way perf_analyzer's C++ client encodes it: a JSON
//! inference header with `"id":""`, every input as binary data (`binary_data_size`) or shared
//! memory, every output listed with `binary_data: true` or shared-memory parameters, the raw
//! tensors appended after the JSON, and `Inference-Header-Content-Length` giving its length.
//!
//! Inference requests go straight through hyper on a pool of keep-alive connections (one per
//! request in flight), with the URI, headers and body built once per data step: the hot loop
//! parses, formats and allocates next to nothing. The other calls use reqwest.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH, HOST};
use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};

use super::tls::TlsOptions;
use super::{
    base_url, error_chain, ClientError, ClientResult, ConnectOptions, CorrelationId, InferClient, InferResult,
    InputSource, OutputTarget, RequestSpec, RequestTiming, SequenceFlags, ServerInfo,
};
use crate::proto::inference::{ModelConfig, ModelMetadataResponse, ModelStatistics, ModelStatisticsResponse};
use crate::tensor::json::{write_with_data, DataError, TensorJson};
use crate::tensor::{DataType, Tensor};

/// `Inference-Header-Content-Length` (header names are case-insensitive; reqwest lower-cases).
const HEADER_LENGTH: &str = "inference-header-content-length";

/// An HTTP client for one server, with a keep-alive pool sized for the load's concurrency.
/// Responses are not compressed (no `Accept-Encoding`), as perf_analyzer's default.
pub struct HttpClient {
    base: String,
    http: reqwest::Client,
    /// `host:port` to connect inference connections to.
    address: String,
    /// `Host` of every inference request.
    host: HeaderValue,
    /// `-H` headers, sent with every request.
    headers: HeaderMap,
    /// Idle inference connections, reused last-in first-out.
    idle: Mutex<Vec<Connection>>,
    /// `--input-tensor-format json` / `--output-tensor-format json`.
    json_inputs: bool,
    json_outputs: bool,
    /// For `https://`: the TLS connector and the name the certificate must carry.
    tls: Option<(tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>)>,
}

/// One keep-alive HTTP/1.1 connection for inference requests.
type Connection = SendRequest<TimedBody>;

/// A request encoded once: the path, every header and the full body (JSON header + binary
/// tensors). Each send clones `Bytes` handles, never the data.
pub struct HttpRequest {
    path: hyper::Uri,
    headers: HeaderMap,
    body: Bytes,
    /// The length of the JSON header at the start of `body` (`None`: the body is all JSON).
    header_length: Option<usize>,
}

/// The opening of a JSON inference header that carries a sequence's parameters, as
/// perf_analyzer's client writes them; the prepared header follows without its own `{`.
fn sequence_prefix(sequence: &SequenceFlags) -> Bytes {
    let id = match &sequence.id {
        CorrelationId::Number(n) => n.to_string(),
        CorrelationId::Text(t) => serde_json::Value::String(t.clone()).to_string(),
    };
    Bytes::from(format!(
        "{{\"parameters\":{{\"sequence_id\":{id},\"sequence_start\":{},\"sequence_end\":{}}},",
        sequence.start, sequence.end
    ))
}

impl HttpClient {
    pub fn new(url: &str, options: &ConnectOptions) -> ClientResult<Self> {
        Self::with_tls(url, options, &TlsOptions::default())
    }

    /// A client whose `https://` URLs use `tls.https` (perf_analyzer's `--ssl-https-*`).
    pub fn with_tls(url: &str, options: &ConnectOptions, tls: &TlsOptions) -> ClientResult<Self> {
        crate::proto::install_crypto_provider();
        let base = base_url(url);
        let parsed = Url::parse(&base).map_err(|e| ClientError::Invalid(format!("bad server URL '{url}': {e}")))?;
        let tls_config = tls.https.client_config(parsed.scheme() == "https")?;
        let mut headers = HeaderMap::new();
        for (name, value) in &options.headers {
            let bad = || ClientError::Invalid(format!("bad header '{name}: {value}'"));
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad())?;
            let value = HeaderValue::from_str(value).map_err(|_| bad())?;
            headers.append(name, value);
        }
        let http = reqwest::Client::builder()
            .no_gzip()
            .no_deflate()
            .no_proxy()
            // Inference calls are never redirected (perf_analyzer does not follow redirects
            // either), and reqwest's redirect policy re-parses the URL of every request.
            .redirect(reqwest::redirect::Policy::none())
            .http1_only()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(options.concurrency.max(1))
            .connect_timeout(Duration::from_secs(10))
            .default_headers(headers.clone())
            .tls_backend_preconfigured(tls_config.clone())
            .build()
            .map_err(|e| ClientError::Invalid(format!("cannot build the HTTP client: {}", error_chain(&e))))?;
        let host = parsed.host_str().unwrap_or("localhost");
        let tls = match parsed.scheme() {
            "http" => None,
            "https" => {
                // An IPv6 literal keeps its brackets in the URL but not in a server name.
                let name = rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                    .map_err(|e| ClientError::Invalid(format!("bad server URL '{url}': {e}")))?;
                Some((tokio_rustls::TlsConnector::from(Arc::new(tls_config)), name))
            }
            other => {
                return Err(ClientError::Invalid(format!(
                    "bad server URL '{url}': scheme '{other}' (http:// or https://)"
                )))
            }
        };
        let address = format!("{host}:{}", parsed.port_or_known_default().unwrap_or(80));
        let host = match parsed.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        let host = HeaderValue::from_str(&host).map_err(|_| ClientError::Invalid(format!("bad server URL '{url}'")))?;
        Ok(HttpClient {
            base,
            http,
            address,
            host,
            headers,
            idle: Mutex::new(Vec::new()),
            tls,
            json_inputs: options.json_inputs,
            json_outputs: options.json_outputs,
        })
    }

    /// An idle inference connection, or a new one. The flag says whether it was reused.
    async fn connection(&self) -> ClientResult<(Connection, bool)> {
        loop {
            let idle = self.idle.lock().pop();
            match idle {
                Some(c) if c.is_closed() => continue,
                Some(c) => return Ok((c, true)),
                None => return Ok((self.connect().await?, false)),
            }
        }
    }

    async fn connect(&self) -> ClientResult<Connection> {
        let unreachable =
            |e: &dyn std::error::Error| ClientError::Unreachable { url: self.base.clone(), reason: error_chain(e) };
        let stream = tokio::time::timeout(Duration::from_secs(10), tokio::net::TcpStream::connect(&self.address))
            .await
            .map_err(|e| unreachable(&e))?
            .map_err(|e| unreachable(&e))?;
        stream.set_nodelay(true).map_err(|e| unreachable(&e))?;
        let sender = match &self.tls {
            None => handshake(stream).await,
            Some((connector, name)) => {
                handshake(connector.connect(name.clone(), stream).await.map_err(|e| unreachable(&e))?).await
            }
        };
        sender.map_err(|e| unreachable(&e))
    }

    /// Sends an inference request and returns the response head and the connection it used. A
    /// reused connection that turns out closed before the request left is replaced once.
    async fn send_infer(
        &self,
        request: &HttpRequest,
        sequence: Option<&SequenceFlags>,
        taken_at: &Arc<OnceLock<Instant>>,
    ) -> ClientResult<(hyper::Response<Incoming>, Connection)> {
        let (mut connection, mut reused) = self.connection().await?;
        let mut headers = request.headers.clone();
        let body = match sequence {
            None => TimedBody { head: None, data: Some(request.body.clone()), taken_at: taken_at.clone() },
            Some(sequence) => {
                // `{"parameters":{...},` replaces the header's `{`: only the head is new bytes.
                let head = sequence_prefix(sequence);
                let grown = head.len() - 1;
                headers.insert(CONTENT_LENGTH, HeaderValue::from(request.body.len() + grown));
                if let Some(length) = request.header_length {
                    headers.insert(HeaderName::from_static(HEADER_LENGTH), HeaderValue::from(length + grown));
                }
                TimedBody { head: Some(head), data: Some(request.body.slice(1..)), taken_at: taken_at.clone() }
            }
        };
        let mut message = hyper::Request::post(request.path.clone()).body(body).expect("a prepared request is valid");
        *message.headers_mut() = headers;
        loop {
            match connection.try_send_request(message).await {
                Ok(response) => return Ok((response, connection)),
                Err(mut e) => match e.take_message() {
                    Some(unsent) if reused => {
                        message = unsent;
                        connection = self.connect().await?;
                        reused = false;
                    }
                    _ => {
                        return Err(ClientError::Unreachable { url: self.base.clone(), reason: error_chain(e.error()) })
                    }
                },
            }
        }
    }

    /// `{base}/v2/models/{model}[/versions/{version}]` followed by `tail` segments; the model name
    /// is percent-encoded as one path segment.
    fn model_url(&self, model: &str, version: &str, tail: &[&str]) -> Url {
        let mut url = Url::parse(&self.base).expect("checked in new");
        {
            let mut path = url.path_segments_mut().expect("http URLs have a path");
            path.pop_if_empty().extend(["v2", "models", model]);
            if !version.is_empty() {
                path.extend(["versions", version]);
            }
            path.extend(tail);
        }
        self.keep_trailing_slash(url)
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = Url::parse(&self.base).expect("checked in new");
        url.path_segments_mut().expect("http URLs have a path").pop_if_empty().extend(segments);
        self.keep_trailing_slash(url)
    }

    /// A base that ends in '/' keeps it: its paths begin with "//", as perf_analyzer's do
    /// (Triton answers them 404 Not Found).
    fn keep_trailing_slash(&self, mut url: Url) -> Url {
        if self.base.ends_with('/') {
            let base = Url::parse(&self.base).map_or(0, |b| b.path().trim_end_matches('/').len());
            let (prefix, rest) = url.path().split_at(base);
            let path = format!("{prefix}/{rest}");
            url.set_path(&path);
        }
        url
    }

    fn unreachable(&self, e: &reqwest::Error) -> ClientError {
        ClientError::Unreachable { url: self.base.clone(), reason: error_chain(e) }
    }

    /// Sends a request and returns the body of a 200 answer; any other status becomes the
    /// server's `{"error": ...}` message.
    async fn call(&self, request: reqwest::RequestBuilder) -> ClientResult<Bytes> {
        let response = request.send().await.map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| self.unreachable(&e))?;
        if status != StatusCode::OK {
            return Err(error_from_body(status, &body));
        }
        Ok(body)
    }

    async fn get_proto<T: prost::Message + Default>(&self, url: Url, message: &str) -> ClientResult<T> {
        let body = self.call(self.http.get(url)).await?;
        proto_from_json(message, &body)
    }

    async fn post_empty(&self, url: Url) -> ClientResult<()> {
        self.call(self.http.post(url).header(CONTENT_LENGTH, 0)).await.map(|_| ())
    }
}

/// An HTTP/1.1 connection over `io`, driven by its own task, which ends when the server closes
/// it or the sender is dropped.
async fn handshake<I>(io: I) -> Result<Connection, hyper::Error>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// The message of a KServe `{"error": ...}` body, or the status and raw body otherwise.
fn error_from_body(status: StatusCode, body: &[u8]) -> ClientError {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: String,
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => ClientError::Server(e.error),
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            ClientError::Server(if text.is_empty() {
                format!("HTTP {status}")
            } else {
                format!("HTTP {status}: {text}")
            })
        }
    }
}

/// Parses a protobuf message from its JSON form (field names as in the proto), ignoring fields
/// this build does not know, so newer servers still parse.
fn proto_from_json<T: prost::Message + Default>(message: &str, body: &[u8]) -> ClientResult<T> {
    let desc = crate::proto::descriptor_pool()
        .get_message_by_name(message)
        .unwrap_or_else(|| panic!("{message} is in the compiled descriptor set"));
    let options = prost_reflect::DeserializeOptions::new().deny_unknown_fields(false);
    let mut de = serde_json::Deserializer::from_slice(body);
    let dynamic = prost_reflect::DynamicMessage::deserialize_with_options(desc, &mut de, &options)
        .map_err(|e| ClientError::Protocol(format!("{message} JSON: {e}")))?;
    dynamic.transcode_to().map_err(|e| ClientError::Protocol(format!("{message} JSON: {e}")))
}

#[derive(Serialize)]
struct InputHeader<'a> {
    name: &'a str,
    shape: &'a [i64],
    datatype: &'static str,
    parameters: TensorParameters<'a>,
}

#[derive(Serialize)]
struct OutputHeader<'a> {
    name: &'a str,
    parameters: TensorParameters<'a>,
}

#[derive(Default, Serialize)]
struct TensorParameters<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    binary_data_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    binary_data: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_memory_region: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_memory_byte_size: Option<u64>,
    /// Sent only when non-zero, as the Triton clients do.
    #[serde(skip_serializing_if = "Option::is_none")]
    shared_memory_offset: Option<u64>,
}

fn shm_parameters(region: &str, offset: u64, byte_size: u64) -> TensorParameters<'_> {
    TensorParameters {
        shared_memory_region: Some(region),
        shared_memory_byte_size: Some(byte_size),
        shared_memory_offset: (offset != 0).then_some(offset),
        ..Default::default()
    }
}

/// Encodes a request body: the JSON header, then each inline input's bytes in input order
/// (none with `json_inputs`: the values are in the header, written straight from the tensor's
/// bytes). The header length is `None` when the body is all JSON, which perf_analyzer then sends
/// without `Inference-Header-Content-Length`.
fn encode_request(spec: &RequestSpec, json_inputs: bool, json_outputs: bool) -> ClientResult<(Bytes, Option<usize>)> {
    let json_bytes: usize = match json_inputs {
        true => spec.inputs.iter().map(|(_, s)| if let InputSource::Inline(t) = s { t.data.len() } else { 0 }).sum(),
        false => 0,
    };
    let mut body = Vec::with_capacity(256 + json_bytes * 5);
    body.extend_from_slice(b"{\"id\":\"\",\"inputs\":[");
    for (i, (name, source)) in spec.inputs.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        let written = match source {
            InputSource::Inline(t) if json_inputs => {
                let head = InputHeader {
                    name,
                    shape: &t.shape,
                    datatype: t.dtype.as_str(),
                    parameters: TensorParameters::default(),
                };
                write_with_data(&head, t.dtype, &t.data, &mut body)
                    .map_err(|e| ClientError::Invalid(format!("input '{name}' cannot be sent as JSON: {e}")))?;
                continue;
            }
            InputSource::Inline(t) => serde_json::to_writer(
                &mut body,
                &InputHeader {
                    name,
                    shape: &t.shape,
                    datatype: t.dtype.as_str(),
                    parameters: TensorParameters { binary_data_size: Some(t.data.len() as u64), ..Default::default() },
                },
            ),
            InputSource::SystemShm { region, offset, byte_size, dtype, shape } => serde_json::to_writer(
                &mut body,
                &InputHeader {
                    name,
                    shape,
                    datatype: dtype.as_str(),
                    parameters: shm_parameters(region, *offset, *byte_size),
                },
            ),
        };
        written.map_err(|e| ClientError::Invalid(format!("cannot encode the request: {e}")))?;
    }
    let outputs: Vec<OutputHeader> = spec
        .outputs
        .iter()
        .map(|(name, target)| OutputHeader {
            name,
            parameters: match target {
                OutputTarget::Inline => TensorParameters { binary_data: Some(!json_outputs), ..Default::default() },
                OutputTarget::SystemShm { region, offset, byte_size } => shm_parameters(region, *offset, *byte_size),
            },
        })
        .collect();
    body.extend_from_slice(b"],\"outputs\":");
    serde_json::to_writer(&mut body, &outputs)
        .map_err(|e| ClientError::Invalid(format!("cannot encode the request: {e}")))?;
    body.push(b'}');
    let header_length = body.len();
    if json_inputs {
        return Ok((Bytes::from(body), None));
    }
    for (_, source) in &spec.inputs {
        if let InputSource::Inline(t) = source {
            body.extend_from_slice(&t.data);
        }
    }
    Ok((Bytes::from(body), Some(header_length)))
}

#[derive(Deserialize)]
struct ResponseHeader {
    #[serde(default)]
    outputs: Vec<TensorJson>,
}

/// Decodes a 200 infer response: the JSON header (its length from the header, else the whole
/// body), then binary outputs as consecutive slices in `outputs` order. JSON `data` outputs are
/// re-encoded in binary layout; shared-memory outputs come back with empty data.
fn decode_response(body: Bytes, header_length: Option<usize>, keep_outputs: bool) -> ClientResult<InferResult> {
    let json_end = header_length.unwrap_or(body.len());
    if json_end > body.len() {
        return Err(ClientError::Protocol(format!(
            "inference header length {json_end} exceeds the {}-byte body",
            body.len()
        )));
    }
    // A 200 answer the caller does not keep is not parsed: the load loop only times the
    // exchange, and the run's first request is checked in full before the load starts.
    if !keep_outputs {
        return Ok(InferResult::default());
    }
    let header: ResponseHeader = serde_json::from_slice(&body[..json_end])
        .map_err(|e| ClientError::Protocol(format!("infer response JSON: {e}")))?;
    let mut pos = json_end;
    let mut outputs = Vec::with_capacity(header.outputs.len());
    for o in header.outputs {
        let dtype =
            DataType::parse(&o.datatype).or_else(|| (o.datatype == "STRING").then_some(DataType::Bytes)).ok_or_else(
                || ClientError::Protocol(format!("output '{}' has unknown datatype '{}'", o.name, o.datatype)),
            )?;
        let binary_size = o.parameters.as_ref().and_then(|p| p.get("binary_data_size")).and_then(|v| v.as_u64());
        let data = match binary_size {
            Some(size) => {
                let end = pos.checked_add(size as usize).filter(|&e| e <= body.len()).ok_or_else(|| {
                    ClientError::Protocol(format!("output '{}' declares {size} bytes past the end of the body", o.name))
                })?;
                let slice = body.slice(pos..end);
                pos = end;
                slice
            }
            None => match o.data {
                Some(values) => values.into_bytes(dtype, &o.shape).map_err(|e| output_data_error(&o.name, e))?.into(),
                None => Bytes::new(),
            },
        };
        outputs.push((o.name, Tensor { dtype, shape: o.shape, data }));
    }
    Ok(InferResult { outputs, ..Default::default() })
}

/// Why an output's JSON `data` is not a tensor of its datatype and shape.
fn output_data_error(name: &str, e: DataError) -> ClientError {
    ClientError::Protocol(match e {
        DataError::BadShape => format!("output '{name}' has an invalid shape"),
        DataError::Count { found } => format!("output '{name}' data: {found} elements do not fill its shape"),
        DataError::Half => format!("output '{name}' data: FP16 and BF16 cannot travel as JSON"),
        DataError::Invalid { index, text } => format!("output '{name}' data: element {index} ({text}) is not valid"),
    })
}

/// A full request body that notes when hyper takes it to write on the connection.
struct TimedBody {
    /// A sequence step's new header opening, written before `data`.
    head: Option<Bytes>,
    data: Option<Bytes>,
    taken_at: Arc<OnceLock<Instant>>,
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(head) = self.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        let frame = self.data.take().map(|d| Ok(Frame::data(d)));
        if frame.is_some() {
            let _ = self.taken_at.set(Instant::now());
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none() && self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let len = |b: &Option<Bytes>| b.as_ref().map_or(0, |d| d.len() as u64);
        SizeHint::with_exact(len(&self.head) + len(&self.data))
    }
}

impl InferClient for HttpClient {
    type Prepared = HttpRequest;

    async fn server_metadata(&self) -> ClientResult<ServerInfo> {
        #[derive(Deserialize)]
        struct Metadata {
            #[serde(default)]
            name: String,
            #[serde(default)]
            version: String,
            #[serde(default)]
            extensions: Vec<String>,
        }
        let body = self.call(self.http.get(self.url(&["v2"]))).await?;
        let m: Metadata =
            serde_json::from_slice(&body).map_err(|e| ClientError::Protocol(format!("server metadata JSON: {e}")))?;
        Ok(ServerInfo { name: m.name, version: m.version, extensions: m.extensions })
    }

    async fn model_metadata(&self, model: &str, version: &str) -> ClientResult<ModelMetadataResponse> {
        self.get_proto(self.model_url(model, version, &[]), "inference.ModelMetadataResponse").await
    }

    async fn model_config(&self, model: &str, version: &str) -> ClientResult<ModelConfig> {
        self.get_proto(self.model_url(model, version, &["config"]), "inference.ModelConfig").await
    }

    async fn statistics(&self, model: &str, version: &str) -> ClientResult<Vec<ModelStatistics>> {
        let url = if model.is_empty() {
            self.url(&["v2", "models", "stats"])
        } else {
            self.model_url(model, version, &["stats"])
        };
        let stats: ModelStatisticsResponse = self.get_proto(url, "inference.ModelStatisticsResponse").await?;
        Ok(stats.model_stats)
    }

    fn prepare(&self, spec: &RequestSpec) -> ClientResult<HttpRequest> {
        let (body, header_length) = encode_request(spec, self.json_inputs, self.json_outputs)?;
        let url = self.model_url(&spec.model_name, &spec.model_version, &["infer"]);
        let path = hyper::Uri::try_from(url.path())
            .map_err(|e| ClientError::Invalid(format!("bad request path '{}': {e}", url.path())))?;
        let mut headers = HeaderMap::with_capacity(3 + self.headers.len());
        headers.insert(HOST, self.host.clone());
        headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
        if let Some(length) = header_length {
            headers.insert(HeaderName::from_static(HEADER_LENGTH), HeaderValue::from(length));
        }
        for (name, value) in &self.headers {
            headers.append(name, value.clone());
        }
        Ok(HttpRequest { path, headers, body, header_length })
    }

    /// Timing, measured on our side of the socket:
    /// - `send`: from the call until hyper takes the complete body to write it on a pooled
    ///   connection (taking or opening a connection, writing the head);
    /// - `recv`: from the moment the response headers are parsed until the body is read and the
    ///   response decoded (JSON header parsed, binary outputs sliced). hyper does not expose
    ///   the first response byte separately from the parsed headers, so server time ends there;
    /// - `total`: from the call to the end of `recv`.
    async fn infer_step(
        &self,
        request: &HttpRequest,
        sequence: Option<&SequenceFlags>,
        keep_outputs: bool,
    ) -> (ClientResult<InferResult>, RequestTiming) {
        self.exchange(request, sequence, keep_outputs).await
    }

    async fn register_system_shm(&self, name: &str, key: &str, offset: u64, byte_size: u64) -> ClientResult<()> {
        let body = serde_json::json!({ "key": key, "offset": offset, "byte_size": byte_size }).to_string();
        let url = self.url(&["v2", "systemsharedmemory", "region", name, "register"]);
        self.call(self.http.post(url).body(body)).await.map(|_| ())
    }

    async fn unregister_system_shm(&self, name: &str) -> ClientResult<()> {
        let url = if name.is_empty() {
            self.url(&["v2", "systemsharedmemory", "unregister"])
        } else {
            self.url(&["v2", "systemsharedmemory", "region", name, "unregister"])
        };
        self.post_empty(url).await
    }

    async fn unregister_cuda_shm(&self, name: &str) -> ClientResult<()> {
        let url = if name.is_empty() {
            self.url(&["v2", "cudasharedmemory", "unregister"])
        } else {
            self.url(&["v2", "cudasharedmemory", "region", name, "unregister"])
        };
        self.post_empty(url).await
    }

    async fn repository_load(&self, model: &str, config: Option<&str>) -> ClientResult<()> {
        let url = self.url(&["v2", "repository", "models", model, "load"]);
        match config {
            Some(json) => {
                let body = serde_json::json!({ "parameters": { "config": json } }).to_string();
                self.call(self.http.post(url).body(body)).await.map(|_| ())
            }
            None => self.post_empty(url).await,
        }
    }

    async fn trace_setting(&self, model: &str, settings: &[(String, Vec<String>)]) -> ClientResult<()> {
        // Triton takes trace_level as a list and the other settings as single strings.
        let body: serde_json::Map<String, serde_json::Value> = settings
            .iter()
            .map(|(key, values)| {
                let value = match (key.as_str(), values.as_slice()) {
                    ("trace_level", values) => serde_json::json!(values),
                    (_, [one]) => serde_json::json!(one),
                    (_, values) => serde_json::json!(values),
                };
                (key.clone(), value)
            })
            .collect();
        let url = self.model_url(model, "", &["trace", "setting"]);
        let request = self.http.post(url).header(reqwest::header::CONTENT_TYPE, "application/json");
        self.call(request.body(serde_json::Value::Object(body).to_string())).await.map(|_| ())
    }
}

impl HttpClient {
    /// One inference exchange; see [`InferClient::infer_step`] for what the timing covers.
    async fn exchange(
        &self,
        request: &HttpRequest,
        sequence: Option<&SequenceFlags>,
        keep_outputs: bool,
    ) -> (ClientResult<InferResult>, RequestTiming) {
        let start = Instant::now();
        let taken_at = Arc::new(OnceLock::new());
        let sent = self.send_infer(request, sequence, &taken_at).await;

        let headers_at = Instant::now();
        let result = match sent {
            Err(e) => Err(e),
            Ok((response, connection)) => {
                let status = response.status();
                let header_length = response
                    .headers()
                    .get(HEADER_LENGTH)
                    .map(|v| v.to_str().ok().and_then(|s| s.trim().parse::<usize>().ok()));
                match response.into_body().collect().await {
                    Err(e) => Err(ClientError::Unreachable { url: self.base.clone(), reason: error_chain(&e) }),
                    Ok(body) => {
                        // The whole answer is read: the connection can take the next request.
                        self.idle.lock().push(connection);
                        let body = body.to_bytes();
                        match header_length {
                            _ if status != StatusCode::OK => Err(error_from_body(status, &body)),
                            Some(None) => Err(ClientError::Protocol("bad Inference-Header-Content-Length".into())),
                            Some(Some(n)) => decode_response(body, Some(n), keep_outputs),
                            None => decode_response(body, None, keep_outputs),
                        }
                    }
                }
            }
        };
        let end = Instant::now();
        let send_end = taken_at.get().copied().unwrap_or(headers_at).min(headers_at);
        let timing = RequestTiming { send: send_end - start, recv: end - headers_at, total: end - start };
        (result, timing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RequestSpec {
        RequestSpec {
            model_name: "my model".into(),
            model_version: "".into(),
            inputs: vec![
                ("A".into(), InputSource::Inline(Tensor::from_f32(vec![1, 2], &[1.0, 2.0]))),
                (
                    "B".into(),
                    InputSource::SystemShm {
                        region: "B_0_0".into(),
                        offset: 0,
                        byte_size: 8,
                        dtype: DataType::Int32,
                        shape: vec![2],
                    },
                ),
            ],
            outputs: vec![
                ("X".into(), OutputTarget::Inline),
                ("Y".into(), OutputTarget::SystemShm { region: "Y".into(), offset: 16, byte_size: 64 }),
            ],
            decoupled: false,
        }
    }

    #[test]
    fn request_encoding_matches_perf_analyzer() {
        let (body, n) = encode_request(&spec(), false, false).unwrap();
        let n = n.expect("a binary body has a header length");
        let header: serde_json::Value = serde_json::from_slice(&body[..n]).unwrap();
        assert_eq!(header["id"], "");
        assert_eq!(header["inputs"][0]["parameters"], serde_json::json!({"binary_data_size": 8}));
        assert_eq!(header["inputs"][0]["shape"], serde_json::json!([1, 2]));
        assert_eq!(
            header["inputs"][1]["parameters"],
            serde_json::json!({"shared_memory_region": "B_0_0", "shared_memory_byte_size": 8})
        );
        assert_eq!(header["outputs"][0]["parameters"], serde_json::json!({"binary_data": true}));
        assert_eq!(header["outputs"][1]["parameters"]["shared_memory_offset"], 16);
        assert_eq!(&body[n..], &Tensor::from_f32(vec![2], &[1.0, 2.0]).data[..]);
    }

    #[test]
    fn a_sequence_step_opens_the_header_with_its_parameters() {
        let (body, n) = encode_request(&spec(), false, false).unwrap();
        let n = n.unwrap();
        let flags = SequenceFlags { id: CorrelationId::Number(42), start: true, end: false };
        let head = sequence_prefix(&flags);
        // The body sent: the new head, then the prepared body without its `{`.
        let mut sent = head.to_vec();
        sent.extend_from_slice(&body[1..]);
        let length = n + head.len() - 1;
        let header: serde_json::Value = serde_json::from_slice(&sent[..length]).unwrap();
        assert_eq!(
            header["parameters"],
            serde_json::json!({"sequence_id": 42, "sequence_start": true, "sequence_end": false})
        );
        assert_eq!(header["inputs"][0]["parameters"], serde_json::json!({"binary_data_size": 8}));
        assert_eq!(&sent[length..], &body[n..]);
        let text = SequenceFlags { id: CorrelationId::Text("a\"b".into()), start: false, end: true };
        let head = sequence_prefix(&text);
        let mut sent = head.to_vec();
        sent.extend_from_slice(&body[1..n]);
        let header: serde_json::Value = serde_json::from_slice(&sent).unwrap();
        assert_eq!(header["parameters"]["sequence_id"], "a\"b");
        assert_eq!(header["parameters"]["sequence_end"], true);
    }

    #[test]
    fn json_tensor_formats_put_values_in_the_header() {
        let (body, n) = encode_request(&spec(), true, true).unwrap();
        assert_eq!(n, None, "an all-JSON body has no header length");
        let header: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(header["inputs"][0]["data"], serde_json::json!([1.0, 2.0]));
        assert_eq!(header["inputs"][0]["parameters"], serde_json::json!({}));
        assert!(header["inputs"][1]["data"].is_null(), "shared-memory inputs stay in their region");
        assert_eq!(header["outputs"][0]["parameters"], serde_json::json!({"binary_data": false}));
    }

    #[test]
    fn urls_encode_the_model_name() {
        let c = HttpClient::new("localhost:1", &ConnectOptions::default()).unwrap();
        assert_eq!(
            c.model_url("my model", "2", &["infer"]).as_str(),
            "http://localhost:1/v2/models/my%20model/versions/2/infer"
        );
        assert_eq!(c.url(&["v2", "models", "stats"]).as_str(), "http://localhost:1/v2/models/stats");
        let prefixed = HttpClient::new("http://localhost:1/triton", &ConnectOptions::default()).unwrap();
        assert_eq!(prefixed.url(&["v2", "health", "ready"]).as_str(), "http://localhost:1/triton/v2/health/ready");
        // A trailing '/' stays, as in perf_analyzer's URLs.
        let slash = HttpClient::new("localhost:1/", &ConnectOptions::default()).unwrap();
        assert_eq!(slash.url(&["v2", "models", "stats"]).as_str(), "http://localhost:1//v2/models/stats");
        let slash = HttpClient::new("localhost:1/triton/", &ConnectOptions::default()).unwrap();
        assert_eq!(slash.model_url("m", "", &["ready"]).as_str(), "http://localhost:1/triton//v2/models/m/ready");
    }

    #[test]
    fn response_decoding_binary_json_and_errors() {
        let json = br#"{"model_name":"m","model_version":"1","outputs":[{"name":"X","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}},{"name":"Y","datatype":"FP32","shape":[1],"data":[1.5]},{"name":"Z","datatype":"FP32","shape":[1]}]}"#;
        let mut body = json.to_vec();
        body.extend([1, 0, 0, 0, 2, 0, 0, 0]);
        let r = decode_response(Bytes::from(body.clone()), Some(json.len()), true).unwrap();
        assert_eq!(r.outputs[0].1.to_i32(), vec![1, 2]);
        assert_eq!(r.outputs[1].1.to_f32(), vec![1.5]);
        assert!(r.outputs[2].1.data.is_empty());
        assert!(decode_response(Bytes::from(body), Some(json.len() + 9), true).is_err());
        // Binary data announced but missing from the body.
        assert!(decode_response(Bytes::from_static(json), None, true).is_err());
        // No header length: the whole body is JSON.
        let plain = br#"{"outputs":[{"name":"Y","datatype":"FP32","shape":[1],"data":[2.5]}]}"#;
        assert_eq!(decode_response(Bytes::from_static(plain), None, true).unwrap().outputs[0].1.to_f32(), vec![2.5]);
        // Not kept: not parsed at all, only the header length is checked.
        assert!(decode_response(Bytes::from_static(b"not json"), None, false).unwrap().outputs.is_empty());
        assert!(decode_response(Bytes::from_static(plain), Some(plain.len() + 1), false).is_err());
        let e = error_from_body(StatusCode::NOT_FOUND, br#"{"error":"Request for unknown model: 'x' is not found"}"#);
        assert!(matches!(e, ClientError::Server(ref m) if m.starts_with("Request for unknown model")));
        assert!(error_from_body(StatusCode::BAD_GATEWAY, b"").to_string().contains("502"));
    }
}
