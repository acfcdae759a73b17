//! The seed reports' results tables as reference data: finds every results table in a seed
//! report (Markdown), with its configuration and layout, and writes it to
//! `reference-results/seeds/<seed>/` as a CSV (values exactly as printed), a sidecar
//! (`.toml`: kind, layout, unit, configuration, source) and the original table (`.md`).
//!
//! Run it with `perfbench report --extract-seeds ../shared/seeds --out reference-results/seeds`.

use std::path::{Path, PathBuf};

use super::table::{ConstColumn, Layout};
use super::{RunConfig, SeedSource, TableKind, TableMeta};
use crate::results::csv::Unit;

/// Why a seed could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{file}:{line}: {message}")]
    Table { file: String, line: usize, message: String },
    #[error("{0}")]
    Sidecar(#[from] super::ReportError),
}

/// One results table of a seed report.
#[derive(Clone, Debug)]
pub struct SeedTable {
    /// The seed's file name, e.g. `000_0e3f950e04427afa.txt`.
    pub seed_file: String,
    /// A folder name for the seed, e.g. `000-bert`.
    pub seed_slug: String,
    /// The section heading, e.g. `Offline: NVIDIA A30, ONNX Runtime with FP16`.
    pub section: String,
    pub kind: TableKind,
    /// 1-based line of the header row.
    pub line: usize,
    pub config: RunConfig,
    pub layout: Layout,
    pub unit: Unit,
    /// Headers and cells as printed (trimmed), without 003's unnamed index column.
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// The table exactly as printed, one `\n` after each line.
    pub markdown: String,
}

impl SeedTable {
    /// The CSV of the table: its own headers, values as printed.
    pub fn csv(&self) -> String {
        let mut out = self.header.join(",");
        out.push('\n');
        for row in &self.rows {
            out.push_str(&row.join(","));
            out.push('\n');
        }
        out
    }

    pub fn meta(&self) -> TableMeta {
        TableMeta {
            kind: self.kind,
            unit: self.unit,
            title: self.section.clone(),
            source: Some(SeedSource { file: self.seed_file.clone(), line: self.line }),
            layout: self.layout.clone(),
            config: self.config.clone(),
        }
    }
}

/// `Deploying the BERT model on …` → `bert`; the seed number goes in front.
fn seed_slug(file_name: &str, text: &str) -> String {
    let number = file_name.split('_').next().unwrap_or(file_name);
    let title = text.lines().find_map(|l| l.strip_prefix("# ")).unwrap_or("");
    let subject = title.trim().strip_prefix("Deploying ").unwrap_or(title);
    let subject = subject.strip_prefix("the ").unwrap_or(subject);
    let subject = subject.split(" model").next().unwrap_or(subject);
    format!("{number}-{}", slug(subject))
}

/// Lowercase words joined by `-`.
pub fn slug(text: &str) -> String {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect::<Vec<_>>()
        .join("-")
}

fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(|c| c.trim().to_owned()).collect()
}

/// Parses one seed report into its results tables, in order.
pub fn parse_seed(file_name: &str, text: &str) -> Result<Vec<SeedTable>, SeedError> {
    let lines: Vec<&str> = text.lines().collect();
    let seed_slug = seed_slug(file_name, text);
    let err = |line: usize, message: String| SeedError::Table { file: file_name.to_owned(), line, message };

    // Parameters printed once for a whole scenario (002, 004), then per-section ones.
    let mut scenario_params: Vec<[String; 2]> = Vec::new();
    let mut section: Option<(String, TableKind, Vec<[String; 2]>)> = None;
    let mut tables = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with('#') {
            let heading = line.trim_start_matches('#').trim();
            if heading.ends_with("scenario") {
                scenario_params.clear();
                section = None;
            } else if let Some(kind) = heading_kind(heading) {
                section = Some((heading.to_owned(), kind, Vec::new()));
            } else {
                section = None;
            }
            i += 1;
            continue;
        }
        if let (Some(bullet), Some((_, _, params))) = (line.trim().strip_prefix("* **"), section.as_mut()) {
            // ` * **GPU:** NVIDIA A40`
            if let Some((name, value)) = bullet.split_once(":**") {
                params.push([name.trim().to_owned(), value.trim().to_owned()]);
            }
            i += 1;
            continue;
        }
        if !line.starts_with('|') {
            i += 1;
            continue;
        }
        let start = i;
        while i < lines.len() && lines[i].starts_with('|') {
            i += 1;
        }
        let block = &lines[start..i];
        let header = cells(block[0]);
        if header.first().is_some_and(|h| h == "Parameter Name") {
            let pairs =
                block.iter().skip(2).map(|l| cells(l)).map(|c| [c[0].clone(), c.get(1).cloned().unwrap_or_default()]);
            match section.as_mut() {
                Some((_, _, params)) => params.extend(pairs),
                None => scenario_params.extend(pairs),
            }
            continue;
        }
        let Some((title, kind, params)) = section.as_ref() else {
            continue;
        };
        if !header.iter().any(|h| h.starts_with("Inferences/")) {
            continue;
        }
        if block.len() < 3 {
            return Err(err(start + 1, "a results table without rows".into()));
        }
        let body: Vec<Vec<String>> = block[2..].iter().map(|l| cells(l)).collect();
        if let Some(bad) = body.iter().position(|r| r.len() != header.len()) {
            return Err(err(
                start + 3 + bad,
                format!("{} cells where the header has {}", body[bad].len(), header.len()),
            ));
        }
        let (layout, unit, header, rows) = detect_layout(header, body).map_err(|m| err(start + 1, m))?;
        let mut config = RunConfig { parameters: params.clone() };
        config.parameters.extend(scenario_params.iter().cloned());
        let mut markdown = block.join("\n");
        markdown.push('\n');
        tables.push(SeedTable {
            seed_file: file_name.to_owned(),
            seed_slug: seed_slug.clone(),
            section: title.clone(),
            kind: *kind,
            line: start + 1,
            config,
            layout,
            unit,
            header,
            rows,
            markdown,
        });
    }
    Ok(tables)
}

