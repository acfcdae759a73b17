//! `--trace-level`, `--trace-rate`, `--trace-count` and `--log-frequency`: like perf_analyzer,
//! set the server's trace settings for the model through the trace extension before the sweep
//! (HTTP `POST /v2/models/<m>/trace/setting`, gRPC `TraceSetting`), with the sweep's own client
//! (its headers and TLS). A refusal is the server's answer to the user's flags: bad input, exit 2.

use super::RunError;
use crate::client::{ClientError, InferClient};
use crate::plan::TraceSetting;

/// Sets `settings` for `model` through `client`.
pub async fn apply<C: InferClient>(client: &C, model: &str, settings: &[TraceSetting]) -> Result<(), RunError> {
    if settings.is_empty() {
        return Ok(());
    }
    let settings: Vec<(String, Vec<String>)> = settings.iter().map(|s| (s.key.clone(), s.values.clone())).collect();
    match client.trace_setting(model, &settings).await {
        Ok(()) => Ok(()),
        Err(e @ ClientError::Unreachable { .. }) => Err(RunError::client(e)),
        Err(e) => Err(RunError::bad_input(anyhow::anyhow!("the server refused the trace settings: {e}"))),
    }
}
