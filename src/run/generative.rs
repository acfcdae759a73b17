//! A plan's generative sweep (`online --endpoint-type`, a scenario's `[online]` with
//! `endpoint_type`): one [`genai`](crate::genai) profile per load level against the run's server,
//! each level's AIPerf files in its own folder, and report.csv/md/html in the results folder
//! after every level, so `report`, `compare` and `gate` read it like any other sweep's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail};

use super::{RunError, SweepOutcome};
use crate::genai::client_limit::ClientLoad;
use crate::genai::export::{self, read_records, RunInfo, RECORDS_FILE};
use crate::genai::metrics::{summarize, Record, Slos};
use crate::genai::runner::Schedule;
use crate::genai::sweep::{self, Level, Part};
use crate::genai::{LlmConfig, Outcome};
use crate::plan::generative::{EndpointType, Generative};
use crate::plan::{Distribution, Load, Model, Plan, Shard, Sweep, PLAN_FILE};
use crate::results::csv::{read_csv, Unit};
use crate::results::ReportRow;

/// Where the levels reach the server.
pub(crate) struct Address<'a> {
    pub http: &'a str,
    pub grpc: &'a str,
    /// The server's Prometheus endpoint (host:port/metrics or a URL); prefix-cache counters.
    pub metrics: Option<&'a str>,
}

/// The load levels of the sweep, in order.
fn schedules(load: &Load) -> anyhow::Result<Vec<Schedule>> {
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
        other => bail!("a generative sweep runs over concurrencies or request rates, not {other:?}"),
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
    shard: Option<Shard>,
    resume: bool,
) -> Result<SweepOutcome, RunError> {
    if shard.is_some_and(|s| s.start_at_ms.is_some()) {
        return Err(RunError::bad_input(anyhow!("--start-at does not line up a generative sweep's levels")));
    }
    let part = shard.map(|s| Part { index: s.index, count: s.count });
    let dir = sweep.output.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).map_err(RunError::bad_input)?;
    std::fs::write(dir.join(PLAN_FILE), folder_plan).map_err(RunError::bad_input)?;
    let mut schedules = match g.trace_timing.fixed_schedule {
        // One level: the file at its timestamps.
        true => vec![Schedule::Trace],
        false => schedules(&sweep.load).map_err(RunError::bad_input)?,
    };
    let kept = if resume {
        finished(&dir, &schedules, g, sweep.call.streaming).map_err(RunError::bad_input)?
    } else {
        Vec::new()
    };
    if !kept.is_empty() {
        eprintln!("resuming: {} measured level(s) kept from the results folder", kept.len());
    }
    schedules.drain(..kept.len());
    let rows = levels(model, sweep, g, address, &dir, schedules, part, kept).await?;
    let table = std::fs::read_to_string(dir.join("report.md")).ok();
    Ok(SweepOutcome { kind: sweep.kind, rows, dir: Some(dir), table })
}

/// One concurrency of the sweep measured alone into `dir` (a search's point): its AIPerf files
/// in `dir/concurrency<N>/`, its reports in `dir`, its row as report.csv reads back.
pub(crate) async fn measure_concurrency(
    model: &Model,
    sweep: &Sweep,
    address: Address<'_>,
    dir: &Path,
    concurrency: u64,
) -> Result<ReportRow, RunError> {
    let g = sweep.generative.as_ref().ok_or_else(|| RunError::bad_input(anyhow!("not a generative sweep")))?;
    std::fs::create_dir_all(dir).map_err(RunError::bad_input)?;
    let schedules = vec![Schedule::Concurrency(concurrency as usize)];
    let rows = levels(model, sweep, g, address, dir, schedules, None, Vec::new()).await?;
    rows.into_iter().next().ok_or_else(|| RunError::target(anyhow!("the level wrote no row")))
}

/// Profiles `schedules` in turn into `dir` and writes the reports after each, `kept` (levels
/// measured before) first.
#[allow(clippy::too_many_arguments)]
async fn levels(
    model: &Model,
    sweep: &Sweep,
    g: &Generative,
    address: Address<'_>,
    dir: &Path,
    schedules: Vec<Schedule>,
    part: Option<Part>,
    kept: Vec<Level>,
) -> Result<Vec<ReportRow>, RunError> {
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
        dir.to_path_buf(),
    )
    .map_err(|e| RunError::bad_input(anyhow!(e)))?;
    config.shape = super::prepare::load_shape(&sweep.shape)?;
    config.server_metrics =
        address.metrics.map(|m| if m.contains("://") { m.to_string() } else { format!("http://{m}") });
    let title = title(model, sweep, g);
    let report_dir = dir.to_path_buf();
    let write = move |done: &[Level]| sweep::write_reports(&report_dir, done, &title);
    let tokenizer: Arc<dyn crate::genai::inputs::Tokenizer> = Arc::new(tokenizer);
    // The levels run on the generative client's own runtime (tuned for thousands of streams).
    tokio::task::spawn_blocking(move || sweep::run(&config, &schedules, tokenizer, part, kept, write))
        .await
        .map_err(RunError::target)?
        .map_err(RunError::target)?;
    read_csv(&dir.join("report.csv"), Unit::Us).map_err(RunError::bad_input)
}

/// The reports' title: model, endpoint, load.
fn title(model: &Model, sweep: &Sweep, g: &Generative) -> String {
    let load = match &sweep.load {
        Load::Concurrency { levels } => format!("concurrency {levels}"),
        Load::RequestRate { start, end, step, .. } => format!("request rate {start}..{end}:{step}/s"),
        _ => String::new(),
    };
    let streaming = if sweep.call.streaming { "streaming " } else { "" };
    format!("{} | {} {streaming}| {load}", model.name, g.endpoint_type)
}

