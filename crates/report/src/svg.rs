//! A small SVG chart writer: bar charts with a ceiling line, line charts, fairness bars with
//! Jain's index, time series with guarantee lines and latency percentile plots on a "nines"
//! axis. Axes carry their units with SI prefixes and 1-2-5 tick steps. The output is plain
//! deterministic text (no scripts, no external references) so it can be inlined in HTML and
//! snapshot-tested.

use crate::model::*;
use crate::ReportError;
use linerate_model::units::{si_prefix, significant};
use std::fmt::Write;

/// Width of every chart in pixels.
pub const WIDTH: f64 = 640.0;
/// Height of every chart in pixels.
pub const HEIGHT: f64 = 360.0;

const PALETTE: [&str; 8] = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f"];
const CEILING: &str = "#d62728";

/// The chart kinds of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartKind {
    /// [`BarChart`]s.
    Bars,
    /// [`XyChart`]s.
    Xy,
    /// [`FlowChart`]s.
    Flows,
    /// [`TimeChart`]s.
    Series,
    /// [`LatencyChart`]s.
    Latency,
}

impl ChartKind {
    /// Every kind, in report order.
    pub const ALL: [ChartKind; 5] =
        [ChartKind::Bars, ChartKind::Xy, ChartKind::Flows, ChartKind::Series, ChartKind::Latency];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ChartKind::Bars => "bars",
            ChartKind::Xy => "xy",
            ChartKind::Flows => "flows",
            ChartKind::Series => "series",
            ChartKind::Latency => "latency",
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<ChartKind> {
        ChartKind::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Parses `report svg --chart KIND[:N]`: the kind and the 0-based index of the N-th chart of
    /// that kind (N from 1; the first without `:N`).
    pub fn parse_spec(spec: &str) -> Result<(ChartKind, usize), ReportError> {
        let parsed = || {
            let (kind, n) = match spec.split_once(':') {
                Some((k, n)) => (k, n.parse::<usize>().ok().filter(|n| *n >= 1)?),
                None => (spec, 1),
            };
            Some((ChartKind::parse(kind)?, n - 1))
        };
        parsed().ok_or_else(|| ReportError::ChartSpec(spec.to_string()))
    }

    /// How many charts of this kind `r` has.
    pub fn count(self, r: &RunReport) -> usize {
        match self {
            ChartKind::Bars => r.charts.bars.len(),
            ChartKind::Xy => r.charts.xy.len(),
            ChartKind::Flows => r.charts.flows.len(),
            ChartKind::Series => r.charts.series.len(),
            ChartKind::Latency => r.charts.latency.len(),
        }
    }
}

/// Chart `index` (0-based) of `kind` in `r`, as a standalone SVG document.
pub fn render(r: &RunReport, kind: ChartKind, index: usize) -> Result<String, ReportError> {
    let missing =
        || ReportError::NoChart { id: r.id.clone(), kind: kind.name().into(), index: index + 1, have: kind.count(r) };
    Ok(match kind {
        ChartKind::Bars => bar_chart(r.charts.bars.get(index).ok_or_else(missing)?),
        ChartKind::Xy => xy_chart(r.charts.xy.get(index).ok_or_else(missing)?),
        ChartKind::Flows => flow_chart(r.charts.flows.get(index).ok_or_else(missing)?),
        ChartKind::Series => time_chart(r.charts.series.get(index).ok_or_else(missing)?),
        ChartKind::Latency => latency_chart(r.charts.latency.get(index).ok_or_else(missing)?),
    })
}

/// Every chart of `r`, in report order, as `(kind, svg)`.
pub fn all(r: &RunReport) -> Vec<(ChartKind, String)> {
    let mut v = Vec::new();
    for kind in ChartKind::ALL {
        for i in 0..kind.count(r) {
            if let Ok(s) = render(r, kind, i) {
                v.push((kind, s));
            }
        }
    }
    v
}

/// Escapes text for XML content and attributes.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if c.is_control() => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

/// The 1-2-5 × 10ⁿ step nearest to `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let n = if m < 1.5 {
        1.0
    } else if m < 3.0 {
        2.0
    } else if m < 7.0 {
        5.0
    } else {
        10.0
    };
    n * p
}

