//! Ensembles (`platform: "ensemble"`): a DAG of steps, each an inference on a composing model.
//!
//! [`Ensemble::new`] checks the graph at load (every step input provided, every ensemble tensor
//! produced once, every ensemble output produced, no cycle). [`Ensemble::run`] starts a step as
//! soon as all its inputs exist, so independent steps run concurrently; each step goes through
//! its composing model's own batcher (the caller's `run_step`), so steps of different ensemble
//! calls batch together there. Tensors pass between steps as `Bytes` (slices of the batch
//! output, never copied). Statistics follow Triton's ensemble scheduler: per request, the
//! ensemble's entry records the whole request's duration, one execution, and the compute times
//! its composing requests recorded (summed); each composing model keeps its own entry.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};

use super::error::{ServerError, ServerResult};
use super::infer::{
    AdmittedRequest, InferRequest, InferResponse, InputBytes, InputData, InputTensor, OutputData, OutputTensor,
    RequestedOutput, MODEL_VERSION,
};
use super::stats::ModelStats;
use crate::proto::inference::{model_config::SchedulingChoice, ModelConfig};
use crate::tensor::DataType;

/// The `platform` of an ensemble's config.
pub const PLATFORM: &str = "ensemble";

/// Whether a config describes an ensemble.
pub fn is_ensemble(config: &ModelConfig) -> bool {
    config.platform == PLATFORM
}

/// One step: a composing model and its tensor maps (composing model's name → ensemble tensor).
#[derive(Clone, Debug)]
struct Step {
    model: String,
    /// Empty: the latest version.
    version: String,
    inputs: Vec<(String, String)>,
    outputs: Vec<(String, String)>,
}

/// A validated ensemble graph.
#[derive(Debug)]
pub struct Ensemble {
    name: String,
    /// What the graph belongs to, for messages: "ensemble" or "BLS model".
    kind: &'static str,
    /// The ensemble's inputs (with their types) and outputs, in config order.
    inputs: Vec<(String, DataType)>,
    outputs: Vec<String>,
    steps: Vec<Step>,
}

/// A tensor that exists during one ensemble request.
struct Value {
    dtype: DataType,
    shape: Vec<i64>,
    data: Bytes,
}

fn sorted(map: &HashMap<String, String>) -> Vec<(String, String)> {
    let mut pairs: Vec<_> = map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    pairs.sort();
    pairs
}

impl Ensemble {
    /// Checks the graph of an ensemble config; the error is one line naming the problem.
    pub fn new(config: &ModelConfig) -> ServerResult<Self> {
        let name = &config.name;
        let bad = |why: String| ServerError::invalid_arg(format!("ensemble '{name}': {why}"));
        let Some(SchedulingChoice::EnsembleScheduling(scheduling)) = &config.scheduling_choice else {
            return Err(bad("platform \"ensemble\" needs ensemble_scheduling".into()));
        };
        if scheduling.step.is_empty() {
            return Err(bad("ensemble_scheduling has no step".into()));
        }
        let steps: Vec<Step> = scheduling
            .step
            .iter()
            .map(|s| Step {
                model: s.model_name.clone(),
                // -1 (and an unset 0) ask for the latest version.
                version: if s.model_version <= 0 { String::new() } else { s.model_version.to_string() },
                inputs: sorted(&s.input_map),
                outputs: sorted(&s.output_map),
            })
            .collect();
        let inputs: Vec<(String, DataType)> = config
            .input
            .iter()
            .map(|i| (i.name.clone(), DataType::from_config_enum(i.data_type).expect("config validated at parse")))
            .collect();
        let outputs: Vec<String> = config.output.iter().map(|o| o.name.clone()).collect();

        // Who produces each tensor: `None` for an ensemble input, `Some(step)` for a step output.
        let mut producer: HashMap<&str, Option<usize>> = inputs.iter().map(|(n, _)| (n.as_str(), None)).collect();
        for (i, step) in steps.iter().enumerate() {
            if step.model.is_empty() {
                return Err(bad(format!("step {i} names no model")));
            }
            for (_, tensor) in &step.outputs {
                if producer.insert(tensor, Some(i)).is_some() {
                    return Err(bad(format!("tensor '{tensor}' is produced more than once (again by step {i})")));
                }
            }
        }
        for (i, step) in steps.iter().enumerate() {
            if let Some((_, t)) = step.inputs.iter().find(|(_, t)| !producer.contains_key(t.as_str())) {
                return Err(bad(format!(
                    "step {i} ('{}') reads tensor '{t}', which no ensemble input or step output provides",
                    step.model
                )));
            }
        }
        if let Some(o) = outputs.iter().find(|o| !producer.contains_key(o.as_str())) {
            return Err(bad(format!("output '{o}' is produced by no step")));
        }

        // Kahn's order over steps: whatever never becomes ready waits on itself.
        let mut available: HashSet<&str> = inputs.iter().map(|(n, _)| n.as_str()).collect();
        let mut done = vec![false; steps.len()];
        loop {
            let ready: Vec<usize> = (0..steps.len())
                .filter(|&i| !done[i] && steps[i].inputs.iter().all(|(_, t)| available.contains(t.as_str())))
                .collect();
            if ready.is_empty() {
                break;
            }
            for i in ready {
                done[i] = true;
                available.extend(steps[i].outputs.iter().map(|(_, t)| t.as_str()));
            }
        }
        if let Some(i) = done.iter().position(|d| !d) {
            return Err(bad(format!("the steps form a cycle (step {i} ('{}') can never run)", steps[i].model)));
        }
        Ok(Ensemble { name: name.clone(), kind: "ensemble", inputs, outputs, steps })
    }

