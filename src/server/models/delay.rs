//! `delay`: a model whose compute time is known, so tests can assert the latency breakdown.
//!
//! Execution takes `delay_us + delay_per_item_us × batch` microseconds (fractions allowed). It sleeps until 200 µs
//! before the deadline and spins for the rest: precise to a few µs without burning a core.
//! Outputs copy the inputs (like `identity`). `fail_every: N` makes every N-th execution fail.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{param, IdentityModel, Model, ModelError};
use crate::proto::inference::ModelConfig;
use crate::server::error::ServerResult;
use crate::tensor::Tensor;

pub struct DelayModel {
    fixed: Duration,
    per_item: Duration,
    batching: bool,
    fail_every: u64,
    executions: AtomicU64,
}

const SPIN_WINDOW: Duration = Duration::from_micros(200);

impl DelayModel {
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        IdentityModel::new(config)?;
        Ok(DelayModel {
            fixed: micros(config, "delay_us", 1000.0)?,
            per_item: micros(config, "delay_per_item_us", 0.0)?,
            batching: config.max_batch_size > 0,
            fail_every: param(config, "fail_every", 0u64)?,
            executions: AtomicU64::new(0),
        })
    }

    /// The configured compute time of one execution of `batch` items.
    pub fn compute_time(&self, batch: u64) -> Duration {
        self.fixed.saturating_add(self.per_item.saturating_mul(u32::try_from(batch).unwrap_or(u32::MAX)))
    }
}

/// The longest `delay_us` or `delay_per_item_us`: a config cannot wedge an instance for ever.
const MAX_DELAY: Duration = Duration::from_secs(60);

/// A duration parameter in (possibly fractional) microseconds, at most [`MAX_DELAY`].
fn micros(config: &ModelConfig, key: &str, default: f64) -> ServerResult<Duration> {
    let us: f64 = param(config, key, default)?;
    Duration::try_from_secs_f64(us / 1e6).ok().filter(|d| *d <= MAX_DELAY).ok_or_else(|| {
        crate::server::ServerError::invalid_arg(format!(
            "model '{}': parameter '{key}' must be a number of µs from 0 to {}",
            config.name,
            MAX_DELAY.as_micros()
        ))
    })
}

/// Waits until `deadline`: sleep for the bulk, spin for the last stretch.
pub fn wait_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > SPIN_WINDOW {
            std::thread::sleep(left - SPIN_WINDOW);
        } else {
            std::hint::spin_loop();
        }
    }
}

impl Model for DelayModel {
    fn execute(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, ModelError> {
        let start = Instant::now();
        let batch = match (self.batching, inputs.first()) {
            (true, Some(t)) => t.shape.first().copied().unwrap_or(1).max(1) as u64,
            _ => 1,
        };
        wait_until(start + self.compute_time(batch));
        let n = self.executions.fetch_add(1, Ordering::Relaxed) + 1;
        if self.fail_every > 0 && n.is_multiple_of(self.fail_every) {
            return Err(ModelError::Failed(format!(
                "injected failure: execution {n} (fail_every = {})",
                self.fail_every
            )));
        }
        Ok(inputs.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::parse_pbtxt;

    fn model(extra: &str) -> DelayModel {
        let text = format!(
            r#"backend: "delay" max_batch_size: 8
               input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
               output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
               {extra}"#
        );
        DelayModel::new(&parse_pbtxt(&text, "d").unwrap()).unwrap()
    }

    fn params(kv: &[(&str, &str)]) -> String {
        kv.iter()
            .map(|(k, v)| format!(r#"parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}"#))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn takes_at_least_the_configured_time_and_copies() {
        let m = model(&params(&[("delay_us", "2000"), ("delay_per_item_us", "500")]));
        assert_eq!(m.compute_time(4), Duration::from_micros(4000));
        let input = Tensor::from_f32(vec![4, 4], &[1.5; 16]);
        let t0 = Instant::now();
        let out = m.execute(std::slice::from_ref(&input)).unwrap();
        assert!(t0.elapsed() >= Duration::from_micros(4000));
        assert_eq!(out[0], input);
    }

    #[test]
    fn injected_failures_hit_every_nth_execution() {
        let m = model(&params(&[("delay_us", "0"), ("fail_every", "4")]));
        let input = Tensor::from_f32(vec![1, 4], &[0.0; 4]);
        let failed: Vec<bool> = (0..8).map(|_| m.execute(std::slice::from_ref(&input)).is_err()).collect();
        assert_eq!(failed, [false, false, false, true, false, false, false, true]);
    }
}
