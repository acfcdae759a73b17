//! `ModelStreamInfer` on the generative twin, as Triton's vLLM backend answers it: inputs
//! `text_input` (BYTES), `stream` (BOOL), `max_tokens` (INT32), `sampling_parameters` (BYTES,
//! JSON), `exclude_input_in_output` (BOOL); each response carries `text_output` (BYTES [1]),
//! and the last is flagged `triton_final_response` (no separate empty response is needed).

use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;

use super::{decode_request, rejected, stream_error, with_final_flag};
use crate::proto::inference as pb;
use crate::proto::inference::model_infer_response::InferOutputTensor;
use crate::server::core::InferenceServer;
use crate::server::error::{ServerError, ServerResult};
use crate::server::generate::{Pieces, TextRequest};
use crate::server::infer::{InferRequest, InputData};
use crate::server::llm::{monotonic_ns, LlmEngine};
use crate::server::repository::MODEL_VERSION;

/// The responses to one streamed request for a generative model. As Triton answers: a request
/// the server refuses before the model sees it (a malformed message, an input the model does
/// not have or of the wrong type) gets its error with only its id; an error from the model (a
/// bad value, a prompt past the context, one mid-stream) comes with the model's name and the
/// final flag but no version.
pub fn answer(
    core: Arc<InferenceServer>,
    engine: Arc<LlmEngine>,
    request: pb::ModelInferRequest,
) -> BoxStream<'static, pb::ModelStreamInferResponse> {
    let arrival_ns = monotonic_ns();
    let (id, name) = (request.id.clone(), request.model_name.clone());
    let admitted = decode_request(request).and_then(|r| check_inputs(&id, &r).map(|()| r));
    let request = match admitted {
        Ok(r) => r,
        Err(e) => return futures::stream::once(async move { rejected(e, id) }).boxed(),
    };
    let started = (|| {
        let text = text_request(request)?;
        let request_id = if id.is_empty() { format!("grpc-{:032x}", rand::random::<u128>()) } else { id.clone() };
        let generation = engine.generate(text.params(request_id, arrival_ns), core.request_log.clone())?;
        Ok::<_, ServerError>(Pieces { engine, text, generation, done: false })
    })();
    let pieces = match started {
        Ok(p) => p,
        Err(e) => return futures::stream::once(async move { model_error(e, id, name) }).boxed(),
    };
    futures::stream::unfold(Some(pieces), move |state| {
        let (id, name) = (id.clone(), name.clone());
        async move {
            let mut pieces = state?;
            match pieces.next().await {
                Ok(Some((text, last))) => Some((with_final_flag(response(&id, &name, &text), last), Some(pieces))),
                Ok(None) => None,
                Err(e) => Some((model_error(e, id, name), None)),
            }
        }
    })
    .boxed()
}

/// An error the model sent: Triton names the model but not its version.
fn model_error(e: ServerError, id: String, name: String) -> pb::ModelStreamInferResponse {
    stream_error(e, id, name, String::new())
}

