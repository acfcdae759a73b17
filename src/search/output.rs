//! The search's results folder: `search.csv` (every configuration × concurrency, the report's
//! columns, `Meets Budget`), `search.md` (top 5, Pareto front, the default configuration),
//! `plots/search_pareto.{png,svg}`, the winner as `best/MODEL/config.pbtxt`, and the winner
//! measured again in fresh windows as `winner.csv` (report.csv's columns).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;

use super::config::{apply, to_pbtxt};
use super::{delivered, delivered_unit, ConfigOutcome, Measured, SearchRow};
use crate::plan::search::{Batching, Candidate, SearchPlan};
use crate::report::plot::pareto::{render_pareto, ParetoChart, ParetoPoint};
use crate::results::csv::report_csv;
use crate::results::LoadPoint;

/// The configuration columns that lead each search.csv row.
pub const CONFIG_COLUMNS: [&str; 6] =
    ["Default", "Instances", "Max Batch Size", "Dynamic Batching", "Max Queue Delay (us)", "Preferred Batch Sizes"];
pub const MEETS_BUDGET: &str = "Meets Budget";

/// [`CONFIG_COLUMNS`]' cells, then one per searched parameter.
fn config_cells(c: &Candidate, default: bool) -> Vec<String> {
    let (on, delay, preferred) = match &c.batching {
        Batching::Off => ("off", String::new(), String::new()),
        Batching::Dynamic { queue_delay_us, preferred } => {
            ("on", queue_delay_us.to_string(), preferred.iter().map(u32::to_string).collect::<Vec<_>>().join(";"))
        }
    };
    let mut cells =
        vec![default.to_string(), c.instances.to_string(), c.max_batch_size.to_string(), on.into(), delay, preferred];
    cells.extend(c.parameters.iter().map(|(_, value)| value.clone()));
    cells
}

/// search.csv as text: the configuration columns (a searched parameter's by its name),
/// report.csv's columns, `Meets Budget`.
pub fn search_csv(configs: &[ConfigOutcome]) -> anyhow::Result<String> {
    let rows: Vec<(&ConfigOutcome, &SearchRow)> =
        configs.iter().flat_map(|c| c.rows.iter().map(move |r| (c, r))).collect();
    let report_rows: Vec<_> = rows.iter().map(|(_, r)| r.row.clone()).collect();
    let report = report_csv(&report_rows)?;
    let mut lines = report.lines();
    let mut out = String::new();
    let header = lines.next().unwrap_or_default();
    let mut columns: Vec<&str> = CONFIG_COLUMNS.to_vec();
    if let Some(first) = configs.first() {
        columns.extend(first.candidate.parameters.iter().map(|(name, _)| name.as_str()));
    }
    writeln!(out, "{},{header},{MEETS_BUDGET}", columns.join(","))?;
    for ((config, row), line) in rows.iter().zip(lines) {
        writeln!(out, "{},{line},{}", config_cells(&config.candidate, config.default).join(","), row.met)?;
    }
    Ok(out)
}

/// One configuration's point on the plot and in the tables: its best point under the budget,
/// or (none met it) its lowest-latency point.
fn representative<'a>(plan: &SearchPlan, config: &'a ConfigOutcome) -> Option<&'a SearchRow> {
    config.best(plan).or_else(|| {
        let stat = |r: &&SearchRow| plan.search.budget.statistic.of(&r.row);
        config.rows.iter().min_by(|a, b| stat(a).total_cmp(&stat(b)))
    })
}

/// Indices of `points` (latency, throughput) that no other point beats on both.
pub fn pareto_front(points: &[(f64, f64)]) -> Vec<usize> {
    (0..points.len())
        .filter(|&i| {
            let (l, t) = points[i];
            !points.iter().any(|&(l2, t2)| l2 <= l && t2 >= t && (l2 < l || t2 > t))
        })
        .collect()
}

/// The winning configuration and its point.
pub fn winner<'a>(plan: &SearchPlan, configs: &'a [ConfigOutcome]) -> Option<(&'a ConfigOutcome, &'a SearchRow)> {
    let score = |c: &ConfigOutcome| c.score(plan);
    configs
        .iter()
        .filter(|c| score(c).is_some())
        .max_by(|a, b| score(a).unwrap_or(f64::MIN).total_cmp(&score(b).unwrap_or(f64::MIN)))
        .and_then(|c| c.best(plan).map(|r| (c, r)))
}

fn concurrency(row: &SearchRow) -> u64 {
    match row.row.load {
        LoadPoint::Concurrency(c) => c,
        LoadPoint::RequestRate(r) => r as u64,
    }
}

