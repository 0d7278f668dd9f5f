//! What time a recording or a history query measures, with its wire names (`measure=` of the
//! history queries, `"measure"` of a recording's request, the `x-profilerd-measure` header,
//! and the pprof sample type of that time).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What time is measured: CPU samples, time blocked off CPU, or wall-clock time (both).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// CPU time: samples of the sampling event.
    #[default]
    Cpu,
    /// Time blocked off CPU: each stack at switch-out, weighted by the time until the thread
    /// runs again (sleeping, waiting for a lock or for IO; not preempted time).
    OffCpu,
    /// Wall-clock time: CPU samples weighted by their period (ns, on cpu-clock) plus every
    /// interval off CPU (blocked or preempted), so that a thread's stacks add up to the time
    /// it lived.
    Wall,
}

impl Measure {
    /// Every measure, in the order the docs list them.
    pub const ALL: [Measure; 3] = [Measure::Cpu, Measure::OffCpu, Measure::Wall];

    /// The wire name: `cpu`, `off_cpu` or `wall` (also the pprof sample type of its time).
    pub fn as_str(self) -> &'static str {
        match self {
            Measure::Cpu => "cpu",
            Measure::OffCpu => "off_cpu",
            Measure::Wall => "wall",
        }
    }

    /// Whether context switches are sampled.
    pub fn samples_switches(self) -> bool {
        self != Measure::Cpu
    }

    /// Whether counts (folded stacks, flamegraphs) are microseconds; else samples.
    pub fn in_microseconds(self) -> bool {
        self != Measure::Cpu
    }
}

impl fmt::Display for Measure {
    /// The wire name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not a [`Measure`]'s.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown measure {0:?}: expected cpu, off_cpu or wall")]
pub struct UnknownMeasure(pub String);

impl FromStr for Measure {
    type Err = UnknownMeasure;

    /// A wire name (`cpu`, `off_cpu`, `wall`).
    fn from_str(text: &str) -> Result<Measure, UnknownMeasure> {
        Measure::ALL
            .into_iter()
            .find(|m| m.as_str() == text)
            .ok_or_else(|| UnknownMeasure(text.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_the_serde_names() {
        for m in Measure::ALL {
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.as_str()));
            assert_eq!(serde_json::from_str::<Measure>(&json).unwrap(), m);
            assert_eq!(m.as_str().parse::<Measure>(), Ok(m));
        }
        assert_eq!(
            "offcpu".parse::<Measure>().unwrap_err().to_string(),
            "unknown measure \"offcpu\": expected cpu, off_cpu or wall"
        );
    }
}
