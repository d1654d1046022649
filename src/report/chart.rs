//! Small hand-written SVG charts: grouped bars over categories, stacked shares over
//! categories, and lines over a numeric x axis, each with labelled axes, tick values and a
//! legend. The SVG is inline (no script, font or style from anywhere), so the page draws the
//! same from a laptop's file browser and from a shared drive. Hand-written because the page
//! needs three chart kinds and nothing interactive: a charting crate would bring more code
//! than these few hundred lines and its own idea of what a page may load.

use std::fmt::Write;

/// Colours told apart with the common colour-vision deficiencies: Okabe and Ito's eight, then
/// four of Tol's muted scheme; beyond twelve series they repeat (the tables still tell them apart).
pub const PALETTE: [&str; 12] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#7F7F7F", "#000000",
    "#882255", "#44AA99", "#DDCC77", "#332288",
];

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 370.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 20.0;
/// Room for the legend above the plot.
const TOP: f64 = 44.0;
/// Room for tick labels (turned 45° when there are many) and the x-axis label under them.
const BOTTOM: f64 = 104.0;

/// What the axes say, with units.
pub struct Axes<'a> {
    pub x: &'a str,
    pub y: &'a str,
}

/// One named series of values: one per category (bars) or (x, y) points (lines), drawn in
/// `colour` (an index into [`PALETTE`], so a pack keeps its colour from chart to chart).
pub struct Series<T> {
    pub name: String,
    pub colour: usize,
    pub values: Vec<T>,
}

/// The colour of series `i`.
pub fn colour(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// Grouped bars: one group per category, one bar per series.
pub fn bars(title: &str, axes: &Axes, categories: &[String], series: &[Series<f64>]) -> String {
    let top = max_of(series.iter().flat_map(|s| s.values.iter().copied()));
    bars_on(&nice_ticks(0.0, top), title, axes, categories, series)
}

/// [`bars`] of counts: the y axis has whole-number ticks only (a count of 0 or 1 is not drawn
/// against 0.2, 0.4, …).
pub fn count_bars(
    title: &str,
    axes: &Axes,
    categories: &[String],
    series: &[Series<f64>],
) -> String {
    let top = max_of(series.iter().flat_map(|s| s.values.iter().copied()));
    bars_on(&count_ticks(top), title, axes, categories, series)
}

/// Whole-number ticks from 0 covering `top` (at least 0 and 1).
pub fn count_ticks(top: f64) -> Vec<f64> {
    let ticks = nice_ticks(0.0, top.max(1.0));
    if ticks.len() > 1 && ticks[1] - ticks[0] >= 1.0 {
        return ticks;
    }
    (0..=top.max(1.0).ceil() as i64).map(|k| k as f64).collect()
}

fn bars_on(
    ticks: &[f64],
    title: &str,
    axes: &Axes,
    categories: &[String],
    series: &[Series<f64>],
) -> String {
    let y_max = *ticks.last().unwrap_or(&1.0);
    let mut svg = open(title);
    let plot = Plot::new(0.0, 1.0, 0.0, y_max);
    plot.y_grid(&mut svg, ticks);
    let slot = plot.width() / categories.len().max(1) as f64;
    let bar = (slot * 0.8) / series.len().max(1) as f64;
    for (ci, cat) in categories.iter().enumerate() {
        let x0 = LEFT + slot * ci as f64 + slot * 0.1;
        for (si, s) in series.iter().enumerate() {
            let v = s.values.get(ci).copied().unwrap_or(0.0);
            let (y, h) = (plot.y(v), plot.y(0.0) - plot.y(v));
            let _ = write!(
                svg,
                r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                x0 + bar * si as f64,
                bar.max(0.5),
                colour(s.colour),
                escape(&s.name),
                escape(&format!("{cat}: {}", tick_label(v)))
            );
        }
        category_label(
            &mut svg,
            LEFT + slot * (ci as f64 + 0.5),
            cat,
            categories.len(),
        );
    }
    close(
        svg,
        &plot,
        axes,
        series.iter().map(|s| (s.name.as_str(), s.colour)),
    )
}

/// Stacked shares (0 to 1) per category, one colour per part: the valuation mix.
pub fn stacked(title: &str, axes: &Axes, categories: &[String], parts: &[Series<f64>]) -> String {
    let mut svg = open(title);
    let plot = Plot::new(0.0, 1.0, 0.0, 100.0);
    plot.y_grid(&mut svg, &nice_ticks(0.0, 100.0));
    let slot = plot.width() / categories.len().max(1) as f64;
    for (ci, cat) in categories.iter().enumerate() {
        let mut below = 0.0;
        for p in parts {
            let v = 100.0 * p.values.get(ci).copied().unwrap_or(0.0);
            if v <= 0.0 {
                continue;
            }
            let (y, h) = (plot.y(below + v), plot.y(below) - plot.y(below + v));
            let _ = write!(
                svg,
                r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}: {}: {v:.1}%</title></rect>"#,
                LEFT + slot * ci as f64 + slot * 0.05,
                slot * 0.9,
                colour(p.colour),
                escape(cat),
                escape(&p.name)
            );
            below += v;
        }
        category_label(
            &mut svg,
            LEFT + slot * (ci as f64 + 0.5),
            cat,
            categories.len(),
        );
    }
    close(
        svg,
        &plot,
        axes,
        parts.iter().map(|s| (s.name.as_str(), s.colour)),
    )
}