/// Writes the folder; returns a short summary for the terminal.
pub fn write(plan: &SearchPlan, measured: &Measured) -> anyhow::Result<String> {
    let dir = plan.out();
    let configs = &measured.configs;
    let original = measured.original.as_ref().context("the model's own config was never read")?;
    std::fs::create_dir_all(dir.join("plots")).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join("search.csv"), search_csv(configs)?).context("writing search.csv")?;
    let stat = plan.search.budget.statistic;
    // One point per configuration that has one.
    let shown: Vec<(&ConfigOutcome, &SearchRow)> =
        configs.iter().filter_map(|c| representative(plan, c).map(|r| (c, r))).collect();
    let xy: Vec<(f64, f64)> = shown.iter().map(|(_, r)| (stat.of(&r.row) / 1e3, delivered(plan, &r.row))).collect();
    let front = pareto_front(&xy);
    let points: Vec<ParetoPoint> = shown
        .iter()
        .zip(&xy)
        .enumerate()
        .map(|(i, ((c, r), &(latency_ms, throughput)))| ParetoPoint {
            latency_ms,
            throughput,
            met: r.met,
            front: front.contains(&i),
            default: c.default,
        })
        .collect();
    let title =
        format!("{} · budget {} · {:?} mode", plan.model.name, plan.search.budget, plan.search.mode).to_lowercase();
    let chart = ParetoChart {
        points: &points,
        statistic: stat.name(),
        budget_ms: plan.search.budget.limit_us / 1e3,
        title: &title,
    };
    render_pareto(&dir.join("plots"), &chart)?;
    let best = winner(plan, configs);
    if let Some((config, _)) = best {
        let best_dir = dir.join("best").join(&plan.model.name);
        std::fs::create_dir_all(&best_dir).with_context(|| format!("creating {}", best_dir.display()))?;
        std::fs::write(best_dir.join("config.pbtxt"), to_pbtxt(&apply(original, &config.candidate)))
            .context("writing the best config.pbtxt")?;
    }
    if let Some(confirmed) = &measured.confirmed {
        std::fs::write(dir.join("winner.csv"), report_csv(std::slice::from_ref(&confirmed.row))?)
            .context("writing winner.csv")?;
    }
    let markdown = search_md(plan, measured, &shown, &front);
    std::fs::write(dir.join("search.md"), &markdown).context("writing search.md")?;
    let mut summary = summary(plan, configs, best);
    if let Some(confirmed) = &measured.confirmed {
        let row = &confirmed.row;
        let _ = write!(
            summary,
            "\nMeasured again{}: {:.1} {}{}, {} {:.2} ms{}",
            if plan.sweep.generative.is_some() { "" } else { " in fresh windows" },
            delivered(plan, row),
            delivered_unit(plan),
            if row.throughput_ci.low.is_finite() {
                format!(" (95% interval {:.1}-{:.1})", row.throughput_ci.low, row.throughput_ci.high)
            } else {
                String::new()
            },
            plan.search.budget.statistic.name(),
            plan.search.budget.statistic.of(row) / 1e3,
            if confirmed.met { "" } else { ": over the budget this time" },
        );
    }
    Ok(match measured.cut {
        Some(cut) => format!("{summary}\n{cut}"),
        None => summary,
    })
}

fn summary(plan: &SearchPlan, configs: &[ConfigOutcome], best: Option<(&ConfigOutcome, &SearchRow)>) -> String {
    let default = configs.iter().find(|c| c.default).and_then(|c| c.best(plan));
    match best {
        None => format!("No configuration of '{}' met the budget {}.", plan.model.name, plan.search.budget),
        Some((config, row)) => {
            let rate = |r: &SearchRow| delivered(plan, &r.row);
            let gain = default
                .filter(|d| rate(d) > 0.0)
                .map(|d| format!(", {:.2}x the default's {:.1}", rate(row) / rate(d), rate(d)))
                .unwrap_or_default();
            format!(
                "Best of {} configurations: {} at concurrency {}: {:.1} {}, {} {:.2} ms{gain}",
                configs.len(),
                config.candidate,
                concurrency(row),
                rate(row),
                delivered_unit(plan),
                plan.search.budget.statistic.name(),
                plan.search.budget.statistic.of(&row.row) / 1e3,
            )
        }
    }
}

fn table_row(plan: &SearchPlan, rank: &str, config: &ConfigOutcome, row: &SearchRow) -> String {
    let cells = config_cells(&config.candidate, config.default);
    let shown: Vec<&str> = cells[1..].iter().map(|c| if c.is_empty() { "-" } else { c.as_str() }).collect();
    format!(
        "| {rank} | {} | {} | {:.1} | {:.2} | {} |",
        shown.join(" | "),
        concurrency(row),
        delivered(plan, &row.row),
        plan.search.budget.statistic.of(&row.row) / 1e3,
        if row.met { "yes" } else { "no" },
    )
}

