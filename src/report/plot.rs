//! The seeds' plots, drawn with plotters as PNG and SVG: offline `throughput_vs_batch`,
//! `latency_vs_batch` and `throughput_vs_latency`; online `latency_vs_concurrency`.
//!
//! Text uses the bundled DejaVu Sans (`assets/fonts/`), registered with plotters' ab_glyph
//! support, so a PNG looks the same on every machine and needs no system fonts.
//!
//! Rows with 95% intervals get whiskers: on throughput points, and on p99 markers (none for a
//! low-sample p99, whose interval is open).

pub mod pareto;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::{RangedCoordf64, RangedCoordi32};
use plotters::coord::Shift;
use plotters::element::ErrorBarOrientV;
use plotters::prelude::*;
use plotters::style::full_palette;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::TableKind;
use crate::results::composing_csv::ComposingRow;
use crate::results::csv::{stages_us, STAGE_NAMES};
use crate::results::{Interval, LoadPoint, ReportRow};

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

/// A hover target in pixels, and the values it names.
#[derive(Clone, Debug)]
pub(super) struct Hotspot {
    x: i32,
    y: i32,
    w: i32,
    h: i32,
    text: String,
}

impl Hotspot {
    /// A box spanning two pixel corners.
    pub(super) fn between(a: (i32, i32), b: (i32, i32), text: String) -> Self {
        Hotspot { x: a.0.min(b.0), y: a.1.min(b.1), w: (a.0 - b.0).abs().max(2), h: (a.1 - b.1).abs().max(2), text }
    }

    /// A square around a point marker.
    pub(super) fn around(p: (i32, i32), text: String) -> Self {
        Hotspot { x: p.0 - 7, y: p.1 - 7, w: 14, h: 14, text }
    }

    fn to_svg(&self) -> String {
        let text = self.text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        format!(
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"transparent\" pointer-events=\"all\"><title>{text}</title></rect>\n",
            self.x, self.y, self.w, self.h
        )
    }
}

/// A linear x/y chart from 0 to the maxima, with the margins and mesh every line plot shares.
pub(super) fn xy_chart<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    (x_max, y_max): (f64, f64),
    x_desc: &str,
    y_desc: &str,
) -> Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>, String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(root)
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&axis_label)
        .y_label_formatter(&axis_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(e)?;
    Ok(chart)
}

/// The hover targets a chart collects while it draws (ignored for PNG and plain SVG files).
pub(super) type Hover = RefCell<Vec<Hotspot>>;

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    plot: PlotKind,
    rows: &[ReportRow],
    title: &str,
    hover: &Hover,
) -> DrawResult {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let heading = match plot {
        PlotKind::ThroughputVsBatch => "Throughput vs batch size",
        PlotKind::LatencyVsBatch if !has_stage_breakdown(rows) => "Average latency vs batch size",
        PlotKind::LatencyVsBatch => "Latency breakdown vs batch size",
        PlotKind::ThroughputVsLatency => "Throughput vs latency",
        PlotKind::LatencyVsConcurrency if load_axis_is_rate(&points_of(rows)) => {
            "Latency breakdown and throughput vs request rate"
        }
        PlotKind::LatencyVsConcurrency => "Latency breakdown and throughput vs concurrency",
    };
    let root = draw_titles(root, heading, title).map_err(|e| e.to_string())?;
    match plot {
        PlotKind::ThroughputVsBatch => throughput_vs_batch(&root, rows, hover),
        PlotKind::LatencyVsBatch => stacked_latency(&root, rows, Axis::Batch, false, hover),
        PlotKind::ThroughputVsLatency => throughput_vs_latency(&root, rows, hover),
        PlotKind::LatencyVsConcurrency => stacked_latency(&root, rows, Axis::Load, true, hover),
    }
}

