#!/usr/bin/env bash
# bench/ui.sh - how fast `profctl ui` draws an hour of a busy history, by hand (not CI).
#
# A history recorded at 999 Hz under the churn of profiler-cli/tests/workloads/churn.c (50
# execs a second, a service redeployed every 2 s, renamed threads, a growing JIT map):
# profilerd (release build, 10-s slices, budget out of the way) runs BENCH_MINUTES (10) under
# it; then an hour of history ending now is made of those slices (hard links renamed with
# shifted times, as bench/daemon.sh does: the store indexes files by name; the past clock hour
# is rolled up when the daemon starts on it), and on that history, with nothing else of the
# bench running, the median of BENCH_QUERIES (5) of:
#
#   1. the daemon alone: `GET /v1/folded` of the last hour (curl on its socket): the first
#      (the files read and folded into the daemon's query cache) apart, then the median of
#      the rest; the answer's bytes and stacks; then the same bounded as profctl ui asks it
#      for a flame graph (`minwidth=0.04`);
#   2. profctl ui: `GET /api/flame` of the same hour (the daemon's query, the stacks read, the
#      tree built and sent, bounded), then `/api/top` of it (from profctl's cache); its bytes;
#   3. in chromium (the ignored test `ui::ui_drag_to_flame_time`, driven over WebDriver): from
#      the end of a drag over the last hour of the timeline to the flame graph drawn, as the
#      page measures it (performance.now() at mouseup to two animation frames after the
#      frames are in the DOM); target < 1 s;
#   4. the page's own weight: its files, without data; target < 300 KB.
#
# Usage:   flock /tmp/profctl-sampling.lock bench/ui.sh     (root; chromium and chromedriver)
# Env:     BENCH_MINUTES=10       minutes of sampling under the churn
#          BENCH_QUERIES=5        runs of each timed request
#          BENCH_KEEP=1           keep the temp dir (logs, slices)
#          BENCH_NO_BUILD=1       do not rebuild profctl / profilerd
#          BENCH_REUSE=DIR        skip the sampling: the slices of an earlier BENCH_KEEP=1 run
# Needs:   cc, awk, curl, cargo, chromium, chromedriver.
set -euo pipefail

BENCH_NAME=ui.sh
BENCH_NEEDS_INFERNO=0
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
MINUTES=${BENCH_MINUTES:-10}
QUERIES=${BENCH_QUERIES:-5}

bench_setup curl chromium chromedriver
PROFILERD=$ROOT/target/release/profilerd
if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
    note "building profilerd (cargo build --release -p profiler-daemon)"
    (cd "$ROOT" && cargo build --release -p profiler-daemon >&2) || die "cargo build failed"
fi
[ -x "$PROFILERD" ] || die "no $PROFILERD"
cc -O1 -g -fno-omit-frame-pointer -pthread -o "$T/churn" "$ROOT/profiler-cli/tests/workloads/churn.c"

PIDS=()
trap 'kill ${PIDS[*]} 2>/dev/null || true; wait 2>/dev/null || true; [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$T"' EXIT

# config NAME: a daemon's configuration under $T/NAME
config() {
    mkdir -p "$T/$1/state" "$T/$1/cache"
    cat >"$T/$1/profilerd.toml" <<EOF
[sampling]
frequency = 999
[storage]
state_dir = "$T/$1/state"
cache_dir = "$T/$1/cache"
[api]
socket = "$T/$1/sock"
max_response_bytes = "512MiB"
[budget]
max_cpu_percent = 10000
EOF
}
wait_socket() {
    local i
    for i in $(seq 100); do
        curl -s -o /dev/null --unix-socket "$1" http://d/v1/status && return 0
        sleep 0.2
    done
    return 1
}
med() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# ------------------------------------------------------------------ sampling
if [ -n "${BENCH_REUSE:-}" ]; then
    SLICES=$BENCH_REUSE
    note "reusing the slices in $SLICES"
