//! A generative sweep's settings: the endpoint type and AIPerf's prompt and token flags, as one
//! section of the settings ([`GenerativeSettings`], flags of `perfbench llm` and `perfbench
//! online`, keys of a scenario's `[online]`) and, resolved, as a sweep's [`Generative`]. A sweep
//! with one measures an OpenAI / Triton generate / KServe streaming endpoint per load level
//! instead of sending tensors. Checked here, before anything starts.

use std::fmt;
use std::path::PathBuf;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::PlanError;
use crate::load::{ModelSelection, OverSaturation};

/// `validate::invalid`, here too: validate reads this module's types, so this one cannot read it.
fn invalid(message: impl Into<String>) -> PlanError {
    PlanError::Invalid(message.into())
}

/// `--endpoint-type`, with AIPerf's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndpointType {
    /// OpenAI `POST /v1/chat/completions`.
    Chat,
    /// OpenAI `POST /v1/completions`.
    Completions,
    /// OpenAI `POST /v1/embeddings` (one response, no tokens out).
    Embeddings,
    /// Triton's `POST /v2/models/{m}/generate` (`generate_stream` with `--streaming`).
    Generate,
    /// KServe gRPC `ModelStreamInfer` with `text_input` (Triton's vLLM backend).
    Kserve,
    /// Anthropic Messages, `POST /v1/messages` (named SSE events; `text_delta`s are the tokens).
    Messages,
    /// OpenAI Responses, `POST /v1/responses` (`response.output_text.delta`s are the tokens).
    Responses,
    /// Cohere-shaped rerank, `POST /v2/rerank`: a query and passages, one answer, no tokens out.
    #[serde(rename = "cohere-rankings")]
    CohereRankings,
}

impl EndpointType {
    pub fn name(self) -> &'static str {
        match self {
            EndpointType::Chat => "chat",
            EndpointType::Completions => "completions",
            EndpointType::Embeddings => "embeddings",
            EndpointType::Generate => "generate",
            EndpointType::Kserve => "kserve",
            EndpointType::Messages => "messages",
            EndpointType::Responses => "responses",
            EndpointType::CohereRankings => "cohere-rankings",
        }
    }
}

impl fmt::Display for EndpointType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `--custom-dataset-type`: how `--input-file` is read, with AIPerf 0.13's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
pub enum DatasetType {
    /// One turn a line (`text`/`texts`, `timestamp` or `delay`, `output_length`, `session_id`).
    #[value(name = "single_turn", alias = "single-turn")]
    #[serde(rename = "single_turn")]
    SingleTurn,
    /// One session a line: `session_id` and `turns`, each a single_turn line.
    #[value(name = "multi_turn", alias = "multi-turn")]
    #[serde(rename = "multi_turn")]
    MultiTurn,
    /// Mooncake's trace: `timestamp`, `input_length`, `output_length`, `hash_ids`.
    #[value(name = "mooncake_trace", alias = "mooncake-trace")]
    #[serde(rename = "mooncake_trace")]
    MooncakeTrace,
    /// An agent's sessions a line each (`session_id`, `turns` of `messages`), children
    /// started by `spawns`/`forks` and joined by the parent's next turn.
    #[value(name = "dag_jsonl", alias = "dag-jsonl")]
    #[serde(rename = "dag_jsonl")]
    DagJsonl,
}

impl DatasetType {
    pub fn name(self) -> &'static str {
        match self {
            DatasetType::SingleTurn => "single_turn",
            DatasetType::MultiTurn => "multi_turn",
            DatasetType::MooncakeTrace => "mooncake_trace",
            DatasetType::DagJsonl => "dag_jsonl",
        }
    }
}

