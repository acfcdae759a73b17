//! `--endpoint-type kserve`: gRPC `ModelStreamInfer` as Triton's vLLM backend takes it. The
//! request carries `text_input` (BYTES), `stream` (BOOL), `exclude_input_in_output` (BOOL) and,
//! when a length or `--extra-inputs` are given, `sampling_parameters` (BYTES, JSON). Every
//! response is one timed event carrying `text_output`; the one flagged `triton_final_response`
//! ends the request. There is no `usage` on this path: the client tokenizer counts. Each request
//! carries the client's id in `ModelInferRequest.id`, which the server's log and answers repeat.
//!
//! The requests go through the perf_analyzer-compatible gRPC client ([`GrpcClient`] with its
//! stream pool), so connection handling, metadata (`-H`) and response stamping are shared.

use std::time::Instant;

use serde_json::{Map, Value};

use super::endpoint::BodyOptions;
use super::metrics::ErrorKind;
use crate::client::grpc::GrpcClient;
use crate::client::{ClientError, ConnectOptions, InferClient, InputSource, OutputTarget, RequestSpec};
use crate::tensor::{DataType, Tensor};

const TEXT_OUTPUT: &str = "text_output";

/// A gRPC client that sends every request on a `ModelStreamInfer` stream.
pub fn client(url: &str, concurrency: usize, headers: &[(String, String)]) -> anyhow::Result<GrpcClient> {
    let options = ConnectOptions {
        concurrency: concurrency.max(1),
        headers: headers.to_vec(),
        streaming: true,
        ..ConnectOptions::default()
    };
    GrpcClient::new(url, &options).map_err(|e| anyhow::anyhow!("{e}"))
}

/// The request for one prompt.
pub fn request(prompt: &str, options: &BodyOptions) -> RequestSpec {
    let mut inputs = vec![
        ("text_input".to_string(), InputSource::Inline(bytes_tensor(prompt))),
        ("stream".to_string(), InputSource::Inline(bool_tensor(options.streaming))),
        // A whole answer would otherwise start with the prompt (vLLM's default).
        ("exclude_input_in_output".to_string(), InputSource::Inline(bool_tensor(true))),
    ];
    let mut sampling = Map::new();
    if let Some(n) = options.max_tokens {
        sampling.insert("max_tokens".into(), n.into());
        sampling.insert("ignore_eos".into(), Value::Bool(true));
    }
    sampling.extend(options.extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    if !sampling.is_empty() {
        let json = Value::Object(sampling).to_string();
        inputs.push(("sampling_parameters".to_string(), InputSource::Inline(bytes_tensor(&json))));
    }
    RequestSpec {
        model_name: options.model.clone(),
        model_version: String::new(),
        inputs,
        outputs: vec![(TEXT_OUTPUT.to_string(), OutputTarget::Inline)],
        decoupled: true,
    }
}

/// Sends one request named `id` (its `ModelInferRequest.id`); returns each response's arrival
/// instant and the text it carried (a response without `text_output`, such as an empty final
/// one, is no event).
pub async fn exchange(
    client: &GrpcClient,
    spec: &RequestSpec,
    id: &str,
) -> Result<Vec<(Instant, String)>, (ErrorKind, String)> {
    let prepared = client.prepare(spec).map_err(|e| (ErrorKind::Protocol, e.to_string()))?;
    let (result, _) = client.infer_with_id(&prepared, id, true).await;
    let result = result.map_err(|e| (error_kind(&e), e.to_string()))?;
    let mut events = Vec::with_capacity(result.responses.len());
    for (at, outputs) in result.responses {
        let Some((_, tensor)) = outputs.iter().find(|(name, _)| name == TEXT_OUTPUT) else { continue };
        let text = first_string(tensor)
            .ok_or_else(|| (ErrorKind::Protocol, "text_output is not a BYTES tensor of UTF-8 text".to_string()))?;
        events.push((at, text));
    }
    Ok(events)
}

fn error_kind(e: &ClientError) -> ErrorKind {
    match e {
        ClientError::Server(_) => ErrorKind::Server,
        ClientError::Protocol(_) | ClientError::Invalid(_) => ErrorKind::Protocol,
        ClientError::Unreachable { .. } | ClientError::Stalled(_) | ClientError::TimedOut { .. } => {
            ErrorKind::Transport
        }
    }
}

fn bytes_tensor(text: &str) -> Tensor {
    let mut data = Vec::with_capacity(4 + text.len());
    data.extend_from_slice(&(text.len() as u32).to_le_bytes());
    data.extend_from_slice(text.as_bytes());
    Tensor { dtype: DataType::Bytes, shape: vec![1], data: data.into() }
}

fn bool_tensor(value: bool) -> Tensor {
    Tensor { dtype: DataType::Bool, shape: vec![1], data: vec![value as u8].into() }
}

/// The elements of a BYTES tensor, concatenated (Triton sends `text_output` as one element).
fn first_string(tensor: &Tensor) -> Option<String> {
    if tensor.dtype != DataType::Bytes {
        return None;
    }
    let mut data = &tensor.data[..];
    let mut text = String::new();
    while !data.is_empty() {
        let len = u32::from_le_bytes(data.get(..4)?.try_into().ok()?) as usize;
        text.push_str(std::str::from_utf8(data.get(4..4 + len)?).ok()?);
        data = &data[4 + len..];
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_carries_the_prompt_stream_flag_and_sampling_json() {
        let mut extra = Map::new();
        extra.insert("temperature".into(), 0.5.into());
        let options = BodyOptions { model: "llm".into(), streaming: true, max_tokens: Some(7), extra };
        let spec = request("Hello", &options);
        assert_eq!(spec.model_name, "llm");
        assert!(spec.decoupled);
        let input = |name: &str| match &spec.inputs.iter().find(|(n, _)| n == name).unwrap().1 {
            InputSource::Inline(t) => t.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(first_string(&input("text_input")).unwrap(), "Hello");
        assert_eq!(&input("stream").data[..], &[1]);
        let sampling: Value = serde_json::from_str(&first_string(&input("sampling_parameters")).unwrap()).unwrap();
        assert_eq!(sampling, serde_json::json!({"max_tokens": 7, "ignore_eos": true, "temperature": 0.5}));
        let bare = request("x", &BodyOptions { model: "llm".into(), ..Default::default() });
        assert!(bare.inputs.iter().all(|(n, _)| n != "sampling_parameters"), "nothing to say, nothing sent");
    }

    #[test]
    fn bytes_elements_are_read_back_and_bad_ones_refused() {
        assert_eq!(first_string(&bytes_tensor("a token")).unwrap(), "a token");
        let short = Tensor { dtype: DataType::Bytes, shape: vec![1], data: vec![9, 0, 0, 0, b'x'].into() };
        assert_eq!(first_string(&short), None);
        let not_bytes = Tensor::from_i32(vec![1], &[3]);
        assert_eq!(first_string(&not_bytes), None);
    }
}
