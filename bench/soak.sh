#!/usr/bin/env bash
# bench/soak.sh - the streaming pipeline's cost under process churn, against perf record, by
# hand (not CI).
#
# Runs the churn of profiler-cli/tests/workloads/churn.c (BENCH_RATE short processes a second
# forked and exec'd, a service binary redeployed every 2 s with the old one deleted, threads
# renaming themselves in a cycle, a JIT map that keeps growing) for BENCH_MINUTES under
#
#   profctl record --window 10 -F 99 -v --folded F          (the whole system)
#
# and then, on the same churn in the same run (one after the other, never at once), under
#
#   perf record -a -g -F 99 -o perf.data
#
# and prints for both, and as ratios profctl/perf:
#
#   1. profiler CPU per minute (ms, and % of one core): user+sys of the profiler process from
#      bench/workloads/cpuwrap.c (getrusage of its whole tree, so threads that exited count),
#      over its wall time, start-up and shutdown included (profctl names its last windows and
#      writes the folded file; perf only finishes perf.data: `perf script` is not counted);
#      targets: profctl below 0.5% of one core, and below perf record's own CPU. profctl's
#      steady rate (its window lines' cumulative CPU, first to last, so start-up is left out)
#      is shown too;
#   2. wake-ups per minute: voluntary context switches of the profiler, summed over its
#      threads from /proc/PID/task/*/status just before it is stopped (threads that ended
#      earlier are missed: profctl's start-up threads); and profctl's drain rounds and its own
#      getrusage count from its -v summary, against perf's "Woken up N times to write data";
#   3. peak RSS (VmHWM just before the stop; VmRSS is also sampled every BENCH_SAMPLE_SECS)
#      and final RSS (VmRSS just before the stop), MB.
#
# Each profiler starts 3 s before the churn and is stopped (SIGINT) 5 s after it ends. What
# the kernel spends taking samples in the churn's context is the churn's, not the profiler's;
# it is not counted for either.
#
# Usage:   flock /tmp/profctl-sampling.lock bench/soak.sh     (root, or perf_event_paranoid <= 0)
# Env:     BENCH_MINUTES=30       churn minutes under profctl (the whole bench takes that plus
#                                 BENCH_PERF_MINUTES plus ~30 s)
#          BENCH_PERF_MINUTES=BENCH_MINUTES
#                                 churn minutes under perf record: its figures are rates, and
#                                 perf keeps no state that grows, so a shorter run measures
#                                 the same rate (5 is enough beside a 30-minute profctl run)
#                                 plus ~30 s); 2 for a quick check
#          BENCH_RATE=50          execs per second
#          BENCH_FREQ=99          sampling frequency (Hz) for both
#          BENCH_WINDOW=10        profctl's --window (s)
#          BENCH_SAMPLE_SECS=5    RSS sampling period (s)
#          BENCH_KEEP=1           keep the temp dir (stderr, RSS samples, folded, perf.data)
#          BENCH_NO_BUILD=1       do not rebuild profctl even if sources are newer
# Needs:   cc, perf, awk, cargo (builds profctl in release mode if it is missing or older than
#          the sources). Unlike bench/record.sh, not inferno: nothing here draws a flamegraph.
set -euo pipefail

BENCH_NAME=soak.sh
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MINUTES=${BENCH_MINUTES:-30}
PERF_MINUTES=${BENCH_PERF_MINUTES:-$MINUTES}
RATE=${BENCH_RATE:-50}
FREQ=${BENCH_FREQ:-99}
WINDOW=${BENCH_WINDOW:-10}
SAMPLE_SECS=${BENCH_SAMPLE_SECS:-5}
DEPLOY_SECS=2

# --------------------------------------------------------------------- setup
BENCH_NEEDS_INFERNO=0
bench_setup
CHURN_SRC=$ROOT/profiler-cli/tests/workloads/churn.c
[ -f "$CHURN_SRC" ] || die "missing workload source $CHURN_SRC"
cc -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls \
    -pthread -o "$T/churn" "$CHURN_SRC"
CHURN_SECS=$((MINUTES * 60))
PERF_CHURN_SECS=$((PERF_MINUTES * 60))