fn heading_kind(heading: &str) -> Option<TableKind> {
    if heading.starts_with("Offline:") {
        Some(TableKind::Offline)
    } else if heading.starts_with("Online:") {
        Some(TableKind::Online)
    } else {
        None
    }
}

type Detected = (Layout, Unit, Vec<String>, Vec<Vec<String>>);

/// Tells the seed's layout from its header, and checks what the layout takes for granted.
fn detect_layout(header: Vec<String>, body: Vec<Vec<String>>) -> Result<Detected, String> {
    if header[0].is_empty() {
        // 003: an index column 0, 1, 2, … that the layout re-creates.
        for (i, row) in body.iter().enumerate() {
            if row[0] != i.to_string() {
                return Err(format!("index column reads {:?} on row {i}", row[0]));
            }
        }
        let strip = |v: Vec<String>| v.into_iter().skip(1).collect::<Vec<_>>();
        return Ok((Layout::Microseconds, Unit::Us, strip(header), body.into_iter().map(strip).collect()));
    }
    if header.iter().any(|h| h.ends_with("(ms)")) {
        let throughput = header.iter().position(|h| h == "Inferences/Second").ok_or("no Inferences/Second column")?;
        let decimals = |v: &str| v.split_once('.').map_or(0, |(_, f)| f.len());
        let d = decimals(&body[0][throughput]);
        for row in &body {
            for cell in &row[throughput..] {
                if decimals(cell) != d {
                    return Err(format!("{cell:?} does not have {d} decimals like the rest"));
                }
            }
        }
        return Ok((Layout::Milliseconds { decimals: d }, Unit::Ms, header, body));
    }
    let anchor = header
        .iter()
        .position(|h| h == "Client Batch Size" || h == "Concurrent client requests")
        .ok_or("unknown table layout")?;
    let mut leading = Vec::new();
    for (c, name) in header.iter().enumerate().take(anchor) {
        let value = &body[0][c];
        if body.iter().any(|r| &r[c] != value) {
            return Err(format!("column {name:?} is not constant"));
        }
        leading.push(ConstColumn { header: name.clone(), value: value.clone() });
    }
    let layout = if header[anchor] == "Client Batch Size" {
        Layout::OfflineSummary { leading }
    } else {
        Layout::OnlineSummary { leading }
    };
    Ok((layout, Unit::Ms, header, body))
}

/// The file stem of each table, numbered per seed and kind: `offline-01-nvidia-a30-…`.
pub fn table_stems(tables: &[SeedTable]) -> Vec<String> {
    let mut counts = [0usize; 2];
    tables
        .iter()
        .map(|t| {
            let n = &mut counts[t.kind as usize];
            *n += 1;
            let section = t.section.split_once(':').map_or(t.section.as_str(), |(_, rest)| rest);
            format!("{}-{:02}-{}", t.kind.title().to_ascii_lowercase(), n, slug(section))
        })
        .collect()
}

/// What an extraction wrote.
#[derive(Clone, Debug, Default)]
pub struct ExtractSummary {
    pub offline: usize,
    pub online: usize,
    pub files: Vec<PathBuf>,
}