    /// One step that calls `model` with the config's own inputs and outputs, by name: the call a
    /// BLS model makes for each request.
    pub fn forwarding(config: &ModelConfig, model: &str) -> Self {
        let names = |tensors: &mut dyn Iterator<Item = &String>| tensors.map(|n| (n.clone(), n.clone())).collect();
        let step = Step {
            model: model.to_string(),
            version: String::new(),
            inputs: names(&mut config.input.iter().map(|i| &i.name)),
            outputs: names(&mut config.output.iter().map(|o| &o.name)),
        };
        Ensemble {
            name: config.name.clone(),
            kind: "BLS model",
            inputs: config
                .input
                .iter()
                .map(|i| (i.name.clone(), DataType::from_config_enum(i.data_type).expect("config validated at parse")))
                .collect(),
            outputs: config.output.iter().map(|o| o.name.clone()).collect(),
            steps: vec![step],
        }
    }

    /// "ensemble 'name'" or "BLS model 'name'", to begin a message.
    pub fn label(&self) -> String {
        format!("{} '{}'", self.kind, self.name)
    }

    /// The composing models' names, each once, in step order.
    pub fn composing_models(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for s in &self.steps {
            if !names.contains(&s.model.as_str()) {
                names.push(&s.model);
            }
        }
        names
    }

    /// Checks the steps that run `model` against its config: the mapped names must be its own.
    /// (The repository has refused composing models without a scheduler already.)
    pub fn check_composing(&self, model: &ModelConfig) -> ServerResult<()> {
        if model.model_transaction_policy.as_ref().is_some_and(|p| p.decoupled) {
            return Err(ServerError::invalid_arg(format!(
                "{}: composing model '{}' is decoupled; its steps need one response per request",
                self.label(),
                model.name
            )));
        }
        let inputs: Vec<&String> = model.input.iter().map(|t| &t.name).collect();
        let outputs: Vec<&String> = model.output.iter().map(|t| &t.name).collect();
        for (i, step) in self.steps.iter().enumerate().filter(|(_, s)| s.model == model.name) {
            let unknown_input = step.inputs.iter().find(|(k, _)| !inputs.contains(&k)).map(|(k, _)| ("input", k));
            let unknown_output = step.outputs.iter().find(|(k, _)| !outputs.contains(&k)).map(|(k, _)| ("output", k));
            if let Some((kind, key)) = unknown_input.or(unknown_output) {
                return Err(ServerError::invalid_arg(format!(
                    "{}: step {i} maps {kind} '{key}', which model '{}' does not have",
                    self.label(),
                    model.name
                )));
            }
        }
        Ok(())
    }

