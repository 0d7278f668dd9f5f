//! A timeline in the terminal: a legend, then one row per bucket with its local time, a bar
//! of block characters stacked by group, its total cores and its top groups, within a width.

use std::fmt::Write as _;

use jiff::tz::TimeZone;

use crate::output::printable;
use crate::time::local_clock;
use crate::timeline::{cores, Timeline};

/// The blocks of the first groups; every later group (and "other") is drawn with the last.
const SHADES: [char; 4] = ['█', '▓', '▒', '░'];

/// The chart of `t` in `width` columns (at least 40 are used), times in `tz`.
pub fn render(t: &Timeline, width: usize, tz: &TimeZone) -> String {
    let width = width.max(40);
    let groups = t.groups();
    let shade_of = |g: &str| {
        let i = groups.iter().position(|x| x == g).unwrap_or(usize::MAX);
        SHADES[i.min(SHADES.len() - 1)]
    };
    let bar_width = ((width - 16) / 2).clamp(10, 60);
    let peak = t.peak().max(0.01);
    let mut out = String::new();
    let mut legend = String::new();
    for (i, g) in groups.iter().enumerate() {
        if i >= SHADES.len() - 1 && i + 1 < groups.len() {
            let _ = write!(legend, "  {} the rest", SHADES[SHADES.len() - 1]);
            break;
        }
        let _ = write!(legend, "  {} {}", shade_of(g), printable(g));
    }
    let _ = writeln!(
        out,
        "{} cores at most; full bar = {}{legend}",
        cores(t.peak()),
        cores(peak)
    );
    for b in &t.buckets {
        let mut bar = String::new();
        let mut done = 0usize;
        let mut sum = 0.0;
        for g in &groups {
            let c = b.of(g);
            if c <= 0.0 {
                continue;
            }
            sum += c;
            let end = ((sum / peak) * bar_width as f64).round() as usize;
            for _ in done..end.min(bar_width) {
                bar.push(shade_of(g));
            }
            done = done.max(end.min(bar_width));
        }
        for _ in done..bar_width {
            bar.push(' ');
        }
        let mut row = format!(
            "{} {bar} {:>5}",
            local_clock(b.start as f64, tz),
            cores(b.total())
        );
        let room = width.saturating_sub(row.chars().count() + 2);
        let mut detail = String::new();
        // Groups under 0.005 cores would read 0.00: left out.
        for g in groups.iter().filter(|g| b.of(g) >= 0.005) {
            let item = format!("{} {}", printable(g), cores(b.of(g)));
            let sep = if detail.is_empty() { "" } else { ", " };
            if detail.chars().count() + sep.len() + item.chars().count() > room {
                break;
            }
            detail.push_str(sep);
            detail.push_str(&item);
        }
        if !detail.is_empty() {
            row.push_str("  ");
            row.push_str(&detail);
        }
        out.push_str(row.trim_end());
        out.push('\n');
    }
    out
}

/// The terminal's width: `COLUMNS` when set, else standard output's terminal, else 100.
pub fn terminal_width() -> usize {
    if let Some(n) = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()) {
        return n;
    }
    terminal_size::terminal_size()
        .map(|(w, _)| w.0 as usize)
        .unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::tests::example;

    #[test]
    fn rows_fit_the_width_and_stack_the_groups() {
        let tz = TimeZone::get("Europe/Berlin").unwrap();
        let text = render(&example(), 64, &tz);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[0].contains("█ burst") && lines[0].contains("▓ sshd"),
            "{text}"
        );
        // 1700000000 is 23:13:20 in Berlin (CET).
        assert!(lines[1].starts_with("23:13:20 ██████"), "{text}");
        assert!(lines[1].contains("1.05  burst 1.00, other 0.05"), "{text}");
        assert!(
            lines[2].starts_with("23:13:25") && lines[2].ends_with("0.00"),
            "{text}"
        );
        // Half the full bar of burst, then sshd's blocks, then other's.
        let row = lines[3];
        let bar: String = row.chars().skip(9).take(24).collect();
        assert_eq!(bar.matches('█').count(), 11, "{row}");
        assert_eq!(bar.matches('▓').count(), 6, "{row}");
        // Only the groups that fit the width are named.
        assert!(row.ends_with("0.85  burst 0.50, sshd 0.25"), "{row}");
        assert!(bar.contains('▒'), "{row}");
        for line in &lines[1..] {
            assert!(line.chars().count() <= 64, "{line}");
        }
    }
}
