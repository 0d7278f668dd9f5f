#!/usr/bin/env bash
# bench/offcpu.sh - what off-CPU recording costs, with and without the switch-sampling cap,
# against perf's tracepoint method (by hand, as root, under the sampling lock):
# bench/workloads/switcher.c makes RATE context switches a second (two threads ping-ponging
# through pipes), recorded these ways in the same run, at 10k, 50k and 100k switches/s:
#
#   none     the workload alone (its own CPU: the baseline)
#   profctl  profctl record --embedded --off-cpu --switch-cap CAP --pid (attached 0.2 s after
#            the start, so that both threads have events of their own that the cap's period
#            reaches), --call-graph $CALL_GRAPH (default dwarf); once with CAP=$SWITCH_CAP
#            (default 10000) and once with 0 (every switch sampled)
#   perf     perf record -e sched:sched_switch -g -- switcher ...; then perf script > /dev/null
#
# Columns: the cap (0: none); the switches profctl saw, sampled and lost (its summary);
# profctl's own CPU (outer - inner cpuwrap figures), per switch seen and per switch sampled;
# perf's CPU (record + script), per switch; the ratio of the costs per switch (profctl per
# switch seen / perf per switch); and what each added to the workload's own CPU time (the
# kernel's work for the events, charged to the switching threads).
#
# Then profilerd's continuous off-CPU sampling (`[sampling] off_cpu`): the daemon (release, its
# default configuration at 99 Hz: auto call graph, kernel frames) on a busy machine - switcher at
# DAEMON_RATE switches/s plus one split per CPU burning CPU - for DAEMON_SECS with off_cpu =
# false, then the same with off_cpu = true: its steady CPU (utime+stime from /proc/PID/stat, from
# 5 s after start to the stop) in ms per minute and % of one core, the ratio on/off, and what
# its status says of samples lost and slices dropped.
#
# Usage: flock /tmp/profctl-sampling.lock bench/offcpu.sh   (root; RATES="10000 50000 100000",
#        SECS=3, CALL_GRAPH=dwarf|fp|auto, SWITCH_CAP=10000; BENCH_NO_BUILD=1 uses
#        target/release/profctl and profilerd as they are; DAEMON_RATE=20000, DAEMON_SECS=30,
#        0: no daemon run)
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

SWITCH_CAP=${SWITCH_CAP:-10000}
RUN=$(calc "$SECS + 0.2")

# profctl_run RATE CAP: profctl attached to a running switcher; sets seen, sampled, lost, prof.
profctl_run() {
    "$WRAP" "$T/p.in" "$T/switcher" "$1" "$RUN" >/dev/null &
    local wpid=$! pid=
    for _ in $(seq 100); do
        pid=$(pgrep -P "$wpid" | head -1) && [ -n "$pid" ] && break
        sleep 0.01
    done
    [ -n "$pid" ] || die "switcher did not start"
    sleep 0.2
    "$WRAP" "$T/p.cpu" "$PROFCTL" record --embedded --off-cpu --switch-cap "$2" \
        --call-graph "$CALL_GRAPH" --folded "$T/p.folded" --pid "$pid" >/dev/null 2>"$T/p.err"
    wait "$wpid"
    local line
    line=$(grep "context switches seen" "$T/p.err") || die "no summary: $(cat "$T/p.err")"
    seen=$(sed -E 's/.* ([0-9]+) context switches seen.*/\1/' <<<"$line")
    sampled=$(sed -E 's/.*seen, ([0-9]+) sampled.*/\1/' <<<"$line")
    lost=$(sed -E 's/.* ([0-9]+) lost.*/\1/' <<<"$line")
    prof=$(calc "$(cpu "$T/p.cpu") - $OVH")
}

printf '%-7s %6s %8s %8s %6s %10s %8s %10s %8s %9s %6s %8s %8s\n' \
    rate cap seen sampled lost profctl_ms us/seen us/sampled perf_ms us/switch ratio \
    +wl_prof +wl_perf