/// The plot's heading, and the run's title on a second line, each shrunk until it fits the width;
/// returns the area below them.
pub(super) fn draw_titles<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    heading: &str,
    title: &str,
) -> Result<DrawingArea<DB, Shift>, DrawingAreaErrorKind<DB::ErrorType>> {
    let width_px = root.dim_in_pixel().0 as i32;
    let lines: Vec<(&str, u32)> = [(heading, 22), (title, 16)].into_iter().filter(|(t, _)| !t.is_empty()).collect();
    let mut y = 8;
    for (text, mut size) in lines {
        while size > 9
            && root.estimate_text_size(text, &TextStyle::from((FONT, size).into_font()))?.0 as i32 > width_px - 20
        {
            size -= 1;
        }
        let style = TextStyle::from((FONT, size).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        root.draw_text(text, &style, (width_px / 2, y))?;
        y += size as i32 + 8;
    }
    Ok(root.split_vertically(y + 4).1)
}

pub(super) fn ms(us: f64) -> f64 {
    if us.is_finite() {
        us / 1000.0
    } else {
        0.0
    }
}

/// Whether the rows carry per-stage latencies (the summary tables of 002/004 offline do not).
pub(super) fn has_stage_breakdown(rows: &[ReportRow]) -> bool {
    rows.iter().any(|r| stages_us(r).iter().any(|s| s.is_finite()))
}

/// An interval as whisker ends, when both are finite.
fn whisker(ci: Interval) -> Option<(f64, f64)> {
    (ci.low.is_finite() && ci.high.is_finite()).then_some((ci.low, ci.high))
}

/// The throughput whisker of a row.
fn throughput_whisker(r: &ReportRow) -> Option<(f64, f64)> {
    whisker(r.throughput_ci)
}

/// The p99 whisker of a row, in ms (none for a low-sample p99).
fn p99_whisker_ms(r: &ReportRow) -> Option<(f64, f64)> {
    if r.low_sample(99.0) {
        return None;
    }
    whisker(r.p99_ci).map(|(lo, hi)| (ms(lo), ms(hi)))
}

/// The highest throughput to fit on an axis: the values and their whiskers' tops.
fn throughput_top(rows: &[ReportRow]) -> f64 {
    rows.iter().map(|r| throughput_whisker(r).map_or(r.throughput, |(_, hi)| hi.max(r.throughput))).fold(0.0, f64::max)
}

/// A finite upper bound with headroom, never zero (plotters needs a non-empty range).
pub(super) fn headroom(max: f64) -> f64 {
    if max.is_finite() && max > 0.0 {
        max * 1.12
    } else {
        1.0
    }
}

/// Axis numbers that stay short: `3.5M`, `250k`, `120`, `2.5`, `0.125`.
pub(super) fn axis_label(value: &f64) -> String {
    let v = *value;
    let trim = |t: String| {
        if t.contains('.') {
            t.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            t
        }
    };
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if a >= 1e4 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        trim(format!("{v:.2}"))
    } else if a == 0.0 {
        "0".into()
    } else {
        trim(format!("{v:.3}"))
    }
}

/// What the category axis counts.
#[derive(Clone, Copy)]
enum Axis {
    Batch,
    Load,
}

/// A load point: batch and load.
type Point = (u64, LoadPoint);

fn points_of(rows: &[ReportRow]) -> Vec<Point> {
    rows.iter().map(|r| (r.batch, r.load)).collect()
}

/// The sweep's load points in the order composing.csv holds them, each once.
fn composing_points(composing: &[ComposingRow]) -> Vec<Point> {
    let mut points: Vec<Point> = Vec::new();
    for r in composing {
        if !points.contains(&(r.batch, r.load)) {
            points.push((r.batch, r.load));
        }
    }
    points
}

fn axis_of(kind: TableKind) -> Axis {
    match kind {
        TableKind::Offline => Axis::Batch,
        TableKind::Online => Axis::Load,
    }
}

fn category_labels(points: &[Point], axis: Axis) -> Vec<String> {
    points
        .iter()
        .map(|&(batch, load)| match (axis, load) {
            (Axis::Batch, _) => batch.to_string(),
            (Axis::Load, LoadPoint::Concurrency(c)) => c.to_string(),
            (Axis::Load, LoadPoint::RequestRate(rate)) => format!("{rate}"),
        })
        .collect()
}

/// The category axis: one segment per row (the segment coordinates include their end), and a
/// single row centred between two empty segments.
fn categories(rows: usize) -> std::ops::Range<i32> {
    match rows as i32 {
        0 | 1 => -1..1,
        n => 0..n - 1,
    }
}

