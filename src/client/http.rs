//! KServe v2 over HTTP/1.1, encoded the way perf_analyzer's C++ client encodes it: a JSON
//! inference header with `"id":""`, every input as binary data (`binary_data_size`) or shared
//! memory, every output listed with `binary_data: true` or shared-memory parameters, the raw
//! tensors appended after the JSON, and `Inference-Header-Content-Length` giving its length.
//!
//! Inference requests go out on a pool of keep-alive connections (one per request in flight),
//! each request's head and body built once per data step and written as they are
//! ([`h1`]): the hot loop parses, formats and allocates next to nothing. The other calls use
//! reqwest.

use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use parking_lot::Mutex;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{StatusCode, Url};
use serde::Deserialize;

use super::connect::{Dialer, Wire, CONNECT_TIMEOUT};
use super::tls::TlsOptions;
use super::{
    base_url, error_chain, ClientError, ClientResult, ConnectOptions, InferClient, InferResult, RequestSpec,
    RequestTiming, SequenceFlags, ServerInfo,
};
use crate::proto::inference::{ModelConfig, ModelMetadataResponse, ModelStatistics, ModelStatisticsResponse};
use wire::{decode_response, encode_request, error_from_body, sequence_prefix};

/// One exchange on a keep-alive HTTP/1.1 connection.
mod h1;
/// The request and answer bodies.
mod wire;

use h1::Connection;

/// An HTTP client for one server, with a keep-alive pool sized for the load's concurrency.
/// Responses are not compressed (no `Accept-Encoding`), as perf_analyzer's default.
pub struct HttpClient {
    base: String,
    http: reqwest::Client,
    /// Opens the inference connections.
    dialer: Dialer,
    /// `Host` of every inference request.
    host: String,
    /// `-H` headers, sent with every request.
    headers: HeaderMap,
    /// Idle inference connections, reused last-in first-out.
    idle: Mutex<Vec<Connection>>,
    /// `--input-tensor-format json` / `--output-tensor-format json`.
    json_inputs: bool,
    json_outputs: bool,
}

/// A request encoded once: its head (request line and every header) and the full body (JSON
/// header + binary tensors). Each send clones `Bytes` handles, never the data.
pub struct HttpRequest {
    head: Bytes,
    /// The head without its length headers and closing blank line: a sequence step, whose body
    /// grows by its parameters, writes its own lengths after it.
    head_start: Bytes,
    body: Bytes,
    /// The length of the JSON header at the start of `body` (`None`: the body is all JSON).
    header_length: Option<usize>,
}

impl HttpRequest {
    /// The head of a sequence step, its body's new `opening` after it: the body is the
    /// prepared one with `opening` in place of its first byte (the JSON header's `{`).
    fn head_opening(&self, opening: &[u8]) -> Bytes {
        let grown = opening.len() - 1;
        let mut head = BytesMut::from(&self.head_start[..]);
        length_headers(&mut head, self.body.len() + grown, self.header_length.map(|n| n + grown));
        head.extend_from_slice(opening);
        head.freeze()
    }
}

