//! Command-line arguments.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use recorder::{CallGraph, RecordOptions, RecordTarget};
use sampler::{EventChoice, EventKind};

/// A sampling profiler for Linux: from a running process to a flamegraph in one command.
#[derive(Debug, Parser)]
#[command(name = "profctl", version, about, propagate_version = true)]
pub struct Cli {
    /// More log output (-v: info, -vv: debug; PROFCTL_LOG=filter overrides). With -v, the
    /// record summary adds profctl's own CPU and wake-ups, and its address-cache figures;
    /// with -vv, its CPU time by phase.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors: no progress line and no summary.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// profilerd's socket, for the commands that ask the daemon (flamegraph, status, and
    /// record --pid when it answers). Default: $PROFILERD_SOCKET, else
    /// /run/profilerd/profilerd.sock.
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

/// profctl's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sample the whole system, a process (--pid) or a command (after --) and write a
    /// flamegraph (SVG), a pprof profile (.pb.gz) and/or folded stacks.
    #[command(after_help = RECORD_EXAMPLES)]
    Record(RecordArgs),
    /// Name addresses: function, inline chain and file:line, from a running process's
    /// mappings (--pid) or an ELF file's own addresses (--elf), as the recorder would.
    Symbolize(SymbolizeArgs),
    /// A flamegraph of a pprof or folded file (--input), or of a past time range from
    /// profilerd's history (no recording: the daemon samples continuously), filtered by
    /// process, command name or user. Users other than root and the daemon's admin group see
    /// only their own processes, without kernel frames.
    #[command(after_help = FLAMEGRAPH_EXAMPLES)]
    Flamegraph(FlamegraphArgs),
    /// What profilerd is doing: event, frequency, samples, lost samples, history kept,
    /// processes tracked, memory.
    Status,
    /// The hottest functions, self and total, as a table: from a file (--input: pprof or
    /// folded) or from profilerd's history (--since, as `flamegraph`).
    #[command(after_help = crate::top::EXAMPLES)]
    Top(crate::top::TopArgs),
    /// A differential flamegraph: what grew (red) and shrank (blue) from BEFORE to AFTER, each
    /// a pprof or folded file or a time range of profilerd's history; with a short summary of
    /// the largest changes.
    #[command(after_help = crate::diff::EXAMPLES)]
    Diff(crate::diff::DiffArgs),
}

const FLAMEGRAPH_EXAMPLES: &str = "Examples:
  profctl flamegraph --since 10m -o last10.svg               the last 10 minutes
  profctl flamegraph --input cpu.pb.gz -o cpu.svg            a pprof or folded file, no daemon
  profctl flamegraph --since @1700000000 --until @1700000300 --comm nginx -o nginx.svg
  profctl flamegraph --since 1h --until 50m --pid 1234 --folded app.folded
  profctl flamegraph --since 5m --pid 1234 --descendants   a process and what it started
  profctl flamegraph --since 5m --cgroup /system.slice/nginx.service

Times: a duration ago (90s, 10m, 2h, 1d) or @UNIX-SECONDS. The daemon's slices (10 s by
default) are the finest grain: a slice overlapping the range is counted whole.";

/// Arguments of `profctl flamegraph`.
#[derive(Debug, Args)]
pub struct FlamegraphArgs {
    /// Render this file instead of asking the daemon: a pprof profile (gzipped or not, as
    /// `go tool pprof` and profctl write) or folded stacks.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["since", "until", "pid", "comm", "uid"])]
    pub input: Option<PathBuf>,
    /// Start of the range: a duration ago (`10m`, `2h`, `90s`, `1d`) or `@UNIX-SECONDS`.
    #[arg(long, value_name = "TIME", value_parser = parse_time, required_unless_present = "input")]
    pub since: Option<TimeArg>,
    /// End of the range, as --since. Default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub until: Option<TimeArg>,
    /// Only this process.
    #[arg(short, long, value_name = "PID", conflicts_with_all = ["comm", "uid"])]
    pub pid: Option<u32>,
    /// Only threads with this command name.
    #[arg(long, value_name = "NAME", conflicts_with = "uid")]
    pub comm: Option<String>,
    /// Only processes of this user (uid).
    #[arg(long, value_name = "UID")]
    pub uid: Option<u32>,
    /// With --pid: also the processes it (and they, in turn) created.
    #[arg(long, requires = "pid")]
    pub descendants: bool,
    /// Only processes in this cgroup or under it (a cgroup v2 path, e.g.
    /// /system.slice/nginx.service or a container's scope).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
    /// Write the SVG flamegraph here.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write folded stacks here (`comm;outer;…;leaf count`).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
}

