//! `search_pareto`: one point per searched configuration (throughput against the budgeted
//! latency statistic), the Pareto front joined by a line, and the budget as a vertical line.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::full_palette;

use super::{draw_titles, headroom, render_to, xy_chart, Chart, DrawResult, Format, Hotspot, Hover, PlotError, FONT};

/// The plot's file stem.
pub const SEARCH_PARETO: &str = "search_pareto";

/// One configuration on the plot.
#[derive(Clone, Debug, PartialEq)]
pub struct ParetoPoint {
    pub latency_ms: f64,
    pub throughput: f64,
    /// It met the budget.
    pub met: bool,
    /// It is on the Pareto front.
    pub front: bool,
    /// The model's own configuration.
    pub default: bool,
}

/// What the plot shows beside its points.
pub struct ParetoChart<'a> {
    pub points: &'a [ParetoPoint],
    /// "p99", "avg", ...
    pub statistic: &'a str,
    pub budget_ms: f64,
    pub title: &'a str,
}

impl Chart for ParetoChart<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, hover: &Hover) -> DrawResult {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
        root.fill(&WHITE).map_err(e)?;
        let heading = format!("Search: throughput vs {} latency, one point per configuration", self.statistic);
        let root = draw_titles(root, &heading, self.title).map_err(e)?;
        let x_max = headroom(self.points.iter().map(|p| p.latency_ms).fold(self.budget_ms, f64::max));
        let y_max = headroom(self.points.iter().map(|p| p.throughput).fold(0.0, f64::max));
        let x_desc = format!("{} latency (ms)", self.statistic);
        let mut chart = xy_chart(&root, (x_max, y_max), &x_desc, "Inferences/second")?;
        let red = full_palette::RED_600;
        chart
            .draw_series(LineSeries::new([(self.budget_ms, 0.0), (self.budget_ms, y_max)], red.stroke_width(2)))
            .map_err(e)?
            .label(format!("budget {}={}ms", self.statistic, self.budget_ms))
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], red.stroke_width(2)));
        let mut front: Vec<(f64, f64)> =
            self.points.iter().filter(|p| p.front).map(|p| (p.latency_ms, p.throughput)).collect();
        front.sort_by(|a, b| a.0.total_cmp(&b.0));
        let blue = full_palette::BLUE_600;
        chart
            .draw_series(LineSeries::new(front, blue.stroke_width(2)))
            .map_err(e)?
            .label("Pareto front")
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], blue.stroke_width(2)));
        let grey = full_palette::GREY_500;
        let color = |p: &ParetoPoint| if p.met { blue } else { grey };
        chart
            .draw_series(self.points.iter().map(|p| Circle::new((p.latency_ms, p.throughput), 5, color(p).filled())))
            .map_err(e)?;
        for p in self.points {
            let text = format!("{} {:.3} ms, {:.2} infer/s", self.statistic, p.latency_ms, p.throughput);
            hover.borrow_mut().push(Hotspot::around(chart.backend_coord(&(p.latency_ms, p.throughput)), text));
        }
        // The default configuration gets a ring, so the gain is visible.
        let orange = full_palette::ORANGE_700;
        chart
            .draw_series(
                self.points
                    .iter()
                    .filter(|p| p.default)
                    .map(|p| Circle::new((p.latency_ms, p.throughput), 9, orange.stroke_width(2))),
            )
            .map_err(e)?
            .label("default configuration")
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, orange.stroke_width(2)));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font((FONT, 14))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(e)
    }
}

/// Writes `search_pareto.png` and `.svg` into `dir`; returns the files.
pub fn render_pareto(dir: &Path, chart: &ParetoChart<'_>) -> Result<Vec<PathBuf>, PlotError> {
    let mut written = Vec::new();
    for format in [Format::Png, Format::Svg] {
        let path = dir.join(format!("{SEARCH_PARETO}.{}", format.extension()));
        render_to(&path, format, chart)?;
        written.push(path);
    }
    Ok(written)
}