    /// Runs one admitted request through the graph. `run_step` runs a composing model's request
    /// through its own scheduler and also records that request's statistics into the given
    /// context (Triton's secondary statistics aggregator). The first failing step fails the
    /// request with its own error; steps still running are abandoned.
    pub async fn run<F, Fut>(
        &self,
        request: AdmittedRequest,
        stats: &ModelStats,
        run_step: F,
    ) -> ServerResult<InferResponse>
    where
        F: Fn(InferRequest, Arc<ModelStats>) -> Fut,
        Fut: Future<Output = ServerResult<InferResponse>>,
    {
        let started = Instant::now();
        let received = request.received;
        let context = Arc::new(ModelStats::default());
        let result = self.execute(&request, &context, run_step).await;
        let done = Instant::now();
        match &result {
            Ok(_) => {
                let compute = context.compute_totals();
                stats.record_success(done - received, started - received, compute);
                stats.record_execution(request.batch_size as u64, compute);
            }
            Err(_) => stats.record_failure(done - received),
        }
        result
    }

    /// Runs the graph for one request without recording the owner's statistics.
    pub(super) async fn execute<F, Fut>(
        &self,
        request: &AdmittedRequest,
        context: &Arc<ModelStats>,
        run_step: F,
    ) -> ServerResult<InferResponse>
    where
        F: Fn(InferRequest, Arc<ModelStats>) -> Fut,
        Fut: Future<Output = ServerResult<InferResponse>>,
    {
        let mut values: HashMap<String, Value> = HashMap::new();
        for ((name, dtype), input) in self.inputs.iter().zip(&request.inputs) {
            let data = match &input.bytes {
                InputBytes::Raw(b) => b.clone(),
                shm => {
                    // Read once from the region; every step then shares these bytes.
                    let mut buf = Vec::with_capacity(shm.len());
                    shm.gather_into(&mut buf)?;
                    Bytes::from(buf)
                }
            };
            values.insert(name.clone(), Value { dtype: *dtype, shape: input.shape.clone(), data });
        }

        let mut started = vec![false; self.steps.len()];
        let mut running = FuturesUnordered::new();
        loop {
            for (i, step) in self.steps.iter().enumerate() {
                if started[i] || !step.inputs.iter().all(|(_, t)| values.contains_key(t)) {
                    continue;
                }
                started[i] = true;
                let step_request = self.step_request(step, request, &values);
                let future = run_step(step_request, context.clone());
                running.push(async move { (i, future.await) });
            }
            let Some((i, result)) = running.next().await else { break };
            let response = result?;
            let step = &self.steps[i];
            for output in response.outputs {
                let OutputData::Raw(data) = output.data else {
                    return Err(ServerError::internal(format!(
                        "{}: step {i} answered output '{}' without data",
                        self.label(),
                        output.name
                    )));
                };
                if let Some((_, tensor)) = step.outputs.iter().find(|(k, _)| *k == output.name) {
                    values.insert(tensor.clone(), Value { dtype: output.datatype, shape: output.shape, data });
                }
            }
        }

        let mut outputs = Vec::with_capacity(request.outputs.len());
        for plan in &request.outputs {
            let name = &self.outputs[plan.config_index];
            let value = values
                .get(name)
                .ok_or_else(|| ServerError::internal(format!("{}: no step produced output '{name}'", self.label())))?;
            outputs.push(OutputTensor {
                name: name.clone(),
                datatype: value.dtype,
                shape: value.shape.clone(),
                data: plan.place(name, value.data.clone())?,
            });
        }
        Ok(InferResponse {
            model_name: self.name.clone(),
            model_version: MODEL_VERSION.to_string(),
            id: request.id.clone(),
            outputs,
        })
    }

