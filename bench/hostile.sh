#!/usr/bin/env bash
# bench/hostile.sh: what one unprivileged user's deep stacks with long names cost everyone else
# (issue 23, docs/security.md "profilerd"), and what their unread answers and result loops
# cost (issue 35, items 1 and 2).
#
# One profilerd --freq 999 (release build, default 10-s slices, default budget) runs two phases
# of BENCH_PHASE_SECONDS (60) each, with another user's workload (split, as root) throughout:
#   1. quiet:   split alone;
#   2. hostile: split, plus user nobody (setpriv) running deepname: two threads recursing up to
#               1000 deep through a function with a 4000-character name, renaming themselves.
# Every second the slice lag is read from /v1/status: now minus the end of the newest slice on
# disk (what a query of closed history waits for; it saws between the slice grace and a slice
# plus its grace when naming keeps up). Printed per phase: median and largest lag, slices
# dropped, and at the end the daemon's peak RSS (VmHWM) and its CPU.
# Then, with nobody's deepname still running, nobody records it for a second at 19 Hz (its
# folded result is tens of MB) and plays two attacks of BENCH_ATTACK_SECONDS (20) each:
#   3. slow readers (item 1): 16 connections, one after another, each asking for the
#      recording's folded stacks and reading only the head;
#   4. result loop (item 2): 8 loops fetching the recording's pprof, and one polling its
#      status, as fast as they are answered.
# Printed for a quiet baseline and each attack: the daemon's RSS (VmRSS, and the largest
# read each quarter second) and root's /v1/status latency (median and largest of 4 a second).
#
# Usage:   flock /tmp/profctl-sampling.lock bench/hostile.sh     (root)
# Env:     BENCH_PHASE_SECONDS=60   length of each phase
#          BENCH_ATTACK_SECONDS=20  length of each attack of issue 35
#          BENCH_NO_BUILD=1         do not rebuild profctl / profilerd
#          BENCH_KEEP=1             keep the temp dir (daemon log, lag readings)
set -euo pipefail
BENCH_NAME=hostile.sh
BENCH_NEEDS_INFERNO=0
source "$(dirname "$0")/lib.sh"

PHASE=${BENCH_PHASE_SECONDS:-60}
ATTACK=${BENCH_ATTACK_SECONDS:-20}
[ "$(id -u)" = 0 ] || die "run as root (the hostile user is played with setpriv)"
bench_setup curl setpriv
PROFILERD=$ROOT/target/release/profilerd
if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
    (cd "$ROOT" && cargo build --release -p profiler-daemon >&2) || die "cargo build failed"
fi
[ -x "$PROFILERD" ] || die "no $PROFILERD"

# The hostile user must reach its program: the temp dir is traversable, the program public.
chmod 0711 "$T"
mkdir -m 0755 "$T/pub"
cc -O1 -g -fno-omit-frame-pointer -pthread "-DF=f$(printf 'x%.0s' $(seq 3999))" \
    -o "$T/pub/deepname" "$ROOT/profiler-cli/tests/workloads/deepname.c"
cc -O1 -g -fno-omit-frame-pointer -o "$T/split" "$SPLIT_SRC"

mkdir -p "$T/d/state" "$T/d/cache"
cat >"$T/d/profilerd.toml" <<EOF
[sampling]
frequency = 999
[storage]
state_dir = "$T/d/state"
cache_dir = "$T/d/cache"
[api]
socket = "$T/d/sock"
EOF
"$PROFILERD" --config "$T/d/profilerd.toml" 2>"$T/d.log" &
DAEMON=$!
LOADS=()
trap 'kill ${LOADS[*]} $DAEMON 2>/dev/null || true; [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$T"' EXIT
for _ in $(seq 100); do [ -S "$T/d/sock" ] && break; sleep 0.1; done
[ -S "$T/d/sock" ] || { cat "$T/d.log" >&2; die "profilerd did not start"; }

status() { curl -s --unix-socket "$T/d/sock" http://x/v1/status; }
field() { sed -n -E "s/.*\"$1\":([0-9]+).*/\1/p"; }

# phase NAME: read the slice lag every second for PHASE seconds into $T/NAME.lag; prints
# "MEDIAN_S MAX_S DROPPED"
phase() {
    local i s newest dropped0 dropped1
    dropped0=$(status | field slices_dropped)
    for i in $(seq "$PHASE"); do
        sleep 1
        s=$(status)
        newest=$(echo "$s" | field newest_slice_end_ns)
        [ -n "$newest" ] && [ "$newest" != 0 ] || continue
        calc "($(date +%s%N) - $newest) / 1e9"
        echo
    done >"$T/$1.lag"
    dropped1=$(status | field slices_dropped)
    echo "$(sort -n "$T/$1.lag" | awk '{ v[NR] = $1 } END { printf "%.1f %.1f", v[int((NR + 1) / 2)], v[NR] }') $((dropped1 - dropped0))"
}

"$T/split" forever >/dev/null 2>&1 &
LOADS+=($!)
note "warming up 25 s (the first slices name every process already running)"
sleep 25
note "phase 1 (quiet): ${PHASE} s"
read -r Q_MED Q_MAX Q_DROP < <(phase quiet)
setpriv --reuid=65534 --regid=65534 --clear-groups -- "$T/pub/deepname" >/dev/null 2>&1 &
DEEP=$!
LOADS+=($DEEP)
note "phase 2 (deep stacks of user nobody): ${PHASE} s"
read -r H_MED H_MAX H_DROP < <(phase hostile)

# Issue 35: nobody's unread answers (item 1) and result loop (item 2).
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
api() { curl -s --unix-socket "$T/d/sock" "$@"; }
rss_mb() { awk '$1 == "VmRSS:" { printf "%d", $2 / 1024 }' "/proc/$DAEMON/status"; }
# watch SECONDS: root's /v1/status latency four times a second and the daemon's RSS; prints
# "LAT_MEDIAN_MS LAT_MAX_MS RSS_MAX_MB"
watch() {
    local i
    for i in $(seq $(($1 * 4))); do
        echo "rss $(rss_mb)"
        echo "lat $(curl -s -o /dev/null -m 30 -w '%{time_total}' --unix-socket "$T/d/sock" http://x/v1/status)"
        sleep 0.25
    done | awk '$1 == "rss" && $2 > m { m = $2 } $1 == "lat" { print $2 * 1000 } END { print "rss", m + 0 }' \
        | sort -n | awk '$1 == "rss" { m = $2; next } { v[++n] = $1 } END { printf "%.1f %.1f %d\n", v[int((n + 1) / 2)], v[n], m }'
}
cat >"$T/pub/slow.py" <<'PY'
import socket, sys, time
codes = []
held = []
for _ in range(16):
    s = socket.socket(socket.AF_UNIX)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(sys.argv[1])
    s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % sys.argv[2]).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(1)
        if not c:
            break
        head += c
    codes.append(head.split(b" ")[1].decode() if head else "none")
    held.append(s)
