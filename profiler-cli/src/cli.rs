//! The command line: every subcommand's clap definition, the flag groups they share
//! ([`RangeArgs`], [`FilterArgs`]), value parsers and `--help` examples. Nothing here runs a
//! command; `commands/` does, and `commands::record::options` turns [`RecordArgs`] into the
//! recorder's options.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use daemon_api::Measure;

use crate::time::{parse_bucket, parse_positive, parse_range, parse_time, TimeArg};

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
    /// profilerd's socket, for the commands that ask the daemon.
    #[arg(long, global = true, value_name = "PATH", help = concat!(
        "profilerd's socket, for the commands that ask the daemon (flamegraph, top, diff, ",
        "timeline, status, ui, and record --pid when it answers). Default: $PROFILERD_SOCKET, else ",
        daemon_api::default_socket!()))]
    pub socket: Option<PathBuf>,
    /// The subcommand.
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
    #[command(
        after_help = FLAMEGRAPH_EXAMPLES,
        mut_arg("since", |a| a.required_unless_present("input")),
    )]
    Flamegraph(FlamegraphArgs),
    /// What profilerd is doing: event, frequency, samples, lost samples, history kept,
    /// processes tracked, memory.
    Status,
    /// The hottest functions, self and total, as a table: from a file (--input: pprof or
    /// folded) or from profilerd's history (--since, as `flamegraph`).
    #[command(
        after_help = TOP_EXAMPLES,
        mut_arg("since", |a| a
            .help("Start of a range of profilerd's history, as `profctl flamegraph --since`")
            .required_unless_present("input")),
        mut_arg("until", |a| a.help("End of the range. Default: now")),
        mut_arg("pid", |a| a.help("Only this process (daemon range)")),
        mut_arg("comm", |a| a.help("Only threads with this command name (daemon range)")),
        mut_arg("uid", |a| a.help("Only processes of this user (daemon range)")),
    )]
    Top(TopArgs),
    /// A differential flamegraph: what grew (red) and shrank (blue) from BEFORE to AFTER, each
    /// a pprof or folded file or a time range of profilerd's history; with a short summary of
    /// the largest changes.
    #[command(
        after_help = DIFF_EXAMPLES,
        mut_arg("pid", |a| a.help("Only this process (ranges)")),
        mut_arg("comm", |a| a.help("Only threads with this command name (ranges)")),
        mut_arg("uid", |a| a.help("Only processes of this user (ranges)")),
    )]
    Diff(DiffArgs),
    /// CPU over time from profilerd's history: each bucket's CPU in cores, stacked by the top
    /// groups (command, process, user or cgroup), as a chart in the terminal, an SVG (-o) or
    /// JSON (--json). Users other than root and the daemon's admin group see only their own
    /// processes' CPU.
    #[command(
        after_help = TIMELINE_EXAMPLES,
        mut_arg("since", |a| a.required(true)),
    )]
    Timeline(TimelineArgs),
    /// A page in the browser over profilerd's history (or over files, --input): the CPU
    /// timeline, live; drag over it for the range's flame graph, top functions, a function's
    /// callers and callees, filters and a diff with another range. Served on 127.0.0.1 to
    /// whoever holds the one-time link it prints; it asks the daemon as the user running it.
    #[command(after_help = UI_EXAMPLES)]
    Ui(UiArgs),
}

/// `profctl ui --help` examples.
const UI_EXAMPLES: &str = "Examples:
  profctl ui                                   the last hour of profilerd's history, live
  profctl ui --since 6h --no-open              print the link only (e.g. over ssh -L PORT:127.0.0.1:PORT)
  profctl ui --input cpu.pb.gz before.folded   files, no daemon

The link holds a one-time token: the first visit turns it into a cookie of that browser, and
every later request must carry it. Only GET requests whose Host is 127.0.0.1, [::1] or
localhost are served. Ctrl-C stops the server.";

