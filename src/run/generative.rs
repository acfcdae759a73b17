//! A plan's generative sweep (`online --endpoint-type`, a scenario's `[online]` with
//! `endpoint_type`): one [`genai`](crate::genai) profile per load level against the run's server,
//! each level's AIPerf files in its own folder, and report.csv/md/html in the results folder
//! after every level, so `report`, `compare` and `gate` read it like any other sweep's.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::anyhow;

use super::{RunError, SweepOutcome};
use crate::genai::runner::Schedule;
use crate::genai::sweep::{self, Level};
use crate::genai::LlmConfig;
use crate::plan::generative::{EndpointType, Generative};
use crate::plan::{Distribution, Load, Model, Sweep, PLAN_FILE};
use crate::results::csv::{read_csv, Unit};

/// Where the levels reach the server.
pub(super) struct Address<'a> {
    pub http: &'a str,
    pub grpc: &'a str,
    /// The server's Prometheus endpoint (host:port/metrics or a URL); prefix-cache counters.
    pub metrics: Option<&'a str>,
}

/// The load levels of the sweep, in order.
fn schedules(load: &Load) -> Result<Vec<Schedule>, RunError> {
    match load {
        Load::Concurrency { levels } => {
            let values = levels.values(crate::plan::MAX_OPEN_CONCURRENCY);
            Ok(values.into_iter().map(|n| Schedule::Concurrency(n as usize)).collect())
        }
        Load::RequestRate { start, end, step, distribution, .. } => {
            let poisson = *distribution == Distribution::Poisson;
            let mut rates = Vec::new();
            let mut rate = *start;
            // The same points perf_analyzer's rate range measures: start, start + step, ... ≤ end.
            while rate <= *end + 1e-9 && rates.len() < 1024 {
                rates.push(Schedule::Rate { per_second: rate, poisson });
                rate += step;
            }
            Ok(rates)
        }
        other => Err(RunError::bad_input(anyhow!(
            "a generative sweep runs over concurrencies or request rates, not {other:?}"
        ))),
    }
}

/// Runs the sweep's levels in turn and writes its reports; the rows come back read from the
/// report.csv written, as every reader sees them.
pub(super) async fn run(
    model: &Model,
    sweep: &Sweep,
    g: &Generative,
    address: Address<'_>,
    folder_plan: &str,
) -> Result<SweepOutcome, RunError> {
    let dir = sweep.output.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).map_err(RunError::bad_input)?;
    std::fs::write(dir.join(PLAN_FILE), folder_plan).map_err(RunError::bad_input)?;
    let tokenizer =
        crate::tokenize::Tokenizer::open(&g.tokenizer).map_err(|e| RunError::bad_input(anyhow!("--tokenizer: {e}")))?;
    let url = match g.endpoint_type {
        EndpointType::Kserve => address.grpc,
        _ => address.http,
    };
    let headers = sweep.call.headers.iter().map(|h| (h.name.clone(), h.value.clone())).collect();
    let mut config = LlmConfig::of(
        g,
        &model.name,
        Some(url.to_string()),
        sweep.call.streaming,
        Schedule::Concurrency(1),
        headers,
        dir.clone(),
    )
    .map_err(|e| RunError::bad_input(anyhow!(e)))?;
    config.server_metrics =
        address.metrics.map(|m| if m.contains("://") { m.to_string() } else { format!("http://{m}") });
    let schedules = schedules(&sweep.load)?;
    let title = format!(
        "{} | {} {}| {}",
        model.name,
        g.endpoint_type,
        if sweep.call.streaming { "streaming " } else { "" },
        match &sweep.load {
            Load::Concurrency { levels } => format!("concurrency {levels}"),
            Load::RequestRate { start, end, step, .. } => format!("request rate {start}..{end}:{step}/s"),
            _ => String::new(),
        }
    );
    let report_dir = dir.clone();
    let write = move |done: &[Level]| sweep::write_reports(&report_dir, done, &title);
    let tokenizer: Arc<dyn crate::genai::inputs::Tokenizer> = Arc::new(tokenizer);
    // The levels run on the generative client's own runtime (tuned for thousands of streams).
    tokio::task::spawn_blocking(move || sweep::run(&config, &schedules, tokenizer, write))
        .await
        .map_err(RunError::target)?
        .map_err(RunError::target)?;
    let rows = read_csv(&dir.join("report.csv"), Unit::Us).map_err(RunError::bad_input)?;
    let table = std::fs::read_to_string(dir.join("report.md")).ok();
    Ok(SweepOutcome { kind: sweep.kind, rows, dir: Some(dir), table })
}
