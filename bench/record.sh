#!/usr/bin/env bash
# bench/record.sh - profctl vs perf's flamegraph pipeline, by hand (not CI).
#
# Profiles the same two-thread CPU workload (profiler-cli/tests/workloads/
# split.c, both CPUs busy) with
#
#   profctl record --call-graph fp --folded F -o S -F HZ -- ./split --threads N OUT
#   perf record -g -F HZ -o perf.data -- ./split --threads N OUT
#     + perf script | inferno-collapse-perf > folded ; inferno-flamegraph > svg
#
# at 999 Hz and 50 kHz, and prints, per frequency, profctl against perf:
#
#   1. profiler CPU time per sample, recording plus everything up to the SVG
#      (target: profctl <= 0.1 x perf's whole pipeline);
#   2. time from the end of recording to the SVG: profctl's "M ms after
#      recording ended" against the wall time of perf script | collapse plus
#      flamegraph (target: <= 0.1 x);
#   3. lost and throttled samples (target at 50 kHz: profctl lost <= perf's);
#   4. inclusive share of each hot function (share of the workload comm's
#      samples whose stack contains it) under both, next to the split the
#      workload measured itself (CLOCK_THREAD_CPUTIME_ID in each function).
#
# How CPU time is measured: bench/workloads/cpuwrap.c runs a command and
# writes the rusage (us resolution) of its whole process tree.  It wraps the
# profiler and, inside the profiler's `-- COMMAND`, the workload; the
# profiler's own CPU is outer - inner (the profiler reaps the workload, so
# the outer rusage includes it), less the wrappers' own cost (outer - inner
# with nothing between the two wrappers, median of 7 runs of `true`, about
# 1 ms: the inner wrapper's exit after it wrote its figures), subtracted from
# both profilers alike.  What the kernel spends taking samples in
# the workload's context is charged to the workload, not to the profiler: it
# is shown apart, as "workload CPU" against an unprofiled baseline run.
#
# Sample counts: profctl's stderr summary; perf's per-event SAMPLE and
# LOST_SAMPLES counts from `perf report --stats` (inferno-collapse-perf weighs
# each stack by its period in ns, so the folded sums are not sample counts).
#
# Usage:   bench/record.sh            (root, or perf_event_paranoid <= 0)
# Env:     BENCH_SECONDS=5            CPU seconds per workload thread
#          BENCH_FREQS="999 50000"    frequencies to run
#          BENCH_KEEP=1               keep the temp dir (perf.data, SVGs, ...)
#          BENCH_NO_BUILD=1           do not rebuild profctl even if sources are newer
# Needs:   cc, perf, cargo (builds profctl in release mode if it is missing or
#          older than the sources), inferno-collapse-perf/inferno-flamegraph
#          (installed with `cargo install inferno --locked` if missing).
# Takes about 40 s with the defaults (5 runs of ~5 s plus perf script).
set -euo pipefail

BENCH_NAME=record.sh
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SECS=${BENCH_SECONDS:-5}
FREQS=${BENCH_FREQS:-"999 50000"}
bench_setup

cc -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer \
    -fno-optimize-sibling-calls -pthread -o "$T/split" "$SPLIT_SRC"
WORK=("$T/split" --threads "$SECS")

# shares FOLDED COMM FUNC...: per FUNC, the fraction of COMM's samples whose
# stack contains FUNC (counted once per stack), then COMM's sample weight
shares() {
    local folded=$1 comm=$2; shift 2
    awk -v comm="$comm" -v funcs="$*" '
        BEGIN { nf = split(funcs, fn, " ") }
        {
            n = $NF; stack = substr($0, 1, length($0) - length($NF) - 1)
            k = split(stack, fr, ";")
            if (fr[1] != comm) next
            total += n
            delete seen
            for (i = 2; i <= k; i++) seen[fr[i]] = 1
            for (j = 1; j <= nf; j++) if (fn[j] in seen) w[fn[j]] += n
        }
        END {
            for (j = 1; j <= nf; j++) printf "%s ", (total ? w[fn[j]] / total : 0)
            printf "%.0f\n", total
        }' "$folded"
}

# measured OUTFILE: the workload's own split, as fractions of hot_a+hot_b+hot_c,
# for hot_a hot_b hot_c mid(=hot_b) work(=hot_a+hot_b)
measured() {
    awk '{ ns[$1] = $2; s += $2 }
        END { a = ns["hot_a"] / s; b = ns["hot_b"] / s; c = ns["hot_c"] / s
              printf "%f %f %f %f %f\n", a, b, c, b, a + b }' "$1"
}