/// Converts every `*.txt` seed in `seeds_dir` into `out_dir/<seed>/<stem>.{csv,toml,md}` and
/// writes `out_dir/index.csv` (one line per table).
pub fn extract_dir(seeds_dir: &Path, out_dir: &Path) -> Result<ExtractSummary, SeedError> {
    let read =
        |path: &Path| std::fs::read_to_string(path).map_err(|source| SeedError::Read { path: path.to_owned(), source });
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|source| SeedError::Write { path: path.to_owned(), source })
    };
    let mut seeds: Vec<PathBuf> = std::fs::read_dir(seeds_dir)
        .map_err(|source| SeedError::Read { path: seeds_dir.to_owned(), source })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    seeds.sort();
    let mut summary = ExtractSummary::default();
    let mut index = String::from("seed,file,kind,layout,rows,section\n");
    for seed in seeds {
        let name = seed.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tables = parse_seed(&name, &read(&seed)?)?;
        for (table, stem) in tables.iter().zip(table_stems(&tables)) {
            let dir = out_dir.join(&table.seed_slug);
            std::fs::create_dir_all(&dir).map_err(|source| SeedError::Write { path: dir.clone(), source })?;
            let csv = dir.join(format!("{stem}.csv"));
            write(&csv, &table.csv())?;
            super::write_sidecar(&dir.join(format!("{stem}.toml")), &table.meta())?;
            write(&dir.join(format!("{stem}.md")), &table.markdown)?;
            let layout = match &table.layout {
                Layout::Milliseconds { decimals } => format!("milliseconds-{decimals}"),
                Layout::Microseconds => "microseconds".into(),
                Layout::OfflineSummary { .. } => "offline_summary".into(),
                Layout::OnlineSummary { .. } => "online_summary".into(),
            };
            index.push_str(&format!(
                "{name},{}/{stem}.csv,{},{layout},{},\"{}\"\n",
                table.seed_slug,
                table.kind.title().to_ascii_lowercase(),
                table.rows.len(),
                table.section.replace('"', "\"\"")
            ));
            match table.kind {
                TableKind::Offline => summary.offline += 1,
                TableKind::Online => summary.online += 1,
            }
            summary.files.push(csv);
        }
    }
    write(&out_dir.join("index.csv"), &index)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = "# Deploying the Demo model on Triton Inference Server

### Offline scenario
| Parameter Name               | Parameter Value     |
|:-----------------------------|:--------------------|
| Max Batch Size               | 8                   |

#### Offline: NVIDIA A40 with FP16
 * **GPU:** NVIDIA A40
 * **Precision:** FP16

|![](plots/a.svg)|![](plots/b.svg)|
|-----|-----|

| Precision   |   Client Batch Size |   Inferences/second |   P90 Latency |   P95 Latency |   P99 Latency |   Avg Latency |
|:------------|--------------------:|--------------------:|--------------:|--------------:|--------------:|--------------:|
| FP16        |                   1 |                81.8 |        12.828 |        13.384 |        13.493 |        12.22  |
| FP16        |                   2 |               164   |        12.906 |        13.222 |        13.635 |        12.199 |

## Advanced
| Inference runtime | Mnemonic used in scripts |
|-------------------|--------------------------|
| ONNX | `onnx` |
";

    #[test]
    fn finds_the_results_table_with_its_configuration() {
        let tables = parse_seed("009_x.txt", SEED).unwrap();
        assert_eq!(tables.len(), 1);
        let t = &tables[0];
        assert_eq!(t.seed_slug, "009-demo");
        assert_eq!(t.section, "Offline: NVIDIA A40 with FP16");
        assert_eq!(t.kind, TableKind::Offline);
        assert_eq!(t.line, 15);
        assert_eq!(t.config.get("GPU"), Some("NVIDIA A40"));
        assert_eq!(t.config.get("Max Batch Size"), Some("8"));
        assert_eq!(t.rows[1][2], "164");
        assert!(matches!(&t.layout, Layout::OfflineSummary { leading } if leading[0].value == "FP16"));
        assert_eq!(table_stems(&tables), vec!["offline-01-nvidia-a40-with-fp16"]);
    }

    #[test]
    fn renders_back_to_the_printed_table() {
        let t = &parse_seed("009_x.txt", SEED).unwrap()[0];
        let rows = crate::results::csv::parse_csv(&t.csv(), t.unit, "seed").unwrap();
        assert_eq!(super::super::table::render_results(&rows, &t.layout), t.markdown);
    }
}
