//! What `perfbench search` explores (pure): the space of model configurations (instance count,
//! `max_batch_size`, dynamic batching), the client concurrencies tried on each, the latency
//! budget a configuration must meet, and the objective that ranks those that do.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use std::path::Path;

use super::layers::overlay;
use super::{Model, Sweep, Target};
use crate::results::{ReportRow, TokenFigures};

/// The latency statistic a budget limits: of the request latency, or (a generative sweep) of
/// the time to first token or the inter-token latency.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Statistic {
    P50,
    P90,
    P95,
    P99,
    Avg,
    TtftP50,
    TtftP99,
    TtftAvg,
    ItlP50,
    ItlP99,
    ItlAvg,
}

impl Statistic {
    pub const ALL: [Statistic; 11] = [
        Statistic::P50,
        Statistic::P90,
        Statistic::P95,
        Statistic::P99,
        Statistic::Avg,
        Statistic::TtftP50,
        Statistic::TtftP99,
        Statistic::TtftAvg,
        Statistic::ItlP50,
        Statistic::ItlP99,
        Statistic::ItlAvg,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Statistic::P50 => "p50",
            Statistic::P90 => "p90",
            Statistic::P95 => "p95",
            Statistic::P99 => "p99",
            Statistic::Avg => "avg",
            Statistic::TtftP50 => "ttft_p50",
            Statistic::TtftP99 => "ttft_p99",
            Statistic::TtftAvg => "ttft_avg",
            Statistic::ItlP50 => "itl_p50",
            Statistic::ItlP99 => "itl_p99",
            Statistic::ItlAvg => "itl_avg",
        }
    }

    /// Whether only a generative sweep measures it.
    pub fn of_tokens(self) -> bool {
        !matches!(self, Statistic::P50 | Statistic::P90 | Statistic::P95 | Statistic::P99 | Statistic::Avg)
    }

    /// This statistic of a measured row, µs (NaN where the row has no token figures).
    pub fn of(self, row: &ReportRow) -> f64 {
        let token = |pick: fn(&TokenFigures) -> f64| row.tokens.as_ref().map_or(f64::NAN, pick);
        match self {
            Statistic::P50 => row.p50_us,
            Statistic::P90 => row.p90_us,
            Statistic::P95 => row.p95_us,
            Statistic::P99 => row.p99_us,
            Statistic::Avg => row.avg_us,
            Statistic::TtftP50 => token(|t| t.ttft_p50_us),
            Statistic::TtftP99 => token(|t| t.ttft_p99_us),
            Statistic::TtftAvg => token(|t| t.ttft_avg_us),
            Statistic::ItlP50 => token(|t| t.itl_p50_us),
            Statistic::ItlP99 => token(|t| t.itl_p99_us),
            Statistic::ItlAvg => token(|t| t.itl_avg_us),
        }
    }
}

/// `--latency-budget p99=20ms`: the statistic and its limit (in a plan file, that text).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Budget {
    pub statistic: Statistic,
    pub limit_us: f64,
}

impl Budget {
    /// Whether a measured row meets the budget: the statistic within the limit and no failures.
    pub fn met_by(&self, row: &ReportRow) -> bool {
        row.requests > 0 && row.failed == 0 && self.statistic.of(row) <= self.limit_us
    }
}

impl FromStr for Budget {
    type Err = String;
    fn from_str(text: &str) -> Result<Budget, String> {
        let bad = || {
            format!(
                "bad --latency-budget '{text}': expected STAT=TIME, e.g. p99=20ms (STAT p50, p90, p95, p99 or avg of \
                 the request latency, or ttft_p50, ttft_p99, ttft_avg, itl_p50, itl_p99, itl_avg; TIME in us, ms or s)"
            )
        };
        let (stat, time) = text.split_once('=').ok_or_else(bad)?;
        let stat = stat.trim().to_ascii_lowercase();
        let statistic = *Statistic::ALL.iter().find(|s| s.name() == stat).ok_or_else(bad)?;
        let time = time.trim();
        let (number, scale) = if let Some(n) = time.strip_suffix("us") {
            (n, 1.0)
        } else if let Some(n) = time.strip_suffix("ms") {
            (n, 1e3)
        } else if let Some(n) = time.strip_suffix('s') {
            (n, 1e6)
        } else {
            return Err(bad());
        };
        let value: f64 = number.trim().parse().map_err(|_| bad())?;
        if !value.is_finite() || value <= 0.0 {
            return Err(bad());
        }
        Ok(Budget { statistic, limit_us: value * scale })
    }
}

impl fmt::Display for Budget {
    /// In ms when whole, else in µs, so that the text reads back as the same budget.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.limit_us % 1000.0 == 0.0 {
            write!(f, "{}={}ms", self.statistic.name(), self.limit_us / 1e3)
        } else {
            write!(f, "{}={}us", self.statistic.name(), self.limit_us)
        }
    }
}

