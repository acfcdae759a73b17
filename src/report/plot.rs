//! The seeds' plots, drawn with plotters as PNG and SVG: offline `throughput_vs_batch`,
//! `latency_vs_batch` and `throughput_vs_latency`; online `latency_vs_concurrency`.
//!
//! Text uses the bundled DejaVu Sans (`assets/fonts/`), registered with plotters' ab_glyph
//! support, so a PNG looks the same on every machine and needs no system fonts.
//!
//! Rows with 95% intervals get whiskers: on throughput points, and on p99 markers (none for a
//! low-sample p99, whose interval is open).

mod axes;
mod canvas;
mod charts;
pub mod pareto;
pub mod tokens;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::TableKind;
use crate::results::composing_csv::ComposingRow;
use crate::results::ReportRow;
use axes::{axis_of, composing_points, load_axis_is_rate, Axis};
use charts::{draw, latency_by_model};

// What the overlay plots (`report::overlay`) and the Pareto plot draw with.
pub(super) use axes::{axis_label, has_stage_breakdown, headroom, ms};
pub(super) use canvas::{box_legend, draw_legend, draw_titles, line_legend, xy_chart, Hotspot, Hover, STAGE_COLORS};

pub(super) const FONT: &str = "sans-serif";
static FONT_BYTES: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");
pub(super) const SIZE_PX: (u32, u32) = (1000, 600);

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("the bundled font could not be loaded")]
    Font,
    #[error("cannot draw {path}: {message}")]
    Draw { path: PathBuf, message: String },
}

/// The file formats to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Png,
    Svg,
}

impl Format {
    pub(super) fn extension(self) -> &'static str {
        match self {
            Format::Png => "png",
            Format::Svg => "svg",
        }
    }
}

/// One of the seeds' plot kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlotKind {
    ThroughputVsBatch,
    LatencyVsBatch,
    ThroughputVsLatency,
    LatencyVsConcurrency,
}

impl PlotKind {
    /// The file stem, as the seeds name their plots.
    pub fn name(self) -> &'static str {
        match self {
            PlotKind::ThroughputVsBatch => "throughput_vs_batch",
            PlotKind::LatencyVsBatch => "latency_vs_batch",
            PlotKind::ThroughputVsLatency => "throughput_vs_latency",
            PlotKind::LatencyVsConcurrency => "latency_vs_concurrency",
        }
    }

    /// The plots a sweep kind gets.
    pub fn for_sweep(kind: TableKind) -> &'static [PlotKind] {
        match kind {
            TableKind::Offline => {
                &[PlotKind::ThroughputVsBatch, PlotKind::LatencyVsBatch, PlotKind::ThroughputVsLatency]
            }
            TableKind::Online => &[PlotKind::LatencyVsConcurrency],
        }
    }
}

fn register_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| plotters::style::register_font(FONT, FontStyle::Normal, FONT_BYTES).is_ok());
    if ok {
        Ok(())
    } else {
        Err(PlotError::Font)
    }
}

/// The stem of the composing models' plot, written only for an ensemble.
pub const LATENCY_BY_MODEL: &str = "latency_by_model";

/// Draws the sweep's plots into `dir` as PNG and SVG, and [`LATENCY_BY_MODEL`] when there are
/// `composing` rows; returns the files written.
pub fn render_plots(
    dir: &Path,
    rows: &[ReportRow],
    kind: TableKind,
    title: &str,
    composing: &[ComposingRow],
) -> Result<Vec<PathBuf>, PlotError> {
    render_plots_as(dir, rows, kind, title, composing, &[Format::Png, Format::Svg])
}

/// [`render_plots`] in the given formats only.
pub fn render_plots_as(
    dir: &Path,
    rows: &[ReportRow],
    kind: TableKind,
    title: &str,
    composing: &[ComposingRow],
    formats: &[Format],
) -> Result<Vec<PathBuf>, PlotError> {
    register_font()?;
    let mut written = Vec::new();
    for &format in formats {
        for &plot in PlotKind::for_sweep(kind) {
            let path = dir.join(format!("{}.{}", plot.name(), format.extension()));
            render_one(&path, format, plot, rows, title)?;
            written.push(path);
        }
        if !composing.is_empty() {
            let path = dir.join(format!("{LATENCY_BY_MODEL}.{}", format.extension()));
            render_to(&path, format, &ModelPlot { composing, kind, title })?;
            written.push(path);
        }
    }
    Ok(written)
}

