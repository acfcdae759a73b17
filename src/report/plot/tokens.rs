//! Generative runs' plots, one point per run or sweep level: `ttft_itl_vs_token_throughput`
//! (TTFT and ITL p50/p90/p99 against total output tokens/s, side by side since TTFT is often
//! ten times ITL; a reasoning model's time to its first answer token, TTFOT, dashed beside TTFT) and `tokens_per_user_vs_token_throughput` (the serving trade-off curve: what
//! one stream gets against what the server delivers in all).

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::full_palette;

use super::{
    draw_legend, draw_titles, headroom, line_legend, render_to, svg_with_hover, xy_chart, Chart, DrawResult, Format,
    Hotspot, Hover, PlotError,
};

pub const LATENCY_VS_TOKEN_THROUGHPUT: &str = "ttft_itl_vs_token_throughput";
pub const USER_VS_TOTAL_TOKENS: &str = "tokens_per_user_vs_token_throughput";

/// One run (or sweep level) of a generative profile.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenPoint {
    /// What the run was, e.g. "concurrency 8".
    pub label: String,
    /// Output tokens per second over the whole run.
    pub total_tokens_per_s: f64,
    /// Output tokens per second per user, p50 over the requests.
    pub user_tokens_per_s: f64,
    /// TTFT p50, p90, p99 in ms (`None`: not streamed).
    pub ttft_ms: Option<[f64; 3]>,
    /// A reasoning model's TTFOT p50, p90, p99 in ms (`None`: no reasoning, or not streamed).
    pub ttfot_ms: Option<[f64; 3]>,
    /// ITL p50, p90, p99 in ms.
    pub itl_ms: Option<[f64; 3]>,
}

const PERCENTILES: [&str; 3] = ["p50", "p90", "p99"];
const COLORS: [RGBColor; 3] = [full_palette::BLUE_600, full_palette::ORANGE_700, full_palette::RED_700];

/// The points sorted by total throughput, as the lines join them.
fn by_throughput(points: &[TokenPoint]) -> Vec<&TokenPoint> {
    let mut sorted: Vec<&TokenPoint> = points.iter().collect();
    sorted.sort_by(|a, b| a.total_tokens_per_s.total_cmp(&b.total_tokens_per_s));
    sorted
}

struct LatencyChart<'a> {
    points: &'a [TokenPoint],
    title: &'a str,
}

impl Chart for LatencyChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, hover: &Hover) -> DrawResult {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        root.fill(&WHITE).map_err(e)?;
        let root = draw_titles(root, "TTFT and ITL vs output token throughput", self.title).map_err(e)?;
        let (left, right) = root.split_horizontally(root.dim_in_pixel().0 / 2);
        let sorted = by_throughput(self.points);
        let x_max = headroom(sorted.iter().map(|p| p.total_tokens_per_s).fold(0.0, f64::max));
        type Get = fn(&TokenPoint) -> Option<[f64; 3]>;
        let ttft: Get = |p| p.ttft_ms;
        let ttfot: Get = |p| p.ttfot_ms;
        let itl: Get = |p| p.itl_ms;
        let reasoning = sorted.iter().any(|p| p.ttfot_ms.is_some());
        // Each panel: its axis name and its metrics, the first solid, a second dashed.
        let left_panel: Vec<(&str, Get)> =
            if reasoning { vec![("TTFT", ttft), ("TTFOT", ttfot)] } else { vec![("TTFT", ttft)] };
        let panels =
            [(&left, if reasoning { "TTFT / TTFOT" } else { "TTFT" }, left_panel), (&right, "ITL", vec![("ITL", itl)])];
        for (area, axis, metrics) in panels {
            let series_of = |get: Get| -> Vec<(&TokenPoint, f64, [f64; 3])> {
                sorted.iter().filter_map(|p| get(p).map(|v| (*p, p.total_tokens_per_s, v))).collect()
            };
            let y_max =
                headroom(metrics.iter().flat_map(|(_, get)| series_of(*get)).map(|(_, _, v)| v[2]).fold(0.0, f64::max));
            let mut chart = xy_chart(area, (x_max, y_max), "Output tokens/s (all streams)", &format!("{axis} (ms)"))?;
            for (k, (name, get)) in metrics.iter().enumerate() {
                let series = series_of(*get);
                for (i, (percentile, color)) in PERCENTILES.iter().zip(COLORS).enumerate() {
                    let line: Vec<(f64, f64)> = series.iter().map(|(_, x, v)| (*x, v[i])).collect();
                    let style = color.stroke_width(2);
                    let drawn = if k == 0 {
                        chart.draw_series(LineSeries::new(line.clone(), style)).map_err(e)?
                    } else {
                        chart.draw_series(DashedLineSeries::new(line.clone(), 8, 5, style)).map_err(e)?
                    };
                    drawn.label(format!("{name} {percentile}")).legend(line_legend(color, 2));
                    chart.draw_series(line.iter().map(|&p| Circle::new(p, 4, color.filled()))).map_err(e)?;
                }
                for (p, x, v) in &series {
                    let text = format!(
                        "{}: {x:.0} tokens/s, {name} p50 {:.3} p90 {:.3} p99 {:.3} ms",
                        p.label, v[0], v[1], v[2]
                    );
                    hover.borrow_mut().push(Hotspot::around(chart.backend_coord(&(*x, v[2])), text));
                }
            }
            draw_legend(&mut chart, SeriesLabelPosition::UpperLeft, 13)?;
        }
        Ok(())
    }
}

struct TradeOffChart<'a> {
    points: &'a [TokenPoint],
    title: &'a str,
}