/// Tick values covering `[lo, hi]` with about `target` steps of 1, 2 or 5 × 10ⁿ; the first and
/// last ticks enclose the range.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    let (lo, hi) = if lo.is_finite() && hi.is_finite() { (lo.min(hi), lo.max(hi)) } else { (0.0, 1.0) };
    let (lo, hi) =
        if hi - lo < 1e-300 { (lo - 0.5 * lo.abs().max(1.0), hi + 0.5 * hi.abs().max(1.0)) } else { (lo, hi) };
    let step = nice_step((hi - lo) / target.max(1) as f64);
    let start = (lo / step).floor() as i64;
    let end = (hi / step).ceil() as i64;
    (start..=end.max(start + 1))
        .take(100)
        .map(|i| i as f64 * step)
        .map(|t| if t.abs() < step * 1e-9 { 0.0 } else { t })
        .collect()
}

/// How an axis in `unit` with values up to `max` is labelled: divisor and displayed unit.
fn axis_scale(max: f64, unit: &str) -> (f64, String) {
    match unit {
        "bit/s" | "B" | "1/s" | "bit" | "B/s" => {
            let (v, p) = si_prefix(max);
            let div = if v == 0.0 || max == 0.0 { 1.0 } else { max / v };
            // a rate of events reads `k/s`, not `k1/s`
            (div, format!("{p}{}", if unit == "1/s" { "/s" } else { unit }))
        }
        "us" if max >= 10_000.0 => (1e3, "ms".into()),
        _ => (1.0, unit.to_string()),
    }
}

fn axis_title(label: &str, unit: &str) -> String {
    if unit.is_empty() {
        label.to_string()
    } else {
        format!("{label} ({unit})")
    }
}

/// Plot area geometry and value→pixel mapping.
struct Frame {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Frame {
    fn px(&self, x: f64) -> f64 {
        self.left + (x - self.x0) / (self.x1 - self.x0).max(1e-300) * (self.right - self.left)
    }
    fn py(&self, y: f64) -> f64 {
        self.bottom - (y - self.y0) / (self.y1 - self.y0).max(1e-300) * (self.bottom - self.top)
    }
}

/// Opens a chart `width` pixels wide (normally [`WIDTH`]; wider when a legend needs the room).
fn open(s: &mut String, title: &str, kind: ChartKind, width: f64) {
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart chart-{}" width="{width}" height="{HEIGHT}" viewBox="0 0 {width} {HEIGHT}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12" role="img">"#,
        kind.name()
    );
    let _ = write!(s, "<title>{}</title>", esc(title));
    let _ = write!(s, r##"<rect width="{width}" height="{HEIGHT}" fill="#ffffff"/>"##);
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="20" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        width / 2.0,
        esc(title)
    );
}

/// Approximate width in pixels of `text` at `size` pixels: DejaVu Sans averages about 0.6 em a
/// character (digits 0.64 em), so 0.64 em never underestimates ordinary labels by much.
pub fn text_width(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size * 0.64
}

