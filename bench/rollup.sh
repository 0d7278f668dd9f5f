#!/usr/bin/env bash
# bench/rollup.sh - profilerd across a roll-up boundary, by hand (not CI): does the roll-up dent
# sampling, cost a burst, or raise memory?
#
# Both CPUs are kept busy by two processes of profiler-cli/tests/workloads/split.c (so that the
# samples a minute are steady: 2 x frequency x 60 when nothing is lost), with the churn of
# profiler-cli/tests/workloads/churn.c on top (50 execs a second, a redeployed service, renamed
# threads, a growing JIT map). profilerd runs with its default budget (2% of one core) and its
# roll-up period shortened to BENCH_PERIOD seconds (PROFILERD_TEST_ROLLUP_SECONDS) with
# BENCH_SLICE slices, so that a roll-up holds as many slices as an hour of 10-s slices does
# (300 of 1 s by default; each slice a tenth of a 10-s slice's size). For each frequency of
# BENCH_FREQS it runs until the second boundary after its start plus BENCH_AFTER seconds (the
# first period is partial and rolled up from its files; the second was built as its slices
# were written) and prints:
#
#   1. samples per minute from 4 minutes before the second boundary to 2 minutes after it
#      (the status's `samples` counter, read every second), their median, and the lowest
#      minute against it (target: no minute below 95% of the median);
#   2. the frequency in effect and budget_frequency_changes (target: unchanged, 0);
#   3. each roll-up's log line: slices, bytes, compact form, CPU of its folds and of its
#      write, duration;
#   4. RSS (VmRSS) just before the boundary, the peak from 30 s before it to 60 s after it
#      (VmHWM, reset through /proc/PID/clear_refs), and at the end (target < 64 MB at 99 Hz).
#
# Usage:   flock /tmp/profctl-sampling.lock bench/rollup.sh     (root)
# Env:     BENCH_FREQS="999 99"   frequencies, one run each, one after the other
#          BENCH_PERIOD=300       roll-up period, seconds
#          BENCH_SLICE=1s         sampling.slice
#          BENCH_AFTER=150        seconds after the second boundary
#          BENCH_KEEP=1           keep the temp dir (logs, status samples, slices)
#          BENCH_NO_BUILD=1       do not rebuild profilerd
#          BENCH_PROFILERD=PATH   run this profilerd binary (default target/release/profilerd)
# Needs:   cc, awk, curl, cargo.
set -euo pipefail

BENCH_NAME=rollup.sh
BENCH_NEEDS_INFERNO=0
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
FREQS=${BENCH_FREQS:-999 99}
PERIOD=${BENCH_PERIOD:-300}
SLICE=${BENCH_SLICE:-1s}
AFTER=${BENCH_AFTER:-150}

bench_setup curl
PROFILERD=${BENCH_PROFILERD:-$ROOT/target/release/profilerd}
if [ "${BENCH_NO_BUILD:-0}" != 1 ] && [ -z "${BENCH_PROFILERD:-}" ]; then
    note "building profilerd (cargo build --release -p profiler-daemon)"
    (cd "$ROOT" && cargo build --release -p profiler-daemon >&2) || die "cargo build failed"
fi
[ -x "$PROFILERD" ] || die "no $PROFILERD"
CFLAGS=(-O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-optimize-sibling-calls -pthread)
cc "${CFLAGS[@]}" -o "$T/split" "$SPLIT_SRC"
cc "${CFLAGS[@]}" -o "$T/churn" "$ROOT/profiler-cli/tests/workloads/churn.c"

kb() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
mb() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