/// How a file's timestamps and delays are kept (`--fixed-schedule`, `--replay-speedup`,
/// `--ignore-trace-delays`), resolved.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceTiming {
    /// Send each entry at its timestamp (open loop) rather than under a concurrency or rate.
    #[serde(default)]
    pub fixed_schedule: bool,
    /// Timestamps and delays are divided by this.
    pub speedup: f64,
    /// Timestamps and delays dropped: as fast as the load allows.
    #[serde(default)]
    pub ignore_delays: bool,
}

impl Default for TraceTiming {
    fn default() -> TraceTiming {
        TraceTiming { fixed_schedule: false, speedup: 1.0, ignore_delays: false }
    }
}

/// AIPerf's defaults.
pub const DEFAULT_INPUT_TOKENS_MEAN: f64 = 550.0;
pub const DEFAULT_BLOCK_SIZE: usize = 512;
/// Requests measured per level when neither a count nor a duration is given (AIPerf's 10).
pub const DEFAULT_REQUEST_COUNT: u64 = 10;
/// AIPerf 0.13's rankings defaults (its dataset config's, which its CLI leaves in place when
/// the flags are not given): passages per query, tokens per passage, tokens per query.
pub const DEFAULT_RANKINGS_PASSAGES: f64 = 10.0;
pub const DEFAULT_RANKINGS_PASSAGE_TOKENS: f64 = 128.0;
pub const DEFAULT_RANKINGS_QUERY_TOKENS: f64 = 32.0;