/// Splits `text` into lines no wider than `max` pixels at `size`, at spaces where it can and
/// inside a word only when the word alone is too wide.
fn wrap(text: &str, size: f64, max: f64) -> Vec<String> {
    let per_line = ((max / (size * 0.64)).floor() as usize).max(4);
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in text.split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > per_line {
            if !cur.is_empty() {
                lines.push(std::mem::take(&mut cur));
            }
            lines.push(word.drain(..per_line).collect());
        }
        let word: String = word.into_iter().collect();
        let need = cur.chars().count() + usize::from(!cur.is_empty()) + word.chars().count();
        if need > per_line && !cur.is_empty() {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(&word);
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

/// Horizontal grid lines and labels of the y axis, plus its title.
fn y_axis(s: &mut String, f: &Frame, ticks: &[f64], div: f64, title: &str) {
    for &t in ticks {
        let y = f.py(t);
        let _ =
            write!(s, r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e0e0e0"/>"##, f.left, f.right);
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            f.left - 6.0,
            y + 4.0,
            esc(&significant(t / div, 4))
        );
    }
    let cy = (f.top + f.bottom) / 2.0;
    let _ = write!(
        s,
        r#"<text x="16" y="{cy:.1}" text-anchor="middle" transform="rotate(-90 16 {cy:.1})">{}</text>"#,
        esc(title)
    );
    let _ = write!(
        s,
        r##"<line x1="{l:.1}" y1="{:.1}" x2="{l:.1}" y2="{:.1}" stroke="#333"/>"##,
        f.top,
        f.bottom,
        l = f.left
    );
    let _ = write!(
        s,
        r##"<line x1="{:.1}" y1="{b:.1}" x2="{:.1}" y2="{b:.1}" stroke="#333"/>"##,
        f.left,
        f.right,
        b = f.bottom
    );
}

fn x_title(s: &mut String, f: &Frame, title: &str) {
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        (f.left + f.right) / 2.0,
        HEIGHT - 8.0,
        esc(title)
    );
}

/// A dashed horizontal reference line, labelled in the right margin (name, then value).
fn ref_line(s: &mut String, f: &Frame, y: f64, label: &str, value: &str, color: &str) {
    let py = f.py(y);
    let _ = write!(
        s,
        r#"<line class="ref" x1="{:.1}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="{color}" stroke-width="2" stroke-dasharray="6 4"/>"#,
        f.left, f.right
    );
    let room = (WIDTH - f.right - 10.0).max(40.0);
    let name = if text_width(label, 12.0) <= room {
        label.to_string()
    } else {
        let keep = ((room / (12.0 * 0.64)) as usize).saturating_sub(1).max(3);
        format!("{}…", label.chars().take(keep).collect::<String>())
    };
    let x = f.right + 6.0;
    let _ = write!(s, r#"<text x="{x:.1}" y="{:.1}" fill="{color}">{}</text>"#, py - 2.0, esc(&name));
    let _ = write!(s, r#"<text x="{x:.1}" y="{:.1}" fill="{color}">{}</text>"#, py + 12.0, esc(value));
}

/// Font size of legend labels.
const LEGEND_FONT: f64 = 11.0;
/// The widest a legend's text column gets before its labels wrap.
const LEGEND_TEXT_MAX: f64 = 280.0;
/// Room a line chart's legend has at the default width (right of the plot, swatch included).
const LEGEND_ROOM: f64 = 200.0;
/// The narrowest plot area a legend may squeeze a line chart to before the chart widens.
const MIN_PLOT: f64 = 300.0;

/// The width of the legend's text column: its longest label, at most [`LEGEND_TEXT_MAX`].
fn legend_text_width(names: &[(String, &str, bool)]) -> f64 {
    names.iter().map(|(n, _, _)| text_width(n, LEGEND_FONT)).fold(0.0, f64::max).min(LEGEND_TEXT_MAX)
}

/// A legend right of the plot: a swatch and the label, wrapped to `text_w` pixels.
fn legend(s: &mut String, f: &Frame, names: &[(String, &str, bool)], text_w: f64) {
    let mut y = f.top + 8.0;
    for (name, color, dashed) in names {
        let x = f.right + 12.0;
        let dash = if *dashed { r#" stroke-dasharray="6 4""# } else { "" };
        let _ = write!(
            s,
            r#"<line x1="{x:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{color}" stroke-width="3"{dash}/>"#,
            x + 18.0
        );
        for (k, line) in wrap(name, LEGEND_FONT, text_w.max(LEGEND_FONT * 4.0)).iter().enumerate() {
            let ly = y + 4.0 + k as f64 * 13.0;
            let _ = write!(
                s,
                r#"<text class="legend" x="{:.1}" y="{ly:.1}" font-size="11">{}</text>"#,
                x + 24.0,
                esc(line)
            );
            if k > 0 {
                y += 13.0;
            }
        }
        y += 18.0;
    }
}

/// A power of two as a tick label: `64`, `1024`; bytes as `64K`, `1M`.
fn pow2_label(v: f64, unit: &str) -> String {
    if unit == "B" {
        for (scale, p) in [(1u64 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")] {
            if v >= scale as f64 {
                return format!("{}{p}", significant(v / scale as f64, 4));
            }
        }
    }
    significant(v, 6)
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// Bars with value labels; `refs` are dashed lines across (ceiling, mean).
fn bars_svg(title: &str, kind: ChartKind, unit: &str, bars: &[Bar], refs: &[(RefLine, &str)]) -> String {
    let mut s = String::new();
    open(&mut s, title, kind, WIDTH);
    let max = bars.iter().map(|b| b.value).chain(refs.iter().map(|r| r.0.value)).filter_map(finite).fold(0.0, f64::max);
    let min = bars.iter().map(|b| b.value).filter_map(finite).fold(0.0, f64::min);
    let ticks = nice_ticks(min, if max > 0.0 { max * 1.05 } else { 1.0 }, 5);
    let (div, shown) = axis_scale(max, unit);
    let f = Frame {
        left: 70.0,
        // the reference lines' labels go in the right margin: as wide as they need, within reason
        right: if refs.is_empty() {
            WIDTH - 20.0
        } else {
            let need = refs.iter().map(|(r, _)| text_width(&r.label, 12.0)).fold(0.0, f64::max) + 16.0;
            WIDTH - need.clamp(140.0, 260.0)
        },
        top: 40.0,
        bottom: HEIGHT - 60.0,
        x0: 0.0,
        x1: bars.len().max(1) as f64,
        y0: ticks.first().copied().unwrap_or(0.0),
        y1: ticks.last().copied().unwrap_or(1.0),
    };
    y_axis(&mut s, &f, &ticks, div, &shown);
    let slot = (f.right - f.left) / bars.len().max(1) as f64;
    let width = (slot * 0.7).min(90.0);
    for (i, b) in bars.iter().enumerate() {
        let v = finite(b.value).unwrap_or(0.0);
        let cx = f.left + slot * (i as f64 + 0.5);
        let (ya, yb) = (f.py(v.max(0.0)), f.py(v.min(0.0)));
        let color = PALETTE[i % PALETTE.len()];
        let _ = write!(
            s,
            r#"<rect class="bar" x="{:.1}" y="{ya:.1}" width="{width:.1}" height="{:.1}" fill="{color}"><title>{}: {}</title></rect>"#,
            cx - width / 2.0,
            (yb - ya).max(0.5),
            esc(&b.label),
            esc(&crate::format::si(v, unit))
        );
        if slot >= 30.0 {
            // value labels only where they fit; each bar's tooltip has its value anyway
            let _ = write!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#,
                ya - 4.0,
                esc(&significant(v / div, 3))
            );
        }
        let label: String = b.label.chars().take((slot / 7.0).max(4.0) as usize).collect();
        let _ =
            write!(s, r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, f.bottom + 16.0, esc(&label));
    }
    for (r, color) in refs {
        ref_line(&mut s, &f, r.value, &r.label, &crate::format::si(r.value, unit), color);
    }
    s.push_str("</svg>\n");
    s
}

/// A bar chart with its ceiling line.
pub fn bar_chart(c: &BarChart) -> String {
    let refs: Vec<(RefLine, &str)> = c.ceiling.iter().map(|r| (r.clone(), CEILING)).collect();
    bars_svg(&c.title, ChartKind::Bars, &c.unit, &c.bars, &refs)
}

/// Per-flow bars with the mean as a dashed line and Jain's index in the title.
pub fn flow_chart(c: &FlowChart) -> String {
    let title = match c.jain_index() {
        Some(j) => format!("{} — Jain's index {j:.3}", c.title),
        None => c.title.clone(),
    };
    let vals: Vec<f64> = c.flows.iter().map(|f| f.value).filter_map(finite).collect();
    let refs: Vec<(RefLine, &str)> = if vals.is_empty() {
        Vec::new()
    } else {
        vec![(RefLine { label: "mean".into(), value: vals.iter().sum::<f64>() / vals.len() as f64 }, "#555555")]
    };
    bars_svg(&title, ChartKind::Flows, &c.unit, &c.flows, &refs)
}

/// How the x axis is drawn.
#[derive(Clone, Copy, PartialEq)]
enum XScale {
    /// Linear, labelled with the axis unit.
    Linear,
    /// Linear from zero (time).
    FromZero,
    /// Powers of two (connections, guests, message sizes spanning a wide range).
    Log2,
    /// Percentiles on a "nines" axis: x = −log10(1 − p/100).
    Nines,
}

#[allow(clippy::too_many_arguments)]
fn lines_svg(
    title: &str,
    kind: ChartKind,
    x: &Axis,
    y: &Axis,
    lines: &[Line],
    refs: &[RefLine],
    xscale: XScale,
    markers: bool,
) -> String {
    // the legend first: its labels decide how much room it takes
    let ref_color = |r: &RefLine| {
        // a guarantee named after a line ("guest1 guarantee") takes that line's colour
        lines
            .iter()
            .position(|l| !l.name.is_empty() && r.label.starts_with(&format!("{} ", l.name)))
            .map_or(CEILING, |i| PALETTE[i % PALETTE.len()])
    };
    let mut legend_items: Vec<(String, &str, bool)> =
        lines.iter().enumerate().map(|(i, l)| (l.name.clone(), PALETTE[i % PALETTE.len()], false)).collect();
    for r in refs {
        legend_items.push((format!("{} {}", r.label, crate::format::si(r.value, &y.unit)), ref_color(r), true));
    }
    let with_legend = legend_items.len() > 1 || !refs.is_empty();
    let text_w = legend_text_width(&legend_items);
    // the legend is right of the plot: 12 px gap, 24 px swatch, the text, 8 px margin
    let legend_w = 12.0 + 24.0 + text_w + 8.0;
    let (width, right) = if !with_legend {
        (WIDTH, WIDTH - 24.0)
    } else if legend_w <= LEGEND_ROOM {
        (WIDTH, WIDTH - LEGEND_ROOM)
    } else if WIDTH - legend_w - 70.0 >= MIN_PLOT {
        (WIDTH, WIDTH - legend_w)
    } else {
        (70.0 + MIN_PLOT + legend_w, 70.0 + MIN_PLOT)
    };
    let mut s = String::new();
    open(&mut s, title, kind, width);
    // a positive x spanning 16× or more (1…64 connections, 64 B…1 MB messages) reads better in powers of two
    let xs: Vec<f64> = lines.iter().flat_map(|l| l.points.iter().map(|p| p[0])).filter(|x| x.is_finite()).collect();
    let xscale = match xscale {
        XScale::Linear
            if xs.len() >= 3
                && xs.iter().all(|x| *x > 0.0)
                && xs.iter().copied().fold(0.0, f64::max) / xs.iter().copied().fold(f64::INFINITY, f64::min)
                    >= 16.0 =>
        {
            XScale::Log2
        }
        other => other,
    };
    let tx = |v: f64| match xscale {
        XScale::Linear | XScale::FromZero => v,
        XScale::Log2 => v.max(1e-300).log2(),
        XScale::Nines => -(1.0 - (v / 100.0).clamp(0.0, 0.999_999_9)).log10(),
    };
    let pts = || lines.iter().flat_map(|l| l.points.iter()).filter(|p| p[0].is_finite() && p[1].is_finite());
    let (xmin, xmax) = pts().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| (a.min(tx(p[0])), b.max(tx(p[0]))));
    let ymax = pts().map(|p| p[1]).chain(refs.iter().map(|r| r.value)).filter_map(finite).fold(0.0, f64::max);
    let ymin = pts().map(|p| p[1]).fold(0.0, f64::min);
    let yt = nice_ticks(ymin, if ymax > 0.0 { ymax * 1.05 } else { 1.0 }, 5);
    let mut x_end = None;
    let (xt, xlabels): (Vec<f64>, Vec<String>) = match xscale {
        XScale::Log2 => {
            let (lo, hi) = (xmin.floor() as i32, xmax.ceil().max(xmin.floor() + 1.0) as i32);
            let every = ((hi - lo) / 10 + 1).max(1) as usize;
            let t: Vec<f64> = (lo..=hi).step_by(every).map(f64::from).collect();
            let l = t.iter().map(|e| pow2_label(2f64.powf(*e), &x.unit)).collect();
            (t, l)
        }
        XScale::Linear | XScale::FromZero => {
            let (lo, hi) = if xmin.is_finite() { (xmin, xmax) } else { (0.0, 1.0) };
            let lo = if xscale == XScale::FromZero { lo.min(0.0) } else { lo };
            let mut t = nice_ticks(lo, hi, 6);
            if xscale == XScale::FromZero && hi > lo {
                // time runs to the last sample, not on to the next round tick (10 s, not 12 s)
                t.retain(|v| *v <= hi * (1.0 + 1e-9));
                x_end = Some(hi);
            }
            // counts (guests, connections) get whole-number ticks only
            if xs.iter().all(|x| x.fract() == 0.0) && t.iter().filter(|v| v.fract() == 0.0).count() >= 2 {
                t.retain(|v| v.fract() == 0.0);
            }
            let (div, _) = axis_scale(hi.abs().max(lo.abs()), &x.unit);
            let l = t.iter().map(|v| significant(v / div, 4)).collect();
            (t, l)
        }
        XScale::Nines => {
            // 99.9 maps to 3.0000000000000004: round before taking the ceiling
            let top = (xmax - 1e-9).ceil().clamp(1.0, 7.0) as i32;
            let mut t: Vec<f64> = (0..=top).map(f64::from).collect();
            let mut l: Vec<String> = (0..=top)
                .map(|n| {
                    if n == 0 {
                        "0%".to_string()
                    } else {
                        format!("{}%", significant(100.0 - 100.0 * 10f64.powi(-n), 8))
                    }
                })
                .collect();
            t.insert(1, 2f64.log10()); // the median
            l.insert(1, "50%".into());
            (t, l)
        }
    };
    let (xdiv_unit, ydiv, yshown) = {
        let (_, xu) = axis_scale(xmax.abs().max(xmin.abs()), &x.unit);
        let (d, yu) = axis_scale(ymax, &y.unit);
        (xu, d, yu)
    };
    let f = Frame {
        left: 70.0,
        right,
        top: 40.0,
        bottom: HEIGHT - 50.0,
        x0: xt.first().copied().unwrap_or(0.0),
        x1: x_end.or(xt.last().copied()).unwrap_or(1.0),
        y0: yt.first().copied().unwrap_or(0.0),
        y1: yt.last().copied().unwrap_or(1.0),
    };
    y_axis(&mut s, &f, &yt, ydiv, &axis_title(&y.label, &yshown));
    for (t, l) in xt.iter().zip(&xlabels) {
        let px = f.px(*t);
        let _ =
            write!(s, r##"<line x1="{px:.1}" y1="{:.1}" x2="{px:.1}" y2="{:.1}" stroke="#f0f0f0"/>"##, f.top, f.bottom);
        let _ = write!(s, r#"<text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, f.bottom + 16.0, esc(l));
    }
    let xtitle = match xscale {
        XScale::Linear | XScale::FromZero => axis_title(&x.label, &xdiv_unit),
        XScale::Log2 => axis_title(&x.label, &x.unit),
        XScale::Nines => "percentile".to_string(),
    };
    x_title(&mut s, &f, &xtitle);
    for (i, l) in lines.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let mut d = String::new();
        for p in l.points.iter().filter(|p| p[0].is_finite() && p[1].is_finite()) {
            let _ = write!(d, "{}{:.1},{:.1}", if d.is_empty() { "M" } else { " L" }, f.px(tx(p[0])), f.py(p[1]));
        }
        if !d.is_empty() {
            let _ = write!(
                s,
                r#"<path class="line" d="{d}" fill="none" stroke="{color}" stroke-width="2"><title>{}</title></path>"#,
                esc(&l.name)
            );
        }
        let finite: Vec<&[f64; 2]> = l.points.iter().filter(|p| p[0].is_finite() && p[1].is_finite()).collect();
        // a line of one point draws nothing: it gets a marker even where lines have none
        if markers || finite.len() == 1 {
            for p in finite {
                let _ =
                    write!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"/>"#, f.px(tx(p[0])), f.py(p[1]));
            }
        }
    }
    for r in refs {
        let py = f.py(r.value);
        let color = ref_color(r);
        let _ = write!(
            s,
            r#"<line class="ref" x1="{:.1}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="{color}" stroke-width="2" stroke-dasharray="6 4"><title>{}</title></line>"#,
            f.left,
            f.right,
            esc(&r.label)
        );
    }
    if with_legend {
        legend(&mut s, &f, &legend_items, text_w);
    }
    s.push_str("</svg>\n");
    s
}

/// A line chart of y against x with markers.
pub fn xy_chart(c: &XyChart) -> String {
    lines_svg(&c.title, ChartKind::Xy, &c.x, &c.y, &c.lines, &[], XScale::Linear, true)
}

/// Rates over time with guarantee lines.
pub fn time_chart(c: &TimeChart) -> String {
    let x = Axis { label: "time".into(), unit: "s".into() };
    let y = Axis { label: "throughput".into(), unit: c.unit.clone() };
    lines_svg(&c.title, ChartKind::Series, &x, &y, &c.lines, &c.guarantees, XScale::FromZero, false)
}

/// Latency against percentile on a nines axis (50 %, 90 %, 99 %, 99.9 % equally spaced).
pub fn latency_chart(c: &LatencyChart) -> String {
    let x = Axis { label: "percentile".into(), unit: String::new() };
    let y = Axis { label: "latency".into(), unit: "us".into() };
    lines_svg(&c.title, ChartKind::Latency, &x, &y, &c.lines, &[], XScale::Nines, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_specs_are_a_kind_and_an_optional_number_from_1() {
        assert_eq!(ChartKind::parse_spec("bars").unwrap(), (ChartKind::Bars, 0));
        assert_eq!(ChartKind::parse_spec("latency:3").unwrap(), (ChartKind::Latency, 2));
        for bad in ["pie", "bars:0", "bars:x", "bars:", ":1"] {
            let e = ChartKind::parse_spec(bad).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("--chart {bad}: expected bars, xy, flows, series or latency, optionally with :N (N from 1)")
            );
        }
    }

    #[test]
    fn ticks_step_by_one_two_or_five() {
        assert_eq!(nice_ticks(0.0, 9.3e9, 5), vec![0.0, 2e9, 4e9, 6e9, 8e9, 10e9]);
        assert_eq!(nice_ticks(0.0, 1.0, 5), vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]);
        assert_eq!(nice_ticks(1.0, 64.0, 6), vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]);
        let t = nice_ticks(5.0, 5.0, 5);
        assert!(t.len() >= 2 && t[0] <= 5.0 && *t.last().unwrap() >= 5.0);
        assert!(nice_ticks(f64::NAN, 1.0, 5).len() >= 2);
    }

    #[test]
    fn escapes_markup_in_labels() {
        assert_eq!(esc("<a href='x'>&\u{1b}"), "&lt;a href=&#39;x&#39;&gt;&amp; ");
        let c = BarChart {
            title: "<script>".into(),
            unit: "bit/s".into(),
            bars: vec![Bar { label: "a&b".into(), value: 1e9 }],
            ceiling: None,
        };
        let svg = bar_chart(&c);
        assert!(!svg.contains("<script>") && svg.contains("&lt;script&gt;") && svg.contains("a&amp;b"));
    }

    /// `(x, text)` of every legend label.
    fn legend_texts(svg: &str) -> Vec<(f64, String)> {
        svg.split("<text class=\"legend\" x=\"")
            .skip(1)
            .map(|rest| {
                let x: f64 = rest[..rest.find('"').unwrap_or(0)].parse().unwrap_or(f64::NAN);
                let text = &rest[rest.find('>').map_or(0, |i| i + 1)..rest.find("</text>").unwrap_or(0)];
                (x, text.replace("&amp;", "&"))
            })
            .collect()
    }

    fn width_of(svg: &str) -> f64 {
        let w = &svg[svg.find("width=\"").unwrap_or(0) + 7..];
        w[..w.find('"').unwrap_or(0)].parse().unwrap_or(0.0)
    }

    #[test]
    fn the_legend_fits_its_labels() {
        let line = |name: &str| Line { name: name.into(), points: vec![[1.0, 4e8], [2.0, 5e8]] };
        let mut c = TimeChart {
            title: "t".into(),
            unit: "bit/s".into(),
            lines: vec![line("guest-one"), line("guest-two")],
            guarantees: vec![
                RefLine { label: "guest-one guarantee".into(), value: 500e6 },
                RefLine { label: "guest-two guarantee".into(), value: 250e6 },
            ],
        };
        for long in [false, true] {
            if long {
                c.guarantees[0].label =
                    "guest-with-a-very-long-name-indeed guarantee of the premium class on the uplink".into();
            }
            let svg = time_chart(&c);
            let width = width_of(&svg);
            let texts = legend_texts(&svg);
            assert!(texts.len() >= 4, "{svg}");
            for (x, t) in &texts {
                assert!(x + text_width(t, 11.0) <= width, "{t:?} at {x} overflows {width}: {svg}");
            }
            let all: String = texts.iter().map(|(_, t)| t.as_str()).collect::<Vec<_>>().join(" ");
            assert!(all.contains("guest-two guarantee 250 Mbit/s"), "{all}");
            if long {
                assert!(all.contains("premium class on the uplink 500 Mbit/s"), "wrapped, not cut: {all}");
            } else {
                assert!(all.contains("guest-one guarantee 500 Mbit/s"), "{all}");
                assert_eq!(width, WIDTH);
            }
        }
    }

    #[test]
    fn wrapping_breaks_at_spaces_and_inside_long_words_only() {
        assert_eq!(wrap("a bb ccc", 10.0, 32.0), ["a bb", "ccc"]);
        assert_eq!(wrap("abcdefghijkl", 10.0, 32.0), ["abcde", "fghij", "kl"]);
        assert_eq!(wrap("", 10.0, 32.0), [""]);
    }

    #[test]
    fn empty_and_non_finite_data_still_draw() {
        let c = XyChart {
            title: "t".into(),
            x: Axis { label: "x".into(), unit: String::new() },
            y: Axis { label: "y".into(), unit: "bit/s".into() },
            lines: vec![Line { name: "n".into(), points: vec![[f64::NAN, 1.0], [1.0, f64::INFINITY]] }],
        };
        let s = xy_chart(&c);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n") && !s.contains("NaN") && !s.contains("inf"));
        let b = bar_chart(&BarChart { title: "e".into(), unit: "".into(), bars: vec![], ceiling: None });
        assert!(!b.contains("NaN"));
    }
}