    fn step_request(&self, step: &Step, request: &AdmittedRequest, values: &HashMap<String, Value>) -> InferRequest {
        InferRequest {
            model_name: step.model.clone(),
            model_version: step.version.clone(),
            id: request.id.clone(),
            inputs: step
                .inputs
                .iter()
                .map(|(input, tensor)| {
                    let v = &values[tensor];
                    InputTensor {
                        name: input.clone(),
                        datatype: v.dtype.as_str().to_string(),
                        shape: v.shape.clone(),
                        data: InputData::Raw(v.data.clone()),
                    }
                })
                .collect(),
            outputs: step.outputs.iter().map(|(o, _)| RequestedOutput { name: o.clone(), shm: None }).collect(),
            sequence: request.sequence.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::parse_pbtxt;

    fn ensemble(steps: &str, outputs: &str) -> ServerResult<Ensemble> {
        let text = format!(
            r#"platform: "ensemble" max_batch_size: 8
               input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
               output [ {outputs} ]
               ensemble_scheduling {{ step [ {steps} ] }}"#
        );
        Ensemble::new(&parse_pbtxt(&text, "e").unwrap())
    }

    fn step(model: &str, input: &str, output: &str) -> String {
        format!(
            r#"{{ model_name: "{model}" model_version: -1
                  input_map {{ key: "INPUT0" value: "{input}" }}
                  output_map {{ key: "OUTPUT0" value: "{output}" }} }}"#
        )
    }

    const OUT: &str = r#"{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }"#;

    #[test]
    fn a_chain_and_a_diamond_are_valid() {
        let chain = ensemble(&[step("a", "IN", "mid"), step("b", "mid", "OUT")].join(","), OUT).unwrap();
        assert_eq!(chain.composing_models(), vec!["a", "b"]);
        let two_outputs = r#"{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] },
                             { name: "OUT2" data_type: TYPE_FP32 dims: [ -1 ] }"#;
        // Steps listed out of order, two branches from one input: order does not matter.
        let diamond =
            ensemble(&[step("b", "x", "OUT"), step("a", "IN", "x"), step("a", "IN", "OUT2")].join(","), two_outputs)
                .unwrap();
        assert_eq!(diamond.composing_models(), vec!["b", "a"]);
    }

    #[test]
    fn an_unknown_tensor_is_refused() {
        let err = ensemble(&[step("a", "IN", "mid"), step("b", "nope", "OUT")].join(","), OUT).unwrap_err();
        assert!(err.message.contains("step 1 ('b') reads tensor 'nope'"), "{}", err.message);
        let err = ensemble(&step("a", "IN", "mid"), OUT).unwrap_err();
        assert!(err.message.contains("output 'OUT' is produced by no step"), "{}", err.message);
    }

    #[test]
    fn a_cycle_is_refused() {
        let steps = [step("a", "IN", "x"), step("b", "y", "z"), step("c", "z", "y"), step("d", "x", "OUT")];
        let err = ensemble(&steps.join(","), OUT).unwrap_err();
        assert!(err.message.contains("cycle (step 1 ('b')"), "{}", err.message);
        let err = ensemble(&step("a", "OUT", "OUT"), OUT).unwrap_err();
        assert!(err.message.contains("cycle"), "{}", err.message);
    }

    #[test]
    fn a_tensor_produced_twice_or_no_steps_is_refused() {
        let err = ensemble(&[step("a", "IN", "OUT"), step("b", "IN", "OUT")].join(","), OUT).unwrap_err();
        assert!(err.message.contains("'OUT' is produced more than once"), "{}", err.message);
        let err = ensemble(&step("a", "IN", "IN"), OUT).unwrap_err();
        assert!(err.message.contains("'IN' is produced more than once"), "{}", err.message);
        assert!(ensemble("", OUT).unwrap_err().message.contains("no step"));
    }

    #[test]
    fn composing_configs_must_have_the_mapped_names() {
        let e = ensemble(&[step("a", "IN", "mid"), step("b", "mid", "OUT")].join(","), OUT).unwrap();
        let model = |name: &str, input: &str| {
            parse_pbtxt(
                &format!(
                    r#"backend: "identity" max_batch_size: 8
                       input [ {{ name: "{input}" data_type: TYPE_FP32 dims: [ -1 ] }} ]
                       output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]"#
                ),
                name,
            )
            .unwrap()
        };
        e.check_composing(&model("a", "INPUT0")).unwrap();
        let err = e.check_composing(&model("b", "X")).unwrap_err();
        assert!(err.message.contains("step 1 maps input 'INPUT0', which model 'b' does not have"), "{}", err.message);
    }
}