fn table_head(plan: &SearchPlan) -> String {
    let parameters = &plan.search.space.parameters;
    let names: String = parameters.iter().map(|p| format!(" {} |", p.name)).collect();
    let columns = 9 + parameters.len();
    let unit = delivered_unit(plan);
    let unit = unit[..1].to_uppercase() + &unit[1..];
    format!(
        "| # | Instances | Max batch size | Dynamic batching | Queue delay (us) | Preferred sizes |{names} Concurrency | \
         {unit} | {} (ms) | Meets budget |\n|{}\n",
        plan.search.budget.statistic.name(),
        "---|".repeat(columns + 1),
    )
}

fn search_md(
    plan: &SearchPlan,
    measured: &Measured,
    shown: &[(&ConfigOutcome, &SearchRow)],
    front: &[usize],
) -> String {
    let configs = &measured.configs;
    let mut md = String::new();
    let points: usize = configs.iter().map(|c| c.rows.len()).sum();
    let _ = writeln!(md, "# Search: {}\n", plan.model.name);
    let _ = writeln!(
        md,
        "Budget {} · objective {:?} · mode {:?} · {} configurations, {} points measured.\n",
        plan.search.budget,
        plan.search.objective,
        plan.search.mode,
        configs.len(),
        points
    );
    let _ = writeln!(md, "{}\n", summary(plan, configs, winner(plan, configs)));
    if let Some(cut) = measured.cut {
        let _ = writeln!(md, "{cut}\n");
    }
    if winner(plan, configs).is_some() {
        let _ = writeln!(md, "The winner's config: `best/{}/config.pbtxt`.\n", plan.model.name);
    }
    let _ = writeln!(md, "## Top 5 by {:?}\n", plan.search.objective);
    let mut ranked: Vec<(&ConfigOutcome, &SearchRow)> =
        configs.iter().filter_map(|c| c.best(plan).map(|r| (c, r))).collect();
    ranked.sort_by(|a, b| b.0.score(plan).unwrap_or(f64::MIN).total_cmp(&a.0.score(plan).unwrap_or(f64::MIN)));
    md.push_str(&table_head(plan));
    for (i, (c, r)) in ranked.iter().take(5).enumerate() {
        let _ = writeln!(md, "{}", table_row(plan, &(i + 1).to_string(), c, r));
    }
    let _ = writeln!(
        md,
        "\n## Pareto front: throughput against {} latency\n\nEach configuration at its best concurrency \
         under the budget (or its lowest latency when none met it); no other configuration is both faster and \
         lower in latency. Plot: `plots/search_pareto.png`.\n",
        plan.search.budget.statistic.name()
    );
    md.push_str(&table_head(plan));
    let mut on_front: Vec<&(&ConfigOutcome, &SearchRow)> = front.iter().map(|&i| &shown[i]).collect();
    on_front.sort_by(|a, b| {
        plan.search.budget.statistic.of(&a.1.row).total_cmp(&plan.search.budget.statistic.of(&b.1.row))
    });
    for (c, r) in on_front {
        let _ = writeln!(md, "{}", table_row(plan, "", c, r));
    }
    let _ = writeln!(md, "\n## Default configuration\n");
    md.push_str(&table_head(plan));
    for (c, r) in shown.iter().filter(|(c, _)| c.default) {
        let _ = writeln!(md, "{}", table_row(plan, "default", c, r));
    }
    let failed: Vec<&ConfigOutcome> = configs.iter().filter(|c| c.error.is_some()).collect();
    if !failed.is_empty() {
        let _ = writeln!(md, "\n## Configurations that failed\n");
        for c in failed {
            let _ = writeln!(md, "- {}: {}", c.candidate, c.error.as_deref().unwrap_or_default());
        }
    }
    md
}

/// Whether `dir` holds a finished search's files (tests).
pub fn written(dir: &Path, model: &str) -> bool {
    ["search.csv", "search.md", "plots/search_pareto.png", "plots/search_pareto.svg"]
        .iter()
        .all(|f| dir.join(f).is_file())
        && dir.join("best").join(model).join("config.pbtxt").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_front_keeps_only_points_nothing_beats_on_both() {
        let points = [(1.0, 100.0), (2.0, 300.0), (3.0, 200.0), (4.0, 400.0), (2.0, 300.0)];
        assert_eq!(pareto_front(&points), [0, 1, 3, 4]);
    }
}
