#!/usr/bin/env bash
# bench/daemon_profile.sh - where profilerd's steady CPU goes, profiled by profctl, by hand
# (not CI).
#
# Two processes of profiler-cli/tests/workloads/split.c keep both CPUs busy (as in
# bench/daemon.sh); a release profilerd samples the machine at BENCH_FREQ (99) Hz; after
# BENCH_SETTLE seconds (100: the naming of what it found running at its start is over) it is
# recorded for BENCH_SECONDS (180) by
#
#   profctl record --embedded --pid PID -F 999 --call-graph dwarf --stack-size 32768 --folded F
#
# with a copy of profctl stripped of its debug information, so that the daemon's naming of
# profctl's own frames costs little. Printed: the daemon's samples per thread, the share of
# them in naming (SymbolService::symbolize_into), in DWARF lookups (Dwarf::frames_into), in
# trims (SymbolService::trim), in the drain, in slice encoding and writing; the busiest leaf
# functions; and the daemon's naming counters from /v1/status when it has them.
# The folded file, the summary and the daemon's log (its filter: PROFILERD_LOG) are kept:
# BENCH_OUT (default bench/out) / daemon-profile-COMMIT-TIME.{folded,txt,log}.
#
# Usage:   flock /tmp/profctl-sampling.lock bench/daemon_profile.sh     (root)
# Env:     BENCH_FREQ=99           the daemon's frequency
#          BENCH_SETTLE=100        seconds between the daemon's start and the recording
#          BENCH_SECONDS=180       seconds recorded
#          BENCH_OUT=bench/out     where the folded file and the summary are kept
#          BENCH_PROFILERD=PATH    run this profilerd binary (default target/release/profilerd)
#          BENCH_NO_BUILD=1        do not rebuild profctl / profilerd
#          BENCH_KEEP=1            keep the temp dir (the daemon's log, its slices)
# Needs:   cc, perf (bench/lib.sh checks it), objcopy, awk, curl.
set -euo pipefail

BENCH_NAME=daemon_profile.sh
BENCH_NEEDS_INFERNO=0
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
FREQ=${BENCH_FREQ:-99}
SETTLE=${BENCH_SETTLE:-100}
SECONDS_RECORDED=${BENCH_SECONDS:-180}

bench_setup curl objcopy
OUT=${BENCH_OUT:-$ROOT/bench/out}
mkdir -p "$OUT"
PROFILERD=${BENCH_PROFILERD:-$ROOT/target/release/profilerd}
if [ "${BENCH_NO_BUILD:-0}" != 1 ] && [ -z "${BENCH_PROFILERD:-}" ]; then
    note "building profilerd (cargo build --release -p profiler-daemon)"
    (cd "$ROOT" && cargo build --release -p profiler-daemon >&2) || die "cargo build failed"
fi
[ -x "$PROFILERD" ] || die "no $PROFILERD"
cc -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls \
    -pthread -o "$T/split" "$SPLIT_SRC"
objcopy --strip-debug "$PROFCTL" "$T/profctl"

COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
NAME=daemon-profile-$COMMIT-$(date +%Y%m%d-%H%M%S)
echo "profilerd at $FREQ Hz beside 2 x split on $(nproc) CPUs, recorded from ${SETTLE} s for ${SECONDS_RECORDED} s"
echo "$(uname -r), profilerd $COMMIT ($PROFILERD); load at start:$(uptime | sed 's/.*load average://')"

LOADS=()
for i in 1 2; do
    "$T/split" forever "$T/split$i.out" >/dev/null &
    LOADS+=($!)
done
DPID=''
trap 'kill ${LOADS[*]} $DPID 2>/dev/null || true; [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$T"' EXIT

