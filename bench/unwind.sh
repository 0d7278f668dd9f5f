#!/usr/bin/env bash
# bench/unwind.sh - profctl's DWARF unwinding vs perf's, by hand (not CI).
#
# Records the same workload -- profiler-cli/tests/workloads/split.c built
# WITHOUT frame pointers (-O2 -fomit-frame-pointer), single-threaded (so that
# main;work;mid;hot_b is the path to look for) -- once with each of
#
#   profctl record --call-graph dwarf --stack-size S --folded F -o SVG -F HZ -- ./split ...
#   perf record --call-graph dwarf,S -F HZ -o perf.data -- ./split ...
#     + perf script | inferno-collapse-perf > folded ; inferno-flamegraph > svg
#
# and prints, profctl against perf:
#
#   1. profiler CPU per sample: profctl's whole run (recording, unwinding
#      every sample as it arrives, symbolizing, SVG) against perf record, and
#      against perf's post-processing alone (perf script, which does perf's
#      unwinding, + collapse + flamegraph).  Target: profctl <= 0.1 x perf's
#      post-processing per unwound sample.
#   2. bytes written per sample: perf.data size / samples.  profctl writes no
#      file while recording (0 bytes on disk); the bytes that pass through its
#      ring buffers per sample are shown as well: the size of one sample
#      record, computed from the sample layout (header, ip, pid/tid, time,
#      period, callchain of the kernel part, the user regs, stack size + dyn
#      size).  The ring figure is an estimate from the layout, not a measure.
#   3. time from the end of recording to the SVG: profctl's "M ms after
#      recording ended" against the wall time of perf script|collapse plus
#      flamegraph.
#   1b. profctl --call-graph fp on the same binary, to show what of profctl's
#      CPU is fixed cost (startup, symbols, SVG) and what DWARF adds per sample.
#   4. stack completeness: of the samples whose stack contains hot_b, the
#      share whose stack holds main;work;mid;hot_b contiguously (folded
#      stacks of comm "split"; an inline frame `run` after main is allowed).  Target: profctl >= perf.
#
# CPU time is measured as in bench/record.sh: bench/workloads/cpuwrap.c
# around the profiler and around the workload inside its `-- COMMAND`; the
# profiler's own CPU is outer - inner, less the wrappers' own cost (measured
# with nothing between two wrappers; subtracted from both profilers alike).
# What the kernel spends copying the
# stack in the workload's context is charged to the workload (shown apart).
#
# Usage:   bench/unwind.sh            (root, or perf_event_paranoid <= 0)
# Env:     BENCH_SECONDS=3            CPU seconds per workload thread
#          BENCH_FREQ=999             sampling frequency
#          BENCH_STACK=16384          bytes of stack copied per sample (both tools)
#          BENCH_KEEP=1               keep the temp dir
#          BENCH_NO_BUILD=1           do not rebuild profctl
#          BENCH_RUNS=5               rounds (profctl dwarf, profctl fp, perf, interleaved);
#                                     CPU per sample is the median over the rounds
# Needs:   cc, perf, cargo, inferno (installed with cargo if missing).
set -euo pipefail

BENCH_NAME=unwind.sh
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SECS=${BENCH_SECONDS:-5}
F=${BENCH_FREQ:-999}
STACK=${BENCH_STACK:-16384}
bench_setup objdump

# No frame pointers; sibling calls off so that mid keeps a frame.
cc -O2 -g -fomit-frame-pointer -fno-optimize-sibling-calls -pthread -o "$T/split" "$SPLIT_SRC"
objdump -d "$T/split" >"$T/split.dis"
grep -q "call.*<hot_b>" "$T/split.dis" || die "hot_b is not called in the no-FP build (inlined?)"
WORK=("$T/split" "$SECS")

# complete FOLDED: "share total" - of comm split's weight whose stack contains
# hot_b, the share holding main;work;mid;hot_b contiguously
complete() {
    awk '{
            n = $NF; stack = substr($0, 1, length($0) - length($NF) - 1)
            k = split(stack, fr, ";")
            if (fr[1] != "split") next
            hasb = 0; path = 0
            for (i = 2; i <= k; i++) {
                if (fr[i] == "hot_b") hasb = 1
                # main;work;mid;hot_b, or main;run;work;mid;hot_b when the symbolizer shows
                # the always_inline run() of split.c as an inline frame
                j = (fr[i+1] == "run") ? i + 1 : i
                if (j + 3 <= k && fr[i] == "main" && fr[j+1] == "work" && fr[j+2] == "mid" && fr[j+3] == "hot_b") path = 1
            }
            if (hasb) { tb += n; if (path) tp += n }
        }
        END { printf "%f %.0f\n", (tb ? tp / tb : 0), tb }' "$1"
}

