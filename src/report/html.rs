//! `report.html` (and the page `perfbench compare` writes): one self-contained file, no network.
//!
//! A [`Page`] is plain data — titled key/value tables, warnings, inline SVG plots and result
//! tables — rendered through one minijinja template. Tables are ordinary HTML, so the page reads
//! without JavaScript; a few lines of inline script make each `sortable` table sort by the column
//! whose header is clicked. Plots are plotters' SVG with a hover layer (see
//! [`plot::sweep_svg`]): hovering a bar or point shows its value.

use serde::Serialize;

use super::table::{self, PipeColumn};
use super::{plot, ReportError, TableMeta};
use crate::results::composing_csv::ComposingRow;
use crate::results::csv::SEQUENCE_COLUMNS;
use crate::results::format::{fixed, format_g};
use crate::results::{LoadPoint, ReportRow};

/// The file name of a results folder's page.
pub const REPORT_HTML: &str = "report.html";

/// One page: everything the template shows, in order.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Page {
    pub title: String,
    /// A line under the title (e.g. where a seed table was printed).
    pub subtitle: String,
    /// `Parameter Name | Parameter Value` rows.
    pub config: Vec<[String; 2]>,
    pub warnings: Vec<String>,
    pub plots: Vec<InlinePlot>,
    pub tables: Vec<HtmlTable>,
    /// Notes under the tables (what ± and * mean).
    pub notes: Vec<String>,
}

/// A plot as an inline `<svg>` document.
#[derive(Clone, Debug, Serialize)]
pub struct InlinePlot {
    pub name: String,
    pub svg: String,
}