fn load_axis_is_rate(points: &[Point]) -> bool {
    points.iter().any(|(_, load)| matches!(load, LoadPoint::RequestRate(_)))
}

fn axis_name(axis: Axis, points: &[Point]) -> &'static str {
    if matches!(axis, Axis::Batch) {
        "Batch size"
    } else if load_axis_is_rate(points) {
        "Request rate (requests/s)"
    } else {
        "Concurrency (requests in flight)"
    }
}

pub(super) const STAGE_COLORS: [RGBColor; 7] = [
    full_palette::PURPLE_300,
    full_palette::BLUE_400,
    full_palette::ORANGE_400,
    full_palette::TEAL_300,
    full_palette::GREEN_500,
    full_palette::BROWN_400,
    full_palette::PINK_300,
];
const LINE_COLOR: RGBColor = full_palette::RED_700;

/// Shows every label up to 20 categories, then every k-th, so labels never overlap.
fn label_for(labels: &[String], value: &SegmentValue<i32>) -> String {
    let step = labels.len().div_ceil(20).max(1);
    match value {
        SegmentValue::CenterOf(i) if *i >= 0 && (*i as usize) < labels.len() && (*i as usize).is_multiple_of(step) => {
            labels[*i as usize].clone()
        }
        _ => String::new(),
    }
}

/// The coordinates of the bar charts: one segment per load point, a linear y.
type CategoryCoord = Cartesian2d<SegmentedCoord<RangedCoordi32>, RangedCoordf64>;

/// Axes, labels and titles of a chart over load points.
fn category_mesh<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, CategoryCoord>,
    labels: &[String],
    x_desc: &str,
    y_desc: &str,
) -> DrawResult {
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .disable_x_mesh()
        .x_labels(labels.len())
        .x_label_formatter(&|v| label_for(labels, v))
        .x_desc(x_desc)
        .y_desc(y_desc)
        .y_label_formatter(&axis_label)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .draw()
        .map_err(|e| e.to_string())
}

/// The bar of category `i` from `low` to `high`, `margin` px in from either side.
fn category_bar(i: usize, low: f64, high: f64, color: RGBColor, margin: u32) -> Rectangle<CategoryPoint> {
    let mut r = Rectangle::new(
        [(SegmentValue::Exact(i as i32), low), (SegmentValue::Exact(i as i32 + 1), high)],
        color.filled(),
    );
    r.set_margin(0, 0, margin, margin);
    r
}

/// A fifth of each category's width on either side of its bar.
fn bar_margin(categories: usize, plot_width_px: u32) -> u32 {
    ((plot_width_px as f64 / categories.max(1) as f64) * 0.2).round().clamp(1.0, 60.0) as u32
}

/// The legend mark of a bar series.
pub(super) fn box_legend(color: RGBColor) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled())
}

/// Stacked bars per load point, one colour per composing model: its server queue + compute.
fn latency_by_model<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    composing: &[ComposingRow],
    points: &[Point],
    axis: Axis,
    hover: &Hover,
) -> DrawResult {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let busy_ms = |r: &ComposingRow| ms(r.queue_us + r.compute_input_us + r.compute_infer_us + r.compute_output_us);
    let at = |r: &ComposingRow| points.iter().position(|p| *p == (r.batch, r.load)).unwrap_or(0);
    let mut models: Vec<&str> = Vec::new();
    let mut tops = vec![0.0; points.len()];
    for r in composing {
        if !models.contains(&r.model.as_str()) {
            models.push(&r.model);
        }
        tops[at(r)] += busy_ms(r);
    }
    // As in the latency breakdown: data in the lower part, the legend above it.
    let legend_room = 1.25 + 0.07 * models.len() as f64;
    let y_max = legend_room * headroom(tops.iter().copied().fold(0.0, f64::max));
    let mut chart = ChartBuilder::on(root)
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(categories(points.len()).into_segmented(), 0.0..y_max)
        .map_err(e)?;
    let labels = category_labels(points, axis);
    category_mesh(&mut chart, &labels, axis_name(axis, points), "Server queue + compute (ms)")?;
    let margin = bar_margin(points.len(), SIZE_PX.0.saturating_sub(120));
    let mut base = vec![0.0; points.len()];
    for (m, model) in models.iter().enumerate() {
        let color = STAGE_COLORS[m % STAGE_COLORS.len()];
        let bars: Vec<_> = composing
            .iter()
            .filter(|r| r.model == *model)
            .map(|r| {
                let i = at(r);
                let low = base[i];
                base[i] += busy_ms(r);
                hover.borrow_mut().push(bar_hotspot(
                    &chart,
                    i,
                    low,
                    base[i],
                    format!("{}: {model} {:.3} ms", labels[i], busy_ms(r)),
                ));
                category_bar(i, low, base[i], color, margin)
            })
            .collect();
        chart.draw_series(bars).map_err(e)?.label(*model).legend(box_legend(color));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft, 13)
}