/// Lines through (x, y) points over a numeric x axis, with a dot at each point.
pub fn lines(title: &str, axes: &Axes, series: &[Series<(f64, f64)>]) -> String {
    let points = || series.iter().flat_map(|s| s.values.iter().copied());
    let (x_lo, x_hi) = range(points().map(|p| p.0));
    let (y_lo, y_hi) = range(points().map(|p| p.1));
    let x_ticks = nice_ticks(x_lo, x_hi);
    let y_ticks = nice_ticks(y_lo.min(0.0), y_hi);
    let plot = Plot::new(
        x_ticks[0],
        *x_ticks.last().unwrap(),
        y_ticks[0],
        *y_ticks.last().unwrap(),
    );
    let mut svg = open(title);
    plot.y_grid(&mut svg, &y_ticks);
    for &t in &x_ticks {
        let x = plot.x(t);
        let _ = write!(
            svg,
            r#"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" class="tick"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" class="tick-label">{}</text>"#,
            HEIGHT - BOTTOM,
            HEIGHT - BOTTOM + 5.0,
            HEIGHT - BOTTOM + 20.0,
            tick_label(t)
        );
    }
    for s in series {
        let path: Vec<String> = s
            .values
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", plot.x(x), plot.y(y)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
            path.join(" "),
            colour(s.colour)
        );
        for &(x, y) in &s.values {
            let _ = write!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"><title>{}: ({}, {})</title></circle>"#,
                plot.x(x),
                plot.y(y),
                colour(s.colour),
                escape(&s.name),
                tick_label(x),
                tick_label(y)
            );
        }
    }
    close(
        svg,
        &plot,
        axes,
        series.iter().map(|s| (s.name.as_str(), s.colour)),
    )
}

/// The plotting area and its data ranges.
struct Plot {
    x_lo: f64,
    x_hi: f64,
    y_lo: f64,
    y_hi: f64,
}

impl Plot {
    fn new(x_lo: f64, x_hi: f64, y_lo: f64, y_hi: f64) -> Plot {
        Plot {
            x_lo,
            x_hi: if x_hi > x_lo { x_hi } else { x_lo + 1.0 },
            y_lo,
            y_hi: if y_hi > y_lo { y_hi } else { y_lo + 1.0 },
        }
    }

    fn width(&self) -> f64 {
        WIDTH - LEFT - RIGHT
    }

    fn x(&self, v: f64) -> f64 {
        LEFT + (v - self.x_lo) / (self.x_hi - self.x_lo) * self.width()
    }

    fn y(&self, v: f64) -> f64 {
        let h = HEIGHT - TOP - BOTTOM;
        HEIGHT - BOTTOM - (v - self.y_lo) / (self.y_hi - self.y_lo) * h
    }

    /// Horizontal grid lines with their values on the left.
    fn y_grid(&self, svg: &mut String, ticks: &[f64]) {
        for &t in ticks {
            let y = self.y(t);
            let _ = write!(
                svg,
                r#"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" class="grid"/><text x="{:.1}" y="{:.1}" text-anchor="end" class="tick-label">{}</text>"#,
                WIDTH - RIGHT,
                LEFT - 6.0,
                y + 4.0,
                tick_label(t)
            );
        }
    }
}

fn open(title: &str) -> String {
    format!(
        r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img"><title>{}</title>"#,
        escape(title)
    )
}

/// The axes, their labels and the legend; ends the SVG.
fn close<'a>(
    mut svg: String,
    plot: &Plot,
    axes: &Axes,
    names: impl Iterator<Item = (&'a str, usize)>,
) -> String {
    let (x0, y0) = (LEFT, HEIGHT - BOTTOM);
    let _ = write!(
        svg,
        r#"<line x1="{x0}" y1="{y0}" x2="{:.1}" y2="{y0}" class="axis"/><line x1="{x0}" y1="{TOP}" x2="{x0}" y2="{y0}" class="axis"/>"#,
        WIDTH - RIGHT
    );
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" class="axis-label x-label">{}</text>"#,
        LEFT + plot.width() / 2.0,
        HEIGHT - 8.0,
        escape(axes.x)
    );
    let mid = (TOP + y0) / 2.0;
    // Turned along the plot's height, which a long label would overrun: then two lines.
    let lines = label_lines(axes.y, y0 - TOP);
    let _ = write!(
        svg,
        r#"<text x="16" y="{mid:.1}" text-anchor="middle" transform="rotate(-90 16 {mid:.1})" class="axis-label y-label">"#
    );
    if let [one] = &lines[..] {
        svg.push_str(&escape(one));
    } else {
        for (i, line) in lines.iter().enumerate() {
            let _ = write!(
                svg,
                r#"<tspan x="16" dy="{}">{}</tspan>"#,
                if i == 0 { "-0.3em" } else { "1.2em" },
                escape(line)
            );
        }
    }
    svg.push_str("</text>");
    svg.push_str(r#"<g class="legend">"#);
    let mut x = LEFT;
    for (name, i) in names {
        let _ = write!(
            svg,
            r#"<rect x="{x:.1}" y="12" width="14" height="14" fill="{}"/><text x="{:.1}" y="24" class="legend-label">{}</text>"#,
            colour(i),
            x + 19.0,
            escape(name)
        );
        x += 30.0 + 7.0 * name.chars().count() as f64;
    }
    svg.push_str("</g></svg>");
    svg
}