/// Arguments of `profctl ui`.
#[derive(Debug, Args)]
pub struct UiArgs {
    /// How much of the history the timeline shows at first (as `flamegraph --since`); the
    /// page can widen it.
    #[arg(long, value_name = "TIME", value_parser = parse_time, conflicts_with = "input")]
    pub since: Option<TimeArg>,
    /// Show these files (pprof, gzipped or not, or folded stacks) instead of the daemon's
    /// history: no daemon needed.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub input: Vec<PathBuf>,
    /// The port on 127.0.0.1 (default: a free one).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub port: u16,
    /// Do not open a browser; only print the link.
    #[arg(long)]
    pub no_open: bool,
}

/// `profctl timeline --help` examples.
const TIMELINE_EXAMPLES: &str = "Examples:
  profctl timeline --since 1h                           the last hour, by command name
  profctl timeline --since 14:00 --by pid --top 8       since 14:00 (local time), by process
  profctl timeline --since 10m --bucket 5s --comm nginx --by pid
  profctl timeline --since 2h --function malloc         when was malloc hot?
  profctl timeline --since 1d -o day.svg                an SVG (open it in a browser)
  profctl timeline --since 30m --json                   {\"bucket_seconds\": .., \"resolution_seconds\": .., \"buckets\": [..]}

A bucket's CPU is its samples' CPU time over its length, in cores (1.0: one CPU busy all the
time). The daemon keeps each stack's samples per second, whatever its slice length: the
resolution is a second (the chart, the SVG and the JSON say it). Slices kept without
per-second counts (written by an older daemon) are spread evenly over their span: a bucket
finer than that is widened to it, with a note. Without --bucket, about 60 buckets, none
shorter than a second.";

/// What `profctl timeline` groups CPU by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GroupByArg {
    /// The thread's command name.
    Comm,
    /// The process (`comm[pid]`).
    Pid,
    /// The process's user (uid).
    Uid,
    /// The process's cgroup.
    Cgroup,
}

/// Arguments of `profctl timeline`.
#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// `--since`, `--until`.
    #[command(flatten)]
    pub range: RangeArgs,
    /// `--pid`, `--comm`, `--uid`, `--descendants`, `--cgroup`.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// `--off-cpu`, `--wall`: that time over time, in threads (seconds per second).
    #[command(flatten)]
    pub measure: MeasureArgs,
    /// Group the CPU by this.
    #[arg(long, value_enum, default_value_t = GroupByArg::Comm)]
    pub by: GroupByArg,
    /// Only the CPU spent with this function on the stack (its name as in flamegraphs).
    #[arg(long, value_name = "NAME")]
    pub function: Option<String>,
    /// Bucket length: whole seconds (`5s`, `1m`, `1h`).
    #[arg(long, value_name = "DURATION", value_parser = parse_bucket)]
    pub bucket: Option<u64>,
    /// Groups shown; the rest is summed as "other".
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u16).range(1..=100))]
    pub top: u16,
    /// Write the timeline as an SVG here (instead of the chart in the terminal).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Print the timeline as JSON: {"bucket_seconds": N, "resolution_seconds": R, "buckets":
    /// [{"start": UNIX-SECONDS, "cpu": {"GROUP": cores, ...}}, ...]} (and "note" when the
    /// buckets were widened to the data's resolution).
    #[arg(long, conflicts_with = "output")]
    pub json: bool,
}

const FLAMEGRAPH_EXAMPLES: &str = "Examples:
  profctl flamegraph --since 10m -o last10.svg               the last 10 minutes
  profctl flamegraph --input cpu.pb.gz -o cpu.svg            a pprof or folded file, no daemon
  profctl flamegraph --since @1700000000 --until @1700000300 --comm nginx -o nginx.svg
  profctl flamegraph --since 1h --until 50m --pid 1234 --folded app.folded
  profctl flamegraph --since 5m --pid 1234 --descendants   a process and what it started
  profctl flamegraph --since 5m --cgroup /system.slice/nginx.service
  profctl flamegraph --since 14:02 --until 14:05 -o range.pb.gz   a range as pprof