/// What Triton's core checks before the model runs: every input is one of the model's, of its
/// type, and `text_input` is there. Triton prefixes the type error with the request's id.
fn check_inputs(id: &str, request: &InferRequest) -> ServerResult<()> {
    const INPUTS: [(&str, &str); 5] = [
        ("text_input", "BYTES"),
        ("sampling_parameters", "BYTES"),
        ("stream", "BOOL"),
        ("exclude_input_in_output", "BOOL"),
        ("max_tokens", "INT32"),
    ];
    let model = &request.model_name;
    for input in &request.inputs {
        let Some((_, want)) = INPUTS.iter().find(|(name, _)| *name == input.name) else {
            return Err(ServerError::invalid_arg(format!(
                "unexpected inference input '{}' for model '{model}'",
                input.name
            )));
        };
        let prefix = if id.is_empty() { String::new() } else { format!("[request id: {id}] ") };
        if input.datatype != *want {
            return Err(ServerError::invalid_arg(format!(
                "{prefix}inference input '{}' data-type is '{}', but model '{model}' expects '{want}'",
                input.name, input.datatype
            )));
        }
        if let InputData::Raw(data) = &input.data {
            if *want == "BYTES" && data.len() < 4 {
                return Err(ServerError::invalid_arg(format!(
                    "{prefix}incomplete string length indicator for inference input '{}' for model '{model}', expecting 4 bytes but only {} bytes available. Please make sure the string length indicator is in one buffer.",
                    input.name,
                    data.len()
                )));
            }
        }
    }
    if !request.inputs.iter().any(|i| i.name == "text_input") {
        return Err(ServerError::invalid_arg(format!(
            "expected 1 inputs but got 0 inputs for model '{model}': 'text_input' is missing"
        )));
    }
    Ok(())
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

/// Reads the request's tensors (checked by [`check_inputs`]) into what the twin generates from.
fn text_request(request: InferRequest) -> ServerResult<TextRequest> {
    let mut text = TextRequest::default();
    for input in &request.inputs {
        let InputData::Raw(data) = &input.data else {
            return Err(ServerError::invalid_arg(format!(
                "input '{}': the generative model takes no shared memory",
                input.name
            )));
        };
        match input.name.as_str() {
            "text_input" => text.text_input = first_string(&input.name, data)?,
            "sampling_parameters" => text.read_sampling_json(&first_string(&input.name, data)?)?,
            "stream" => text.stream = data.first().is_some_and(|&b| b != 0),
            "exclude_input_in_output" => text.exclude_input_in_output = data.first().is_some_and(|&b| b != 0),
            "max_tokens" => {
                let bytes: [u8; 4] = data
                    .get(..4)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| ServerError::invalid_arg("input 'max_tokens' must hold one INT32"))?;
                let n = i32::from_le_bytes(bytes);
                if n < 1 {
                    return Err(ServerError::invalid_arg(format!("max_tokens must be at least 1, got {n}")));
                }
                text.max_tokens = Some(n as usize);
            }
            other => return Err(ServerError::invalid_arg(format!("unexpected inference input '{other}'"))),
        }
    }
    Ok(text)
}

/// The first element of a BYTES tensor (4-byte little-endian length, then the bytes), as UTF-8;
/// a short one fails with the python backend's words.
fn first_string(name: &str, data: &[u8]) -> ServerResult<String> {
    let len = u32::from_le_bytes(data.get(..4).and_then(|p| p.try_into().ok()).unwrap_or_default()) as usize;
    let Some(bytes) = data.get(4..4 + len) else {
        return Err(ServerError::invalid_arg(format!(
            "incomplete string data for inference input '{name}', expecting string of length {len} but only {} bytes available",
            data.len() - 4
        )));
    };
    String::from_utf8(bytes.to_vec()).map_err(|_| ServerError::invalid_arg(format!("input '{name}' is not UTF-8 text")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// What real Triton 2.51 sends on a stream when a decoupled python model fails after its
    /// first response (`fail_after` in tests/interop/generative_models/llm): error, model name,
    /// request id and the final flag, no version.
    #[test]
    fn a_model_error_is_encoded_as_tritons() {
        let tritons = "0a116661696c6564206f6e20707572706f736512260a036c6c6d1a027231221b0a15747269746f6e5f66696e616c5f726573706f6e736512020801";
        let ours = model_error(ServerError::unavailable("failed on purpose"), "r1".into(), "llm".into());
        let hex: String = ours.encode_to_vec().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, tritons);
    }

    #[test]
    fn a_short_string_is_refused_in_the_python_backends_words() {
        let e = first_string("sampling_parameters", b"\x12\0\0\0{}").unwrap_err();
        assert_eq!(
            e.message,
            "incomplete string data for inference input 'sampling_parameters', expecting string of length 18 but only 2 bytes available"
        );
    }
}