/// An axis label's width in user units, generously (13 px semi-bold: under 8 px a character).
fn label_width(text: &str) -> f64 {
    8.0 * text.chars().count() as f64
}

/// The label as one line when it fits in `room`, else as two lines split at the space nearest
/// its middle.
fn label_lines(text: &str, room: f64) -> Vec<String> {
    if label_width(text) <= room {
        return vec![text.to_string()];
    }
    let middle = text.len() / 2;
    let split = text
        .match_indices(' ')
        .map(|(i, _)| i)
        .min_by_key(|&i| i.abs_diff(middle));
    match split {
        Some(i) => vec![text[..i].to_string(), text[i + 1..].to_string()],
        None => vec![text.to_string()],
    }
}

/// A category's name under its slot, turned when there are many.
fn category_label(svg: &mut String, x: f64, text: &str, count: usize) {
    let y = HEIGHT - BOTTOM + 16.0;
    if count > 12 {
        let _ = write!(
            svg,
            r#"<text x="{x:.1}" y="{y:.1}" text-anchor="end" transform="rotate(-45 {x:.1} {y:.1})" class="tick-label">{}</text>"#,
            escape(text)
        );
    } else {
        let _ = write!(
            svg,
            r#"<text x="{x:.1}" y="{y:.1}" text-anchor="middle" class="tick-label">{}</text>"#,
            escape(text)
        );
    }
}

fn max_of(values: impl Iterator<Item = f64>) -> f64 {
    values.filter(|v| v.is_finite()).fold(0.0, f64::max)
}

fn range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi { (0.0, 1.0) } else { (lo, hi) }
}

/// About five round tick values (1, 2 or 5 times a power of ten apart) covering lo..=hi.
pub fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let hi = if hi > lo { hi } else { lo + 1.0 };
    let raw = (hi - lo) / 5.0;
    let unit = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * unit)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * unit);
    let first = (lo / step).floor() as i64;
    let last = (hi / step).ceil() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// A tick value in a few characters: 1.5k, 2M, 0.25, -3.
pub fn tick_label(v: f64) -> String {
    let a = v.abs();
    let (scaled, unit) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    // Three significant digits or so: 262144 is "262k", 12500 "12.5k", 0.25 "0.25".
    let decimals = match scaled.abs() {
        a if a >= 100.0 => 0,
        a if a >= 10.0 => 1,
        _ => 3,
    };
    let text = format!("{scaled:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    let text = if text == "-0" { "0" } else { text };
    format!("{text}{unit}")
}

/// Text made safe inside HTML and SVG elements and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(
            nice_ticks(0.0, 100.0),
            vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        let t = nice_ticks(-15402.7, 13636.2);
        assert!(t[0] <= -15402.7 && *t.last().unwrap() >= 13636.2);
        assert_eq!(nice_ticks(3.0, 3.0)[0], 3.0);
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_label(1500.0), "1500");
        assert_eq!(tick_label(25000.0), "25k");
        assert_eq!(tick_label(2_000_000.0), "2M");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(-0.0001), "0");
        assert_eq!(tick_label(262144.0), "262k");
        assert_eq!(tick_label(12500.0), "12.5k");
    }

    #[test]
    fn count_axes_tick_whole_numbers() {
        assert_eq!(count_ticks(0.0), vec![0.0, 1.0]);
        assert_eq!(count_ticks(3.0), vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(count_ticks(100.0)[1], 20.0);
    }

    #[test]
    fn a_long_axis_label_takes_two_lines() {
        assert_eq!(label_lines("count", 222.0), vec!["count"]);
        let two = label_lines("nodes per move (median), or the companion's mean", 222.0);
        assert_eq!(two.len(), 2);
        assert!(two.iter().all(|l| label_width(l) <= 222.0), "{two:?}");
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn a_bar_chart_has_its_labels_and_legend() {
        let svg = bars(
            "t",
            &Axes {
                x: "move",
                y: "share of rows (%)",
            },
            &["up".into(), "down".into()],
            &[Series {
                name: "d6".into(),
                colour: 1,
                values: vec![60.0, 40.0],
            }],
        );
        assert!(svg.contains(">move</text>") && svg.contains(">share of rows (%)</text>"));
        assert!(svg.contains(">d6</text>") && svg.matches("<rect").count() == 3);
        assert_eq!(svg.matches(&format!("fill=\"{}\"", PALETTE[1])).count(), 3);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
    }
}