echo "profctl --call-graph dwarf vs perf record --call-graph dwarf,$STACK + perf script + inferno"
echo "workload: split $SECS, no frame pointers (1 thread, $SECS CPU s), $F Hz, $STACK-byte stack copies"
echo "$(nproc) CPUs, $(uname -r), $(perf --version)"

"$WRAP" "$T/base.wl" "${WORK[@]}" "$T/base.out"
BASE_WL=$(cpu "$T/base.wl")
WRAP_OVERHEAD=$(wrapper_overhead)
echo "wrapper overhead subtracted from both profilers' CPU: $(calc "1000 * $WRAP_OVERHEAD") ms"

RUNS=${BENCH_RUNS:-5}
PC_RUNS=(); FP_RUNS=(); PF_RUNS=()
for R in $(seq 1 "$RUNS"); do
# ---------------------------------------------------------------- profctl
P=$T/pc$R
"$WRAP" "$P.cpu" "$PROFCTL" record --call-graph dwarf --stack-size "$STACK" --folded "$P.folded" -o "$P.svg" -F "$F" \
    -- "$WRAP" "$P.wl" "${WORK[@]}" "$P.out" 2>"$P.err" || { cat "$P.err" >&2; die "profctl record failed"; }
read -r PC_SAMPLES PC_LOST < <(sed -n -E \
    's/^profctl: ([0-9]+) samples in .*, ([0-9]+) lost, .*/\1 \2/p' "$P.err") || true
PC_MS=$(sed -n -E 's/^profctl: wrote .*\(([0-9]+) ms after recording ended\).*/\1/p' "$P.err") || true
PC_Q=$(sed -n -E 's/^profctl: user stacks \([A-Za-z]+ unwinding\): (.*)/\1/p' "$P.err") || true
[ -n "${PC_SAMPLES:-}" ] && [ -n "$PC_MS" ] || { cat "$P.err" >&2; die "cannot parse profctl's summary"; }
PC_CPU=$(calc "$(cpu "$P.cpu") - $(cpu "$P.wl") - $WRAP_OVERHEAD")
PC_WL=$(cpu "$P.wl")

# ---------------------------------------------------------------- profctl, fp
O=$T/pcfp$R
"$WRAP" "$O.cpu" "$PROFCTL" record --call-graph fp --folded "$O.folded" -o "$O.svg" -F "$F" \
    -- "$WRAP" "$O.wl" "${WORK[@]}" "$O.out" 2>"$O.err" || { cat "$O.err" >&2; die "profctl record --call-graph fp failed"; }
FP_SAMPLES=$(sed -n -E 's/^profctl: ([0-9]+) samples in .*/\1/p' "$O.err")
FP_CPU=$(calc "$(cpu "$O.cpu") - $(cpu "$O.wl") - $WRAP_OVERHEAD")

# ---------------------------------------------------------------- perf
Q=$T/perf$R
"$WRAP" "$Q.cpu" perf record --call-graph "dwarf,$STACK" -F "$F" -o "$Q.data" \
    -- "$WRAP" "$Q.wl" "${WORK[@]}" "$Q.out" 2>"$Q.err" || { cat "$Q.err" >&2; die "perf record failed"; }
"$WRAP" "$Q.script.cpu" bash -c 'set -o pipefail; perf script -i "$1" 2>"$2" | inferno-collapse-perf >"$3"' \
    _ "$Q.data" "$Q.script.err" "$Q.folded" || { cat "$Q.script.err" >&2; die "perf script | collapse failed"; }
