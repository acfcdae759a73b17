//! The plots of `perfbench compare`: several runs of one sweep kind drawn over each other —
//! throughput against batch or load (one line per run), p99 against throughput (one line per
//! run), and the per-stage latency breakdown with the runs' bars side by side at each point.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::full_palette;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::html::InlinePlot;
use super::plot::{
    axis_label, box_legend, draw_legend, draw_titles, has_stage_breakdown, headroom, line_legend, ms, render_to,
    svg_with_hover, xy_chart, Chart, DrawResult, Format, Hotspot, Hover, PlotError, FONT, STAGE_COLORS,
};
use super::TableKind;
use crate::results::csv::{stages_us, STAGE_NAMES};
use crate::results::{LoadPoint, ReportRow};

/// One run's rows of one sweep, and the short name its lines and bars carry.
#[derive(Clone, Debug)]
pub struct RunRows {
    pub name: String,
    pub rows: Vec<ReportRow>,
}

/// The overlay plots, in the order a page shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverlayKind {
    Throughput,
    P99VsThroughput,
    Stages,
}

impl OverlayKind {
    pub const ALL: [OverlayKind; 3] = [OverlayKind::Throughput, OverlayKind::P99VsThroughput, OverlayKind::Stages];

    /// The file stem (prefixed by the sweep: `online_throughput`).
    pub fn name(self) -> &'static str {
        match self {
            OverlayKind::Throughput => "throughput",
            OverlayKind::P99VsThroughput => "p99_vs_throughput",
            OverlayKind::Stages => "stages",
        }
    }
}

static RUN_COLORS: [RGBColor; 6] = [
    full_palette::BLUE_700,
    full_palette::RED_700,
    full_palette::GREEN_700,
    full_palette::ORANGE_700,
    full_palette::PURPLE_700,
    full_palette::BROWN_700,
];

fn run_color(k: usize) -> RGBColor {
    RUN_COLORS[k % RUN_COLORS.len()]
}

struct Overlay<'a> {
    plot: OverlayKind,
    runs: &'a [RunRows],
    kind: TableKind,
    title: &'a str,
}

/// The x value of a row: batch offline, concurrency or rate online.
fn x_of(kind: TableKind, r: &ReportRow) -> f64 {
    match (kind, r.load) {
        (TableKind::Offline, _) => r.batch as f64,
        (TableKind::Online, LoadPoint::Concurrency(c)) => c as f64,
        (TableKind::Online, LoadPoint::RequestRate(rate)) => rate,
    }
}

fn x_name(kind: TableKind, runs: &[RunRows]) -> &'static str {
    let rate = runs.iter().flat_map(|r| &r.rows).any(|r| matches!(r.load, LoadPoint::RequestRate(_)));
    match kind {
        TableKind::Offline => "Batch size",
        TableKind::Online if rate => "Request rate (requests/s)",
        TableKind::Online => "Concurrency (requests in flight)",
    }
}

impl Chart for Overlay<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, hover: &Hover) -> DrawResult {
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let x_desc = x_name(self.kind, self.runs);
        let heading = match self.plot {
            OverlayKind::Throughput => format!("Throughput vs {}", x_desc.to_lowercase()),
            OverlayKind::P99VsThroughput => "p99 latency vs throughput".into(),
            OverlayKind::Stages => format!("Latency breakdown per run vs {}", x_desc.to_lowercase()),
        };
        let root = draw_titles(root, &heading, self.title).map_err(|e| e.to_string())?;
        match self.plot {
            OverlayKind::Throughput => {
                lines(&root, self.runs, hover, x_desc, "Inferences/second", |r| (x_of(self.kind, r), r.throughput))
            }
            OverlayKind::P99VsThroughput => {
                lines(&root, self.runs, hover, "Inferences/second", "p99 latency (ms)", |r| {
                    (r.throughput, ms(r.p99_us))
                })
            }
            OverlayKind::Stages => stages(&root, self.runs, hover, self.kind, x_desc),
        }
    }
}

/// One line with dots per run, `xy` mapping a row to its point.
fn lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    runs: &[RunRows],
    hover: &Hover,
    x_desc: &str,
    y_desc: &str,
    xy: impl Fn(&ReportRow) -> (f64, f64),
) -> DrawResult {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let points: Vec<Vec<(f64, f64)>> = runs
        .iter()
        .map(|run| {
            let mut p: Vec<(f64, f64)> =
                run.rows.iter().map(&xy).filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
            p.sort_by(|a, b| a.0.total_cmp(&b.0));
            p
        })
        .collect();
    let all = points.iter().flatten();
    let x_max = headroom(all.clone().map(|p| p.0).fold(0.0, f64::max));
    let y_max = 1.3 * headroom(all.map(|p| p.1).fold(0.0, f64::max));
    let mut chart = xy_chart(root, (x_max, y_max), x_desc, y_desc)?;
    for (k, (run, p)) in runs.iter().zip(&points).enumerate() {
        let color = run_color(k);
        chart
            .draw_series(LineSeries::new(p.clone(), color.stroke_width(2)))
            .map_err(e)?
            .label(run.name.as_str())
            .legend(line_legend(color, 2));
        chart.draw_series(p.iter().map(|q| Circle::new(*q, 4, color.filled()))).map_err(e)?;
        for q in p {
            let text = format!("{}: {x_desc} {}, {y_desc} {}", run.name, axis_label(&q.0), axis_label(&q.1));
            hover.borrow_mut().push(Hotspot::around(chart.backend_coord(q), text));
        }
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft, 13)
}

