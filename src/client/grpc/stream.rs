//! gRPC `ModelStreamInfer` for `--streaming`: like perf_analyzer's per-context streams, each
//! request in flight owns one open bidirectional stream, so responses need no reordering. Idle
//! streams are kept for reuse.

use std::time::Instant;

use bytes::BufMut;
use parking_lot::Mutex;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use super::Encoded;
use crate::client::{ClientError, ClientResult, RequestTiming};
use crate::proto::inference::{ModelInferResponse, ModelStreamInferResponse};

const STREAM_INFER_PATH: &str = "/inference.GRPCInferenceService/ModelStreamInfer";

/// One open stream: where requests go in and responses come out.
struct OpenStream {
    requests: mpsc::Sender<Encoded>,
    responses: Streaming<ModelStreamInferResponse>,
}

/// Idle streams, reused by later requests.
#[derive(Default)]
pub struct StreamPool {
    idle: Mutex<Vec<OpenStream>>,
    /// How requests are compressed (`--grpc-compression-algorithm`).
    compression: Option<CompressionEncoding>,
}

/// The responses of one streamed request with their arrival times: one for a model that is not
/// decoupled, held inline, so the hot path allocates nothing for it.
pub type Responses = smallvec::SmallVec<[(Instant, ModelInferResponse); 1]>;

impl StreamPool {
    pub fn new(compression: Option<CompressionEncoding>) -> Self {
        StreamPool { idle: Mutex::default(), compression }
    }

    /// Closes the idle streams (their connection may be gone); requests open new ones.
    pub fn drop_idle(&self) {
        self.idle.lock().clear();
    }

    /// Opens a stream with `first` already queued: a gRPC C++ server (Triton) sends the response
    /// headers only with its first response, so waiting for them before sending would hang.
    async fn open(
        &self,
        channel: Channel,
        metadata: tonic::metadata::MetadataMap,
        max_bytes: usize,
        first: Encoded,
    ) -> Result<OpenStream, Status> {
        let (requests, rx) = mpsc::channel(1);
        requests.try_send(first).expect("a new channel has room for one request");
        let mut grpc =
            tonic::client::Grpc::new(channel).max_decoding_message_size(max_bytes).max_encoding_message_size(max_bytes);
        if let Some(encoding) = self.compression {
            grpc = grpc.send_compressed(encoding);
        }
        grpc.ready().await.map_err(|e| Status::from_error(Box::new(e)))?;
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        *request.metadata_mut() = metadata;
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(STREAM_INFER_PATH);
        let responses = grpc.streaming(request, path, StreamCodec).await?.into_inner();
        Ok(OpenStream { requests, responses })
    }

    /// Sends one pre-encoded `ModelInferRequest` on an idle (or new) stream and waits for its
    /// response; for a decoupled request (`request.1`), for every response up to the one flagged
    /// `triton_final_response`. Returns every response with its arrival time, in order. Send
    /// ends when the request is queued on the stream; recv covers decoding. `watch`, when
    /// given, is called with the count of responses so far as each one arrives.
    pub async fn infer(
        &self,
        channel: Channel,
        metadata: tonic::metadata::MetadataMap,
        max_bytes: usize,
        (encoded, decoupled): (Encoded, bool),
        status_error: impl Fn(Status) -> ClientError,
        watch: Option<&(dyn Fn(usize) + Sync)>,
    ) -> (ClientResult<Responses>, RequestTiming) {
        let start = Instant::now();
        let idle = self.idle.lock().pop();
        let mut stream = match idle {
            Some(s) => {
                if s.requests.send(encoded).await.is_err() {
                    let e = ClientError::Unreachable { url: "gRPC stream".into(), reason: "the stream closed".into() };
                    return (Err(e), timing(start, start, Instant::now()));
                }
                s
            }
            None => match self.open(channel, metadata, max_bytes, encoded).await {
                Ok(s) => s,
                Err(status) => return (Err(status_error(status)), timing(start, start, start)),
            },
        };
        let sent = Instant::now();
        let mut responses = Responses::new();
        loop {
            let message = stream.responses.message().await;
            let answered = Instant::now();
            let response = match message {
                Ok(Some(m)) if !m.error_message.is_empty() => {
                    self.idle.lock().push(stream);
                    return (Err(ClientError::Server(m.error_message)), timing(start, sent, answered));
                }
                Ok(Some(m)) => match m.infer_response {
                    Some(r) => r,
                    None => {
                        let e = ClientError::Protocol("stream response without infer_response".into());
                        return (Err(e), timing(start, sent, answered));
                    }
                },
                Ok(None) => {
                    let e = ClientError::Protocol("the server closed the stream".into());
                    return (Err(e), timing(start, sent, answered));
                }
                Err(status) => return (Err(status_error(status)), timing(start, sent, answered)),
            };
            let done = !decoupled || is_final(&response);
            responses.push((answered, response));
            if let Some(watch) = watch {
                watch(responses.len());
            }
            if done {
                self.idle.lock().push(stream);
                return (Ok(responses), timing(start, sent, answered));
            }
        }
    }
}

/// Whether a decoupled model's response is its request's last (`triton_final_response`).
fn is_final(response: &ModelInferResponse) -> bool {
    use crate::proto::inference::infer_parameter::ParameterChoice;
    matches!(
        response.parameters.get("triton_final_response").and_then(|p| p.parameter_choice.as_ref()),
        Some(ParameterChoice::BoolParam(true))
    )
}

fn timing(start: Instant, sent: Instant, answered: Instant) -> RequestTiming {
    let end = Instant::now();
    RequestTiming { send: sent - start, recv: end - answered, total: end - start }
}

/// Writes pre-encoded requests; decodes `ModelStreamInferResponse`.
struct StreamCodec;

struct PassThrough;
struct StreamDecoder;

impl Codec for StreamCodec {
    type Encode = Encoded;
    type Decode = ModelStreamInferResponse;
    type Encoder = PassThrough;
    type Decoder = StreamDecoder;
    fn encoder(&mut self) -> PassThrough {
        PassThrough
    }
    fn decoder(&mut self) -> StreamDecoder {
        StreamDecoder
    }
}

impl Encoder for PassThrough {
    type Item = Encoded;
    type Error = Status;
    fn encode(&mut self, (head, tail): Encoded, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&head);
        dst.put_slice(&tail);
        Ok(())
    }
}

impl Decoder for StreamDecoder {
    type Item = ModelStreamInferResponse;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<ModelStreamInferResponse>, Status> {
        ModelStreamInferResponse::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(format!("bad ModelStreamInferResponse: {e}")))
    }
}