/// The generative section, as given: every field optional.
#[derive(Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerativeSettings {
    /// Profile a generative endpoint (chat, completions, embeddings, generate, kserve, messages,
    /// responses or cohere-rankings) instead of sending tensors: TTFT, ITL and tokens/s per load level, AIPerf's files per level.
    #[arg(long = "endpoint-type", value_enum)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_type: Option<EndpointType>,
    /// A path in place of the endpoint type's (e.g. v1/chat/completions).
    #[arg(long = "endpoint", visible_alias = "custom-endpoint")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Mean prompt length in tokens of synthetic prompts [default: 550].
    #[arg(long = "synthetic-input-tokens-mean", visible_alias = "isl")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic_input_tokens_mean: Option<f64>,
    /// Its standard deviation [default: 0].
    #[arg(long = "synthetic-input-tokens-stddev", visible_alias = "isl-stddev")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic_input_tokens_stddev: Option<f64>,
    /// Output length asked for (`max_tokens`, with `ignore_eos`); unset: the server decides.
    #[arg(long = "output-tokens-mean", visible_alias = "osl")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_mean: Option<f64>,
    /// Its standard deviation [default: 0].
    #[arg(long = "output-tokens-stddev", visible_alias = "osl-stddev")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_stddev: Option<f64>,
    /// Distinct synthetic prompts (default, as AIPerf 0.13: one per request, warm-up included,
    /// so no prompt is sent twice; 100 with --benchmark-duration).
    #[arg(long = "num-dataset-entries", visible_alias = "num-prompts")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_dataset_entries: Option<usize>,
    /// Extra body fields, `key:value` (a JSON value, else a string), or one JSON object.
    #[arg(long = "extra-inputs")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_inputs: Option<Vec<String>>,
    /// JSONL prompts (single- or multi-turn, ShareGPT-like) or a mooncake trace (`timestamp`,
    /// `input_length`, `output_length`, `hash_ids`).
    #[arg(long = "input-file")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_file: Option<PathBuf>,
    /// How --input-file is read: single_turn, multi_turn, mooncake_trace or dag_jsonl
    /// (AIPerf's); unset: a mooncake trace when the first line has `input_length`, else prompts.
    #[arg(long = "custom-dataset-type", value_enum)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_dataset_type: Option<DatasetType>,
    /// Send each entry of --input-file at its `timestamp` (ms; later turns at theirs, or their
    /// `delay` after the answer before), whatever is in flight; how late each left is kept.
    #[arg(long = "fixed-schedule", num_args = 0, default_missing_value = "true")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed_schedule: Option<bool>,
    /// Divide the file's timestamps and delays by this (2: twice as fast) [default: 1].
    #[arg(long = "replay-speedup")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_speedup: Option<f64>,
    /// Drop the file's timestamps and delays: each turn leaves as soon as the load allows.
    #[arg(long = "ignore-trace-delays", num_args = 0, default_missing_value = "true")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_trace_delays: Option<bool>,
    /// Tokens per `hash_id` block of a mooncake trace [default: 512].
    #[arg(long = "prompt-input-tokens-block-size", visible_alias = "isl-block-size")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_input_tokens_block_size: Option<usize>,
    /// Client tokenizer: cl100k_base or o200k_base (bundled), or a tokenizer.json or its
    /// directory [default: cl100k_base].
    #[arg(long = "tokenizer")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// SLOs, e.g. "time_to_first_token:100 inter_token_latency:10" (ms; tokens/sec/user).
    #[arg(long = "goodput")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<String>,
    /// Seconds to send requests for, per level.
    #[arg(long = "benchmark-duration")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub benchmark_duration: Option<f64>,
    /// Seed of the synthetic prompts and lengths [default: 0].
    #[arg(long = "random-seed")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_seed: Option<u64>,
    /// cohere-rankings: mean passages per query [default: 10].
    #[arg(long = "rankings-passages-mean")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rankings_passages_mean: Option<f64>,
    /// Its standard deviation [default: 0].
    #[arg(long = "rankings-passages-stddev")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rankings_passages_stddev: Option<f64>,
    /// cohere-rankings: mean tokens per passage [default: 128].
    #[arg(long = "rankings-passages-prompt-token-mean")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rankings_passages_prompt_token_mean: Option<f64>,
    /// Its standard deviation [default: 0].
    #[arg(long = "rankings-passages-prompt-token-stddev")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rankings_passages_prompt_token_stddev: Option<f64>,
    /// cohere-rankings: mean tokens per query [default: 32].
    #[arg(long = "rankings-query-prompt-token-mean")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rankings_query_prompt_token_mean: Option<f64>,
    /// Its standard deviation [default: 0].
    #[arg(long = "rankings-query-prompt-token-stddev")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rankings_query_prompt_token_stddev: Option<f64>,
    /// Sessions to run (AIPerf's): each level ends once this many have started and finished;
    /// also the number of distinct synthetic sessions unless --num-dataset-entries is given.
    #[arg(long = "conversation-num", visible_aliases = ["num-conversations", "num-sessions"])]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_num: Option<usize>,
    /// Mean user turns per synthetic session [default: 1]; each later turn resends the
    /// conversation so far, the answers the server returned included.
    #[arg(long = "conversation-turn-mean", visible_alias = "session-turns-mean")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_turn_mean: Option<usize>,
    /// Its standard deviation [default: 0].
    #[arg(long = "conversation-turn-stddev", visible_alias = "session-turns-stddev")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_turn_stddev: Option<usize>,
    /// Mean think time in ms before each later turn, counted from the previous answer's end
    /// (the session keeps its concurrency slot meanwhile) [default: 0].
    #[arg(long = "conversation-turn-delay-mean", visible_alias = "session-turn-delay-mean")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_turn_delay_mean: Option<f64>,
    /// Its standard deviation in ms [default: 0].
    #[arg(long = "conversation-turn-delay-stddev", visible_alias = "session-turn-delay-stddev")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_turn_delay_stddev: Option<f64>,
    /// Every think time multiplied by this [default: 1].
    #[arg(long = "conversation-turn-delay-ratio", visible_alias = "session-delay-ratio")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_turn_delay_ratio: Option<f64>,
    /// Tokens of one system prompt that every session starts with.
    #[arg(long = "shared-system-prompt-length")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_system_prompt_length: Option<usize>,
    /// Tokens of a user context message of each session's own, after the system prompt.
    #[arg(long = "user-context-prompt-length")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_context_prompt_length: Option<usize>,
    /// Distinct prompt prefixes; each session's first prompt starts with one drawn at random.
    #[arg(long = "prompt-prefix-pool-size", visible_aliases = ["prefix-prompt-pool-size", "num-prefix-prompts"])]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_prefix_pool_size: Option<usize>,
    /// Tokens of each prompt prefix.
    #[arg(long = "prompt-prefix-length", visible_alias = "prefix-prompt-length")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_prefix_length: Option<usize>,
    /// With several models (`-m a,b`): which one each session goes to, round-robin (AIPerf's
    /// default), random (uniform, seeded by --random-seed) or weighted (by --model-weights).
    #[arg(long = "model-selection-strategy", value_enum)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_selection_strategy: Option<ModelSelection>,
    /// Each model's weight for the weighted strategy, `a:3,b:1` (implies it when no strategy is given).
    #[arg(long = "model-weights")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_weights: Option<String>,
    /// End an open-loop level early, marked `saturated`, once its requests in flight and their
    /// latency keep rising (guidellm's over_saturation test; see docs/saturation.md). Optional
    /// `min_seconds=S,min_latency=S,mode=enforce|monitor` [default: 30, 2.5, enforce].
    #[arg(long = "over-saturation", num_args = 0..=1, default_missing_value = "", value_name = "KEY=VALUE,...")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_saturation: Option<OverSaturation>,
}