else
    config rec
    "$PROFILERD" --config "$T/rec/profilerd.toml" 2>"$T/rec.err" &
    PIDS+=($!)
    wait_socket "$T/rec/sock" || { cat "$T/rec.err" >&2; die "profilerd does not answer"; }
    note "sampling at 999 Hz under the churn for $MINUTES minutes"
    "$T/churn" drive "$((MINUTES * 60))" "$T/churn.out" >/dev/null
    kill -INT "${PIDS[0]}"; wait "${PIDS[0]}" || true; PIDS=()
    SLICES=$T/rec/state/slices
fi
mapfile -t SRC < <(ls "$SLICES" | grep -E '^[0-9]+-[0-9]+\.pb\.gz$' | sort -n)
[ "${#SRC[@]}" -gt 0 ] || die "no slices in $SLICES"
SRC_BYTES=$(cat "${SRC[@]/#/$SLICES/}" | wc -c)

# ------------------------------------------------------------------ an hour of history
config hist
NOW=$(date +%s)
awk -v n="${#SRC[@]}" -v now="$NOW" 'BEGIN {
    s = 361; for (k = 0; k < s; k++) { st = now - (s - k) * 10; printf "%d %d000000000 %d000000000\n", k % n, st, st + 10 } }' |
    while read -r i st en; do echo "${SRC[$i]} $st-$en.pb.gz"; done |
    (mkdir -p "$T/hist/state/slices" && cd "$SLICES" &&
        while read -r src dst; do ln "$src" "$T/hist/state/slices/$dst"; done)
SOCK=$T/hist/sock
"$PROFILERD" --config "$T/hist/profilerd.toml" 2>"$T/hist.err" &
PIDS+=($!)
wait_socket "$SOCK" || { cat "$T/hist.err" >&2; die "the history daemon does not answer"; }
# The past clock hour is rolled up at start: wait for it (at most 2 minutes).
for i in $(seq 120); do
    [ "$(find "$T/hist/state/slices" -name '*.hour.pb.gz' | wc -l)" -ge 1 ] && break
    sleep 1
done
ROLLUPS=$(find "$T/hist/state/slices" -name '*.hour.pb.gz' | wc -l)
PLAIN=$(find "$T/hist/state/slices" -name '*.pb.gz' ! -name '*.hour.pb.gz' | wc -l)
SINCE=$((NOW - 3600)).000
UNTIL=$NOW.000

# 1. the daemon alone
for i in $(seq "$QUERIES"); do
    curl -s --unix-socket "$SOCK" -o "$T/folded.txt" -w '%{time_total}\n' \
        "http://d/v1/folded?since=$SINCE&until=$UNTIL" | awk '{ printf "%d\n", $1 * 1000 }'
done >"$T/daemon.ms"
DAEMON_COLD_MS=$(head -1 "$T/daemon.ms")
DAEMON_MS=$(tail -n +2 "$T/daemon.ms" | med)
FOLDED_BYTES=$(wc -c <"$T/folded.txt")
STACKS=$(wc -l <"$T/folded.txt")
# 1b. the daemon's bounded answer (what profctl ui asks for the flame graph)
for i in $(seq "$QUERIES"); do
    curl -s --unix-socket "$SOCK" -o "$T/bounded.txt" -w '%{time_total}\n' \
        "http://d/v1/folded?since=$SINCE&until=$UNTIL&minwidth=0.04" | awk '{ printf "%d\n", $1 * 1000 }'
done >"$T/bounded.ms"
BOUNDED_MS=$(med <"$T/bounded.ms")
BOUNDED_BYTES=$(wc -c <"$T/bounded.txt")
BOUNDED_LINES=$(wc -l <"$T/bounded.txt")

HIST_RSS_KB=$(awk '/^VmRSS/ { print $2 }' "/proc/${PIDS[0]}/status")

