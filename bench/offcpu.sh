#!/usr/bin/env bash
# bench/offcpu.sh - what off-CPU recording costs, against perf's tracepoint method (by hand, as
# root, under the sampling lock): bench/workloads/switcher.c makes RATE context switches a
# second (two threads ping-ponging through pipes) for SECS seconds, recorded three ways in the
# same run, at 10k, 50k and 100k switches/s:
#
#   none     the workload alone (its own CPU: the baseline)
#   profctl  profctl record --off-cpu -- switcher ... (--call-graph $CALL_GRAPH, default dwarf)
#   perf     perf record -e sched:sched_switch -g -- switcher ...; then perf script > /dev/null
#
# Columns: the switches profctl saw, sampled and lost (its summary); profctl's own CPU
# (outer - inner cpuwrap figures), per switch seen and per switch sampled; perf's CPU (record
# + script), per switch; their ratio; and what each added to the workload's own CPU time (the
# kernel's work for the events, charged to the switching threads).
#
# Usage: flock /tmp/profctl-sampling.lock bench/offcpu.sh   (root; RATES="10000 50000 100000",
#        SECS=3, CALL_GRAPH=dwarf|fp|auto; BENCH_NO_BUILD=1 uses target/release/profctl as is)
set -euo pipefail
BENCH_NAME=offcpu
BENCH_NEEDS_INFERNO=0
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"
bench_setup
RATES=${RATES:-10000 50000 100000}
SECS=${SECS:-3}
CALL_GRAPH=${CALL_GRAPH:-dwarf}
cc -O2 -pthread -o "$T/switcher" "$HERE/workloads/switcher.c"
OVH=$(wrapper_overhead)
note "wrapper overhead $(calc "$OVH * 1000") ms; $SECS s per run, --call-graph $CALL_GRAPH"

printf '%-7s %8s %8s %6s %10s %9s %10s %10s %9s %7s %9s %9s\n' \
    rate seen sampled lost profctl_ms us/seen us/sampled perf_ms us/switch ratio +wl_prof +wl_perf
for rate in $RATES; do
    "$WRAP" "$T/base.cpu" "$T/switcher" "$rate" "$SECS" >/dev/null
    "$WRAP" "$T/p.cpu" "$PROFCTL" record --off-cpu --call-graph "$CALL_GRAPH" \
        --folded "$T/p.folded" -- "$WRAP" "$T/p.in" "$T/switcher" "$rate" "$SECS" \
        >/dev/null 2>"$T/p.err"
    line=$(grep "context switches seen" "$T/p.err") || die "no summary: $(cat "$T/p.err")"
    seen=$(sed -E 's/.* ([0-9]+) context switches seen.*/\1/' <<<"$line")
    sampled=$(sed -E 's/.*seen, ([0-9]+) sampled.*/\1/' <<<"$line")
    lost=$(sed -E 's/.* ([0-9]+) lost.*/\1/' <<<"$line")
    prof=$(calc "$(cpu "$T/p.cpu") - $(cpu "$T/p.in") - $OVH")
    "$WRAP" "$T/f.cpu" perf record -q -e sched:sched_switch -g -o "$T/perf.data" -- \
        "$WRAP" "$T/f.in" "$T/switcher" "$rate" "$SECS" >/dev/null 2>&1
    "$WRAP" "$T/s.cpu" perf script -i "$T/perf.data" >/dev/null 2>&1
    switches=$(perf script -i "$T/perf.data" -F event 2>/dev/null | grep -c sched_switch || true)
    perf=$(calc "$(cpu "$T/f.cpu") - $(cpu "$T/f.in") - $OVH + $(cpu "$T/s.cpu")")
    printf '%-7s %8s %8s %6s %10.1f %9.2f %10.2f %10.1f %9.2f %7s %9.1f %9.1f\n' \
        "$rate" "$seen" "$sampled" "$lost" "$(calc "$prof * 1000")" \
        "$(calc "$prof * 1e6 / ($seen > 0 ? $seen : 1)")" \
        "$(calc "$prof * 1e6 / ($sampled > 0 ? $sampled : 1)")" \
        "$(calc "$perf * 1000")" "$(calc "$perf * 1e6 / ($switches > 0 ? $switches : 1)")" \
        "$(ratio "$prof" "$perf" %.2f)" \
        "$(calc "($(cpu "$T/p.in") - $(cpu "$T/base.cpu")) * 1000")" \
        "$(calc "($(cpu "$T/f.in") - $(cpu "$T/base.cpu")) * 1000")"
done
echo "(ms of CPU over $SECS s; +wl_*: the workload's own CPU added by each, ms; ratio: profctl / perf)"
