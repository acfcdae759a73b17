//! `ModelStreamInfer` on the generative twin, as Triton's vLLM backend answers it: inputs
//! `text_input` (BYTES), `stream` (BOOL), `max_tokens` (INT32), `sampling_parameters` (BYTES,
//! JSON), `exclude_input_in_output` (BOOL); each response carries `text_output` (BYTES [1]),
//! and the last is flagged `triton_final_response` (no separate empty response is needed).

use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;

use super::{decode_request, stream_error, with_final_flag};
use crate::proto::inference as pb;
use crate::proto::inference::model_infer_response::InferOutputTensor;
use crate::server::core::InferenceServer;
use crate::server::error::{ServerError, ServerResult};
use crate::server::generate::{Pieces, TextRequest};
use crate::server::infer::{InferRequest, InputData};
use crate::server::llm::{monotonic_ns, LlmEngine};
use crate::server::repository::MODEL_VERSION;

/// The responses to one streamed request for a generative model.
pub fn answer(
    core: Arc<InferenceServer>,
    engine: Arc<LlmEngine>,
    request: pb::ModelInferRequest,
) -> BoxStream<'static, pb::ModelStreamInferResponse> {
    let arrival_ns = monotonic_ns();
    let (id, name) = (request.id.clone(), request.model_name.clone());
    let started = (|| {
        let text = text_request(decode_request(request)?)?;
        let request_id = if id.is_empty() { format!("grpc-{:032x}", rand::random::<u128>()) } else { id.clone() };
        let generation = engine.generate(text.params(request_id, arrival_ns), core.request_log.clone())?;
        Ok::<_, ServerError>(Pieces { engine, text, generation, done: false })
    })();
    let pieces = match started {
        Ok(p) => p,
        Err(e) => return futures::stream::once(async move { stream_error(e, id, name, MODEL_VERSION.into()) }).boxed(),
    };
    futures::stream::unfold(Some(pieces), move |state| {
        let (id, name) = (id.clone(), name.clone());
        async move {
            let mut pieces = state?;
            match pieces.next().await {
                Ok(Some((text, last))) => Some((with_final_flag(response(&id, &name, &text), last), Some(pieces))),
                Ok(None) => None,
                Err(e) => Some((stream_error(e, id, name, MODEL_VERSION.into()), None)),
            }
        }
    })
    .boxed()
}

fn response(id: &str, model: &str, text: &str) -> pb::ModelInferResponse {
    let mut raw = Vec::with_capacity(4 + text.len());
    raw.extend_from_slice(&(text.len() as u32).to_le_bytes());
    raw.extend_from_slice(text.as_bytes());
    pb::ModelInferResponse {
        model_name: model.to_string(),
        model_version: MODEL_VERSION.to_string(),
        id: id.to_string(),
        outputs: vec![InferOutputTensor {
            name: "text_output".into(),
            datatype: "BYTES".into(),
            shape: vec![1],
            ..Default::default()
        }],
        raw_output_contents: vec![raw.into()],
        ..Default::default()
    }
}

/// Reads the request's tensors into what the twin generates from.
fn text_request(request: InferRequest) -> ServerResult<TextRequest> {
    let mut text = TextRequest::default();
    let mut has_text = false;
    for input in &request.inputs {
        let InputData::Raw(data) = &input.data else {
            return Err(ServerError::invalid(format!(
                "input '{}': the generative model takes no shared memory",
                input.name
            )));
        };
        let kind = |want: &str| -> ServerResult<()> {
            if input.datatype == want {
                Ok(())
            } else {
                Err(ServerError::invalid(format!(
                    "inference input '{}' data-type is '{}', but model '{}' expects '{want}'",
                    input.name, input.datatype, request.model_name
                )))
            }
        };
        match input.name.as_str() {
            "text_input" => {
                kind("BYTES")?;
                text.text_input = first_string(&input.name, data)?;
                has_text = true;
            }
            "sampling_parameters" => {
                kind("BYTES")?;
                text.read_sampling_json(&first_string(&input.name, data)?)?;
            }
            "stream" => {
                kind("BOOL")?;
                text.stream = data.first().is_some_and(|&b| b != 0);
            }
            "exclude_input_in_output" => {
                kind("BOOL")?;
                text.exclude_input_in_output = data.first().is_some_and(|&b| b != 0);
            }
            "max_tokens" => {
                kind("INT32")?;
                let bytes: [u8; 4] = data
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| ServerError::invalid("input 'max_tokens' must hold one INT32"))?;
                let n = i32::from_le_bytes(bytes);
                if n < 1 {
                    return Err(ServerError::invalid(format!("max_tokens must be at least 1, got {n}")));
                }
                text.max_tokens = Some(n as usize);
            }
            other => {
                return Err(ServerError::invalid(format!(
                    "unexpected inference input '{other}' for model '{}'",
                    request.model_name
                )))
            }
        }
    }
    if !has_text {
        return Err(ServerError::invalid(format!(
            "expected 1 inputs but got 0 inputs for model '{}': 'text_input' is missing",
            request.model_name
        )));
    }
    Ok(text)
}

/// The first element of a BYTES tensor (4-byte little-endian length, then the bytes), as UTF-8.
fn first_string(name: &str, data: &[u8]) -> ServerResult<String> {
    let bad = || ServerError::invalid(format!("input '{name}': malformed BYTES tensor"));
    let len = u32::from_le_bytes(data.get(..4).ok_or_else(bad)?.try_into().map_err(|_| bad())?) as usize;
    let bytes = data.get(4..4 + len).ok_or_else(bad)?;
    String::from_utf8(bytes.to_vec()).map_err(|_| ServerError::invalid(format!("input '{name}' is not UTF-8 text")))
}