# one FREQ: a run of profilerd across two boundaries; figures on stdout
one() {
    local freq=$1 d=$T/d$1 start b2 end pid loads=() i
    mkdir -p "$d/state" "$d/cache"
    cat >"$d/profilerd.toml" <<EOF
[sampling]
frequency = $freq
slice = "$SLICE"
[storage]
state_dir = "$d/state"
cache_dir = "$d/cache"
# As many roll-ups as the defaults keep (3 days of hours), so that the per-uid share of a
# roll-up has the budget an hour's has.
max_age = "$((PERIOD * 72))s"
[api]
socket = "$d/sock"
EOF
    for i in 1 2; do
        "$T/split" forever "$T/split$i.out" >/dev/null &
        loads+=($!)
    done
    start=$(date +%s)
    b2=$(((start / PERIOD + 2) * PERIOD))
    end=$((b2 + AFTER))
    # The driver ends on its own at the end of the run and stops what it started (killing it
    # would leave its service, JIT and renaming processes behind).
    "$T/churn" drive $((end - start)) "$d/churn.out" 50 >/dev/null 2>&1 &
    local churn=$!
    PROFILERD_TEST_ROLLUP_SECONDS=$PERIOD "$PROFILERD" --config "$d/profilerd.toml" 2>"$d/err" &
    pid=$!
    PIDS="${loads[*]} $pid"
    note "$freq Hz: second boundary at +$((b2 - start)) s, the run ends at +$((end - start)) s"
    local reset=0 before_rss=0 peak=0
    while [ "$(date +%s)" -lt "$end" ]; do
        kill -0 "$pid" 2>/dev/null || { cat "$d/err" >&2; die "profilerd exited"; }
        local now s
        now=$(date +%s)
        s=$(curl -sf --unix-socket "$d/sock" http://d/v1/status 2>/dev/null) || s=''
        if [ -n "$s" ]; then
            echo "$now $(echo "$s" | jq -r '[.samples, .frequency, .budget_frequency_changes, .budget_cpu_percent] | @tsv') $(kb "$pid" VmRSS)" >>"$d/samples"
        fi
        if [ "$reset" = 0 ] && [ "$now" -ge $((b2 - 30)) ]; then
            before_rss=$(kb "$pid" VmRSS)
            echo 5 >"/proc/$pid/clear_refs"
            reset=1
        fi
        if [ "$reset" = 1 ] && [ "$now" -ge $((b2 + 60)) ]; then
            peak=$(kb "$pid" VmHWM)
            reset=2
        fi
        sleep 1
    done
    local final status
    final=$(kb "$pid" VmRSS)
    status=$(curl -sf --unix-socket "$d/sock" http://d/v1/status)
    kill -INT "$pid"
    wait "$pid" || true
    kill "${loads[@]}" 2>/dev/null || true
    wait "${loads[@]}" "$churn" 2>/dev/null || true
    PIDS=''

    echo
    echo "== $freq Hz: roll-up period $PERIOD s of $SLICE slices, boundary at $(date -u -d "@$b2" +%T) UTC"
    echo "samples per minute (minute 0 begins at the boundary):"
    awk -v b="$b2" '
        { t = $1 - b; m = (t < 0) ? -int((-t + 59) / 60) : int(t / 60)
          if (!(m in first)) { first[m] = $2; ft[m] = $1 } last[m] = $2; lt[m] = $1 }
        END {
            n = 0
            for (m = -4; m <= 1; m++) {
                if (!(m in first) || !((m + 1) in first)) continue
                # from the first reading of this minute to the first of the next: 60 s
                v = (first[m + 1] - first[m]) * 60 / (ft[m + 1] - ft[m])
                printf "  minute %+d: %d\n", m, v; vals[++n] = v
            }
            for (i = 2; i <= n; i++) {   # insertion sort (mawk has no asort)
                x = vals[i]; j = i - 1
                while (j > 0 && vals[j] > x) { vals[j + 1] = vals[j]; j-- }
                vals[j + 1] = x
            }
            med = (n % 2) ? vals[(n + 1) / 2] : (vals[n / 2] + vals[n / 2 + 1]) / 2
            printf "  median %d, lowest %d (%.1f%% of the median) %s\n", med, vals[1],
                100 * vals[1] / med, (vals[1] >= 0.95 * med) ? "PASS" : "FAIL"
        }' "$d/samples"
    echo "frequency at the end $(echo "$status" | jq .frequency) Hz (configured $(echo "$status" | jq .configured_frequency)), budget_frequency_changes $(echo "$status" | jq .budget_frequency_changes) $( [ "$(echo "$status" | jq .budget_frequency_changes)" = 0 ] && echo PASS || echo FAIL)"
    echo "budget_cpu_percent (the pipeline's, 30-s window): max $(awk '{ if ($5 > m) m = $5 } END { printf "%.2f", m }' "$d/samples")%, at the end $(echo "$status" | jq .budget_cpu_percent)%"
    echo "roll-ups:"
    grep 'rolled up an hour' "$d/err" | sed -E 's/^.*(start_ns=)/  \1/' || echo "  none"
    echo "RSS: before the boundary $(mb "$before_rss") MB, peak from 30 s before to 60 s after $(mb "$peak") MB, at the end $(mb "$final") MB"
    if [ "$freq" -le 99 ]; then
        awk -v p="$peak" -v f="$final" 'BEGIN { print ((p < 65536 && f < 65536) ? "  < 64 MB at 99 Hz PASS" : "  < 64 MB at 99 Hz FAIL") }'
    fi
}

PIDS=''
trap 'kill $PIDS 2>/dev/null || true; [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$T"' EXIT
echo "profilerd across a roll-up boundary: 2 x split + churn on $(nproc) CPUs; $(uname -r); profilerd $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "load at start:$(uptime | sed 's/.*load average://')"
for f in $FREQS; do
    one "$f"
done
echo "load at end:$(uptime | sed 's/.*load average://')"
