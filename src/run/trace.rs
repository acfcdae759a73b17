//! `--trace-level`, `--trace-rate`, `--trace-count` and `--log-frequency`: like perf_analyzer,
//! set the server's trace settings for the model through the trace extension before the sweep
//! (HTTP `POST /v2/models/<m>/trace/setting`, gRPC `TraceSetting`). A refusal is the server's
//! answer to the user's flags: bad input, exit 2.

use std::collections::HashMap;

use super::RunError;
use crate::client::{base_url, ClientError};
use crate::plan::{Protocol, TraceSetting};
use crate::proto::inference::grpc_inference_service_client::GrpcInferenceServiceClient;
use crate::proto::inference::trace_setting_request::SettingValue;
use crate::proto::inference::TraceSettingRequest;

/// Sets `settings` for `model` on the server at `url`.
pub async fn apply(url: &str, protocol: Protocol, model: &str, settings: &[TraceSetting]) -> Result<(), RunError> {
    if settings.is_empty() {
        return Ok(());
    }
    let unreachable = |reason: String| RunError::client(ClientError::Unreachable { url: url.to_string(), reason });
    match protocol {
        Protocol::Http => {
            // Triton takes trace_level as a list and the other settings as single strings.
            let body: serde_json::Map<String, serde_json::Value> = settings
                .iter()
                .map(|s| {
                    let value = match (s.key.as_str(), s.values.as_slice()) {
                        ("trace_level", values) => serde_json::json!(values),
                        (_, [one]) => serde_json::json!(one),
                        (_, values) => serde_json::json!(values),
                    };
                    (s.key.clone(), value)
                })
                .collect();
            let response = reqwest::Client::new()
                .post(format!("{}/v2/models/{model}/trace/setting", base_url(url)))
                .header("content-type", "application/json")
                .body(serde_json::Value::Object(body).to_string())
                .send()
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            if !response.status().is_success() {
                let text = response.text().await.unwrap_or_default();
                return Err(RunError::bad_input(anyhow::anyhow!("the server refused the trace settings: {text}")));
            }
        }
        Protocol::Grpc => {
            let mut client =
                GrpcInferenceServiceClient::connect(base_url(url)).await.map_err(|e| unreachable(e.to_string()))?;
            let settings: HashMap<String, SettingValue> =
                settings.iter().map(|s| (s.key.clone(), SettingValue { value: s.values.clone() })).collect();
            client.trace_setting(TraceSettingRequest { settings, model_name: model.to_string() }).await.map_err(
                |e| RunError::bad_input(anyhow::anyhow!("the server refused the trace settings: {}", e.message())),
            )?;
        }
    }
    Ok(())
}