/// A table of printed cells; `sortable` ones get clickable headers.
#[derive(Clone, Debug, Serialize)]
pub struct HtmlTable {
    pub id: String,
    pub caption: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Per column: sort as numbers (the cell's leading number) rather than text.
    pub numeric: Vec<bool>,
    pub sortable: bool,
    /// Per row: a CSS class (`fail`, `pass`) or empty.
    pub row_classes: Vec<String>,
}

impl HtmlTable {
    /// A table from the same columns report.md prints.
    pub fn from_columns(id: &str, caption: &str, columns: &[PipeColumn]) -> Self {
        let n = columns.first().map_or(0, |c| c.cells.len());
        let numeric = columns
            .iter()
            .map(|c| !c.cells.is_empty() && c.cells.iter().all(|s| leading_number(s).is_some()))
            .collect();
        HtmlTable {
            id: id.into(),
            caption: caption.into(),
            headers: columns.iter().map(|c| c.header.clone()).collect(),
            rows: (0..n).map(|i| columns.iter().map(|c| c.cells[i].clone()).collect()).collect(),
            numeric,
            sortable: true,
            row_classes: Vec::new(),
        }
    }
}

/// The number a cell starts with (`12.5 ± 0.3`, `12.5*`, `3.64e+05`).
fn leading_number(cell: &str) -> Option<f64> {
    cell.split_whitespace().next()?.trim_end_matches('*').parse().ok()
}

const TEMPLATE: &str = include_str!("page.html.j2");

/// Renders a page through the template (HTML-escaped except the plots' SVG).
pub fn render_page(page: &Page) -> Result<String, ReportError> {
    let mut env = minijinja::Environment::new();
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
    env.add_template("page.html", TEMPLATE).map_err(template_error)?;
    let template = env.get_template("page.html").map_err(template_error)?;
    template.render(minijinja::context! { page => page }).map_err(template_error)
}

fn template_error(e: minijinja::Error) -> ReportError {
    ReportError::Template(e.to_string())
}

/// The run's page: configuration, warnings, every plot inline, the results table in the
/// sidecar's layout, the composing models and sequences when present.
pub fn report_page(rows: &[ReportRow], meta: &TableMeta, composing: &[ComposingRow]) -> Result<Page, ReportError> {
    let mut plots = Vec::new();
    for &kind in plot::PlotKind::for_sweep(meta.kind) {
        plots.push(InlinePlot { name: kind.name().into(), svg: plot::sweep_svg(kind, rows, &meta.title)? });
    }
    if !composing.is_empty() {
        let svg = plot::model_svg(composing, meta.kind, &meta.title)?;
        plots.push(InlinePlot { name: plot::LATENCY_BY_MODEL.into(), svg });
    }
    let mut tables = vec![HtmlTable::from_columns("results", "Results", &table::results_columns(rows, &meta.layout))];
    if !composing.is_empty() {
        let columns = table::composing_columns(composing, &meta.layout);
        tables.push(HtmlTable::from_columns("composing", "Composing models", &columns));
    }
    if rows.iter().any(|r| r.sequences > 0) {
        tables.push(HtmlTable::from_columns("sequences", "Sequences", &sequence_columns(rows)));
    }
    let subtitle =
        meta.source.as_ref().map_or_else(String::new, |s| format!("Seed table: {}, line {}", s.file, s.line));
    Ok(Page {
        title: meta.title.clone(),
        subtitle,
        config: meta.config.parameters.clone(),
        warnings: warnings(rows),
        plots,
        tables,
        notes: table::render_notes(rows)
            .split("\n\n")
            .map(|n| n.trim().replace("\\*", "*"))
            .filter(|n| !n.is_empty())
            .collect(),
    })
}

fn sequence_columns(rows: &[ReportRow]) -> Vec<PipeColumn> {
    vec![
        PipeColumn::new("Batch", rows.iter().map(|r| r.batch.to_string()).collect()),
        PipeColumn::new("Load", rows.iter().map(|r| load_text(r.load)).collect()),
        PipeColumn::new(SEQUENCE_COLUMNS[0], rows.iter().map(|r| r.sequences.to_string()).collect()),
        PipeColumn::new(SEQUENCE_COLUMNS[1], rows.iter().map(|r| fixed(r.avg_sequence_length, 1)).collect()),
    ]
}

/// A load point as people say it: `concurrency 4`, `250 req/s`.
pub fn load_text(load: LoadPoint) -> String {
    match load {
        LoadPoint::Concurrency(c) => format!("concurrency {c}"),
        LoadPoint::RequestRate(rate) => format!("{} req/s", format_g(rate)),
    }
}

/// What a reader must know before trusting a row: unstable, overloaded, failed or late requests.
pub fn warnings(rows: &[ReportRow]) -> Vec<String> {
    let mut out = Vec::new();
    for r in rows {
        let at = format!("batch {} at {}", r.batch, load_text(r.load));
        let limits = r.client_limits();
        if !limits.is_empty() {
            out.push(format!("{at}: client-limited: {}", limits.join("; ")));
        }
        // A seed's rows carry no request counts: nothing is known about them.
        if r.requests == 0 {
            continue;
        }
        if !r.stable {
            out.push(format!(
                "{at}: not stable (throughput spread {:.1}%, p99 spread {:.1}%)",
                r.throughput_spread_pct, r.p99_spread_pct
            ));
        }
        if r.overloaded {
            out.push(format!("{at}: overloaded (the server queue grew window after window)"));
        }
        if r.interrupted {
            out.push(format!("{at}: interrupted (the connection to the server was lost during the point)"));
        }
        if r.failed > 0 {
            out.push(format!("{at}: {} of {} requests failed", r.failed, r.failed + r.requests));
        }
        if r.late > 0 || r.missed > 0 {
            out.push(format!("{at}: {} requests sent late, {} never sent", r.late, r.missed));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_numbers_read_marked_cells_and_refuse_text() {
        assert_eq!(leading_number("12.5 ± 0.3"), Some(12.5));
        assert_eq!(leading_number("7.25*"), Some(7.25));
        assert_eq!(leading_number("3.64e+05"), Some(364000.0));
        assert_eq!(leading_number("pre"), None);
    }

    #[test]
    fn a_page_escapes_text_and_keeps_plots_as_markup() {
        let page = Page {
            title: "a <b> & c".into(),
            config: vec![["GPU".into(), "<x>".into()]],
            plots: vec![InlinePlot { name: "p".into(), svg: "<svg id=\"p\"></svg>".into() }],
            tables: vec![HtmlTable::from_columns(
                "results",
                "Results",
                &[
                    PipeColumn::new("Batch", vec!["2".into(), "1".into()]),
                    PipeColumn::new("M", vec!["x".into(), "y".into()]),
                ],
            )],
            ..Page::default()
        };
        let html = render_page(&page).unwrap();
        assert!(html.contains("<title>a &lt;b&gt; &amp; c</title>"), "{html}");
        assert!(html.contains("<td>&lt;x&gt;</td>"), "{html}");
        assert!(html.contains("<svg id=\"p\"></svg>"), "{html}");
        assert!(
            html.contains("<th data-type=\"num\">Batch</th>") && html.contains("<th data-type=\"text\">M</th>"),
            "{html}"
        );
        assert!(!html.contains("http://") && !html.contains("https://") && !html.contains(" src="), "{html}");
    }
}
