//! The batching policies a model's config sets, as plain values: the dynamic batcher's
//! (`BatchPolicy`, and `decide`, its pure decision) and the sequence batcher's
//! (`SequencePolicy`, with its control inputs). The schedulers and the models read them; this
//! module reads neither, so it sits below both.

use std::time::{Duration, Instant};

use super::error::{ServerError, ServerResult};
use super::infer::CorrelationId;
use crate::proto::inference::model_config::SchedulingChoice;
use crate::proto::inference::model_sequence_batching::{control::Kind, StrategyChoice};
use crate::proto::inference::ModelConfig;
use crate::tensor::DataType;

/// The longest `max_queue_delay_microseconds` honoured (an hour); longer values wait this long.
const MAX_QUEUE_DELAY: Duration = Duration::from_secs(3600);

/// How requests are grouped into executions.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchPolicy {
    /// 0: the model has no batch dimension, every request runs alone.
    pub max_batch_size: usize,
    /// Without `dynamic_batching` in the config every request runs alone too.
    pub dynamic: bool,
    pub preferred: Vec<usize>,
    pub max_queue_delay: Duration,
}

impl BatchPolicy {
    pub fn from_config(config: &ModelConfig) -> Self {
        let dynamic = match &config.scheduling_choice {
            Some(SchedulingChoice::DynamicBatching(d)) => Some(d),
            _ => None,
        };
        BatchPolicy {
            max_batch_size: config.max_batch_size.max(0) as usize,
            dynamic: dynamic.is_some() && config.max_batch_size > 0,
            preferred: dynamic
                .map(|d| d.preferred_batch_size.iter().filter(|&&p| p > 0).map(|&p| p as usize).collect())
                .unwrap_or_default(),
            // Capped, so that `oldest + delay` cannot overflow an Instant.
            max_queue_delay: Duration::from_micros(dynamic.map_or(0, |d| d.max_queue_delay_microseconds))
                .min(MAX_QUEUE_DELAY),
        }
    }
}

/// What an idle instance should do with the queue as it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Take this many requests from the head of the queue.
    Execute(usize),
    /// Nothing is ready: wait for a new request or until this instant.
    WaitUntil(Instant),
}

/// The batching decision, a pure function of the queue's head. `sizes` are the batch sizes of
/// the compatible run at the head (non-empty); `can_grow` says whether a later arrival could
/// still join it.
pub fn decide(policy: &BatchPolicy, sizes: &[usize], can_grow: bool, oldest: Instant, now: Instant) -> Decision {
    if !policy.dynamic {
        return Decision::Execute(1);
    }
    let total: usize = sizes.iter().sum();
    if !can_grow || policy.preferred.contains(&total) {
        return Decision::Execute(sizes.len());
    }
    let deadline = oldest + policy.max_queue_delay;
    if now < deadline {
        return Decision::WaitUntil(deadline);
    }
    let mut cumulative = 0;
    let mut best = sizes.len();
    for (i, s) in sizes.iter().enumerate() {
        cumulative += s;
        if policy.preferred.contains(&cumulative) {
            best = i + 1;
        }
    }
    Decision::Execute(best)
}

/// Triton's `max_sequence_idle_microseconds` when the config leaves it 0.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(1);

/// Longest idle timeout or queue delay honoured (an hour), so deadlines cannot overflow.
const MAX_WAIT: Duration = Duration::from_secs(3600);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlKind {
    Start,
    End,
    Ready,
    CorrId,
}

/// One control input tensor the batcher adds to every execution.
#[derive(Clone, Debug, PartialEq)]
pub struct Control {
    pub name: String,
    pub kind: ControlKind,
    pub dtype: DataType,
    /// Little-endian false and true values (START, END, READY).
    false_true: [Vec<u8>; 2],
}

impl Control {
    /// One item's value: a flag's false/true value, or the correlation id in the control's type
    /// (`None` for an empty slot: 0 or "").
    pub(super) fn value(&self, flag: bool, id: Option<&CorrelationId>, out: &mut Vec<u8>) {
        if self.kind != ControlKind::CorrId {
            out.extend_from_slice(&self.false_true[flag as usize]);
            return;
        }
        match (self.dtype, id) {
            (DataType::Bytes, id) => {
                let text = id.map(|i| i.to_string()).unwrap_or_default();
                out.extend_from_slice(&(text.len() as u32).to_le_bytes());
                out.extend_from_slice(text.as_bytes());
            }
            (dtype, id) => {
                let n = match id {
                    Some(CorrelationId::Number(n)) => *n,
                    _ => 0,
                };
                let size = dtype.element_size().unwrap_or(8);
                out.extend_from_slice(&n.to_le_bytes()[..size]);
            }
        }
    }
}

/// The sequence batcher's settings, from `sequence_batching`.
#[derive(Clone, Debug, PartialEq)]
pub struct SequencePolicy {
    /// `direct` (the default) or `oldest`.
    pub direct: bool,
    /// Sequences one instance holds at once.
    pub slots: usize,
    /// Most requests in one execution (1 when the model does not batch).
    pub max_batch: usize,
    /// Preferred sizes and the queue delay (`oldest`; `direct` has only the delay).
    pub batch: BatchPolicy,
    pub idle: Duration,
    pub controls: Vec<Control>,
}

