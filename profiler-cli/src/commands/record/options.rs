//! `profctl record`'s arguments as the recorder's options, checks clap cannot make, and what
//! `-o` holds.

use std::path::{Path, PathBuf};

use anyhow::Result;

use recorder::{CallGraph, Measure, RecordOptions, RecordTarget};
use sampler::{EventChoice, EventKind};

use crate::cli::{CallGraphArg, EventArg, OutputFormat, RecordArgs};
use crate::error::UsageError;
use crate::output::check_writable;

/// Default flamegraph path when neither -o nor --folded is given.
pub const DEFAULT_SVG: &str = "profile.svg";

/// The files a recording writes: `-o` as pprof or SVG (by `--format`, else its extension),
/// `--folded`, and `profile.svg` when neither `-o` nor `--folded` is given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordOutputs {
    /// A pprof profile.
    pub pprof: Option<PathBuf>,
    /// An SVG flamegraph.
    pub svg: Option<PathBuf>,
    /// Folded stacks.
    pub folded: Option<PathBuf>,
}

impl RecordOutputs {
    /// What `args` ask for.
    pub fn of(args: &RecordArgs) -> RecordOutputs {
        let pprof = args
            .output
            .clone()
            .filter(|p| output_format(p, args.format) == OutputFormat::Pprof);
        let svg = match (&args.output, &args.folded) {
            (None, None) => Some(DEFAULT_SVG.into()),
            (svg, _) => svg.clone().filter(|_| pprof.is_none()),
        };
        RecordOutputs {
            pprof,
            svg,
            folded: args.folded.clone(),
        }
    }

    /// Fail when one of the files cannot be written (before recording, not after).
    pub fn check_writable(&self) -> Result<()> {
        for path in self.svg.iter().chain(&self.folded).chain(&self.pprof) {
            check_writable(path)?;
        }
        Ok(())
    }
}

/// The format `--format` names, else the one `path`'s extension implies (`.pb.gz`, `.pb`,
/// `.pprof`: pprof; anything else: SVG).
pub fn output_format(path: &Path, format: Option<OutputFormat>) -> OutputFormat {
    if let Some(f) = format {
        return f;
    }
    let name = path.to_string_lossy();
    if [".pb.gz", ".pb", ".pprof"]
        .iter()
        .any(|e| name.ends_with(e))
    {
        OutputFormat::Pprof
    } else {
        OutputFormat::Svg
    }
}

/// Largest sample record, in bytes, with `stack_bytes` of user stack copied (0 for none):
/// header, ip, tid, time, cpu, period, a callchain of up to 127 frames and its context
/// markers, user registers, the stack copy and its two sizes.
pub fn max_sample_bytes(stack_bytes: u32) -> usize {
    let fixed = 8 + 5 * 8;
    let callchain = 8 + (127 + 8) * 8;
    let stacks = if stack_bytes == 0 {
        0
    } else {
        8 + 3 * 8 + 8 + stack_bytes as usize + 8
    };
    fixed + callchain + stacks
}

impl RecordArgs {
    /// How frames are named.
    pub fn resolve_options(&self) -> recorder::ResolveOptions {
        let mut options = recorder::ResolveOptions {
            lines: self.lines,
            ..recorder::resolve_options()
        };
        options.debug_search.extra_dirs = self.debug_dirs.clone();
        options
    }

    /// Combinations of arguments clap does not check: a ring buffer must hold at least two of
    /// the largest samples (a smaller one records nothing and says nothing of it).
    pub fn validate(&self) -> Result<(), UsageError> {
        let options = self.to_options();
        if options.measure != Measure::Cpu && options.target == RecordTarget::System {
            return Err(UsageError(format!(
                "{} records one process: give --pid PID or -- COMMAND",
                if self.wall { "--wall" } else { "--off-cpu" }
            )));
        }
        let stack_bytes = match self.call_graph {
            CallGraphArg::Fp => 0,
            _ => self.stack_size,
        };
        let need = 2 * max_sample_bytes(stack_bytes);
        let have = options.ring_pages * 4096;
        if have < need {
            let pages = need.div_ceil(4096).next_power_of_two();
            return Err(UsageError(format!(
                "--ring-pages {} ({have} bytes) cannot hold two samples of up to {} bytes \
                 (with --stack-size {}); use at least --ring-pages {pages}",
                options.ring_pages,
                need / 2,
                self.stack_size
            )));
        }
        Ok(())
    }

