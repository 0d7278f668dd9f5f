# bench/lib.sh - what bench/record.sh and bench/unwind.sh share: checks, building profctl
# and the CPU wrapper, arithmetic on cpuwrap figures. Sourced, not run; the sourcing script
# sets BENCH_NAME (for messages) and defines nothing of the same names.
#
# After `bench_setup TOOL...`: HERE, ROOT, PROFCTL, SPLIT_SRC, T (the temp dir, removed on
# exit unless BENCH_KEEP=1), WRAP (bench/workloads/cpuwrap.c, built) and PROCCPU
# (bench/workloads/proccpu.c, built) are set.

die() { echo "$BENCH_NAME: $*" >&2; exit 1; }
note() { echo "$BENCH_NAME: $*" >&2; }

# cpu FILE: user+sys seconds; wall FILE: wall seconds (from a cpuwrap file)
cpu() { awk '{printf "%.6f", $2 + $3}' "$1"; }
wall() { awk '{printf "%.6f", $1}' "$1"; }
# cpu_snapshot PID FILE: each live thread of PID with its CPU time so far, its name and the
# times it was run, "TID NS NAME RUNS" per line (/proc/PID/task/TID/schedstat: nanoseconds,
# where /proc/PID/stat counts 10-ms ticks, and time slices, about its wake-ups; spaces in a
# name become _), then "ticks N", the whole process's utime+stime in clock ticks (threads
# ended included), and "process NS", the whole process's CPU clock in nanoseconds (threads
# ended included; bench/workloads/proccpu.c, built by bench_setup), when it was built.
cpu_snapshot() {
    local f tid comm
    for f in /proc/"$1"/task/*/schedstat; do
        tid=${f#/proc/"$1"/task/}
        tid=${tid%/schedstat}
        comm=$(tr ' ' _ <"/proc/$1/task/$tid/comm" 2>/dev/null) || comm=?
        awk -v t="$tid" -v c="${comm:-?}" '{ print t, $1, c, $3 }' "$f" 2>/dev/null || true
    done >"$2"
    awk '{ sub(/.*\) /, ""); print "ticks", $12 + $13 }' "/proc/$1/stat" >>"$2"
    if [ -x "${PROCCPU:-}" ]; then
        echo "process $("$PROCCPU" "$1")" >>"$2" 2>/dev/null || true
    fi
}
# cpu_ms_between BEFORE AFTER: CPU milliseconds of a process between two cpu_snapshot files:
# the process CPU clock's difference when both files have it (nanoseconds, threads that ended
# included); else per thread in nanoseconds (a thread new in AFTER counts whole), or the ticks'
# difference when that is more (threads that ended between the two are only in the ticks; a
# tick is 10 ms, so over a few minutes that choice alone can add some 3 ms a minute).
cpu_ms_between() {
    awk -v hz="$(getconf CLK_TCK)" '
        NR == FNR { if ($1 == "ticks") t0 = $2; else if ($1 == "process") p0 = $2; else ns0[$1] = $2; next }
        $1 == "ticks" { t1 = $2; next }
        $1 == "process" { p1 = $2; next }
        { ns += $2 - ns0[$1] }
        END {
            if (p0 != "" && p1 != "") { printf "%.1f\n", (p1 - p0) / 1e6; exit }
            a = ns / 1e6; b = (t1 - t0) * 1000 / hz; printf "%.1f\n", (a > b ? a : b) }' "$1" "$2"
}
# cpu_ms_by_thread BEFORE AFTER: the CPU milliseconds and the runs (time slices) between two
# cpu_snapshot files by thread name (threads of one name summed; a thread new in AFTER counts
# whole), "NAME MS RUNS" per line, the busiest first.
cpu_ms_by_thread() {
    awk 'NR == FNR { if ($1 != "ticks" && $1 != "process") { ns0[$1] = $2; r0[$1] = $4 } next }
        $1 != "ticks" && $1 != "process" { ms[$3] += ($2 - ns0[$1]) / 1e6; runs[$3] += $4 - r0[$1] }
        END { for (n in ms) printf "%s %.1f %d\n", n, ms[n], runs[n] }' "$1" "$2" | sort -k2 -rn
}
# calc EXPR: floating point arithmetic
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }
# ratio A B [FMT]: A/B, or "-" when B is 0
ratio() { awk -v a="$1" -v b="$2" -v f="${3:-%.3f}" 'BEGIN { if (b + 0 == 0) print "-"; else printf f "\n", a / b }'; }
# verdict RATIO LIMIT: PASS when RATIO <= LIMIT
verdict() { awk -v r="$1" -v l="$2" 'BEGIN { if (r == "-") print "n/a"; else print (r + 0 <= l + 0 ? "PASS" : "FAIL") }'; }

# bench_setup TOOL...: check the tools, perf access and inferno (unless the sourcing script
# set BENCH_NEEDS_INFERNO=0: it draws no flamegraph); build profctl (unless BENCH_NO_BUILD=1)
# and the wrapper; make the temp dir.
bench_setup() {
    HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    ROOT=$(dirname "$HERE")
    PROFCTL=$ROOT/target/release/profctl
    SPLIT_SRC=$ROOT/profiler-cli/tests/workloads/split.c
    local wrap_src=$HERE/workloads/cpuwrap.c
    export PATH="$PATH:$HOME/.cargo/bin"

    local t
    for t in cc perf awk "$@"; do
        command -v "$t" >/dev/null || die "missing tool: $t"
    done
    [ -f "$SPLIT_SRC" ] || die "missing workload source $SPLIT_SRC"
    [ -f "$wrap_src" ] || die "missing $wrap_src"
    if [ "$(id -u)" != 0 ] && [ "$(cat /proc/sys/kernel/perf_event_paranoid)" -gt 0 ]; then
        die "run as root (or with kernel.perf_event_paranoid <= 0)"
    fi
    if [ "${BENCH_NEEDS_INFERNO:-1}" = 1 ] &&
        { ! command -v inferno-collapse-perf >/dev/null || ! command -v inferno-flamegraph >/dev/null; }; then
        command -v cargo >/dev/null ||
            die "inferno is missing and so is cargo: install Rust, then 'cargo install inferno --locked'"
        note "inferno missing: cargo install inferno --locked (into ~/.cargo/bin)"
        cargo install inferno --locked >&2 || die "'cargo install inferno --locked' failed; install it by hand"
        command -v inferno-collapse-perf >/dev/null || die "inferno-collapse-perf still not on PATH"
    fi
    if [ "${BENCH_NO_BUILD:-0}" = 1 ]; then
        note "BENCH_NO_BUILD=1: using $PROFCTL as it is"
    elif [ ! -x "$PROFCTL" ] || [ -n "$(find "$ROOT/Cargo.toml" "$ROOT/Cargo.lock" "$ROOT/crates" \
            "$ROOT/profiler-cli/src" "$ROOT/profiler-cli/Cargo.toml" -newer "$PROFCTL" -print -quit)" ]; then
        command -v cargo >/dev/null || die "profctl must be built and cargo is missing"
        note "building profctl (cargo build --release -p profiler-cli)"
        (cd "$ROOT" && cargo build --release -p profiler-cli >&2) ||
            die "cargo build failed (BENCH_NO_BUILD=1 runs the existing binary, if any)"
    fi
    [ -x "$PROFCTL" ] || die "no $PROFCTL after the build"

    T=$(mktemp -d "${TMPDIR:-/tmp}/profctl-$BENCH_NAME.XXXXXX")
    if [ "${BENCH_KEEP:-0}" = 1 ]; then
        note "keeping temp files in $T"
    else
        trap 'rm -rf "$T"' EXIT
    fi
    # Static when the C library allows it: less of the wrapper's own exec and exit to subtract.
    cc -O2 -static -o "$T/cpuwrap" "$wrap_src" 2>/dev/null || cc -O2 -o "$T/cpuwrap" "$wrap_src"
    WRAP=$T/cpuwrap
    cc -O2 -static -o "$T/proccpu" "$HERE/workloads/proccpu.c" 2>/dev/null ||
        cc -O2 -o "$T/proccpu" "$HERE/workloads/proccpu.c"
    PROCCPU=$T/proccpu
}

# wrapper_overhead: the wrappers' own cost in seconds, outer - inner with no profiler between
# them (the inner wrapper's exit after it wrote its figures, the outer's fork and wait),
# median of 7. Both profilers' "outer - inner" include it once; it is subtracted from both.
wrapper_overhead() {
    local i
    for i in 1 2 3 4 5 6 7; do
        "$WRAP" "$T/ovh.cpu" "$WRAP" "$T/ovh.in" true
        awk 'NR == FNR { o = $2 + $3; next } { printf "%.6f\n", o - $2 - $3 }' "$T/ovh.cpu" "$T/ovh.in"
    done | sort -g | sed -n 4p
}