fn throughput_vs_batch<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    rows: &[ReportRow],
    hover: &Hover,
) -> DrawResult {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let labels = category_labels(&points_of(rows), Axis::Batch);
    let y_max = headroom(throughput_top(rows));
    let mut chart = ChartBuilder::on(root)
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(90)
        .build_cartesian_2d(categories(rows.len()).into_segmented(), 0.0..y_max)
        .map_err(e)?;
    category_mesh(&mut chart, &labels, "Batch size", "Inferences/second")?;
    let (line, dots) = throughput_line(rows, 2);
    chart.draw_series(line).map_err(e)?.label("Inferences/second").legend(line_legend(LINE_COLOR, 2));
    chart.draw_series(dots).map_err(e)?;
    chart.draw_series(throughput_whiskers(rows)).map_err(e)?;
    for (i, r) in rows.iter().enumerate() {
        let at = chart.backend_coord(&(SegmentValue::CenterOf(i as i32), r.throughput));
        hover.borrow_mut().push(Hotspot::around(at, format!("batch {}: {:.2} infer/s", labels[i], r.throughput)));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft, 14)
}

fn throughput_vs_latency<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    rows: &[ReportRow],
    hover: &Hover,
) -> DrawResult {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let x_max = headroom(
        rows.iter()
            .flat_map(|r| [ms(r.avg_us), ms(r.p99_us), p99_whisker_ms(r).map_or(0.0, |(_, hi)| hi)])
            .fold(0.0, f64::max),
    );
    let y_max = headroom(throughput_top(rows));
    let mut chart = xy_chart(root, (x_max, y_max), "Latency (ms)", "Inferences/second")?;
    type Latency = fn(&ReportRow) -> f64;
    let series: [(&str, Latency, RGBColor); 2] =
        [("avg latency", |r| r.avg_us, full_palette::BLUE_600), ("p99 latency", |r| r.p99_us, LINE_COLOR)];
    for (name, latency, color) in series {
        let points: Vec<(f64, f64)> =
            rows.iter().filter(|r| latency(r).is_finite()).map(|r| (ms(latency(r)), r.throughput)).collect();
        if points.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(e)?
            .label(name)
            .legend(line_legend(color, 2));
        chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled()))).map_err(e)?;
        for (r, p) in rows.iter().filter(|r| latency(r).is_finite()).zip(&points) {
            let text = format!("batch {}: {name} {:.3} ms, {:.2} infer/s", r.batch, p.0, p.1);
            hover.borrow_mut().push(Hotspot::around(chart.backend_coord(p), text));
        }
        // Throughput whiskers on every point; the p99 point also gets its latency interval.
        let style = color.stroke_width(1);
        chart
            .draw_series(rows.iter().filter(|r| latency(r).is_finite()).filter_map(|r| {
                throughput_whisker(r)
                    .map(|(lo, hi)| ErrorBar::new_vertical(ms(latency(r)), lo, r.throughput, hi, style, 8))
            }))
            .map_err(e)?;
        if name.starts_with("p99") {
            chart
                .draw_series(rows.iter().filter_map(|r| {
                    p99_whisker_ms(r)
                        .map(|(lo, hi)| ErrorBar::new_horizontal(r.throughput, lo, ms(r.p99_us), hi, style, 8))
                }))
                .map_err(e)?;
        }
    }
    // Each avg point names its batch size.
    chart
        .draw_series(
            rows.iter()
                .filter(|r| r.avg_us.is_finite())
                .map(|r| Text::new(format!("batch {}", r.batch), (ms(r.avg_us), r.throughput), (FONT, 12).into_font())),
        )
        .map_err(e)?;
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight, 14)
}

