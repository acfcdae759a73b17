//! Axes and scales: the category axis of load points (labels, segments, bars), number labels,
//! headroom, and the unit conversions the charts share.

use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::{RangedCoordf64, RangedCoordi32};
use plotters::prelude::*;

use super::super::TableKind;
use super::{DrawResult, FONT};
use crate::results::composing_csv::ComposingRow;
use crate::results::csv::stages_us;
use crate::results::{LoadPoint, ReportRow};

pub(crate) fn ms(us: f64) -> f64 {
    if us.is_finite() {
        us / 1000.0
    } else {
        0.0
    }
}

/// Whether the rows carry per-stage latencies (the summary tables of 002/004 offline do not).
pub(crate) fn has_stage_breakdown(rows: &[ReportRow]) -> bool {
    rows.iter().any(|r| stages_us(r).iter().any(|s| s.is_finite()))
}

/// A finite upper bound with headroom, never zero (plotters needs a non-empty range).
pub(crate) fn headroom(max: f64) -> f64 {
    if max.is_finite() && max > 0.0 {
        max * 1.12
    } else {
        1.0
    }
}

/// Axis numbers that stay short: `3.5M`, `250k`, `120`, `2.5`, `0.125`.
pub(crate) fn axis_label(value: &f64) -> String {
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
pub(super) enum Axis {
    Batch,
    Load,
}

/// A load point: batch and load.
pub(super) type Point = (u64, LoadPoint);

pub(super) fn points_of(rows: &[ReportRow]) -> Vec<Point> {
    rows.iter().map(|r| (r.batch, r.load)).collect()
}

/// The sweep's load points in the order composing.csv holds them, each once.
pub(super) fn composing_points(composing: &[ComposingRow]) -> Vec<Point> {
    let mut points: Vec<Point> = Vec::new();
    for r in composing {
        if !points.contains(&(r.batch, r.load)) {
            points.push((r.batch, r.load));
        }
    }
    points
}

pub(super) fn axis_of(kind: TableKind) -> Axis {
    match kind {
        TableKind::Offline => Axis::Batch,
        TableKind::Online => Axis::Load,
    }
}

pub(super) fn category_labels(points: &[Point], axis: Axis) -> Vec<String> {
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
pub(super) fn categories(rows: usize) -> std::ops::Range<i32> {
    match rows as i32 {
        0 | 1 => -1..1,
        n => 0..n - 1,
    }
}

pub(super) fn load_axis_is_rate(points: &[Point]) -> bool {
    points.iter().any(|(_, load)| matches!(load, LoadPoint::RequestRate(_)))
}

pub(super) fn axis_name(axis: Axis, points: &[Point]) -> &'static str {
    if matches!(axis, Axis::Batch) {
        "Batch size"
    } else if load_axis_is_rate(points) {
        "Request rate (requests/s)"
    } else {
        "Concurrency (requests in flight)"
    }
}

/// Shows every label up to 20 categories, then every k-th, so labels never overlap.
pub(super) fn label_for(labels: &[String], value: &SegmentValue<i32>) -> String {
    let step = labels.len().div_ceil(20).max(1);
    match value {
        SegmentValue::CenterOf(i) if *i >= 0 && (*i as usize) < labels.len() && (*i as usize).is_multiple_of(step) => {
            labels[*i as usize].clone()
        }
        _ => String::new(),
    }
}

/// The coordinates of the bar charts: one segment per load point, a linear y.
pub(super) type CategoryCoord = Cartesian2d<SegmentedCoord<RangedCoordi32>, RangedCoordf64>;

/// Axes, labels and titles of a chart over load points.
pub(super) fn category_mesh<DB: DrawingBackend>(
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
pub(super) fn category_bar(i: usize, low: f64, high: f64, color: RGBColor, margin: u32) -> Rectangle<CategoryPoint> {
    let mut r = Rectangle::new(
        [(SegmentValue::Exact(i as i32), low), (SegmentValue::Exact(i as i32 + 1), high)],
        color.filled(),
    );
    r.set_margin(0, 0, margin, margin);
    r
}

/// A fifth of each category's width on either side of its bar.
pub(super) fn bar_margin(categories: usize, plot_width_px: u32) -> u32 {
    ((plot_width_px as f64 / categories.max(1) as f64) * 0.2).round().clamp(1.0, 60.0) as u32
}

/// A point on the category axis.
pub(super) type CategoryPoint = (SegmentValue<i32>, f64);