Times: a duration ago (90s, 10m, 2h, 1d), @UNIX-SECONDS, a local time (14:02, 14:02:30: today,
or yesterday when that is still to come), a local date and time (\"2026-11-26 14:02\") or RFC 3339
(2026-11-26T14:02:00+01:00). Local time is the system's (TZ honoured). The daemon's slices (10 s
by default) are the finest grain: a slice overlapping the range is counted whole.";

/// A range of profilerd's history: `--since`, `--until` (flamegraph, top, timeline; each
/// command says when `--since` is required).
#[derive(Debug, Args)]
pub struct RangeArgs {
    /// Start of the range: a duration ago (`10m`, `2h`, `90s`, `1d`), `@UNIX-SECONDS`, a local
    /// time today (`14:02`, `14:02:30`; yesterday's when today's is still to come), a local
    /// date and time (`2026-11-26 14:02`) or RFC 3339 with an offset.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub since: Option<TimeArg>,
    /// End of the range, as --since. Default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub until: Option<TimeArg>,
}

/// Which processes a range of profilerd's history keeps: `--pid`, `--comm`, `--uid` (flamegraph,
/// top, diff).
#[derive(Debug, Args)]
pub struct ProcessArgs {
    /// Only this process.
    #[arg(short, long, value_name = "PID", conflicts_with_all = ["comm", "uid"])]
    pub pid: Option<u32>,
    /// Only threads with this command name.
    #[arg(long, value_name = "NAME", conflicts_with = "uid")]
    pub comm: Option<String>,
    /// Only processes of this user (uid).
    #[arg(long, value_name = "UID")]
    pub uid: Option<u32>,
}

/// The whole filter of a range of profilerd's history: [`ProcessArgs`], `--descendants` and
/// `--cgroup` (flamegraph).
#[derive(Debug, Args)]
pub struct FilterArgs {
    /// `--pid`, `--comm`, `--uid`.
    #[command(flatten)]
    pub process: ProcessArgs,
    /// With --pid: also the processes it (and they, in turn) created.
    #[arg(long, requires = "pid")]
    pub descendants: bool,
    /// Only processes in this cgroup or under it (a cgroup v2 path, e.g.
    /// /system.slice/nginx.service or a container's scope).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
}

/// Which time of profilerd's history: `--off-cpu`, `--wall` (flamegraph, top, timeline; the
/// daemon must run with `[sampling] off_cpu = true`).
#[derive(Debug, Args)]
pub struct MeasureArgs {
    /// Where threads waited instead of where they ran: the daemon's off-CPU stacks, each
    /// weighted by the time until its thread ran again, under a frame naming the wait
    /// (`[off-cpu: sleep|lock|io|other]`). Counts are microseconds (timeline: threads).
    /// Needs profilerd's `[sampling] off_cpu = true`.
    #[arg(long, conflicts_with = "wall")]
    pub off_cpu: bool,
    /// Wall-clock time: the daemon's CPU samples weighted by their period plus its off-CPU
    /// stacks (preempted time included). Counts are microseconds (timeline: threads). Needs
    /// profilerd's `[sampling] off_cpu = true`.
    #[arg(long)]
    pub wall: bool,
}

impl MeasureArgs {
    /// The `measure` parameter of the history queries (None: CPU).
    pub fn measure(&self) -> Option<Measure> {
        if self.off_cpu {
            Some(Measure::OffCpu)
        } else if self.wall {
            Some(Measure::Wall)
        } else {
            None
        }
    }
}

/// Arguments of `profctl flamegraph`.
#[derive(Debug, Args)]
pub struct FlamegraphArgs {
    /// Render this file instead of asking the daemon: a pprof profile (gzipped or not, as
    /// `go tool pprof` and profctl write) or folded stacks.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["since", "until", "pid", "comm", "uid", "off_cpu", "wall"])]
    pub input: Option<PathBuf>,
    /// `--since`, `--until`.
    #[command(flatten)]
    pub range: RangeArgs,
    /// `--pid`, `--comm`, `--uid`, `--descendants`, `--cgroup`.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// `--off-cpu`, `--wall`.
    #[command(flatten)]
    pub measure: MeasureArgs,
    /// Write the SVG flamegraph here; with a range, a pprof profile when FILE ends in .pb.gz,
    /// .pb or .pprof (or with --format pprof), with profilerd's labels (pid, tid, comm, uid,
    /// cgroup), for go tool pprof, speedscope or a fleet store.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// What -o holds (default: by its extension); pprof only for a range.
    #[arg(long, value_enum, value_name = "FORMAT", requires = "output")]
    pub format: Option<OutputFormat>,
    /// Write folded stacks here (`comm;outer;…;leaf count`).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
}

/// `profctl top --help` examples.
const TOP_EXAMPLES: &str = "Examples:
  profctl top --input cpu.pb.gz                 a pprof file (profctl's, go tool pprof's, ...)
  profctl top --input app.folded --limit 5      folded stacks
  profctl top --since 10m --comm nginx          profilerd's history of the last 10 minutes

self: samples in which the function was the innermost frame; total: samples in which it was on
the stack (once per sample, however deep the recursion). The thread's command name, the root of
profctl's stacks, is not counted as a function.";

/// Arguments of `profctl top` (the range and filter flags' help is set on [`Command::Top`]).
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Read this file (pprof, gzipped or not, or folded stacks) instead of asking the daemon.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["since", "until", "pid", "comm", "uid", "off_cpu", "wall"])]
    pub input: Option<PathBuf>,
    /// `--since`, `--until`.
    #[command(flatten)]
    pub range: RangeArgs,
    /// `--pid`, `--comm`, `--uid`.
    #[command(flatten)]
    pub filter: ProcessArgs,
    /// `--off-cpu`, `--wall`.
    #[command(flatten)]
    pub measure: MeasureArgs,
    /// Rows shown.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 20)]
    pub limit: usize,
    /// Order by total instead of self.
    #[arg(long)]
    pub by_total: bool,
}

