//! A timeline as an SVG: a title and the range in local time, a stacked bar of cores per
//! bucket coloured by group, a local-time axis, a cores axis with grid lines, a legend, and a
//! hover title per bucket with its figures. Self-contained: no script, font or network.

use std::fmt::Write as _;

use jiff::tz::TimeZone;

use crate::time::local_clock;
use crate::timeline::{cores, Timeline, OTHER};

const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 64.0;
const BOTTOM: f64 = 40.0;

/// The groups' colours, in order; "other" is grey.
const PALETTE: [&str; 10] = [
    "#d9480f", "#1971c2", "#2f9e44", "#9c36b5", "#f08c00", "#0c8599", "#c2255c", "#5c940d",
    "#3b5bdb", "#862e9c",
];
const OTHER_COLOUR: &str = "#adb5bd";

/// Text made safe inside SVG elements and attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() && c != '\n' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A round top for the cores axis: 1, 2 or 5 times a power of ten, at least `peak`.
fn axis_top(peak: f64) -> f64 {
    let peak = peak.max(0.1);
    let mut step = 10f64.powf(peak.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * step >= peak - 1e-9 {
            step *= m;
            break;
        }
    }
    step
}

/// The plot's geometry and the groups' order, shared by the parts of the picture.
struct Plot<'a> {
    t: &'a Timeline,
    groups: Vec<String>,
    /// Plot width and height.
    pw: f64,
    ph: f64,
    /// Bar width.
    bw: f64,
    /// Cores at the top of the axis.
    top: f64,
}

impl Plot<'_> {
    /// The y of `cores`.
    fn y(&self, cores: f64) -> f64 {
        TOP + self.ph - cores / self.top * self.ph
    }

    /// The colour of `group`.
    fn colour(&self, group: &str) -> &'static str {
        if group == OTHER {
            return OTHER_COLOUR;
        }
        let i = self.groups.iter().position(|x| x == group).unwrap_or(0);
        PALETTE[i % PALETTE.len()]
    }

    /// The cores axis: five grid lines with their figures, and its name.
    fn cores_axis(&self, s: &mut String) {
        for i in 0..=4 {
            let c = self.top * f64::from(i) / 4.0;
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#e9ecef"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
                LEFT + self.pw,
                self.y(c),
                self.y(c),
                LEFT - 6.0,
                self.y(c) + 4.0,
                cores(c)
            );
        }
        let _ = writeln!(
            s,
            r##"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle" fill="#555">cores</text>"##,
            TOP + self.ph / 2.0
        );
    }

    /// One stacked bar per bucket, with its figures as a hover title over its whole column.
    fn bars(&self, s: &mut String, tz: &TimeZone) {
        for (i, b) in self.t.buckets.iter().enumerate() {
            let x = LEFT + i as f64 * self.bw;
            let end = b.start + self.t.bucket_seconds;
            let mut tip = format!(
                "{} to {}: {} cores",
                local_clock(b.start as f64, tz),
                local_clock(end as f64, tz),
                cores(b.total())
            );
            for g in self.groups.iter().filter(|g| b.of(g) > 0.0) {
                let _ = write!(tip, "\n{g} {}", cores(b.of(g)));
            }
            let _ = write!(
                s,
                r##"<g><title>{}</title><rect x="{x:.2}" y="{TOP}" width="{:.2}" height="{}" fill="#ffffff" fill-opacity="0"/>"##,
                escape(&tip),
                self.bw,
                self.ph
            );
            let mut sum = 0.0;
            for g in &self.groups {
                let c = b.of(g);
                if c <= 0.0 {
                    continue;
                }
                let _ = write!(
                    s,
                    r#"<rect x="{x:.2}" y="{:.2}" width="{:.2}" height="{:.2}" fill="{}"/>"#,
                    self.y(sum + c),
                    (self.bw - 0.5).max(0.5),
                    self.y(sum) - self.y(sum + c),
                    self.colour(g)
                );
                sum += c;
            }
            s.push_str("</g>\n");
        }
    }

    /// The time axis: about seven labels, in local time.
    fn time_axis(&self, s: &mut String, tz: &TimeZone) {
        let base = TOP + self.ph;
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{base:.1}" y2="{base:.1}" stroke="#495057"/>"##,
            LEFT + self.pw
        );
        let step = (self.t.buckets.len() / 7).max(1);
        for (i, b) in self.t.buckets.iter().enumerate().step_by(step) {
            let x = LEFT + i as f64 * self.bw;
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{base:.1}" y2="{:.1}" stroke="#495057"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" fill="#333">{}</text>"##,
                base + 5.0,
                base + 18.0,
                local_clock(b.start as f64, tz)
            );
        }
    }

    /// The legend: a box of each group's colour and its name.
    fn legend(&self, s: &mut String) {
        for (i, g) in self.groups.iter().enumerate() {
            let ly = TOP + 8.0 + i as f64 * 20.0;
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                WIDTH - RIGHT + 16.0,
                ly,
                self.colour(g),
                WIDTH - RIGHT + 34.0,
                ly + 10.0,
                escape(g)
            );
        }
    }
}

/// The SVG of `t`, titled `title`, with `subtitle` under it, times in `tz`.
pub fn render(t: &Timeline, title: &str, subtitle: &str, tz: &TimeZone) -> String {
    let pw = WIDTH - LEFT - RIGHT;
    let plot = Plot {
        t,
        groups: t.groups(),
        pw,
        ph: HEIGHT - TOP - BOTTOM,
        bw: pw / t.buckets.len().max(1) as f64,
        top: axis_top(t.peak()),
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="24" font-size="17">{}</text><text x="{LEFT}" y="44" fill="#555">{}</text>"##,
        escape(title),
        escape(subtitle)
    );
    plot.cores_axis(&mut s);
    plot.bars(&mut s, tz);
    plot.time_axis(&mut s, tz);
    plot.legend(&mut s);
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::tests::example;

    #[test]
    fn bars_titles_axis_and_legend() {
        let tz = TimeZone::get("Europe/Berlin").unwrap();
        let svg = render(&example(), "CPU <by comm>", "range", &tz);
        // Well-formed XML, every bucket a group with its hover title.
        let mut reader = quick_xml::Reader::from_str(&svg);
        let (mut titles, mut rects) = (Vec::new(), 0);
        let mut in_title = false;
        loop {
            match reader.read_event().expect("well-formed SVG") {
                quick_xml::events::Event::Eof => break,
                quick_xml::events::Event::Start(e) if e.name().as_ref() == b"title" => {
                    in_title = true
                }
                quick_xml::events::Event::Text(t) if in_title => {
                    titles.push(t.unescape().unwrap().into_owned());
                    in_title = false;
                }
                quick_xml::events::Event::Empty(e) if e.name().as_ref() == b"rect" => rects += 1,
                _ => {}
            }
        }
        assert_eq!(titles.len(), 3);
        assert_eq!(
            titles[0],
            "23:13:20 to 23:13:25: 1.05 cores\nburst 1.00\nother 0.05"
        );
        assert!(titles[2].contains("sshd 0.25"));
        // Background, three hover areas, 2 + 3 bars, 3 legend boxes.
        assert_eq!(rects, 1 + 3 + 5 + 3);
        assert!(svg.contains("CPU &lt;by comm&gt;"));
        assert!(svg.contains(">23:13:30</text>"));
        assert_eq!(axis_top(1.05), 2.0);
        assert_eq!(axis_top(0.3), 0.5);
    }
}