# 2. profctl ui's requests
"$PROFCTL" --socket "$SOCK" ui --since 65m --no-open >"$T/ui.url" 2>"$T/ui.err" &
PIDS+=($!)
for i in $(seq 50); do [ -s "$T/ui.url" ] && break; sleep 0.1; done
URL=$(head -1 "$T/ui.url")
BASE=${URL%%/\?*}
curl -s -c "$T/cookies" -o /dev/null "$URL"
PAGE_BYTES=0
for f in / /ui.js /ui.css; do
    PAGE_BYTES=$((PAGE_BYTES + $(curl -s -b "$T/cookies" "$BASE$f" | wc -c)))
done
for i in $(seq "$QUERIES"); do
    # A range of its own each time (a millisecond apart), so that none is answered from the cache.
    until_i=$NOW.00$i
    a=$(curl -s -b "$T/cookies" -o "$T/flame.json" -w '%{time_total}' "$BASE/api/flame?since=$SINCE&until=$until_i&minwidth=0.04")
    b=$(curl -s -b "$T/cookies" -o "$T/top.json" -w '%{time_total}' "$BASE/api/top?since=$SINCE&until=$until_i")
    awk -v a="$a" -v b="$b" 'BEGIN { printf "%d %d\n", a * 1000, b * 1000 }'
done >"$T/ui.ms"
FLAME_MS=$(cut -d' ' -f1 "$T/ui.ms" | med)
TOP_MS=$(cut -d' ' -f2 "$T/ui.ms" | med)
FLAME_BYTES=$(wc -c <"$T/flame.json")
FLAME_NODES=$(grep -o '"nodes":[0-9]*' "$T/flame.json" | tail -1 | cut -d: -f2)

# 3. in chromium
(cd "$ROOT" && PROFCTL_UI_BENCH_SOCKET=$SOCK PROFCTL_UI_BENCH_RUNS=$QUERIES \
    cargo test --release -p profiler-cli --test integration -- --ignored --nocapture ui::ui_drag_to_flame_time \
    >"$T/drag.out" 2>&1) || { tail -30 "$T/drag.out" >&2; die "the browser run failed"; }
DRAG_MS=$(sed -n -E 's/^drag to flame graph: ([0-9]+) ms.*/\1/p' "$T/drag.out" | med)

echo "history: ${#SRC[@]} slices recorded ($(calc "$SRC_BYTES / 1048576") MB), an hour made of them: $ROLLUPS roll-ups, $PLAIN plain slices"
echo "load: $(uptime | sed 's/.*load average://')"
printf '%-62s %s\n' "figure (median of $QUERIES)" "value"
printf '%-62s %s\n' "daemon: GET /v1/folded, the last hour, first (files read)" "$DAEMON_COLD_MS ms"
printf '%-62s %s\n' "daemon: GET /v1/folded, the last hour, then" "$DAEMON_MS ms ($STACKS stacks, $(calc "$FOLDED_BYTES / 1048576") MB)"
printf '%-62s %s\n' "daemon: GET /v1/folded?minwidth=0.04, the last hour" "$BOUNDED_MS ms ($BOUNDED_LINES lines, $((BOUNDED_BYTES / 1024)) KB)"
printf '%-62s %s\n' "the history daemon's RSS after those queries" "$((HIST_RSS_KB / 1024)) MB"
printf '%-62s %s\n' "profctl ui: /api/flame of the hour (daemon included)" "$FLAME_MS ms ($FLAME_NODES frames, $((FLAME_BYTES / 1024)) KB)"
printf '%-62s %s\n' "profctl ui: /api/top of the same hour (cached stacks)" "$TOP_MS ms"
printf '%-62s %s\n' "chromium: end of the drag to the flame graph drawn" "$DRAG_MS ms (target < 1000) $(sed -n -E 's/^drag to flame graph: [0-9]+ ms(.*)/\1/p' "$T/drag.out" | tr '\n' ' ')"
printf '%-62s %s\n' "the page's weight without data" "$((PAGE_BYTES / 1024)) KB (target < 300)"