impl SequencePolicy {
    /// `None` for a model without `sequence_batching`; an error for a config it cannot serve.
    pub fn from_config(config: &ModelConfig) -> ServerResult<Option<SequencePolicy>> {
        let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice else {
            return Ok(None);
        };
        let name = &config.name;
        let bad = |what: String| ServerError::invalid_arg(format!("model '{name}': sequence_batching: {what}"));
        let max_batch = config.max_batch_size.max(1) as usize;
        let batching = config.max_batch_size > 0;
        let (direct, slots, preferred, delay_us) = match &sb.strategy_choice {
            None => (true, max_batch, vec![], 0),
            Some(StrategyChoice::Direct(d)) => (true, max_batch, vec![], d.max_queue_delay_microseconds),
            Some(StrategyChoice::Oldest(o)) => {
                if o.max_candidate_sequences < 0 {
                    return Err(bad("oldest.max_candidate_sequences must be >= 0".into()));
                }
                let preferred: Vec<usize> =
                    o.preferred_batch_size.iter().filter(|&&p| p > 0).map(|&p| p as usize).collect();
                if let Some(p) = preferred.iter().find(|&&p| p > max_batch) {
                    return Err(bad(format!("preferred batch size {p} exceeds max_batch_size {max_batch}")));
                }
                (
                    false,
                    // 0 (unset): as many candidates as a batch holds.
                    match o.max_candidate_sequences {
                        0 => max_batch,
                        n => (n as usize).min(4096),
                    },
                    preferred,
                    o.max_queue_delay_microseconds,
                )
            }
        };
        let idle = match sb.max_sequence_idle_microseconds {
            0 => DEFAULT_IDLE,
            us => Duration::from_micros(us).min(MAX_WAIT),
        };
        let mut controls = Vec::new();
        for input in &sb.control_input {
            let [control] = input.control.as_slice() else {
                return Err(bad(format!("control input '{}' must have exactly one control", input.name)));
            };
            if config.input.iter().any(|i| i.name == input.name)
                || controls.iter().any(|c: &Control| c.name == input.name)
            {
                return Err(bad(format!("control input '{}' is named twice", input.name)));
            }
            let kind = match Kind::try_from(control.kind) {
                Ok(Kind::ControlSequenceStart) => ControlKind::Start,
                Ok(Kind::ControlSequenceEnd) => ControlKind::End,
                Ok(Kind::ControlSequenceReady) => ControlKind::Ready,
                Ok(Kind::ControlSequenceCorrid) => ControlKind::CorrId,
                Err(_) => return Err(bad(format!("control input '{}' has an unknown kind", input.name))),
            };
            let (dtype, false_true) = if kind == ControlKind::CorrId {
                let dtype = DataType::from_config_enum(control.data_type);
                match dtype {
                    Some(
                        d @ (DataType::Uint64 | DataType::Int64 | DataType::Uint32 | DataType::Int32 | DataType::Bytes),
                    ) => (d, [vec![], vec![]]),
                    _ => {
                        return Err(bad(format!(
                            "CONTROL_SEQUENCE_CORRID '{}' needs data_type TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING",
                            input.name
                        )))
                    }
                }
            } else {
                let le = |v: &[u8]| v.to_vec();
                match (&control.int32_false_true[..], &control.fp32_false_true[..], &control.bool_false_true[..]) {
                    ([f, t], [], []) => (DataType::Int32, [le(&f.to_le_bytes()), le(&t.to_le_bytes())]),
                    ([], [f, t], []) => (DataType::Fp32, [le(&f.to_le_bytes()), le(&t.to_le_bytes())]),
                    ([], [], [f, t]) => (DataType::Bool, [vec![*f as u8], vec![*t as u8]]),
                    _ => {
                        return Err(bad(format!(
                            "control input '{}' needs exactly one of int32_false_true, fp32_false_true, bool_false_true, with two values",
                            input.name
                        )))
                    }
                }
            };
            controls.push(Control { name: input.name.clone(), kind, dtype, false_true });
        }
        let batch = BatchPolicy {
            max_batch_size: config.max_batch_size.max(0) as usize,
            dynamic: batching,
            preferred,
            max_queue_delay: Duration::from_micros(delay_us).min(MAX_WAIT),
        };
        Ok(Some(SequencePolicy { direct, slots, max_batch, batch, idle, controls }))
    }

    /// Where a control of this kind sits among the inputs the model receives (after the
    /// config's inputs), if the config has one.
    pub fn control_index(config: &ModelConfig, kind: ControlKind) -> Option<usize> {
        let policy = SequencePolicy::from_config(config).ok()??;
        policy.controls.iter().position(|c| c.kind == kind).map(|i| config.input.len() + i)
    }
}
