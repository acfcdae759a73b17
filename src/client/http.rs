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
use serde::Deserialize;

use super::tls::TlsOptions;
use super::{
    base_url, error_chain, ClientError, ClientResult, ConnectOptions, InferClient, InferResult, RequestSpec,
    RequestTiming, SequenceFlags, ServerInfo,
};
use crate::proto::inference::{ModelConfig, ModelMetadataResponse, ModelStatistics, ModelStatisticsResponse};
use wire::{decode_response, encode_request, error_from_body, sequence_prefix};

/// The request and answer bodies.
mod wire;

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
