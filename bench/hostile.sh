#!/usr/bin/env bash
# bench/hostile.sh: what one unprivileged user's deep stacks with long names cost everyone else
# (issue 23, docs/security.md "profilerd").
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
#
# Usage:   flock /tmp/profctl-sampling.lock bench/hostile.sh     (root)
# Env:     BENCH_PHASE_SECONDS=60   length of each phase
#          BENCH_NO_BUILD=1         do not rebuild profctl / profilerd
#          BENCH_KEEP=1             keep the temp dir (daemon log, lag readings)
set -euo pipefail
BENCH_NAME=hostile.sh
BENCH_NEEDS_INFERNO=0
source "$(dirname "$0")/lib.sh"

PHASE=${BENCH_PHASE_SECONDS:-60}
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
LOADS+=($!)
note "phase 2 (deep stacks of user nobody): ${PHASE} s"
read -r H_MED H_MAX H_DROP < <(phase hostile)
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
echo "daemon: peak RSS $((HWM / 1024)) MB, CPU $CPU s over the run, frequency at the end $FREQ Hz, SIGTERM took $(printf %.1f "$STOP") s"