# status_kb PID FIELD: a /proc/PID/status figure in kB (0 if gone)
status_kb() {
    local v
    v=$(awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null | head -1) || true
    echo "${v:-0}"
}
# switches PID: voluntary and involuntary context switches summed over the live threads
switches() {
    cat /proc/"$1"/task/*/status 2>/dev/null |
        awk '$1 == "voluntary_ctxt_switches:" { v += $2 } $1 == "nonvoluntary_ctxt_switches:" { n += $2 }
             END { print v + 0, n + 0 }'
}

# run_one NAME SECS PROFILER-COMMAND...: SECS of churn under a profiler. Writes $T/NAME.{cpu,err,rss,
# churn,final}; .final holds "VMRSS_KB VMHWM_KB VOLUNTARY INVOLUNTARY MAX_SAMPLED_RSS_KB".
run_one() {
    local name=$1 secs=$2; shift 2
    local r=$T/$name
    "$WRAP" "$r.cpu" "$@" 2>"$r.err" &
    local wpid=$! pid="" i
    for i in $(seq 200); do
        pid=$(pgrep -P "$wpid" | head -1) && [ -n "$pid" ] && break
        sleep 0.05
    done
    [ -n "$pid" ] || { cat "$r.err" >&2; die "$name did not start"; }
    (
        while kill -0 "$pid" 2>/dev/null; do
            echo "$(date +%s) $(status_kb "$pid" VmRSS)" >>"$r.rss"
            sleep "$SAMPLE_SECS"
        done
    ) &
    local sampler=$!
    sleep 3
    kill -0 "$pid" 2>/dev/null || { cat "$r.err" >&2; die "$name exited before the churn"; }
    "$T/churn" drive "$secs" "$r.churn" "$RATE" "$DEPLOY_SECS" ||
        die "the churn failed under $name"
    sleep 5
    local max_sampled
    max_sampled=$(awk '$2 > m { m = $2 } END { print m + 0 }' "$r.rss")
    echo "$(status_kb "$pid" VmRSS) $(status_kb "$pid" VmHWM) $(switches "$pid") $max_sampled" >"$r.final"
    kill -INT "$pid"
    wait "$wpid" || true
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    local map
    map=$(sed -n 's/^jit_map //p' "$r.churn")
    [ -n "$map" ] && rm -f "$map"
    [ -s "$r.cpu" ] || { cat "$r.err" >&2; die "no CPU figures for $name"; }
}

echo "churn: $RATE execs/s, a deploy every $DEPLOY_SECS s, renames, a growing JIT map; $MINUTES min under profctl, $PERF_MINUTES under perf, at $FREQ Hz"
echo "$(nproc) CPUs, $(uname -r), $(perf --version), profctl $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "load at start:$(uptime | sed 's/.*load average://')"
START=$(date +%s)

run_one pc "$CHURN_SECS" "$PROFCTL" record --window "$WINDOW" -F "$FREQ" -v --folded "$T/pc.folded"
grep -q '^profctl: window ' "$T/pc.err" || { cat "$T/pc.err" >&2; die "profctl printed no window line"; }
sleep 3
run_one perf "$PERF_CHURN_SECS" perf record -a -g -F "$FREQ" -o "$T/perf.data"
[ -s "$T/perf.data" ] || { cat "$T/perf.err" >&2; die "perf wrote no perf.data"; }

# ------------------------------------------------------------------ figures
read -r PC_RSS PC_HWM PC_VOL PC_INVOL PC_MAXS <"$T/pc.final"
read -r PF_RSS PF_HWM PF_VOL PF_INVOL PF_MAXS <"$T/perf.final"
PC_CPU=$(cpu "$T/pc.cpu"); PC_WALL=$(wall "$T/pc.cpu")
PF_CPU=$(cpu "$T/perf.cpu"); PF_WALL=$(wall "$T/perf.cpu")
PC_CPM=$(calc "60000 * $PC_CPU / $PC_WALL"); PF_CPM=$(calc "60000 * $PF_CPU / $PF_WALL")
PC_PCT=$(calc "100 * $PC_CPU / $PC_WALL"); PF_PCT=$(calc "100 * $PF_CPU / $PF_WALL")
PC_WPM=$(calc "60 * $PC_VOL / $PC_WALL"); PF_WPM=$(calc "60 * $PF_VOL / $PF_WALL")
read -r PC_ROUNDS PC_RU_VOL < <(sed -n -E \
    's/^profctl: own CPU .*, ([0-9]+) drain rounds( \(longest [0-9.]+ ms\))?, ([0-9]+) \+ [0-9]+ context switches.*/\1 \3/p' "$T/pc.err") || true
[ -n "${PC_ROUNDS:-}" ] || { tail -20 "$T/pc.err" >&2; die "cannot parse profctl's -v summary"; }
PC_RPM=$(calc "60 * $PC_ROUNDS / $PC_WALL")
PF_WOKEN=$(sed -n -E 's/.*Woken up ([0-9]+) times.*/\1/p' "$T/perf.err" | tail -1)
PF_RPM=$(calc "60 * ${PF_WOKEN:-0} / $PF_WALL")
PC_RUPM=$(calc "60 * $PC_RU_VOL / $PC_WALL")
peak() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", (a > b ? a : b) / 1024 }'; }
PC_PEAK=$(peak "$PC_HWM" "$PC_MAXS"); PF_PEAK=$(peak "$PF_HWM" "$PF_MAXS")
PC_FIN=$(calc "$PC_RSS / 1024"); PF_FIN=$(calc "$PF_RSS / 1024")
execs_per_s() { awk '$1 == "execs" { e = $2 } $1 == "seconds" { s = $2 } END { printf "%.1f", s ? e / s : 0 }' "$1"; }
R_CPU=$(ratio "$PC_CPM" "$PF_CPM")
# profctl's steady rate, start-up left out: its cumulative "ms CPU" from the first window line
# to the last one closed before the stop, over the time between them.
PC_STEADY=$(grep '^profctl: window ' "$T/pc.err" | awk '
    { if (!match($0, /[0-9.]+ ms CPU/)) next
      ms = substr($0, RSTART, RLENGTH) + 0
      split($3, span, "-"); t = span[2] + 0
      n++; if (n == 1) { t0 = t; m0 = ms } ; if (t <= wall - 8) { t1 = t; m1 = ms } }
    END { if (t1 > t0) printf "%.1f", 60 * (m1 - m0) / (t1 - t0); else print 0 }' wall="$PC_WALL")

echo
printf '%-40s %12s %12s %9s  %-10s %s\n' "" profctl "perf record" ratio target ""
printf '%-40s %12.1f %12.1f %9s\n' "profiler CPU per minute (ms)" "$PC_CPM" "$PF_CPM" "$R_CPU"
printf '%-40s %11.3f%% %11.3f%% %9s  %-10s %s\n' "  % of one core" "$PC_PCT" "$PF_PCT" "" "< 0.5%" \
    "$(awk -v p="$PC_PCT" 'BEGIN { print (p < 0.5 ? "PASS" : "FAIL") }')"
printf '%-40s %12s %12s %9s\n' "  profctl steady, start-up left out" "$PC_STEADY" "" "$(ratio "$PC_STEADY" "$PF_CPM")"
printf '%-40s %12s %12s %9s  %-10s %s\n' "  profctl/perf" "" "" "$R_CPU" "< 1" \
    "$(awk -v r="$R_CPU" 'BEGIN { if (r == "-") print "n/a"; else print (r + 0 < 1 ? "PASS" : "FAIL") }')"
printf '%-40s %12.0f %12.0f %9s\n' "wake-ups per minute (voluntary cs)" "$PC_WPM" "$PF_WPM" "$(ratio "$PC_WPM" "$PF_WPM")"
printf '%-40s %12.0f %12.0f %9s\n' "  drain rounds / perf \"woken up\" per min" "$PC_RPM" "$PF_RPM" "$(ratio "$PC_RPM" "$PF_RPM")"
printf '%-40s %12.0f\n' "  profctl voluntary cs/min (getrusage)" "$PC_RUPM"
printf '%-40s %12s %12s %9s\n' "peak RSS (MB)" "$PC_PEAK" "$PF_PEAK" "$(ratio "$PC_PEAK" "$PF_PEAK")"
printf '%-40s %12.1f %12.1f %9s\n' "final RSS (MB)" "$PC_FIN" "$PF_FIN" "$(ratio "$PC_FIN" "$PF_FIN")"
printf '%-40s %12.3f %12.3f\n' "profiler CPU (s), user+sys" "$PC_CPU" "$PF_CPU"
printf '%-40s %12.1f %12.1f\n' "profiler wall (s)" "$PC_WALL" "$PF_WALL"
printf '%-40s %12s %12s\n' "execs per second achieved" "$(execs_per_s "$T/pc.churn")" "$(execs_per_s "$T/perf.churn")"
printf '%-40s %12s %12.1f\n' "perf.data (MB)" "" "$(calc "$(stat -c %s "$T/perf.data") / 1048576")"
echo
echo "profctl's resident memory over the run (MB, at eighths of its samples):"
awk '{ t[NR] = $1; v[NR] = $2 } END { for (i = 1; i <= 8; i++) { j = int(NR * i / 8); if (j < 1) j = 1;
    printf "  +%ds %.1f", t[j] - t[1], v[j] / 1024 } print "" }' "$T/pc.rss"
echo "profctl's first and last windows:"
grep '^profctl: window ' "$T/pc.err" | sed -n '1p;$p' | cut -c1-400
echo "load at end:$(uptime | sed 's/.*load average://')   total $(($(date +%s) - START)) s"