print(" ".join(codes), flush=True)
time.sleep(float(sys.argv[3]))
PY
chmod 0644 "$T/pub/slow.py"
# The system's python3: one on root's PATH (a pyenv shim under /root) may not be nobody's to run.
SYSTEM_PYTHON=/usr/bin/python3
[ -x "$SYSTEM_PYTHON" ] || SYSTEM_PYTHON=$(command -v python3)
ID=$(as_nobody curl -s --unix-socket "$T/d/sock" -X POST -H 'Content-Type: application/json' \
    -d "{\"pid\":$DEEP,\"frequency\":19,\"duration\":1}" http://x/v1/recordings | sed -n -E 's/.*"id":([0-9]+).*/\1/p')
[ -n "$ID" ] || die "nobody's recording was not started"
as_nobody curl -s --unix-socket "$T/d/sock" "http://x/v1/recordings/$ID?wait=60" >/dev/null
SIZE=$(api "http://x/v1/recordings/$ID/folded" | wc -c)
note "nobody's recording $ID folds to $((SIZE / 1024)) KiB; quiet baseline: $ATTACK s"
read -r B_MED B_MAX B_RSS < <(watch "$ATTACK")
note "attack 3 (16 slow readers of nobody's): $ATTACK s"
as_nobody "$SYSTEM_PYTHON" "$T/pub/slow.py" "$T/d/sock" "/v1/recordings/$ID/folded" "$ATTACK" >"$T/slow.codes" 2>&1 &
SLOW=$!
LOADS+=($SLOW)
read -r S_MED S_MAX S_RSS < <(watch "$ATTACK")
wait "$SLOW" || true
SLOW_200=$(tr ' ' '\n' <"$T/slow.codes" | grep -c '^200$' || true)
SLOW_503=$(tr ' ' '\n' <"$T/slow.codes" | grep -c '^503$' || true)
note "attack 4 (nobody's result loop): $ATTACK s"
LOOPS=()
for _ in $(seq 8); do
    as_nobody sh -c "while :; do curl -s -o /dev/null --unix-socket '$T/d/sock' http://x/v1/recordings/$ID/pprof; done" &
    LOOPS+=($!)
done
as_nobody sh -c "while :; do curl -s -o /dev/null --unix-socket '$T/d/sock' http://x/v1/recordings/$ID; done" &
LOOPS+=($!)
LOADS+=("${LOOPS[@]}")
read -r L_MED L_MAX L_RSS < <(watch "$ATTACK")
for p in "${LOOPS[@]}"; do pkill -P "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
HWM=$(awk '$1 == "VmHWM:" { print $2 }' "/proc/$DAEMON/status")
CPU=$(awk '{ sub(/.*\) /, ""); print ($12 + $13) / 100 }' "/proc/$DAEMON/stat")
FREQ=$(status | field frequency)
kill "$DAEMON"
STOP=$(now_s() { date +%s.%N; }; a=$(now_s); while kill -0 "$DAEMON" 2>/dev/null; do sleep 0.05; done; calc "$(now_s) - $a")

echo
echo "profilerd --freq 999, 10-s slices, split as root throughout; $PHASE s per phase"
printf '%-44s %10s %10s %8s\n' "phase" "lag med s" "lag max s" "dropped"
printf '%-44s %10s %10s %8s\n' "quiet (split only)" "$Q_MED" "$Q_MAX" "$Q_DROP"
printf '%-44s %10s %10s %8s\n' "hostile (+ nobody's deep stacks)" "$H_MED" "$H_MAX" "$H_DROP"
echo "hostile / quiet median lag: $(ratio "$H_MED" "$Q_MED" %.2f)"
echo
echo "issue 35: nobody's recording folds to $((SIZE / 1024)) KiB; $ATTACK s each"
printf '%-44s %14s %14s %10s\n' "attack" "status med ms" "status max ms" "RSS max MB"
printf '%-44s %14s %14s %10s\n' "none (baseline)" "$B_MED" "$B_MAX" "$B_RSS"
printf '%-44s %14s %14s %10s\n' "16 slow readers ($SLOW_200 answered, $SLOW_503 refused)" "$S_MED" "$S_MAX" "$S_RSS"
printf '%-44s %14s %14s %10s\n' "result loop (8 pprof + 1 status)" "$L_MED" "$L_MAX" "$L_RSS"
echo "daemon: peak RSS $((HWM / 1024)) MB, CPU $CPU s over the run, frequency at the end $FREQ Hz, SIGTERM took $(printf %.1f "$STOP") s"