impl From<Budget> for String {
    fn from(b: Budget) -> String {
        b.to_string()
    }
}

impl TryFrom<String> for Budget {
    type Error = String;
    fn try_from(s: String) -> Result<Budget, String> {
        s.parse()
    }
}

/// What ranks the configurations that meet the budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// The most inferences (a generative sweep: requests) per second.
    #[default]
    Throughput,
    /// The lowest budgeted latency.
    Latency,
    /// The most output tokens per second (a generative sweep; its default).
    Tokens,
}

impl Objective {
    /// A row's score: higher is better; NaN where the row lacks the figure.
    pub fn score(self, row: &ReportRow, budget: &Budget) -> f64 {
        match self {
            Objective::Throughput => row.throughput,
            Objective::Latency => -budget.statistic.of(row),
            Objective::Tokens => row.tokens.as_ref().map_or(f64::NAN, |t| t.output_tokens_per_s),
        }
    }
}

impl FromStr for Objective {
    type Err = String;
    fn from_str(text: &str) -> Result<Objective, String> {
        match text {
            "throughput" => Ok(Objective::Throughput),
            "latency" => Ok(Objective::Latency),
            "tokens" => Ok(Objective::Tokens),
            _ => Err(format!("bad --objective '{text}': throughput, latency or tokens (output tokens/s)")),
        }
    }
}

/// How the space is walked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Climb: one dimension at a time, to the next value while the objective improves.
    #[default]
    Quick,
    /// Every configuration of the grid.
    Brute,
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(text: &str) -> Result<Mode, String> {
        match text {
            "quick" => Ok(Mode::Quick),
            "brute" => Ok(Mode::Brute),
            _ => Err(format!("bad --mode '{text}': quick or brute")),
        }
    }
}

/// The scheduling of one configuration.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Batching {
    /// No dynamic batcher: each request runs alone.
    Off,
    /// Triton's dynamic batcher with this queue delay and these preferred sizes (none: empty).
    Dynamic { queue_delay_us: u64, preferred: Vec<u32> },
}

impl Batching {
    /// Whether this scheduling fits a `max_batch_size` (preferred sizes within it; a model
    /// without batching takes no batcher).
    pub fn fits(&self, max_batch_size: u32) -> bool {
        match self {
            Batching::Off => true,
            Batching::Dynamic { preferred, .. } => {
                max_batch_size > 0 && preferred.iter().all(|p| (1..=max_batch_size).contains(p))
            }
        }
    }
}

/// One point of the space.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Candidate {
    pub instances: u32,
    pub max_batch_size: u32,
    pub batching: Batching,
    /// The searched model `parameters` (name, value), in the space's order.
    pub parameters: Vec<(String, String)>,
}

impl Candidate {
    /// Whether requests may be batched together by the server.
    pub fn batches(&self) -> bool {
        self.max_batch_size > 1 && matches!(self.batching, Batching::Dynamic { .. })
    }
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "instances={} max_batch_size={}", self.instances, self.max_batch_size)?;
        match &self.batching {
            Batching::Off => write!(f, " dynamic_batching=off")?,
            Batching::Dynamic { queue_delay_us, preferred } if preferred.is_empty() => {
                write!(f, " dynamic_batching=on delay={queue_delay_us}us")?
            }
            Batching::Dynamic { queue_delay_us, preferred } => {
                let sizes: Vec<String> = preferred.iter().map(u32::to_string).collect();
                write!(f, " dynamic_batching=on delay={queue_delay_us}us preferred={}", sizes.join(";"))?
            }
        }
        for (name, value) in &self.parameters {
            write!(f, " {name}={value}")?;
        }
        Ok(())
    }
}

/// The space: each dimension's values in climbing order (smallest first). An empty scheduler
/// dimension (`instances`, `max_batch_sizes`, `batching`) keeps the model's own value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Space {
    pub instances: Vec<u32>,
    pub max_batch_sizes: Vec<u32>,
    pub batching: Vec<Batching>,
    /// Model `parameters` searched, each with its values in climbing order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<Parameter>,
    /// Client concurrencies tried on each configuration, in order; a ramp stops once the
    /// budget breaks.
    pub concurrency: Vec<u64>,
}

/// A model config parameter the search varies (`--parameter max_num_seqs=8..256`): values as
/// the config's `string_value` holds them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parameter {
    pub name: String,
    pub values: Vec<String>,
}