/// Stacked per-stage bars per category; `with_throughput` adds Inferences/second on a second
/// y-axis. Tables without a stage breakdown (002/004 offline) get bars of the average latency.
fn stacked_latency<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    rows: &[ReportRow],
    axis: Axis,
    with_throughput: bool,
    hover: &Hover,
) -> DrawResult {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let points = points_of(rows);
    let labels = category_labels(&points, axis);
    let has_stages = has_stage_breakdown(rows);
    let bar_top = |r: &ReportRow| {
        if has_stages {
            stages_us(r).iter().map(|s| ms(*s)).sum()
        } else {
            ms(r.avg_us)
        }
    };
    // Data fills the lower ~60%, so the legend (upper left) never covers it.
    let y_max = 1.45
        * headroom(
            rows.iter()
                .flat_map(|r| [bar_top(r), ms(r.p99_us), p99_whisker_ms(r).map_or(0.0, |(_, hi)| hi)])
                .fold(0.0, f64::max),
        );
    let t_max = 1.45 * headroom(throughput_top(rows));
    let mut builder = ChartBuilder::on(root);
    builder.margin(16).x_label_area_size(50).y_label_area_size(80);
    if with_throughput {
        builder.right_y_label_area_size(90);
    }
    let chart = builder.build_cartesian_2d(categories(rows.len()).into_segmented(), 0.0..y_max).map_err(e)?;
    let mut chart = chart.set_secondary_coord(categories(rows.len()).into_segmented(), 0.0..t_max);
    category_mesh(&mut chart, &labels, axis_name(axis, &points), "Latency (ms)")?;
    let margin = bar_margin(rows.len(), SIZE_PX.0.saturating_sub(if with_throughput { 210 } else { 120 }));
    let bar = |i: usize, low: f64, high: f64, color: RGBColor| category_bar(i, low, high, color, margin);
    if has_stages {
        let mut base = vec![0.0; rows.len()];
        for (s, name) in STAGE_NAMES.iter().enumerate() {
            let color = STAGE_COLORS[s];
            let bars: Vec<_> = rows
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let low = base[i];
                    base[i] += ms(stages_us(r)[s]);
                    let text = format!("{}: {name} {:.3} ms", labels[i], ms(stages_us(r)[s]));
                    hover.borrow_mut().push(bar_hotspot(&*chart, i, low, base[i], text));
                    bar(i, low, base[i], color)
                })
                .collect();
            chart.draw_series(bars).map_err(e)?.label(*name).legend(box_legend(color));
        }
    } else {
        let color = full_palette::BLUE_400;
        for (i, r) in rows.iter().enumerate() {
            let text = format!("{}: avg latency {:.3} ms", labels[i], ms(r.avg_us));
            hover.borrow_mut().push(bar_hotspot(&*chart, i, 0.0, ms(r.avg_us), text));
        }
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| bar(i, 0.0, ms(r.avg_us), color)))
            .map_err(e)?
            .label("avg latency")
            .legend(box_legend(color));
    }
    let p99: Vec<(SegmentValue<i32>, f64)> = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.p99_us.is_finite())
        .map(|(i, r)| (SegmentValue::CenterOf(i as i32), ms(r.p99_us)))
        .collect();
    for (i, r) in rows.iter().enumerate().filter(|(_, r)| r.p99_us.is_finite()) {
        let at = chart.backend_coord(&(SegmentValue::CenterOf(i as i32), ms(r.p99_us)));
        hover.borrow_mut().push(Hotspot::around(at, format!("{}: p99 latency {:.3} ms", labels[i], ms(r.p99_us))));
    }
    if !p99.is_empty() {
        chart
            .draw_series(p99.iter().map(|p| TriangleMarker::new(p.clone(), 6, BLACK.filled())))
            .map_err(e)?
            .label("p99 latency")
            .legend(|(x, y)| TriangleMarker::new((x + 7, y), 6, BLACK.filled()));
        chart
            .draw_series(rows.iter().enumerate().filter_map(|(i, r)| {
                p99_whisker_ms(r).map(|(lo, hi)| {
                    ErrorBar::new_vertical(
                        SegmentValue::CenterOf(i as i32),
                        lo,
                        ms(r.p99_us),
                        hi,
                        BLACK.stroke_width(1),
                        8,
                    )
                })
            }))
            .map_err(e)?;
    }
    if with_throughput {
        chart
            .configure_secondary_axes()
            .y_desc("Inferences/second")
            .y_label_formatter(&axis_label)
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 16))
            .draw()
            .map_err(e)?;
        let (line, dots) = throughput_line(rows, 3);
        chart
            .draw_secondary_series(line)
            .map_err(e)?
            .label("Inferences/second (right axis)")
            .legend(line_legend(LINE_COLOR, 3));
        chart.draw_secondary_series(dots).map_err(e)?;
        chart.draw_secondary_series(throughput_whiskers(rows)).map_err(e)?;
        for (i, r) in rows.iter().enumerate() {
            let at = chart.borrow_secondary().backend_coord(&(SegmentValue::CenterOf(i as i32), r.throughput));
            hover.borrow_mut().push(Hotspot::around(at, format!("{}: {:.2} infer/s", labels[i], r.throughput)));
        }
    }
    draw_legend(&mut *chart, SeriesLabelPosition::UpperLeft, 13)
}

