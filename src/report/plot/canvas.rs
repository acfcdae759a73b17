//! What every chart draws on: titles, legends, the colours, the x/y chart with its mesh, and
//! the hover targets collected while drawing.

use std::cell::RefCell;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::full_palette;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::axes::axis_label;
use super::{DrawResult, FONT};

/// A hover target in pixels, and the values it names.
#[derive(Clone, Debug)]
pub(crate) struct Hotspot {
    x: i32,
    y: i32,
    w: i32,
    h: i32,
    text: String,
}

impl Hotspot {
    /// A box spanning two pixel corners.
    pub(crate) fn between(a: (i32, i32), b: (i32, i32), text: String) -> Self {
        Hotspot { x: a.0.min(b.0), y: a.1.min(b.1), w: (a.0 - b.0).abs().max(2), h: (a.1 - b.1).abs().max(2), text }
    }

    /// A square around a point marker.
    pub(crate) fn around(p: (i32, i32), text: String) -> Self {
        Hotspot { x: p.0 - 7, y: p.1 - 7, w: 14, h: 14, text }
    }

    pub(super) fn to_svg(&self) -> String {
        let text = self.text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        format!(
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"transparent\" pointer-events=\"all\"><title>{text}</title></rect>\n",
            self.x, self.y, self.w, self.h
        )
    }
}

/// A linear x/y chart from 0 to the maxima, with the margins and mesh every line plot shares.
pub(crate) fn xy_chart<'a, DB: DrawingBackend>(
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
pub(crate) type Hover = RefCell<Vec<Hotspot>>;

/// The plot's heading, and the run's title on a second line, each shrunk until it fits the width;
/// returns the area below them.
pub(crate) fn draw_titles<DB: DrawingBackend>(
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

pub(crate) const STAGE_COLORS: [RGBColor; 7] = [
    full_palette::PURPLE_300,
    full_palette::BLUE_400,
    full_palette::ORANGE_400,
    full_palette::TEAL_300,
    full_palette::GREEN_500,
    full_palette::BROWN_400,
    full_palette::PINK_300,
];
pub(super) const LINE_COLOR: RGBColor = full_palette::RED_700;

/// The legend mark of a bar series.
pub(crate) fn box_legend(color: RGBColor) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled())
}

/// The legend mark of a line series.
pub(crate) fn line_legend(color: RGBColor, stroke_width: u32) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(stroke_width))
}

/// The box naming the chart's labelled series.
pub(crate) fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
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