impl FromStr for Parameter {
    type Err = String;
    /// `NAME=VALUES`: numbers as `--instances` takes them (a list or a doubling range), or
    /// words separated by commas, tried in the order given.
    fn from_str(text: &str) -> Result<Parameter, String> {
        let bad =
            |why: &str| format!("bad --parameter '{text}': {why} (expected NAME=VALUES, e.g. max_num_seqs=8..256)");
        let (name, list) = text.split_once('=').ok_or_else(|| bad("no '='"))?;
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(bad("no parameter name"));
        }
        let values = match values("--parameter", list, 0) {
            Ok(numbers) => numbers.iter().map(u64::to_string).collect(),
            Err(_) if list.contains("..") => return Err(bad("a range takes whole numbers")),
            Err(_) => {
                let mut words: Vec<String> = Vec::new();
                for word in list.split(',').map(str::trim) {
                    if word.is_empty() {
                        return Err(bad("an empty value"));
                    }
                    if !words.iter().any(|w| w == word) {
                        words.push(word.to_string());
                    }
                }
                words
            }
        };
        Ok(Parameter { name: name.to_string(), values })
    }
}

/// The defaults: up to 4 instances, batches up to 128, the dynamic batcher without delay,
/// concurrency doubling to 256.
pub const DEFAULT_INSTANCES: &str = "1,2,4";
pub const DEFAULT_MAX_BATCH_SIZES: &str = "1,8,32,128";
pub const DEFAULT_CONCURRENCY: &str = "1..256";
/// A generative search's default: the continuous batcher's most running sequences (vLLM's
/// name, the `llm` twin's parameter); the scheduler dimensions keep the model's own.
pub const DEFAULT_GENERATIVE_PARAMETER: &str = "max_num_seqs=8..256";

/// A search as a user gives it, every key optional: the `perfbench search` flags, or a
/// scenario's `[search]` table (its keys are these names). Declared once for both: clap reads the
/// flags into it, serde the table. [`SearchSettings::merged`] lays the flags over the file;
/// [`SearchPlan::resolve`] fills the rest from the defaults and checks it.
// A file may write each list of numbers as the flag does (`"1,2,4"`, `"1..8"`) or as an array
// (`[1, 2, 4]`): `values_text` reads both as the flag's text.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSettings {
    /// The latency a configuration must keep: STAT=TIME, STAT p50, p90, p95, p99 or avg (e.g. p99=20ms); a generative sweep also ttft_p50, ttft_p99, ttft_avg, itl_p50, itl_p99, itl_avg.
    #[arg(long = "latency-budget")]
    pub latency_budget: Option<String>,
    /// What ranks the configurations that meet the budget: throughput (default), latency, or tokens (output tokens/s; a generative sweep's default).
    #[arg(long = "objective")]
    pub objective: Option<String>,
    /// quick (default: climb one dimension at a time while it pays) or brute (the whole grid).
    #[arg(long = "mode")]
    pub mode: Option<String>,
    /// Most configurations tried (beside the model's own).
    #[arg(long = "max-configs")]
    pub max_configs: Option<usize>,
    /// No new configuration is started after this many minutes.
    #[arg(long = "max-minutes")]
    pub max_minutes: Option<f64>,
    /// Instance counts: a list 1,2,4 or a doubling range 1..8.
    #[arg(long = "instances")]
    #[serde(default, deserialize_with = "values_text::option")]
    pub instances: Option<String>,
    /// max_batch_size values: a list 1,8,32,128 or a doubling range 1..128.
    #[arg(long = "max-batch-size")]
    #[serde(default, deserialize_with = "values_text::option")]
    pub max_batch_size: Option<String>,
    /// Dynamic batching: on, off, or on,off.
    #[arg(long = "dynamic-batching")]
    pub dynamic_batching: Option<String>,
    /// The dynamic batcher's max_queue_delay_microseconds values (list or range).
    #[arg(long = "queue-delay-us")]
    #[serde(default, deserialize_with = "values_text::option")]
    pub queue_delay_us: Option<String>,
    /// One set of preferred batch sizes, e.g. 4,8, or none (repeatable: each set is tried).
    #[arg(long = "preferred-batch-sizes")]
    #[serde(default, deserialize_with = "values_text::list")]
    pub preferred_batch_sizes: Option<Vec<String>>,
    /// A model config parameter and its values, NAME=VALUES, e.g. max_num_seqs=8..256 (repeatable).
    #[arg(long = "parameter")]
    pub parameter: Option<Vec<String>>,
    /// Client concurrencies tried on each configuration, in order; a ramp stops once the budget breaks.
    #[arg(long = "concurrency")]
    #[serde(default, deserialize_with = "values_text::option")]
    pub concurrency: Option<String>,
}

impl SearchSettings {
    /// `over`'s values where it has them, these elsewhere (a scenario's `[search]` under flags,
    /// or under a profile's).
    pub fn merged(&self, over: &SearchSettings) -> SearchSettings {
        overlay(self, over)
    }
}