/// A time on the command line: some time ago, or absolute.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimeArg {
    /// This long before now.
    Ago(std::time::Duration),
    /// UNIX time in seconds.
    Unix(f64),
}

impl TimeArg {
    /// UNIX time in seconds, with `now` the current one.
    pub fn unix_seconds(self, now: f64) -> f64 {
        match self {
            TimeArg::Ago(d) => now - d.as_secs_f64(),
            TimeArg::Unix(t) => t,
        }
    }
}

/// `--since`/`--until`: `10m`, `90s`, `2h`, `1d`, `500ms`, or `@UNIX-SECONDS`.
pub fn parse_time(text: &str) -> Result<TimeArg, String> {
    if let Some(unix) = text.strip_prefix('@') {
        return match unix.parse::<f64>() {
            Ok(t) if t.is_finite() && t >= 0.0 => Ok(TimeArg::Unix(t)),
            _ => Err(format!("not UNIX seconds: {text:?}")),
        };
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| {
        format!("expected a duration ago (10m, 2h, 90s, 1d) or @UNIX-SECONDS, got {text:?}")
    })?;
    let scale = match unit {
        "ms" => 1e-3,
        "s" | "" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => {
            return Err(format!(
                "unknown unit in {text:?}: expected ms, s, m, h or d"
            ))
        }
    };
    let secs = value * scale;
    if !secs.is_finite() || secs > 100.0 * 365.0 * 86_400.0 {
        return Err(format!("out of range: {text:?}"));
    }
    Ok(TimeArg::Ago(std::time::Duration::from_secs_f64(secs)))
}

/// Arguments of `profctl symbolize`.
#[derive(Debug, Args)]
pub struct SymbolizeArgs {
    /// Addresses are absolute addresses in this running process.
    #[arg(
        short,
        long,
        value_name = "PID",
        required_unless_present = "elf",
        conflicts_with = "elf"
    )]
    pub pid: Option<u32>,
    /// Addresses are this file's own (ELF virtual) addresses, as addr2line takes them.
    #[arg(short, long, value_name = "PATH")]
    pub elf: Option<PathBuf>,
    /// Also search this directory for debug files (.build-id/xx/rest.debug, debuglink names).
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<PathBuf>,
    /// Neither read nor write profctl's caches (under $XDG_CACHE_HOME/profctl, else
    /// ~/.cache/profctl, shared with `profctl record`): with --elf, the frame cache (frames/),
    /// from which addresses an earlier run named (with DWARF) come without opening the
    /// binary's DWARF; the decompressed debug sections (dwarf/) and symbol tables
    /// (symbols/). Every address is then named from the binary's debug info. --pid never
    /// uses the frame cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Addresses, hex (0x prefix optional). Read from standard input when none are given.
    #[arg(value_name = "ADDR")]
    pub addresses: Vec<String>,
}

const RECORD_EXAMPLES: &str = "Examples:
  profctl record --duration 5 -o system.svg            the whole system for 5 s (root or CAP_PERFMON)
  profctl record --pid 1234 --freq 999 -o app.svg      a running process until Ctrl-C
                                                       (through profilerd when it answers)
  profctl record --folded out.folded -- ./my-program   a command, until it exits
  profctl record -d 10 -o cpu.pb.gz                    a pprof profile (go tool pprof, Parca, Pyroscope)

Without -o and --folded, the flamegraph is written to profile.svg. -o writes pprof when its name
ends in .pb.gz, .pb or .pprof (or with --format pprof), else SVG.";

/// What `-o` holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// An SVG flamegraph.
    Svg,
    /// A pprof profile (gzipped protobuf; inline frames, files, build-ids, pid/tid/comm labels).
    Pprof,
}