pct() { awk -v x="$1" 'BEGIN { printf "%5.1f%%", 100 * x }'; }

FUNCS="hot_a hot_b hot_c mid work"
RATE0=$(cat /proc/sys/kernel/perf_event_max_sample_rate)
START=$(date +%s)

echo "profctl vs perf record -g + perf script + inferno, workload: split --threads $SECS (2 threads, $SECS CPU s each)"
echo "$(nproc) CPUs, $(uname -r), $(perf --version), inferno $(cargo install --list 2>/dev/null | sed -n 's/^inferno \(v[^:]*\):.*/\1/p')"
echo "load at start:$(uptime | sed 's/.*load average://')   kernel.perf_event_max_sample_rate=$RATE0"

# ---------------------------------------------------------------- baseline
"$WRAP" "$T/base.wl" "${WORK[@]}" "$T/base.out"
BASE_WL=$(cpu "$T/base.wl")
WRAP_OVERHEAD=$(wrapper_overhead)
echo "wrapper overhead subtracted from both profilers' CPU: $(calc "1000 * $WRAP_OVERHEAD") ms"
echo "unprofiled workload: $(printf '%.2f' "$BASE_WL") CPU s in $(printf '%.2f' "$(wall "$T/base.wl")") s wall"

for F in $FREQS; do
    # ------------------------------------------------------------ profctl
    P=$T/pc-$F
    "$WRAP" "$P.cpu" "$PROFCTL" record --call-graph fp --folded "$P.folded" -o "$P.svg" -F "$F" \
        -- "$WRAP" "$P.wl" "${WORK[@]}" "$P.out" 2>"$P.err" ||
        { cat "$P.err" >&2; die "profctl record failed at $F Hz"; }
    read -r PC_SAMPLES PC_LOST PC_THR < <(sed -n -E \
        's/^profctl: ([0-9]+) samples in .*, ([0-9]+) lost, ([0-9]+) throttled.*/\1 \2 \3/p' "$P.err") || true
    PC_MS=$(sed -n -E 's/^profctl: wrote .*\(([0-9]+) ms after recording ended\).*/\1/p' "$P.err") || true
    [ -n "${PC_SAMPLES:-}" ] && [ -n "$PC_MS" ] || { cat "$P.err" >&2; die "cannot parse profctl's summary"; }
    [ -s "$P.svg" ] || die "profctl wrote no SVG"
    PC_CPU=$(calc "$(cpu "$P.cpu") - $(cpu "$P.wl") - $WRAP_OVERHEAD")
    PC_WL=$(cpu "$P.wl")

    # ------------------------------------------------------------ perf
    Q=$T/perf-$F
    "$WRAP" "$Q.cpu" perf record -g -F "$F" -o "$Q.data" \
        -- "$WRAP" "$Q.wl" "${WORK[@]}" "$Q.out" 2>"$Q.err" ||
        { cat "$Q.err" >&2; die "perf record failed at $F Hz"; }
    "$WRAP" "$Q.script.cpu" bash -c 'set -o pipefail; perf script -i "$1" 2>"$2" | inferno-collapse-perf >"$3"' \
        _ "$Q.data" "$Q.script.err" "$Q.folded" ||
        { cat "$Q.script.err" >&2; die "perf script | inferno-collapse-perf failed"; }
    "$WRAP" "$Q.fg.cpu" inferno-flamegraph "$Q.folded" >"$Q.svg" || die "inferno-flamegraph failed"
    [ -s "$Q.svg" ] || die "inferno wrote no SVG"
    read -r PF_SAMPLES PF_LOST PF_THR < <(perf report --stats -i "$Q.data" 2>/dev/null | awk '
        /stats:$/ && !/Aggregated/ { ev = 1; next }
        ev && $1 == "SAMPLE" { s += $3 }
        ev && $1 == "LOST_SAMPLES" { l += $3 }
        !ev && $1 == "THROTTLE" { t += $3 }
        END { print s + 0, l + 0, t + 0 }') || true
    [ "${PF_SAMPLES:-0}" -gt 0 ] || die "perf report --stats found no samples"
    PF_REC=$(calc "$(cpu "$Q.cpu") - $(cpu "$Q.wl") - $WRAP_OVERHEAD")
    PF_SCR=$(cpu "$Q.script.cpu")
    PF_FG=$(cpu "$Q.fg.cpu")
    PF_CPU=$(calc "$PF_REC + $PF_SCR + $PF_FG")
    PF_MS=$(calc "1000 * ($(wall "$Q.script.cpu") + $(wall "$Q.fg.cpu"))")
    PF_WL=$(cpu "$Q.wl")

    # ------------------------------------------------------------ table
    PC_US=$(calc "1e6 * $PC_CPU / $PC_SAMPLES")
    PF_US=$(calc "1e6 * $PF_CPU / $PF_SAMPLES")
    R_CPU=$(ratio "$PC_US" "$PF_US")
    R_SVG=$(ratio "$PC_MS" "$PF_MS")
    if [ "$F" -ge 50000 ]; then
        LOST_V=$([ "$PC_LOST" -le "$PF_LOST" ] && echo PASS || echo FAIL)
        LOST_T="<= perf"
    else
        LOST_V=""; LOST_T="(50 kHz only)"
    fi
    echo
    echo "== $F Hz =============================================================================="
    printf '%-34s %12s %12s %9s  %-14s %s\n' "" profctl perf "ratio" target ""
    printf '%-34s %12d %12d %9s\n' "samples" "$PC_SAMPLES" "$PF_SAMPLES" "$(ratio "$PC_SAMPLES" "$PF_SAMPLES")"
    printf '%-34s %12.3f %12.3f %9s\n' "profiler CPU, record..SVG (s)" "$PC_CPU" "$PF_CPU" "$(ratio "$PC_CPU" "$PF_CPU")"
    printf '%-34s %12s %12.3f\n' "  perf record" "" "$PF_REC"
    printf '%-34s %12s %12.3f\n' "  perf script | inferno-collapse" "" "$PF_SCR"
    printf '%-34s %12s %12.3f\n' "  inferno-flamegraph" "" "$PF_FG"
    printf '%-34s %12.2f %12.2f %9s  %-14s %s\n' "CPU per sample (us)" "$PC_US" "$PF_US" "$R_CPU" "<= 0.10" "$(verdict "$R_CPU" 0.1)"
    printf '%-34s %12d %12.0f %9s  %-14s %s\n' "end of recording -> SVG (ms)" "$PC_MS" "$PF_MS" "$R_SVG" "<= 0.10" "$(verdict "$R_SVG" 0.1)"
    printf '%-34s %12d %12d %9s  %-14s %s\n' "lost samples" "$PC_LOST" "$PF_LOST" "" "$LOST_T" "$LOST_V"
    printf '%-34s %12d %12d\n' "throttle events" "$PC_THR" "$PF_THR"
    printf '%-34s %12.2f %12.2f %9s  (unprofiled %.2f)\n' "workload CPU (s)" "$PC_WL" "$PF_WL" "" "$BASE_WL"
    printf '%-34s %12.2f %12.2f %9s  (kernel sampling cost, noisy)\n' "  extra workload CPU/sample (us)" \
        "$(calc "1e6 * ($PC_WL - $BASE_WL) / $PC_SAMPLES")" "$(calc "1e6 * ($PF_WL - $BASE_WL) / $PF_SAMPLES")" ""

    read -r -a PCS < <(shares "$P.folded" split $FUNCS)
    read -r -a PFS < <(shares "$Q.folded" split $FUNCS)
    read -r -a PCM < <(measured "$P.out")
    read -r -a PFM < <(measured "$Q.out")
    echo
    echo "inclusive share of comm 'split' samples   (measured = the workload's own split of hot_a+hot_b+hot_c CPU in that run)"
    printf '  %-10s %9s %10s %9s %10s %12s\n' function profctl measured perf measured profctl-perf
    i=0
    for fn in $FUNCS; do
        printf '  %-10s %9s %10s %9s %10s %+11.1f%%\n' "$fn" "$(pct "${PCS[$i]}")" "$(pct "${PCM[$i]}")" \
            "$(pct "${PFS[$i]}")" "$(pct "${PFM[$i]}")" "$(calc "100 * (${PCS[$i]} - ${PFS[$i]})")"
        i=$((i + 1))
    done
    printf '  %-10s %9d %10s %9s\n' "(samples)" "${PCS[5]}" "" "$(awk -v w="${PFS[5]}" -v f="$F" \
        'BEGIN { printf "%.0f", w / int(1e9 / f) }')"
done

RATE1=$(cat /proc/sys/kernel/perf_event_max_sample_rate)
echo
echo "load at end:$(uptime | sed 's/.*load average://')   total $(($(date +%s) - START)) s"
if [ "$RATE1" != "$RATE0" ]; then
    echo "NOTE: kernel.perf_event_max_sample_rate changed $RATE0 -> $RATE1 during the run (the kernel lowers it"
    echo "      when sampling interrupts take too long; see dmesg); rates above it are capped."
fi