/// A list of numbers as a file may write it, a string (`"1,2,4"`, `"1..8"`) or an array
/// (`[1, 2, 4]`), read as the text the flag takes.
mod values_text {
    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Values {
        Text(String),
        Numbers(Vec<u64>),
    }

    impl From<Values> for String {
        fn from(v: Values) -> String {
            match v {
                Values::Text(t) => t,
                Values::Numbers(n) => n.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
            }
        }
    }

    pub fn option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        Values::deserialize(d).map(|v| Some(v.into()))
    }

    pub fn list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
        Vec::<Values>::deserialize(d).map(|sets| Some(sets.into_iter().map(String::from).collect()))
    }
}

/// A list `1,8,32` (sorted, deduplicated) or a doubling range `1..64` (1, 2, 4, ..., 64, the
/// end always included), each value at least `min`.
pub fn values(flag: &str, text: &str, min: u64) -> Result<Vec<u64>, String> {
    let number = |s: &str| -> Result<u64, String> {
        let v: u64 = s.trim().parse().map_err(|_| format!("bad {flag} '{text}': '{s}' is not a number"))?;
        if v < min {
            return Err(format!("bad {flag} '{text}': values must be >= {min}"));
        }
        Ok(v)
    };
    let mut out = match text.split_once("..") {
        Some((a, b)) => {
            let (start, end) = (number(a)?, number(b)?);
            if end < start {
                return Err(format!("bad {flag} '{text}': the range is descending"));
            }
            let mut v = vec![start];
            let mut x = start.max(1);
            while x * 2 < end {
                x *= 2;
                v.push(x);
            }
            v.push(end);
            v
        }
        None => text.split(',').map(number).collect::<Result<Vec<_>, _>>()?,
    };
    out.sort_unstable();
    out.dedup();
    if out.is_empty() {
        return Err(format!("bad {flag} '{text}': no values"));
    }
    Ok(out)
}

/// The improvement a climb step or a concurrency step must bring to go on, in percent: above
/// the run-to-run noise of a short measurement.
pub const IMPROVEMENT_PCT: f64 = 5.0;

/// A resolved search (the `[search]` table of a plan file): the budget, the objective, how the
/// space is walked and within what bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Search {
    pub budget: Budget,
    pub objective: Objective,
    pub mode: Mode,
    /// Most configurations tried beside the model's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_configs: Option<usize>,
    /// No configuration is started once this many minutes have passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_minutes: Option<f64>,
    /// What a climb step or a concurrency step must bring to go on, in percent.
    pub improvement_pct: f64,
    pub space: Space,
}

/// A whole search: where, what model, the search, and how each point is measured (`sweep`, an
/// online sweep whose concurrency each configuration's ramp replaces). `perfbench search
/// --print-plan` prints it as TOML and `perfbench search PLAN.toml` runs it back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchPlan {
    pub target: Target,
    pub model: Model,
    pub search: Search,
    pub sweep: Sweep,
}

impl SearchPlan {
    /// The results folder.
    pub fn out(&self) -> &Path {
        self.sweep.output.dir.as_deref().expect("a checked search plan has an output folder")
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a search plan is always representable as TOML")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_parse_in_any_unit_and_bad_ones_say_why() {
        let b: Budget = "p99=20ms".parse().unwrap();
        assert_eq!(b, Budget { statistic: Statistic::P99, limit_us: 20_000.0 });
        assert_eq!("avg=500us".parse::<Budget>().unwrap().limit_us, 500.0);
        assert_eq!("P95=0.5s".parse::<Budget>().unwrap().limit_us, 500_000.0);
        let ttft: Budget = "ttft_p99=250ms".parse().unwrap();
        assert_eq!(ttft, Budget { statistic: Statistic::TtftP99, limit_us: 250_000.0 });
        assert_eq!(ttft.to_string().parse::<Budget>().unwrap(), ttft, "reads back");
        for s in Statistic::ALL {
            assert_eq!(format!("{}=1ms", s.name()).parse::<Budget>().unwrap().statistic, s);
        }
        for bad in ["p99", "p98=1ms", "p99=1", "p99=-1ms", "p99=xms"] {
            let e = bad.parse::<Budget>().unwrap_err().to_string();
            assert!(e.contains("--latency-budget"), "{bad}: {e}");
        }
    }

    #[test]
    fn ranges_double_and_lists_sort() {
        assert_eq!(values("f", "1..4", 1).unwrap(), [1, 2, 4]);
        assert_eq!(values("f", "1..6", 1).unwrap(), [1, 2, 4, 6]);
        assert_eq!(values("f", "32,1,8,8", 0).unwrap(), [1, 8, 32]);
        assert!(values("f", "4..1", 1).is_err());
        assert!(values("f", "0,1", 1).is_err());
    }
}