impl OutputFormat {
    /// The format `--format` names, else the one `path`'s extension implies.
    pub fn of(path: &std::path::Path, format: Option<OutputFormat>) -> OutputFormat {
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
}

/// Which event drives sampling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EventArg {
    /// Hardware cycles when the machine has a PMU, else cpu-clock.
    Auto,
    /// Hardware CPU cycles.
    Cycles,
    /// The software CPU clock timer.
    CpuClock,
}

/// How user stacks are walked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CallGraphArg {
    /// Frame pointers, followed by the kernel.
    Fp,
    /// DWARF unwinding of a copy of the user stack.
    Dwarf,
    /// DWARF, spliced with frame pointers where the copy runs out.
    Auto,
}

/// Arguments of `profctl record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Profile this running process: all its threads, and threads and child processes it
    /// creates while recording.
    #[arg(short, long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Samples per second (per CPU for the whole system). Capped at the kernel's
    /// perf_event_max_sample_rate.
    #[arg(short = 'F', long = "freq", value_name = "HZ", default_value_t = sampler::defaults::FREQUENCY,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub frequency: u64,
    /// Stop after this many seconds (fractions allowed). Without it, recording runs until Ctrl-C
    /// or until the command exits.
    #[arg(short, long, value_name = "SECS", value_parser = parse_seconds)]
    pub duration: Option<std::time::Duration>,
    /// Close a time window every SECS seconds and name it while recording goes on, printing
    /// a line per window (samples, hottest functions, and what profctl holds: processes,
    /// files, open descriptors, memory). The outputs hold every window. Without it, the
    /// whole recording is one window, named when it ends.
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    pub window: Option<std::time::Duration>,
    /// Write the SVG flamegraph here, or a pprof profile when FILE ends in .pb.gz, .pb or
    /// .pprof (or with --format pprof).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// What -o holds (default: by its extension).
    #[arg(long, value_enum, value_name = "FORMAT", requires = "output")]
    pub format: Option<OutputFormat>,
    /// Write folded stacks here (`comm;outer;…;leaf count`, as FlameGraph and inferno read).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
    /// Do not sample kernel code or collect kernel frames.
    #[arg(long)]
    pub no_kernel: bool,
    /// The event to sample on.
    #[arg(long, value_enum, default_value_t = EventArg::Auto)]
    pub event: EventArg,
    /// How user stacks are walked: `fp` follows frame pointers in the kernel (cheapest; broken
    /// by code built without them), `dwarf` unwinds a copy of the stack with .eh_frame,
    /// `auto` unwinds with DWARF and continues from the frame-pointer chain where the copy
    /// runs out.
    #[arg(long, value_enum, default_value_t = CallGraphArg::Auto)]
    pub call_graph: CallGraphArg,
    /// Bytes of user stack copied per sample for DWARF unwinding (multiple of 8, up to 61440).
    #[arg(long, value_name = "BYTES", default_value_t = recorder::defaults::STACK_BYTES,
          value_parser = parse_stack_size)]
    pub stack_size: u32,
    /// Put file:line on frames (from DWARF), in folded and SVG output.
    #[arg(long)]
    pub lines: bool,
    /// Also search this directory for debug files (.build-id/xx/rest.debug, debuglink
    /// names); may be repeated. /usr/lib/debug is always searched, and debuginfod servers
    /// when DEBUGINFOD_URLS is set. Debug files give names and lines, and .debug_frame for
    /// binaries whose own unwind tables miss their code.
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<PathBuf>,
    /// Data pages per ring buffer (a power of two). Default: 128 with --call-graph fp; when
    /// stacks are copied, a quarter of a ring holds a tenth of a second of samples (2048 at
    /// 999 Hz with 16 KiB stacks; 256 to 2048), and with --window a ring holds a second
    /// (512 at 99 Hz).
    #[arg(long, value_name = "PAGES", value_parser = parse_ring_pages)]
    pub ring_pages: Option<usize>,
    /// With --pid, record in this process even when profilerd answers on its socket
    /// (otherwise a --pid recording is asked of profilerd when it answers, and recorded here
    /// when it does not, or when an option only this process has is given: --window,
    /// --lines, --debug-dir, --ring-pages, --event, --call-graph, --stack-size).
    #[arg(long)]
    pub embedded: bool,
    /// The command to run and profile (after --). Recording ends when it exits; if the
    /// recording ends first (--duration, Ctrl-C), the command is sent SIGTERM.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// `--stack-size`: a multiple of 8 from 8 to [`sampler::MAX_STACK_BYTES`] (checked by clap,