/// A length distribution in tokens (AIPerf's mean/stddev pairs).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenLength {
    pub mean: f64,
    #[serde(default)]
    pub stddev: f64,
}

/// A generative sweep, resolved: what each level sends and how much.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generative {
    pub endpoint_type: EndpointType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    pub input_tokens: TokenLength,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<TokenLength>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_dataset_entries: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_file: Option<PathBuf>,
    /// `--custom-dataset-type` (`None`: guessed from the file's first line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset_type: Option<DatasetType>,
    /// The file's timestamps and delays: kept, scaled or dropped.
    #[serde(default, skip_serializing_if = "is_default_timing")]
    pub trace_timing: TraceTiming,
    pub block_size: usize,
    /// `--extra-inputs` as given (each checked to parse).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_inputs: Vec<String>,
    pub tokenizer: String,
    /// `--goodput` as given (checked to parse).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<String>,
    /// Requests measured per level; `None` with a duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_count: Option<u64>,
    /// Seconds each level sends requests for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub benchmark_duration_s: Option<f64>,
    #[serde(default)]
    pub warmup_request_count: u64,
    #[serde(default)]
    pub random_seed: u64,
    /// `--endpoint-type cohere-rankings`: what each query and its passages are made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rankings: Option<Rankings>,
    /// AIPerf's session flags, when any is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Sessions>,
    /// How a mix of models (`-m a,b`) picks each session's model.
    #[serde(default, skip_serializing_if = "is_default")]
    pub model_selection: ModelSelection,
    /// `--model-weights` as given (the weighted strategy's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_weights: Option<String>,
    /// The over-saturation stop of open-loop levels, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_saturation: Option<OverSaturation>,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

fn is_default_timing(timing: &TraceTiming) -> bool {
    *timing == TraceTiming::default()
}

/// Synthetic sessions (AIPerf's `--conversation-*` and prefix-prompt flags), resolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sessions {
    /// Sessions per level (`--conversation-num`); `None`: the request count or duration ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    /// User turns per session (a positive normal integer, as AIPerf draws it).
    pub turns: TokenLength,
    /// Think time before each later turn, in ms, before `delay_ratio`.
    pub delay_ms: TokenLength,
    pub delay_ratio: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_system_prompt_tokens: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_context_prompt_tokens: Option<usize>,
    /// Prefixes in the pool (0: none) and tokens in each.
    #[serde(default)]
    pub prefix_pool_size: usize,
    #[serde(default)]
    pub prefix_tokens: usize,
}

