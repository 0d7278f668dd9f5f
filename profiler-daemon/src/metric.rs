//! Prometheus metrics as tables: each metric described once (name, type, help, how to read
//! its value from a status), written in the text exposition format.

use std::fmt::Write as _;

/// One metric of a status `T`.
pub struct Metric<T> {
    /// Name, after the `profilerd_` prefix.
    pub name: &'static str,
    /// `counter` or `gauge`.
    pub kind: &'static str,
    /// The `# HELP` text.
    pub help: &'static str,
    /// Its value in a status.
    pub value: fn(&T) -> f64,
}

/// Append `metrics` of `status` to `out` in the text exposition format.
pub fn write<T>(out: &mut String, metrics: &[Metric<T>], status: &T) {
    for m in metrics {
        let (name, kind, help) = (m.name, m.kind, m.help);
        let value = (m.value)(status);
        let _ = writeln!(
            out,
            "# HELP profilerd_{name} {help}\n# TYPE profilerd_{name} {kind}\nprofilerd_{name} {value}"
        );
    }
}