/// so that a bad value exits 2 before anything is started).
fn parse_stack_size(text: &str) -> Result<u32, String> {
    let bytes: u32 = text
        .parse()
        .map_err(|_| format!("not a number of bytes: {text:?}"))?;
    if bytes == 0 || bytes % 8 != 0 || bytes > sampler::MAX_STACK_BYTES {
        return Err(format!(
            "the stack size must be a multiple of 8 from 8 to {}, got {bytes}",
            sampler::MAX_STACK_BYTES
        ));
    }
    Ok(bytes)
}

/// `--ring-pages`: a power of two (whether it holds a sample is checked with the other options).
fn parse_ring_pages(text: &str) -> Result<usize, String> {
    let pages: usize = text
        .parse()
        .map_err(|_| format!("not a number of pages: {text:?}"))?;
    if pages == 0 || !pages.is_power_of_two() || pages > 1 << 20 {
        return Err(format!(
            "the ring size must be a power of two of pages from 1 to 1048576, got {pages}"
        ));
    }
    Ok(pages)
}

/// Invalid arguments found after parsing (a combination clap does not check): exit status 2,
/// like clap's own errors.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

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

fn parse_seconds(text: &str) -> Result<std::time::Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("not a number of seconds: {text:?}"))?;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(format!(
            "duration must be a positive number of seconds, got {text}"
        ));
    }
    std::time::Duration::try_from_secs_f64(secs).map_err(|_| format!("{text} seconds is too long"))
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

    /// The recorder's options.
    /// Combinations of arguments clap does not check: a ring buffer must hold at least two of
    /// the largest samples (a smaller one records nothing and says nothing of it).
    pub fn validate(&self) -> Result<(), UsageError> {
        let options = self.to_options();
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
            ..RecordOptions::new(target)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_targets() {
        let cli = Cli::try_parse_from(["profctl", "record", "--pid", "7", "-F", "50", "-d", "1.5"])
            .unwrap();
        let Command::Record(args) = cli.command else {
            panic!("not a record command")
        };
        let o = args.to_options();
        assert_eq!(o.target, RecordTarget::Pid(7));
        assert_eq!(o.frequency, 50);
        assert_eq!(o.duration, Some(std::time::Duration::from_millis(1500)));
        let cli = Cli::try_parse_from(["profctl", "record", "--", "ls", "-l"]).unwrap();
        let Command::Record(args) = cli.command else {
            panic!("not a record command")
        };
        assert_eq!(
            args.to_options().target,
            RecordTarget::Command(vec!["ls".into(), "-l".into()])
        );
        assert!(Cli::try_parse_from(["profctl", "record", "--pid", "1", "--", "ls"]).is_err());
        assert!(Cli::try_parse_from(["profctl", "record", "-d", "-1"]).is_err());
        assert!(Cli::try_parse_from(["profctl", "record", "-F", "0"]).is_err());
        assert!(Cli::try_parse_from(["profctl", "record", "-d", "1e20"]).is_err());
        assert!(Cli::try_parse_from(["profctl", "record", "--stack-size", "12"]).is_err());
        assert!(Cli::try_parse_from(["profctl", "record", "--stack-size", "1000000"]).is_err());
        assert!(Cli::try_parse_from(["profctl", "record", "--ring-pages", "3"]).is_err());
        let small = |extra: &[&str]| {
            let mut argv = vec!["profctl", "record", "--ring-pages", "1"];
            argv.extend_from_slice(extra);
            let Command::Record(args) = Cli::try_parse_from(argv).unwrap().command else {
                panic!("not a record command")
            };
            args.validate()
        };
        assert!(
            small(&[]).is_err(),
            "one page cannot hold a 16 KiB stack copy"
        );
        assert!(small(&["--call-graph", "fp"]).is_ok());
    }
}