impl Sessions {
    /// Whether a session can have more than one turn, or context messages before its turns:
    /// what only a messages endpoint can carry.
    pub fn sends_history(&self) -> bool {
        self.turns.mean > 1.0
            || self.turns.stddev > 0.0
            || self.shared_system_prompt_tokens.is_some()
            || self.user_context_prompt_tokens.is_some()
    }
}

/// A rankings request's synthetic shape (AIPerf's `--rankings-*` flags).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rankings {
    /// Passages per query.
    pub passages: TokenLength,
    /// Tokens per passage.
    pub passage_tokens: TokenLength,
    /// Tokens per query.
    pub query_tokens: TokenLength,
}

impl GenerativeSettings {
    /// Whether any key of the section is set.
    pub fn is_given(&self) -> bool {
        *self != GenerativeSettings::default()
    }
}

/// The section filled with AIPerf's defaults and checked. `request_count` and `warmup` come from
/// the measurement section (`--request-count`, `--warmup-request-count`).
pub fn resolve(
    s: &GenerativeSettings,
    request_count: Option<u64>,
    warmup: Option<u64>,
) -> Result<Option<Generative>, PlanError> {
    let Some(endpoint_type) = s.endpoint_type else {
        return match s.is_given() {
            true => Err(invalid("the generative settings (prompts, tokens, --goodput, ...) need --endpoint-type")),
            false => Ok(None),
        };
    };
    let input_tokens = TokenLength {
        mean: s.synthetic_input_tokens_mean.unwrap_or(DEFAULT_INPUT_TOKENS_MEAN),
        stddev: s.synthetic_input_tokens_stddev.unwrap_or(0.0),
    };
    if !(input_tokens.mean >= 1.0 && input_tokens.stddev >= 0.0) {
        return Err(invalid("--synthetic-input-tokens-mean must be at least 1 and its stddev at least 0"));
    }
    let output_tokens =
        s.output_tokens_mean.map(|mean| TokenLength { mean, stddev: s.output_tokens_stddev.unwrap_or(0.0) });
    if output_tokens.is_some_and(|o| !(o.mean >= 1.0 && o.stddev >= 0.0)) {
        return Err(invalid("--output-tokens-mean must be at least 1 and its stddev at least 0"));
    }
    let duration = s.benchmark_duration;
    if duration.is_some_and(|d| !(d.is_finite() && d > 0.0)) {
        return Err(invalid("--benchmark-duration must be positive"));
    }
    if request_count == Some(0) {
        return Err(invalid("--request-count must be at least 1"));
    }
    let block_size = s.prompt_input_tokens_block_size.unwrap_or(DEFAULT_BLOCK_SIZE);
    if block_size == 0 || s.num_dataset_entries == Some(0) {
        return Err(invalid("--num-dataset-entries and --prompt-input-tokens-block-size must be at least 1"));
    }
    if s.endpoint.is_some() && endpoint_type == EndpointType::Kserve {
        return Err(invalid("--endpoint names an HTTP path; --endpoint-type kserve is gRPC ModelStreamInfer"));
    }
    let rankings = resolve_rankings(s, endpoint_type)?;
    let sessions = resolve_sessions(s, endpoint_type)?;
    let trace_timing = resolve_trace_timing(s, endpoint_type)?;
    let model_selection = match (s.model_selection_strategy, &s.model_weights) {
        (None, Some(_)) => ModelSelection::Weighted,
        (Some(strategy), _) => strategy,
        (None, None) => ModelSelection::default(),
    };
    match (model_selection, &s.model_weights) {
        (ModelSelection::Weighted, None) => {
            return Err(invalid("--model-selection-strategy weighted needs --model-weights a:3,b:1"))
        }
        (ModelSelection::RoundRobin | ModelSelection::Random, Some(_)) => {
            return Err(invalid(format!("--model-weights is for the weighted strategy, not {model_selection}")))
        }
        _ => {}
    }
    let extra_inputs = s.extra_inputs.clone().unwrap_or_default();
    parse_extra_inputs(&extra_inputs).map_err(invalid)?;
    if let Some(goodput) = &s.goodput {
        parse_goodput(goodput).map_err(invalid)?;
    }
    Ok(Some(Generative {
        endpoint_type,
        endpoint: s.endpoint.clone(),
        input_tokens,
        output_tokens,
        num_dataset_entries: s.num_dataset_entries,
        input_file: s.input_file.clone(),
        dataset_type: s.custom_dataset_type,
        trace_timing,
        block_size,
        extra_inputs,
        tokenizer: s.tokenizer.clone().unwrap_or_else(|| crate::tokenize::DEFAULT_TOKENIZER.to_string()),
        goodput: s.goodput.clone(),
        // A session count ends a level by itself, as a duration does.
        request_count: request_count
            .or((duration.is_none() && s.conversation_num.is_none()).then_some(DEFAULT_REQUEST_COUNT)),
        benchmark_duration_s: duration,
        warmup_request_count: warmup.unwrap_or(0),
        random_seed: s.random_seed.unwrap_or(0),
        rankings,
        sessions,
        model_selection,
        model_weights: s.model_weights.clone(),
        over_saturation: s.over_saturation,
    }))
}