"$WRAP" "$Q.fg.cpu" inferno-flamegraph "$Q.folded" >"$Q.svg" || die "inferno-flamegraph failed"
read -r PF_SAMPLES PF_LOST < <(perf report --stats -i "$Q.data" 2>/dev/null | awk '
    /stats:$/ && !/Aggregated/ { ev = 1; next }
    ev && $1 == "SAMPLE" { s += $3 }
    ev && $1 == "LOST_SAMPLES" { l += $3 }
    END { print s + 0, l + 0 }') || true
[ "${PF_SAMPLES:-0}" -gt 0 ] || die "perf report --stats found no samples"
PF_REC=$(calc "$(cpu "$Q.cpu") - $(cpu "$Q.wl") - $WRAP_OVERHEAD")
PF_POST=$(calc "$(cpu "$Q.script.cpu") + $(cpu "$Q.fg.cpu")")
PF_MS=$(calc "1000 * ($(wall "$Q.script.cpu") + $(wall "$Q.fg.cpu"))")
PF_WL=$(cpu "$Q.wl")
PF_BYTES=$(stat -c %s "$Q.data")

PC_RUNS+=("$(calc "1e6 * $PC_CPU / $PC_SAMPLES")")
FP_RUNS+=("$(calc "1e6 * $FP_CPU / $FP_SAMPLES")")
PF_RUNS+=("$(calc "1e6 * $PF_POST / $PF_SAMPLES")")
done
# median / spread of a list of numbers
median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { printf "%.6f", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
spread() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { printf "%.2f-%.2f", a[1], a[NR] }'; }

# Ring-buffer bytes of one profctl sample record (layout, x86-64): header 8,
# ip 8, pid/tid 8, time 8, id/cpu/period ~24, callchain nr 8 + ~4 entries of
# the kernel part (user part: only the PERF_CONTEXT_USER marker when the
# sample is in user space), regs abi 8 + 3 regs (ip, sp, bp) 24, stack size
# 8 + STACK + dyn size 8.
PC_RING=$(( 8 + 8 + 8 + 8 + 24 + 8 + 4 * 8 + 8 + 24 + 8 + STACK + 8 ))

read -r PC_COMP PC_B < <(complete "$P.folded")
read -r FP_COMP FP_B < <(complete "$O.folded")
read -r PF_COMP PF_B < <(complete "$Q.folded")

PC_US=$(median "${PC_RUNS[@]}")
FP_US=$(median "${FP_RUNS[@]}")
PF_REC_US=$(calc "1e6 * $PF_REC / $PF_SAMPLES")
PF_POST_US=$(median "${PF_RUNS[@]}")
PF_ALL_US=$(calc "1e6 * ($PF_REC + $PF_POST) / $PF_SAMPLES")
R_POST=$(ratio "$PC_US" "$PF_POST_US")
R_ALL=$(ratio "$PC_US" "$PF_ALL_US")
R_MS=$(ratio "$PC_MS" "$PF_MS")

echo
printf '%-44s %12s %12s %9s  %-10s %s\n' "" profctl perf ratio target ""
printf '%-44s %12d %12d\n' "samples" "$PC_SAMPLES" "$PF_SAMPLES"
printf '%-44s %12d %12d\n' "lost samples" "$PC_LOST" "$PF_LOST"
printf '%-44s %12.3f %12.3f\n' "profiler CPU, whole run (s)" "$PC_CPU" "$(calc "$PF_REC + $PF_POST")"
printf '%-44s %12s %12.3f\n' "  perf record" "" "$PF_REC"
printf '%-44s %12s %12.3f\n' "  perf script|collapse + flamegraph" "" "$PF_POST"
echo "(CPU per sample: median of $RUNS rounds; the other rows: the last round)"
printf '%-44s %12.2f %12.2f %9s  %-10s %s\n' "CPU/sample (us): profctl all vs perf post" "$PC_US" "$PF_POST_US" "$R_POST" "<= 0.10" "$(verdict "$R_POST" 0.1)"
printf '%-44s %12s %12s\n' "  spread over the rounds" "$(spread "${PC_RUNS[@]}")" "$(spread "${PF_RUNS[@]}")"
printf '%-44s %12.2f %12.2f %9s\n' "CPU/sample (us): profctl all vs perf all" "$PC_US" "$PF_ALL_US" "$R_ALL"
printf '%-44s %12s %12.2f\n' "  perf record alone" "" "$PF_REC_US"
printf '%-44s %12.2f %12s  (spread %s)\n' "CPU/sample (us): profctl --call-graph fp" \
    "$FP_US" "" "$(spread "${FP_RUNS[@]}")"
printf '%-44s %12.2f %12s  (dwarf - fp, medians)\n' "  DWARF's marginal CPU/sample (us)" \
    "$(calc "$PC_US - $FP_US")" ""
printf '%-44s %12d %12.0f\n' "bytes written to disk per sample" 0 "$(calc "$PF_BYTES / $PF_SAMPLES")"
printf '%-44s %12d %12s  (profctl: computed sample record size)\n' "ring-buffer bytes per sample" "$PC_RING" ""
printf '%-44s %12d %12.0f %9s\n' "end of recording -> SVG (ms)" "$PC_MS" "$PF_MS" "$R_MS"
printf '%-44s %11.1f%% %11.1f%% %9s  %-10s %s\n' "hot_b samples with main;work;mid;hot_b" \
    "$(calc "100 * $PC_COMP")" "$(calc "100 * $PF_COMP")" "" ">= perf" \
    "$(awk -v a="$PC_COMP" -v b="$PF_COMP" 'BEGIN { print (a + 0 >= b - 0.001 ? "PASS" : "FAIL") }')"
printf '%-44s %12.0f %12.0f  (perf: weighted by period)\n' "  hot_b weight" "$PC_B" "$PF_B"
printf '%-44s %11.1f%%\n' "  same, profctl --call-graph fp" "$(calc "100 * $FP_COMP")"
printf '%-44s %12.2f %12.2f  (unprofiled %.2f)\n' "workload CPU (s)" "$PC_WL" "$PF_WL" "$BASE_WL"
echo "profctl: user stacks: $PC_Q"