impl Chart for TradeOffChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, hover: &Hover) -> DrawResult {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        root.fill(&WHITE).map_err(e)?;
        let root = draw_titles(root, "Tokens/s per user vs output token throughput", self.title).map_err(e)?;
        let sorted = by_throughput(self.points);
        let x_max = headroom(sorted.iter().map(|p| p.total_tokens_per_s).fold(0.0, f64::max));
        let y_max = headroom(sorted.iter().map(|p| p.user_tokens_per_s).fold(0.0, f64::max));
        let mut chart =
            xy_chart(&root, (x_max, y_max), "Output tokens/s (all streams)", "Output tokens/s per user (p50)")?;
        let color = full_palette::BLUE_600;
        let line: Vec<(f64, f64)> = sorted.iter().map(|p| (p.total_tokens_per_s, p.user_tokens_per_s)).collect();
        chart.draw_series(LineSeries::new(line.clone(), color.stroke_width(2))).map_err(e)?;
        chart.draw_series(line.iter().map(|&p| Circle::new(p, 5, color.filled()))).map_err(e)?;
        for (p, xy) in sorted.iter().zip(&line) {
            chart
                .draw_series(std::iter::once(Text::new(p.label.clone(), *xy, (super::FONT, 13).into_font())))
                .map_err(e)?;
            let text = format!("{}: {:.0} tokens/s in all, {:.1} per user", p.label, xy.0, xy.1);
            hover.borrow_mut().push(Hotspot::around(chart.backend_coord(xy), text));
        }
        Ok(())
    }
}

/// Writes both plots into `dir` as PNG and SVG; returns the files.
pub fn render_token_plots(dir: &Path, points: &[TokenPoint], title: &str) -> Result<Vec<PathBuf>, PlotError> {
    let mut written = Vec::new();
    for format in [Format::Png, Format::Svg] {
        let path = dir.join(format!("{LATENCY_VS_TOKEN_THROUGHPUT}.{}", format.extension()));
        render_to(&path, format, &LatencyChart { points, title })?;
        written.push(path);
        let path = dir.join(format!("{USER_VS_TOTAL_TOKENS}.{}", format.extension()));
        render_to(&path, format, &TradeOffChart { points, title })?;
        written.push(path);
    }
    Ok(written)
}

/// Both plots as inline SVG with hover values, for report.html: `(name, svg)`.
pub fn token_svgs(points: &[TokenPoint], title: &str) -> Result<Vec<(String, String)>, PlotError> {
    Ok(vec![
        (
            LATENCY_VS_TOKEN_THROUGHPUT.to_string(),
            svg_with_hover(LATENCY_VS_TOKEN_THROUGHPUT, &LatencyChart { points, title })?,
        ),
        (USER_VS_TOTAL_TOKENS.to_string(), svg_with_hover(USER_VS_TOTAL_TOKENS, &TradeOffChart { points, title })?),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points() -> Vec<TokenPoint> {
        [(1, 90.0, 90.0, 10.0, 1.0), (8, 600.0, 75.0, 14.0, 1.3), (32, 1500.0, 47.0, 30.0, 2.1)]
            .into_iter()
            .map(|(c, total, user, ttft, itl)| TokenPoint {
                label: format!("concurrency {c}"),
                total_tokens_per_s: total,
                user_tokens_per_s: user,
                ttft_ms: Some([ttft, ttft * 1.5, ttft * 2.0]),
                ttfot_ms: None,
                itl_ms: Some([itl, itl * 1.2, itl * 1.6]),
            })
            .collect()
    }

    #[test]
    fn both_plots_are_written_as_png_and_svg_with_every_level() {
        let dir = tempfile::tempdir().unwrap();
        let files = render_token_plots(dir.path(), &points(), "test run").unwrap();
        assert_eq!(files.len(), 4);
        for file in &files {
            assert!(std::fs::metadata(file).unwrap().len() > 1000, "{file:?}");
        }
        let svgs = token_svgs(&points(), "test run").unwrap();
        let (_, trade_off) = &svgs[1];
        for label in ["concurrency 1", "concurrency 8", "concurrency 32"] {
            assert!(trade_off.contains(label), "{label} is on the trade-off curve");
        }
        // Hover values name each level's percentiles.
        assert!(svgs[0].1.contains("concurrency 32: 1500 tokens/s, TTFT p50 30.000 p90 45.000 p99 60.000 ms"));
        assert!(svgs[0].1.contains("ITL p50 2.100"));
    }

    #[test]
    fn a_reasoning_run_plots_ttfot_beside_ttft() {
        let plain = token_svgs(&points(), "plain").unwrap();
        assert!(!plain[0].1.contains("TTFOT"), "no reasoning, no TTFOT");
        let mut points = points();
        for p in &mut points {
            p.ttfot_ms = p.ttft_ms.map(|t| t.map(|v| v * 3.0));
        }
        let svgs = token_svgs(&points, "reasoning").unwrap();
        assert!(svgs[0].1.contains("concurrency 32: 1500 tokens/s, TTFOT p50 90.000 p90 135.000 p99 180.000 ms"));
        assert!(svgs[0].1.contains("TTFT p50 30.000"), "TTFT is still there");
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(render_token_plots(dir.path(), &points, "reasoning").unwrap().len(), 4);
    }

    #[test]
    fn a_run_without_streaming_still_gets_its_trade_off_plot() {
        let mut points = points();
        for p in &mut points {
            p.ttft_ms = None;
            p.itl_ms = None;
        }
        let svgs = token_svgs(&points, "whole answers").unwrap();
        assert!(svgs[1].1.contains("concurrency 8"));
    }
}