/// `--custom-dataset-type`, `--fixed-schedule`, `--replay-speedup` and `--ignore-trace-delays`:
/// each needs an `--input-file`, and a dropped schedule cannot also be kept.
fn resolve_trace_timing(s: &GenerativeSettings, endpoint_type: EndpointType) -> Result<TraceTiming, PlanError> {
    let timing = TraceTiming {
        fixed_schedule: s.fixed_schedule.unwrap_or(false),
        speedup: s.replay_speedup.unwrap_or(1.0),
        ignore_delays: s.ignore_trace_delays.unwrap_or(false),
    };
    if s.input_file.is_none() {
        let given = [
            (s.custom_dataset_type.is_some(), "--custom-dataset-type"),
            (timing.fixed_schedule, "--fixed-schedule"),
            (s.replay_speedup.is_some(), "--replay-speedup"),
            (timing.ignore_delays, "--ignore-trace-delays"),
        ];
        if let Some((_, flag)) = given.iter().find(|(set, _)| *set) {
            return Err(invalid(format!("{flag} needs an --input-file to read")));
        }
    }
    if !(timing.speedup.is_finite() && timing.speedup > 0.0) {
        return Err(invalid("--replay-speedup must be a positive number"));
    }
    if timing.fixed_schedule && timing.ignore_delays {
        return Err(invalid("--fixed-schedule sends at the file's timestamps; --ignore-trace-delays drops them"));
    }
    if s.custom_dataset_type == Some(DatasetType::DagJsonl) {
        if timing.fixed_schedule {
            return Err(invalid("--custom-dataset-type dag_jsonl has delays, no timestamps: no --fixed-schedule"));
        }
        if !matches!(endpoint_type, EndpointType::Chat) {
            return Err(invalid(format!(
                "--custom-dataset-type dag_jsonl sends chat messages: --endpoint-type chat, not {endpoint_type}"
            )));
        }
    }
    Ok(timing)
}