/// The levels an interrupted run of this sweep finished in `dir` (`run --resume`): the leading
/// levels whose records are on disk, summarized again from them.
fn finished(dir: &Path, schedules: &[Schedule], g: &Generative, streaming: bool) -> anyhow::Result<Vec<Level>> {
    let slos = slos(g)?;
    let clock = RunInfo::now(serde_json::Value::Null);
    let mut kept = Vec::new();
    for &schedule in schedules {
        let folder = dir.join(Level::folder(schedule));
        if !folder.join(RECORDS_FILE).exists() {
            break;
        }
        let (records, client) = read_records(&folder, &clock)?;
        kept.push(Level { schedule, outcome: stored(records, client, slos.as_ref(), streaming) });
    }
    Ok(kept)
}

/// The sweep's `--goodput` objectives.
fn slos(g: &Generative) -> anyhow::Result<Option<Slos>> {
    g.goodput.as_deref().map(Slos::parse).transpose().map_err(|e| anyhow!(e))
}

/// A level's outcome from records kept on disk (one run's, or every shard's of one level).
fn stored(records: Vec<Record>, client: ClientLoad, slos: Option<&Slos>, streaming: bool) -> Outcome {
    let summary = summarize(&records, slos, streaming);
    let spans_received = records.iter().any(|r| r.server.is_some());
    Outcome {
        records,
        summary,
        server_counters: Vec::new(),
        server_notes: Vec::new(),
        client_cpu_fraction: client.cpu_fraction,
        client,
        spans_received,
        saturation: None,
    }
}

/// Whether `dir` is a generative sweep's results folder (its plan says so).
pub(super) fn is_generative(dir: &Path) -> bool {
    Plan::load(&dir.join(PLAN_FILE)).is_ok_and(|plan| plan.sweeps.iter().any(|s| s.generative.is_some()))
}

/// `perfbench merge` of a generative sweep's shard folders: each level's records from every shard
/// (instants in Unix time, so shards on machines whose clocks agree line up), summarized as one
/// run's and written as one run writes them: exact percentiles, not averages of the shards'.
pub(super) fn merge(dirs: &[PathBuf], out: &Path) -> anyhow::Result<()> {
    let plans = dirs.iter().map(|d| Plan::load(&d.join(PLAN_FILE))).collect::<Result<Vec<_>, _>>()?;
    let lead = &plans[0];
    let count = lead.shard.map_or(1, |s| s.count);
    if dirs.len() as u64 != count {
        bail!("the run has {count} shards: give all {count} folders (got {})", dirs.len());
    }
    let mut seen = vec![false; count as usize];
    for (plan, dir) in plans.iter().zip(dirs) {
        if plan.identity() != lead.identity() {
            bail!("mixed plans: {} and {} ran different plans", dirs[0].display(), dir.display());
        }
        let index = plan.shard.map_or(0, |s| s.index) as usize;
        if std::mem::replace(&mut seen[index], true) {
            bail!("shard {index} given twice ({})", dir.display());
        }
    }
    let sweep = lead.sweeps.iter().find(|s| s.generative.is_some()).expect("a generative plan");
    let g = sweep.generative.as_ref().expect("checked");
    let slos = slos(g)?;
    let clock = RunInfo::now(serde_json::Value::Null);
    let mut levels = Vec::new();
    for schedule in schedules(&sweep.load)? {
        let folder = Level::folder(schedule);
        let (mut records, mut client, mut missing) = (Vec::new(), ClientLoad::default(), Vec::new());
        for (plan, dir) in plans.iter().zip(dirs) {
            if !dir.join(&folder).join(RECORDS_FILE).exists() {
                missing.push(plan.shard.map_or(0, |s| s.index));
                continue;
            }
            let (theirs, load) = read_records(&dir.join(&folder), &clock)?;
            records.extend(theirs);
            client = ClientLoad {
                cpu_fraction: client.cpu_fraction.max(load.cpu_fraction),
                send_lag_p99_us: client.send_lag_p99_us.max(load.send_lag_p99_us),
                handling_lag_p99_us: client.handling_lag_p99_us.max(load.handling_lag_p99_us),
                wake_lag_p99_us: client.wake_lag_p99_us.max(load.wake_lag_p99_us),
            };
        }
        if !missing.is_empty() {
            eprintln!("merge: {folder} left out: shard(s) {missing:?} did not measure it");
            continue;
        }
        let dir = out.join(&folder);
        std::fs::create_dir_all(&dir)?;
        let outcome = stored(records, client, slos.as_ref(), sweep.call.streaming);
        let config = LlmConfig::of(g, &lead.model.name, None, sweep.call.streaming, schedule, Vec::new(), dir.clone())
            .map_err(|e| anyhow!(e))?;
        let info = RunInfo::now(config.input_config(&g.tokenizer));
        export::write_all(&dir, &outcome.summary, &outcome.records, &info)?;
        levels.push(Level { schedule, outcome });
    }
    if levels.is_empty() {
        bail!("no level was measured by every shard");
    }
    let whole = Plan { shard: None, ..lead.clone() };
    std::fs::write(out.join(PLAN_FILE), whole.to_toml())?;
    sweep::write_reports(out, &levels, &title(&lead.model, sweep, g))
}