/// The hover box of category `i`'s bar from `low` to `high` (the bar's full segment width).
fn bar_hotspot<DB: DrawingBackend>(
    chart: &ChartContext<'_, DB, CategoryCoord>,
    i: usize,
    low: f64,
    high: f64,
    text: String,
) -> Hotspot {
    let a = chart.backend_coord(&(SegmentValue::Exact(i as i32), low));
    let b = chart.backend_coord(&(SegmentValue::Exact(i as i32 + 1), high));
    // A fifth in from either side, as the bar is drawn.
    let inset = (b.0 - a.0).abs() / 5;
    Hotspot::between((a.0.min(b.0) + inset, a.1), (a.0.max(b.0) - inset, b.1), text)
}

/// A point on the category axis.
type CategoryPoint = (SegmentValue<i32>, f64);

/// Inferences/second per category: a line `stroke_width` wide, and a dot on each point.
fn throughput_line<DB: DrawingBackend>(
    rows: &[ReportRow],
    stroke_width: u32,
) -> (LineSeries<DB, CategoryPoint>, Vec<Circle<CategoryPoint, i32>>) {
    let points: Vec<CategoryPoint> =
        rows.iter().enumerate().map(|(i, r)| (SegmentValue::CenterOf(i as i32), r.throughput)).collect();
    let dots = points.iter().map(|p| Circle::new(p.clone(), 4, LINE_COLOR.filled())).collect();
    (LineSeries::new(points, LINE_COLOR.stroke_width(stroke_width)), dots)
}

/// A vertical whisker at one category of the bar charts.
type Whisker = ErrorBar<SegmentValue<i32>, f64, ErrorBarOrientV<SegmentValue<i32>, f64>>;

/// Throughput intervals as whiskers on the category axis.
fn throughput_whiskers(rows: &[ReportRow]) -> Vec<Whisker> {
    rows.iter()
        .enumerate()
        .filter_map(|(i, r)| {
            throughput_whisker(r).map(|(lo, hi)| {
                ErrorBar::new_vertical(
                    SegmentValue::CenterOf(i as i32),
                    lo,
                    r.throughput,
                    hi,
                    LINE_COLOR.stroke_width(2),
                    10,
                )
            })
        })
        .collect()
}

/// The legend mark of a line series.
pub(super) fn line_legend(color: RGBColor, stroke_width: u32) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(stroke_width))
}

/// The box naming the chart's labelled series.
pub(super) fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
    font_size: u32,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .label_font((FONT, font_size))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}