/// The session flags (AIPerf's, with its refusals), `None` when none is given.
fn resolve_sessions(s: &GenerativeSettings, endpoint_type: EndpointType) -> Result<Option<Sessions>, PlanError> {
    let synthetic_only = [
        s.conversation_turn_mean.is_some(),
        s.conversation_turn_stddev.is_some(),
        s.conversation_turn_delay_mean.is_some(),
        s.conversation_turn_delay_stddev.is_some(),
        s.conversation_turn_delay_ratio.is_some(),
        s.shared_system_prompt_length.is_some(),
        s.user_context_prompt_length.is_some(),
        s.prompt_prefix_pool_size.is_some(),
        s.prompt_prefix_length.is_some(),
    ];
    if !synthetic_only.contains(&true) && s.conversation_num.is_none() {
        return Ok(None);
    }
    if synthetic_only.contains(&true) && s.input_file.is_some() {
        return Err(invalid(
            "the --conversation-turn-*, prompt-prefix and context-prompt options shape synthetic sessions; \
             an --input-file brings its own",
        ));
    }
    if matches!(endpoint_type, EndpointType::Embeddings | EndpointType::CohereRankings) {
        return Err(invalid(format!("--endpoint-type {endpoint_type} answers without generating: no sessions")));
    }
    if s.conversation_num == Some(0) {
        return Err(invalid("--conversation-num must be at least 1"));
    }
    let turns = TokenLength {
        mean: s.conversation_turn_mean.unwrap_or(1) as f64,
        stddev: s.conversation_turn_stddev.unwrap_or(0) as f64,
    };
    if turns.mean < 1.0 {
        return Err(invalid("--conversation-turn-mean must be at least 1"));
    }
    let delay_ms = TokenLength {
        mean: s.conversation_turn_delay_mean.unwrap_or(0.0),
        stddev: s.conversation_turn_delay_stddev.unwrap_or(0.0),
    };
    let delay_ratio = s.conversation_turn_delay_ratio.unwrap_or(1.0);
    if ![delay_ms.mean, delay_ms.stddev, delay_ratio].iter().all(|v| v.is_finite() && *v >= 0.0) {
        return Err(invalid("--conversation-turn-delay-mean, -stddev and -ratio must be 0 or more"));
    }
    if s.shared_system_prompt_length == Some(0) || s.user_context_prompt_length == Some(0) {
        return Err(invalid("--shared-system-prompt-length and --user-context-prompt-length must be at least 1"));
    }
    let prefix_pool_size = s.prompt_prefix_pool_size.unwrap_or(0);
    let prefix_tokens = s.prompt_prefix_length.unwrap_or(0);
    if (prefix_pool_size > 0) != (prefix_tokens > 0) {
        return Err(invalid("--prompt-prefix-pool-size and --prompt-prefix-length go together, both at least 1"));
    }
    let context = s.shared_system_prompt_length.is_some() || s.user_context_prompt_length.is_some();
    if prefix_pool_size > 0 && context {
        return Err(invalid(
            "--prompt-prefix-pool-size/--prompt-prefix-length and --shared-system-prompt-length/\
             --user-context-prompt-length are mutually exclusive (as in AIPerf)",
        ));
    }
    let sessions = Sessions {
        count: s.conversation_num,
        turns,
        delay_ms,
        delay_ratio,
        shared_system_prompt_tokens: s.shared_system_prompt_length,
        user_context_prompt_tokens: s.user_context_prompt_length,
        prefix_pool_size,
        prefix_tokens,
    };
    let carries_messages =
        matches!(endpoint_type, EndpointType::Chat | EndpointType::Messages | EndpointType::Responses);
    if sessions.sends_history() && !carries_messages {
        return Err(invalid(format!(
            "--endpoint-type {endpoint_type} sends one prompt, no history: multi-turn sessions and context \
             prompts need chat, messages or responses"
        )));
    }
    Ok(Some(sessions))
}