/// `Inference-Header-Content-Length` (when the body has binary data after its JSON),
/// `Content-Length`, and the blank line that ends the head.
fn length_headers(head: &mut BytesMut, body: usize, header_length: Option<usize>) {
    let mut number = itoa::Buffer::new();
    if let Some(n) = header_length {
        head.extend_from_slice(b"inference-header-content-length: ");
        head.extend_from_slice(number.format(n).as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"content-length: ");
    head.extend_from_slice(number.format(body).as_bytes());
    head.extend_from_slice(b"\r\n\r\n");
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
            .connect_timeout(CONNECT_TIMEOUT)
            .default_headers(headers.clone())
            .tls_backend_preconfigured(tls_config.clone())
            .build()
            .map_err(|e| ClientError::Invalid(format!("cannot build the HTTP client: {}", error_chain(&e))))?;
        let host = parsed.host_str().unwrap_or("localhost");
        let tls = match parsed.scheme() {
            "http" => None,
            "https" => Some(tls_config),
            other => {
                return Err(ClientError::Invalid(format!(
                    "bad server URL '{url}': scheme '{other}' (http:// or https://)"
                )))
            }
        };
        let dialer = Dialer::new(url, host, parsed.port_or_known_default().unwrap_or(80), tls, Wire::Http)?;
        let host = match parsed.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        if host.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err(ClientError::Invalid(format!("bad server URL '{url}'")));
        }
        Ok(HttpClient {
            base,
            http,
            dialer,
            host,
            headers,
            idle: Mutex::new(Vec::new()),
            json_inputs: options.json_inputs,
            json_outputs: options.json_outputs,
        })
    }

    /// An idle inference connection, or a new one. The flag says whether it was reused.
    async fn connection(&self) -> ClientResult<(Connection, bool)> {
        loop {
            let idle = self.idle.lock().pop();
            match idle {
                Some(mut c) => {
                    if c.usable() {
                        return Ok((c, true));
                    }
                }
                None => return Ok((self.connect().await?, false)),
            }
        }
    }

    async fn connect(&self) -> ClientResult<Connection> {
        match self.dialer.dial().await {
            Ok(io) => Ok(Connection::new(io)),
            Err(e) => Err(ClientError::Unreachable { url: self.base.clone(), reason: self.dialer.explain(&e) }),
        }
    }

    /// Sends an inference request and reads its answer on a pooled connection, which goes back
    /// to the pool when the server keeps it. A reused connection that the server had closed
    /// (not one byte of the request could be written) is replaced once.
    async fn send_infer(&self, request: &HttpRequest, sequence: Option<&SequenceFlags>) -> ClientResult<h1::Answer> {
        let (mut connection, mut reused) = self.connection().await?;
        // `{"parameters":{...},` replaces the header's `{`: only the head is new bytes.
        let opened;
        let (head, body) = match sequence {
            None => (&request.head, &request.body),
            Some(sequence) => {
                opened = (request.head_opening(&sequence_prefix(sequence)), request.body.slice(1..));
                (&opened.0, &opened.1)
            }
        };
        loop {
            match connection.exchange(&mut head.clone().chain(body.clone())).await {
                Ok(answer) => {
                    if answer.keep_alive {
                        self.idle.lock().push(connection);
                    }
                    return Ok(answer);
                }
                Err(failed) if reused && failed.unsent => {
                    tracing::debug!("a pooled connection was closed: {}", failed.error);
                    connection = self.connect().await?;
                    reused = false;
                }
                Err(failed) => {
                    return Err(ClientError::Unreachable {
                        url: self.base.clone(),
                        reason: self.dialer.explain_probing(&failed.error).await,
                    })
                }
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

    /// A control call's failure, explained; one that names no cause gets the one a probe
    /// connection finds (reqwest drops a TLS alert that follows the handshake).
    async fn unreachable(&self, e: reqwest::Error) -> ClientError {
        ClientError::Unreachable { url: self.base.clone(), reason: self.dialer.explain_probing(&e).await }
    }

    /// Sends a request and returns the body of a 200 answer; any other status becomes the
    /// server's `{"error": ...}` message.
    async fn call(&self, request: reqwest::RequestBuilder) -> ClientResult<Bytes> {
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => return Err(self.unreachable(e).await),
        };
        let status = response.status();
        let body = match response.bytes().await {
            Ok(body) => body,
            Err(e) => return Err(self.unreachable(e).await),
        };
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
        self.call(self.http.post(url).header(reqwest::header::CONTENT_LENGTH, 0)).await.map(|_| ())
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

impl InferClient for HttpClient {
    type Prepared = HttpRequest;

    /// Empties the pool of inference connections. The control calls' client (statistics,
    /// metadata) checks its pooled connections itself and retries one found closed.
    fn drop_connections(&self) {
        self.idle.lock().clear();
    }

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
        let mut head = BytesMut::with_capacity(256);
        head.extend_from_slice(b"POST ");
        head.extend_from_slice(url.path().as_bytes());
        head.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        head.extend_from_slice(self.host.as_bytes());
        head.extend_from_slice(b"\r\n");
        for (name, value) in &self.headers {
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        let head_start = head.clone().freeze();
        length_headers(&mut head, body.len(), header_length);
        Ok(HttpRequest { head: head.freeze(), head_start, body, header_length })
    }

    /// Timing, measured on our side of the socket:
    /// - `send`: from the call until the whole request is written on a pooled connection (taking
    ///   or opening a connection included);
    /// - `recv`: from the moment the answer's head is parsed until its body is read and decoded
    ///   (JSON header parsed, binary outputs sliced);
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
        let (result, sent_at, head_at) = match self.send_infer(request, sequence).await {
            Err(e) => {
                let now = Instant::now();
                (Err(e), now, now)
            }
            Ok(answer) => {
                let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
                let result = match answer.header_length {
                    _ if status != StatusCode::OK => Err(error_from_body(status, &answer.body)),
                    Some(None) => Err(ClientError::Protocol("bad Inference-Header-Content-Length".into())),
                    Some(Some(n)) => decode_response(answer.body, Some(n), keep_outputs),
                    None => decode_response(answer.body, None, keep_outputs),
                };
                (result, answer.sent_at, answer.head_at)
            }
        };
        let end = Instant::now();
        let timing = RequestTiming { send: sent_at - start, recv: end - head_at, total: end - start };
        (result, timing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