mkdir -p "$T/state" "$T/cache"
cat >"$T/profilerd.toml" <<EOF
[sampling]
frequency = $FREQ
[storage]
state_dir = "$T/state"
cache_dir = "$T/cache"
max_bytes = "16GiB"
[api]
socket = "$T/sock"
EOF
"$PROFILERD" --config "$T/profilerd.toml" 2>"$T/profilerd.err" &
DPID=$!
sleep "$SETTLE"
kill -0 "$DPID" 2>/dev/null || { cat "$T/profilerd.err" >&2; die "profilerd exited"; }
status() { curl -sf --unix-socket "$T/sock" http://d/v1/status || true; }
status >"$T/status0.json"
cpu_snapshot "$DPID" "$T/cpu0"
"$T/profctl" record --embedded --pid "$DPID" -F 999 --call-graph dwarf --stack-size 32768 \
    -d "$SECONDS_RECORDED" --folded "$OUT/$NAME.folded" -q
cpu_snapshot "$DPID" "$T/cpu1"
status >"$T/status1.json"
kill -INT "$DPID"
wait "$DPID" || true
DPID=''
cp "$T/profilerd.err" "$OUT/$NAME.log"

F=$OUT/$NAME.folded
TOTAL=$(awk '{ s += $NF } END { print s + 0 }' "$F")
# share PATTERN: samples of stacks with a frame matching PATTERN (an awk regex), and percent
share() {
    awk -v p="$1" -v t="$TOTAL" '{ n = $NF; $NF = ""; if ($0 ~ p) s += n }
        END { printf "%6d  %5.1f%%", s, t ? 100 * s / t : 0 }' "$F"
}
{
    echo "daemon CPU while recorded: $(cpu_ms_between "$T/cpu0" "$T/cpu1") ms in ${SECONDS_RECORDED} s" \
        "(with the recording's own interference)"
    echo "samples: $TOTAL"
    echo "by thread (the first frame):"
    awk '{ n = $NF; split($1, f, ";"); s[f[1]] += n } END { for (k in s) printf "  %6d  %s\n", s[k], k }' "$F" |
        sort -rn
    printf '  %-56s %s\n' "naming (SymbolService::symbolize_into)" "$(share 'SymbolService::symbolize_into')"
    printf '  %-56s %s\n' "  names looked up (SymbolService::name_file_offset)" "$(share 'SymbolService::name_file_offset')"
    printf '  %-56s %s\n' "  DWARF lookups (Dwarf::frames_into)" "$(share 'Dwarf::frames_into')"
    printf '  %-56s %s\n' "trims (SymbolService::trim)" "$(share 'SymbolService::trim')"
    printf '  %-56s %s\n' "free memory returned (malloc_trim)" "$(share 'malloc_trim')"
    printf '  %-56s %s\n' "slice encoded (Slice::encode)" "$(share 'Slice::encode')"
    printf '  %-56s %s\n' "slice written (Store::write_slice)" "$(share 'write_slice')"
    printf '  %-56s %s\n' "budget readings (budget::run)" "$(share 'budget::run')"
    printf '  %-56s %s\n' "unwinding (unwind::)" "$(share 'unwind::')"
    echo "busiest leaf functions:"
    awk '{ n = $NF; $NF = ""; k = split($0, f, ";"); sub(/ +$/, "", f[k]); s[f[k]] += n }
        END { for (k in s) printf "  %6d  %s\n", s[k], k }' "$F" | sort -rn | awk 'NR <= 25'
    echo "naming counters (/v1/status, before and after the recording):"
    for f in status0 status1; do
        printf '  %s: ' "$f"
        tr ',' '\n' <"$T/$f.json" | grep -E '"(names|name_lookups|name_bytes|symbolizers|symbolizer_bytes|slices_named)"' |
            tr -d '"{}' | tr '\n' ' '
        echo
    done
    echo "load at end:$(uptime | sed 's/.*load average://')"
} | tee "$OUT/$NAME.txt"
note "kept $F, $OUT/$NAME.txt and the daemon's log $OUT/$NAME.log (PROFILERD_LOG sets its filter)"