/// The `--rankings-*` flags, for a rankings endpoint only (AIPerf refuses them elsewhere, and
/// refuses `--synthetic-input-tokens-*` with one: a rankings prompt is a query and passages).
fn resolve_rankings(s: &GenerativeSettings, endpoint_type: EndpointType) -> Result<Option<Rankings>, PlanError> {
    let given = [
        s.rankings_passages_mean,
        s.rankings_passages_stddev,
        s.rankings_passages_prompt_token_mean,
        s.rankings_passages_prompt_token_stddev,
        s.rankings_query_prompt_token_mean,
        s.rankings_query_prompt_token_stddev,
    ]
    .iter()
    .any(Option::is_some);
    if endpoint_type != EndpointType::CohereRankings {
        return match given {
            true => Err(invalid("the --rankings-* options need --endpoint-type cohere-rankings")),
            false => Ok(None),
        };
    }
    if s.synthetic_input_tokens_mean.is_some() || s.synthetic_input_tokens_stddev.is_some() {
        return Err(invalid(
            "--endpoint-type cohere-rankings sizes its prompts with --rankings-query-prompt-token-mean and \
             --rankings-passages-prompt-token-mean, not --synthetic-input-tokens-*",
        ));
    }
    let length = |mean: Option<f64>, default: f64, stddev: Option<f64>| TokenLength {
        mean: mean.unwrap_or(default),
        stddev: stddev.unwrap_or(0.0),
    };
    let rankings = Rankings {
        passages: length(s.rankings_passages_mean, DEFAULT_RANKINGS_PASSAGES, s.rankings_passages_stddev),
        passage_tokens: length(
            s.rankings_passages_prompt_token_mean,
            DEFAULT_RANKINGS_PASSAGE_TOKENS,
            s.rankings_passages_prompt_token_stddev,
        ),
        query_tokens: length(
            s.rankings_query_prompt_token_mean,
            DEFAULT_RANKINGS_QUERY_TOKENS,
            s.rankings_query_prompt_token_stddev,
        ),
    };
    let lengths = [rankings.passages, rankings.passage_tokens, rankings.query_tokens];
    if !lengths.iter().all(|l| l.mean >= 1.0 && l.stddev >= 0.0) {
        return Err(invalid("the --rankings-* means must be at least 1 and their stddevs at least 0"));
    }
    Ok(Some(rankings))
}

/// `--extra-inputs key:value` (value parsed as JSON when it is JSON) or a whole JSON object.
pub fn parse_extra_inputs(items: &[String]) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let mut out = serde_json::Map::new();
    for item in items {
        if item.trim_start().starts_with('{') {
            let object: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(item).map_err(|e| format!("--extra-inputs '{item}': {e}"))?;
            out.extend(object);
            continue;
        }
        let (key, value) = item
            .split_once(':')
            .ok_or_else(|| format!("--extra-inputs '{item}': expected key:value or a JSON object"))?;
        let value = serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
        out.insert(key.to_string(), value);
    }
    Ok(out)
}

/// The per-request metrics an SLO may name.
pub const SLO_METRICS: [&str; 7] = [
    "time_to_first_token",
    "time_to_first_output_token",
    "inter_token_latency",
    "request_latency",
    "output_token_throughput_per_user",
    "output_sequence_length",
    "input_sequence_length",
];

/// `--goodput "time_to_first_token:100 inter_token_latency:10"`: (metric, limit) pairs in the
/// metrics' display units (ms, tokens/sec/user).
pub fn parse_goodput(text: &str) -> Result<Vec<(String, f64)>, String> {
    let mut out = Vec::new();
    for item in text.split(|c: char| c.is_whitespace() || c == ',').filter(|s| !s.is_empty()) {
        let (tag, value) = item.split_once(':').ok_or_else(|| format!("--goodput: '{item}' is not METRIC:VALUE"))?;
        if !SLO_METRICS.contains(&tag) {
            return Err(format!("--goodput: unknown metric '{tag}' (one of {})", SLO_METRICS.join(", ")));
        }
        let value: f64 = value.parse().map_err(|_| format!("--goodput: '{value}' is not a number"))?;
        if !value.is_finite() || value < 0.0 {
            return Err(format!("--goodput: '{item}' needs a value of 0 or more"));
        }
        out.push((tag.to_string(), value));
    }
    if out.is_empty() {
        return Err("--goodput: no SLO given".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