/// `profctl diff --help` examples.
const DIFF_EXAMPLES: &str = "Examples:
  profctl diff before.pb.gz after.pb.gz -o diff.svg        two pprof files (or folded stacks)
  profctl diff --before 10m..5m --after 5m..0 -o diff.svg  two ranges of profilerd's history
  profctl diff --before 1h..50m after.folded --comm nginx  a range against a file

Colours: red frames grew from BEFORE to AFTER, blue ones shrank (the deeper the colour, the
larger the change). Each frame is drawn as wide as AFTER has it. BEFORE's counts are scaled to
AFTER's total samples first, so that shares are compared, unless --no-normalize.";

/// Arguments of `profctl diff` (the filter flags' help is set on [`Command::Diff`]).
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The profiles' files (pprof or folded), BEFORE then AFTER; a side given as a range
    /// (--before, --after) takes no file.
    #[arg(value_name = "FILE", num_args = 0..=2)]
    pub files: Vec<PathBuf>,
    /// BEFORE as a range of profilerd's history: `SINCE..UNTIL`, each as `flamegraph --since`
    /// takes it (`10m..5m`, `@1700000000..@1700000300`, `14:00..14:05`; `0` is now).
    #[arg(long, value_name = "RANGE", value_parser = parse_range)]
    pub before: Option<(TimeArg, TimeArg)>,
    /// AFTER as a range of profilerd's history.
    #[arg(long, value_name = "RANGE", value_parser = parse_range)]
    pub after: Option<(TimeArg, TimeArg)>,
    /// `--pid`, `--comm`, `--uid`.
    #[command(flatten)]
    pub filter: ProcessArgs,
    /// Write the differential SVG flamegraph here (default: diff.svg).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write the differential folded stacks here (`stack before after`).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
    /// Compare raw sample counts, not shares of each side's total.
    #[arg(long)]
    pub no_normalize: bool,
    /// Functions listed in the summary.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 10)]
    pub limit: usize,
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
    /// Stop after this long: seconds (fractions allowed) or a duration (`500ms`, `90s`, `10m`,
    /// `1.5h`). Without it, recording runs until Ctrl-C or until the command exits.
    #[arg(short, long, value_name = "DURATION", value_parser = parse_positive)]
    pub duration: Option<std::time::Duration>,
    /// Close a time window every DURATION (seconds, or `500ms`, `10s`, `1m`) and name it while
    /// recording goes on, printing a line per window (samples, hottest functions, and what
    /// profctl holds: processes, files, open descriptors, memory). The outputs hold every
    /// window. Without it, the whole recording is one window, named when it ends.
    #[arg(long, value_name = "DURATION", value_parser = parse_positive)]
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
    /// Record where threads wait instead of where they run: each stack at a context switch
    /// out, weighted by the time until the thread runs again (sleeps, locks, IO; not time
    /// preempted), under a frame naming the wait (`[off-cpu: sleep|lock|io|other]`). Counts
    /// are microseconds. Needs --pid or a command.
    #[arg(long, conflicts_with = "wall")]
    pub off_cpu: bool,
    /// Record wall-clock time: CPU samples (on cpu-clock) weighted by their period plus the
    /// off-CPU stacks of --off-cpu and the time threads were preempted, so that a thread's
    /// stacks add up to the time it lived. Counts are microseconds. Needs --pid or a command.
    #[arg(long)]
    pub wall: bool,
    /// With --off-cpu or --wall: context switches sampled (stack taken) per second at most;
    /// 0 samples every one. Past it, one switch in N is sampled and stands for the N (its
    /// time scaled); every switch is still counted (the summary's seen, sampled, scaled).
    /// Through profilerd the default applies.
    #[arg(long, value_name = "RATE", default_value_t = recorder::defaults::SWITCH_CAP)]
    pub switch_cap: u64,
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
    /// --lines, --debug-dir, --ring-pages, --event, --call-graph, --stack-size, --switch-cap;
    /// --off-cpu and --wall when this user may sample context switches).
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_values_are_refused_by_clap() {
        for argv in [
            &["profctl", "record", "--pid", "1", "--", "ls"][..],
            &["profctl", "record", "-d", "-1"],
            &["profctl", "record", "-F", "0"],
            &["profctl", "record", "-d", "1e20"],
            &["profctl", "record", "-d", "0"],
            &["profctl", "record", "--window", "3 weeks"],
            &["profctl", "timeline", "--since", "1h", "--bucket", "1.5s"],
            &["profctl", "record", "--stack-size", "12"],
            &["profctl", "record", "--stack-size", "1000000"],
            &["profctl", "record", "--ring-pages", "3"],
            &["profctl", "top", "--input", "x", "--pid", "1"],
            &["profctl", "flamegraph", "--since", "1m", "--descendants"],
        ] {
            assert!(Cli::try_parse_from(argv).is_err(), "{argv:?}");
        }
    }

    #[test]
    fn every_duration_flag_takes_the_same_grammar() {
        // `record --duration 10m` was refused while `timeline --bucket 1m` was accepted.
        let cli =
            Cli::try_parse_from(["profctl", "record", "--duration", "10m", "--window", "1.5"])
                .unwrap();
        let Command::Record(args) = cli.command else {
            panic!("not a record command")
        };
        assert_eq!(args.duration, Some(std::time::Duration::from_secs(600)));
        assert_eq!(args.window, Some(std::time::Duration::from_millis(1500)));
        let cli = Cli::try_parse_from(["profctl", "timeline", "--since", "1h", "--bucket", "1m"])
            .unwrap();
        let Command::Timeline(args) = cli.command else {
            panic!("not a timeline command")
        };
        assert_eq!(args.bucket, Some(60));
    }

    #[test]
    fn shared_groups_parse_into_their_fields() {
        let cli = Cli::try_parse_from([
            "profctl",
            "flamegraph",
            "--since",
            "10m",
            "--pid",
            "7",
            "--descendants",
        ])
        .unwrap();
        let Command::Flamegraph(args) = cli.command else {
            panic!("not a flamegraph command")
        };
        assert_eq!(args.filter.process.pid, Some(7));
        assert!(args.filter.descendants);
        assert!(args.range.since.is_some() && args.range.until.is_none());
    }
}