/// Stacked stage bars, the runs side by side at each point (the run's number above its bar).
fn stages<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    runs: &[RunRows],
    hover: &Hover,
    kind: TableKind,
    x_desc: &str,
) -> DrawResult {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut xs: Vec<f64> = runs.iter().flat_map(|r| r.rows.iter().map(|row| x_of(kind, row))).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let all_rows: Vec<ReportRow> = runs.iter().flat_map(|r| r.rows.iter().cloned()).collect();
    let with_stages = has_stage_breakdown(&all_rows);
    let parts = |r: &ReportRow| -> Vec<f64> {
        if with_stages {
            stages_us(r).iter().map(|s| ms(*s)).collect()
        } else {
            vec![ms(r.avg_us)]
        }
    };
    let y_max =
        1.35 * headroom(all_rows.iter().map(|r| parts(r).iter().filter(|v| v.is_finite()).sum()).fold(0.0, f64::max));
    let n = xs.len().max(1);
    let mut chart = ChartBuilder::on(root)
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5..(n as f64 - 0.5), 0.0..y_max)
        .map_err(e)?;
    let labels: Vec<String> = xs.iter().map(axis_label).collect();
    let label = |v: &f64| {
        let i = v.round();
        if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
            labels[i as usize].clone()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .disable_x_mesh()
        .x_labels(n + 1)
        .x_label_formatter(&label)
        .x_desc(x_desc)
        .y_desc("Latency (ms)")
        .y_label_formatter(&axis_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(e)?;
    let width = 0.8 / runs.len().max(1) as f64;
    let names: Vec<&str> = if with_stages { STAGE_NAMES.to_vec() } else { vec!["avg latency"] };
    for (s, stage) in names.iter().enumerate() {
        let color = STAGE_COLORS[s % STAGE_COLORS.len()];
        let mut bars = Vec::new();
        for (k, run) in runs.iter().enumerate() {
            for r in &run.rows {
                let Some(i) = xs.iter().position(|x| *x == x_of(kind, r)) else { continue };
                let p = parts(r);
                let low: f64 = p[..s].iter().filter(|v| v.is_finite()).sum();
                let value = if p[s].is_finite() { p[s] } else { 0.0 };
                let left = i as f64 - 0.4 + k as f64 * width;
                let right = left + width * 0.9;
                let corners = [(left, low), (right, low + value)];
                let text = format!("{} at {}: {stage} {value:.3} ms", run.name, labels[i]);
                hover.borrow_mut().push(Hotspot::between(
                    chart.backend_coord(&corners[0]),
                    chart.backend_coord(&corners[1]),
                    text,
                ));
                bars.push(Rectangle::new(corners, color.filled()));
            }
        }
        chart.draw_series(bars).map_err(e)?.label(*stage).legend(box_legend(color));
    }
    // Each bar says which run it is: the run's number (1-based, as the page lists them).
    let mut marks = Vec::new();
    for (k, run) in runs.iter().enumerate() {
        for r in &run.rows {
            let Some(i) = xs.iter().position(|x| *x == x_of(kind, r)) else { continue };
            let top: f64 = parts(r).iter().filter(|v| v.is_finite()).sum();
            let centre = i as f64 - 0.4 + (k as f64 + 0.45) * width;
            let color = &RUN_COLORS[k % RUN_COLORS.len()];
            let style = TextStyle::from((FONT, 12).into_font()).color(color).pos(Pos::new(HPos::Center, VPos::Bottom));
            marks.push(Text::new(format!("{}", k + 1), (centre, top), style));
        }
    }
    chart.draw_series(marks).map_err(e)?;
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft, 13)
}

/// Writes one sweep's overlay plots as `<sweep>_<plot>.png/.svg` into `dir` and returns the
/// files and each plot's inline SVG (with hover values) for the page.
pub fn write_overlays(
    dir: &Path,
    sweep: &str,
    runs: &[RunRows],
    kind: TableKind,
    title: &str,
) -> Result<(Vec<PathBuf>, Vec<InlinePlot>), PlotError> {
    let mut files = Vec::new();
    let mut inline = Vec::new();
    for plot in OverlayKind::ALL {
        let chart = Overlay { plot, runs, kind, title };
        let stem = format!("{sweep}_{}", plot.name());
        for format in [Format::Png, Format::Svg] {
            let path = dir.join(format!("{stem}.{}", format.extension()));
            render_to(&path, format, &chart)?;
            files.push(path);
        }
        inline.push(InlinePlot { svg: svg_with_hover(&stem, &chart)?, name: stem });
    }
    Ok((files, inline))
}
