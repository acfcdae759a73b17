//! The seeds' charts: throughput vs batch, stacked latency (by stage, with throughput on a
//! second axis), throughput vs latency, and the composing models' latency.

use plotters::coord::Shift;
use plotters::element::ErrorBarOrientV;
use plotters::prelude::*;
use plotters::style::full_palette;

use super::axes::{
    axis_label, axis_name, bar_margin, categories, category_bar, category_labels, category_mesh, has_stage_breakdown,
    headroom, load_axis_is_rate, ms, points_of, Axis, CategoryCoord, CategoryPoint, Point,
};
use super::canvas::{
    box_legend, draw_legend, draw_titles, line_legend, xy_chart, Hotspot, Hover, LINE_COLOR, STAGE_COLORS,
};
use super::{DrawResult, PlotKind, FONT, SIZE_PX};
use crate::results::composing_csv::ComposingRow;
use crate::results::csv::{stages_us, STAGE_NAMES};
use crate::results::{Interval, ReportRow};

pub(super) fn draw<DB: DrawingBackend>(
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

/// An interval as whisker ends, when both are finite.
pub(super) fn whisker(ci: Interval) -> Option<(f64, f64)> {
    (ci.low.is_finite() && ci.high.is_finite()).then_some((ci.low, ci.high))
}

/// The throughput whisker of a row.
pub(super) fn throughput_whisker(r: &ReportRow) -> Option<(f64, f64)> {
    whisker(r.throughput_ci)
}

/// The p99 whisker of a row, in ms (none for a low-sample p99).
pub(super) fn p99_whisker_ms(r: &ReportRow) -> Option<(f64, f64)> {
    if r.low_sample(99.0) {
        return None;
    }
    whisker(r.p99_ci).map(|(lo, hi)| (ms(lo), ms(hi)))
}

/// The highest throughput to fit on an axis: the values and their whiskers' tops.
pub(super) fn throughput_top(rows: &[ReportRow]) -> f64 {
    rows.iter().map(|r| throughput_whisker(r).map_or(r.throughput, |(_, hi)| hi.max(r.throughput))).fold(0.0, f64::max)
}

/// Stacked bars per load point, one colour per composing model: its server queue + compute.
pub(super) fn latency_by_model<DB: DrawingBackend>(
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

pub(super) fn throughput_vs_batch<DB: DrawingBackend>(
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

pub(super) fn throughput_vs_latency<DB: DrawingBackend>(
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
pub(super) fn stacked_latency<DB: DrawingBackend>(
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
pub(super) fn bar_hotspot<DB: DrawingBackend>(
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

/// Inferences/second per category: a line `stroke_width` wide, and a dot on each point.
pub(super) fn throughput_line<DB: DrawingBackend>(
    rows: &[ReportRow],
    stroke_width: u32,
) -> (LineSeries<DB, CategoryPoint>, Vec<Circle<CategoryPoint, i32>>) {
    let points: Vec<CategoryPoint> =
        rows.iter().enumerate().map(|(i, r)| (SegmentValue::CenterOf(i as i32), r.throughput)).collect();
    let dots = points.iter().map(|p| Circle::new(p.clone(), 4, LINE_COLOR.filled())).collect();
    (LineSeries::new(points, LINE_COLOR.stroke_width(stroke_width)), dots)
}

/// A vertical whisker at one category of the bar charts.
pub(super) type Whisker = ErrorBar<SegmentValue<i32>, f64, ErrorBarOrientV<SegmentValue<i32>, f64>>;

/// Throughput intervals as whiskers on the category axis.
pub(super) fn throughput_whiskers(rows: &[ReportRow]) -> Vec<Whisker> {
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