    /// The recorder's options.
    pub fn to_options(&self) -> RecordOptions {
        let target = match (&self.pid, self.command.is_empty()) {
            (Some(pid), _) => RecordTarget::Pid(*pid),
            (None, false) => RecordTarget::Command(self.command.clone()),
            (None, true) => RecordTarget::System,
        };
        RecordOptions {
            frequency: self.frequency,
            duration: self.duration,
            window: self.window,
            include_kernel: !self.no_kernel,
            ring_pages: self.ring_pages.unwrap_or(match self.call_graph {
                CallGraphArg::Fp => sampler::defaults::RING_PAGES,
                _ if self.window.is_some() => {
                    recorder::defaults::ring_pages_streaming(self.frequency, self.stack_size)
                }
                _ => recorder::defaults::ring_pages_with_stacks(self.frequency, self.stack_size),
            }),
            call_graph: match self.call_graph {
                CallGraphArg::Fp => CallGraph::Fp,
                CallGraphArg::Dwarf => CallGraph::Dwarf,
                CallGraphArg::Auto => CallGraph::Auto,
            },
            stack_bytes: self.stack_size,
            preload_symbols: Some(self.resolve_options().debug_search),
            frame_cache_dir: recorder::frame_cache_dir(),
            debuginfod: debuginfod::DebuginfodConfig::from_env(),
            event: match self.event {
                EventArg::Auto => EventChoice::Auto,
                EventArg::Cycles => EventChoice::Force(EventKind::Cycles),
                EventArg::CpuClock => EventChoice::Force(EventKind::CpuClock),
            },
            measure: self.measure(),
            switch_cap: self.switch_cap,
            ..RecordOptions::new(target)
        }
    }

    /// What time is measured: `--off-cpu`, `--wall`, else CPU.
    pub fn measure(&self) -> Measure {
        if self.off_cpu {
            Measure::OffCpu
        } else if self.wall {
            Measure::Wall
        } else {
            Measure::Cpu
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn record_args(argv: &[&str]) -> RecordArgs {
        let mut full = vec!["profctl", "record"];
        full.extend_from_slice(argv);
        let Command::Record(args) = Cli::try_parse_from(full).unwrap().command else {
            panic!("not a record command")
        };
        args
    }

    #[test]
    fn parses_targets() {
        let o = record_args(&["--pid", "7", "-F", "50", "-d", "1.5"]).to_options();
        assert_eq!(o.target, RecordTarget::Pid(7));
        assert_eq!(o.frequency, 50);
        assert_eq!(o.duration, Some(std::time::Duration::from_millis(1500)));
        assert_eq!(
            record_args(&["--", "ls", "-l"]).to_options().target,
            RecordTarget::Command(vec!["ls".into(), "-l".into()])
        );
        let small = |extra: &[&str]| {
            let mut argv = vec!["--ring-pages", "1"];
            argv.extend_from_slice(extra);
            record_args(&argv).validate()
        };
        assert!(
            small(&[]).is_err(),
            "one page cannot hold a 16 KiB stack copy"
        );
        assert!(small(&["--call-graph", "fp"]).is_ok());
    }

    #[test]
    fn outputs_asked_for() {
        let o = RecordOutputs::of(&record_args(&[]));
        assert_eq!(o.svg, Some(PathBuf::from(DEFAULT_SVG)));
        let o = RecordOutputs::of(&record_args(&["-o", "x.pb.gz", "--folded", "f"]));
        assert_eq!(o.pprof, Some(PathBuf::from("x.pb.gz")));
        assert_eq!((o.svg, o.folded), (None, Some(PathBuf::from("f"))));
        let o = RecordOutputs::of(&record_args(&["-o", "x", "--format", "pprof"]));
        assert_eq!((o.pprof, o.svg), (Some(PathBuf::from("x")), None));
        let o = RecordOutputs::of(&record_args(&["--folded", "f"]));
        assert_eq!((o.pprof, o.svg), (None, None));
    }

    #[test]
    fn output_format_by_extension_or_flag() {
        let of = |p: &str, f| output_format(Path::new(p), f);
        assert_eq!(of("x.pb.gz", None), OutputFormat::Pprof);
        assert_eq!(of("x.pprof", None), OutputFormat::Pprof);
        assert_eq!(of("x.svg", None), OutputFormat::Svg);
        assert_eq!(of("x.out", Some(OutputFormat::Pprof)), OutputFormat::Pprof);
        assert_eq!(of("x.pb.gz", Some(OutputFormat::Svg)), OutputFormat::Svg);
    }
}