/// Draws one plot to one file.
pub fn render_one(
    path: &Path,
    format: Format,
    plot: PlotKind,
    rows: &[ReportRow],
    title: &str,
) -> Result<(), PlotError> {
    render_to(path, format, &SweepPlot { plot, rows, title })
}

pub(super) type DrawResult = Result<(), String>;

/// A chart that draws on either backend.
pub(super) trait Chart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, hover: &Hover) -> DrawResult;
}

struct SweepPlot<'a> {
    plot: PlotKind,
    rows: &'a [ReportRow],
    title: &'a str,
}

impl Chart for SweepPlot<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, hover: &Hover) -> DrawResult {
        draw(root, self.plot, self.rows, self.title, hover)
    }
}

struct ModelPlot<'a> {
    composing: &'a [ComposingRow],
    kind: TableKind,
    title: &'a str,
}

impl Chart for ModelPlot<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, hover: &Hover) -> DrawResult {
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let points = composing_points(self.composing);
        let heading = match axis_of(self.kind) {
            Axis::Batch => "Server latency by composing model vs batch size",
            Axis::Load if load_axis_is_rate(&points) => "Server latency by composing model vs request rate",
            Axis::Load => "Server latency by composing model vs concurrency",
        };
        let root = draw_titles(root, heading, self.title).map_err(|e| e.to_string())?;
        latency_by_model(&root, self.composing, &points, axis_of(self.kind), hover)
    }
}

/// Draws `chart` into one file.
pub(super) fn render_to(path: &Path, format: Format, chart: &impl Chart) -> Result<(), PlotError> {
    register_font()?;
    let fail = |message: String| PlotError::Draw { path: path.to_owned(), message };
    let hover = Hover::default();
    match format {
        Format::Png => {
            let root = BitMapBackend::new(path, SIZE_PX).into_drawing_area();
            chart.draw(&root, &hover).map_err(fail)?;
            root.present().map_err(|e| fail(e.to_string()))
        }
        Format::Svg => {
            let root = SVGBackend::new(path, SIZE_PX).into_drawing_area();
            chart.draw(&root, &hover).map_err(fail)?;
            root.present().map_err(|e| fail(e.to_string()))
        }
    }
}

/// Draws `chart` as an SVG document for inlining in a page, with a hover layer on top: one
/// transparent box per bar and point whose `<title>` the browser shows as a tooltip.
pub(super) fn svg_with_hover(name: &str, chart: &impl Chart) -> Result<String, PlotError> {
    register_font()?;
    let fail = |message: String| PlotError::Draw { path: PathBuf::from(format!("{name}.svg (inline)")), message };
    let hover = Hover::default();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE_PX).into_drawing_area();
        chart.draw(&root, &hover).map_err(fail)?;
        root.present().map_err(|e| fail(e.to_string()))?;
    }
    let layer: String = hover.into_inner().iter().map(Hotspot::to_svg).collect();
    match svg.rfind("</svg>") {
        Some(end) => svg.insert_str(end, &format!("<g class=\"hover\">\n{layer}</g>\n")),
        None => return Err(fail("the SVG backend wrote no closing tag".into())),
    }
    Ok(svg)
}

/// One sweep plot as inline SVG with hover values.
pub fn sweep_svg(plot: PlotKind, rows: &[ReportRow], title: &str) -> Result<String, PlotError> {
    svg_with_hover(plot.name(), &SweepPlot { plot, rows, title })
}

/// The composing models' plot as inline SVG with hover values.
pub fn model_svg(composing: &[ComposingRow], kind: TableKind, title: &str) -> Result<String, PlotError> {
    svg_with_hover(LATENCY_BY_MODEL, &ModelPlot { composing, kind, title })
}