for rate in $RATES; do
    "$WRAP" "$T/base.cpu" "$T/switcher" "$rate" "$RUN" >/dev/null
    "$WRAP" "$T/f.cpu" perf record -q -e sched:sched_switch -g -o "$T/perf.data" -- \
        "$WRAP" "$T/f.in" "$T/switcher" "$rate" "$RUN" >/dev/null 2>&1
    "$WRAP" "$T/s.cpu" perf script -i "$T/perf.data" >/dev/null 2>&1
    switches=$(perf script -i "$T/perf.data" -F event 2>/dev/null | grep -c sched_switch || true)
    perf=$(calc "$(cpu "$T/f.cpu") - $(cpu "$T/f.in") - $OVH + $(cpu "$T/s.cpu")")
    perf_per=$(calc "$perf * 1e6 / ($switches > 0 ? $switches : 1)")
    for cap in "$SWITCH_CAP" 0; do
        profctl_run "$rate" "$cap"
        per_seen=$(calc "$prof * 1e6 / ($seen > 0 ? $seen : 1)")
        printf '%-7s %6s %8s %8s %6s %10.1f %8.2f %10.2f %8.1f %9.2f %6s %8.1f %8.1f\n' \
            "$rate" "$cap" "$seen" "$sampled" "$lost" "$(calc "$prof * 1000")" "$per_seen" \
            "$(calc "$prof * 1e6 / ($sampled > 0 ? $sampled : 1)")" \
            "$(calc "$perf * 1000")" "$perf_per" "$(ratio "$per_seen" "$perf_per" %.2f)" \
            "$(calc "($(cpu "$T/p.in") - $(cpu "$T/base.cpu")) * 1000")" \
            "$(calc "($(cpu "$T/f.in") - $(cpu "$T/base.cpu")) * 1000")"
    done
done
echo "(ms of CPU; profctl records $SECS s of a ${RUN} s run, perf all of it; +wl_*: the"
echo " workload's own CPU added by each, ms; ratio: profctl per switch seen / perf per switch)"

# ------------------------------------------------------- profilerd, continuous
DAEMON_SECS=${DAEMON_SECS:-30}
DAEMON_RATE=${DAEMON_RATE:-20000}
[ "$DAEMON_SECS" -gt 0 ] || exit 0
command -v curl >/dev/null || die "missing tool: curl (for the daemon's status)"
PROFILERD=$ROOT/target/release/profilerd
if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
    (cd "$ROOT" && cargo build --release -p profiler-daemon >&2) || die "cargo build failed"
fi
[ -x "$PROFILERD" ] || die "no $PROFILERD"
cc -O1 -g -fno-omit-frame-pointer -pthread -o "$T/split" "$SPLIT_SRC"
status() { curl -sf --unix-socket "$1" http://d/v1/status | tr -d '{}"' | tr ',' '\n' |
    awk -F': *' -v k="$2" '$1 ~ "^ *" k "$" { print $2 }'; }
# daemon_run OFF_CPU: the daemon's steady CPU (s) on the busy load, then "lost dropped"
daemon_run() {
    local d=$T/daemon-$1
    mkdir -p "$d/state" "$d/cache"
    printf '[sampling]\nfrequency = 99\noff_cpu = %s\n[storage]\nstate_dir = "%s"\ncache_dir = "%s"\n[api]\nsocket = "%s"\n' \
        "$1" "$d/state" "$d/cache" "$d/sock" >"$d/profilerd.toml"
    "$PROFILERD" --config "$d/profilerd.toml" 2>"$d/err" &
    local pid=$! i
    for i in $(seq 300); do status "$d/sock" sampling >/dev/null 2>&1 && break; sleep 0.1; done
    "$T/switcher" "$DAEMON_RATE" "$((DAEMON_SECS + 5))" >/dev/null &
    local sw=$!
    local cpus; cpus=$(nproc)
    local burners=()
    for i in $(seq "$cpus"); do "$T/split" forever >/dev/null & burners+=($!); done
    sleep 5
    cpu_snapshot "$pid" "$d/cpu0"
    sleep "$DAEMON_SECS"
    cpu_snapshot "$pid" "$d/cpu1"
    echo "$(calc "$(cpu_ms_between "$d/cpu0" "$d/cpu1") / 1000") $(status "$d/sock" lost) $(status "$d/sock" slices_dropped)"
    kill "$pid" "${burners[@]}"; wait "$pid" || true
    wait "${burners[@]}" 2>/dev/null || true
    wait "$sw" || true
}
note "profilerd at 99 Hz, $DAEMON_SECS s each, switcher at $DAEMON_RATE/s + $(nproc) split burning CPU"
read -r off_s off_lost off_dropped <<<"$(daemon_run false)"
read -r on_s on_lost on_dropped <<<"$(daemon_run true)"
per_min() { calc "$1 * 60000 / $DAEMON_SECS"; }
printf '%-10s %10s %8s %8s %8s\n' off_cpu ms/min %core lost dropped
printf '%-10s %10.1f %8.2f %8s %8s\n' false "$(per_min "$off_s")" "$(calc "$off_s * 100 / $DAEMON_SECS")" "$off_lost" "$off_dropped"
printf '%-10s %10.1f %8.2f %8s %8s\n' true "$(per_min "$on_s")" "$(calc "$on_s * 100 / $DAEMON_SECS")" "$on_lost" "$on_dropped"
echo "ratio on/off: $(ratio "$on_s" "$off_s" %.1f) (the daemon's own CPU, steady; lost: samples; dropped: slices)"
