#!/usr/bin/env bash
# bench/go.sh - whole stacks of a Go program: profctl against perf, by hand (not CI).
#
# The Go workload profiler-cli/tests/workloads/gostack (a frameless leaf main.leaf under
# main.caller and main.(*T).Method, inlined code, a generic function) is built twice with
# Debian's go: the default build (.symtab, DWARF, .debug_frame) and a stripped one
# (-ldflags='-s -w': only .gopclntab is left). Each runs with as many goroutines as CPUs
# (every CPU busy), recorded in turn by
#
#   profctl record --call-graph auto  --folded F -F HZ -- ./gostack SECS NCPU
#   profctl record --call-graph dwarf --folded F -F HZ -- ./gostack SECS NCPU
#   perf record --call-graph fp           -F HZ -- ./gostack SECS NCPU
#   perf record --call-graph dwarf,16384  -F HZ -- ./gostack SECS NCPU
#     (+ perf script -F comm,pid,tid,time,event,ip,sym,dso | inferno-collapse-perf)
#
# and prints, per build and profiler: the samples of the workload, the share of them whose
# stack has every frame named (no address, [unknown] or [binary]), and the share of the hot samples
# (those in main.leaf) whose stack is whole: from runtime.goexit to main.leaf through
# main.work and the leaf's caller (main.caller or main.(*T).Method).
#
# Usage:   flock /tmp/profctl-sampling.lock bench/go.sh   (root, or perf_event_paranoid <= 0)
# Env:     BENCH_SECONDS=5   seconds the workload runs
#          BENCH_FREQ=999    sampling frequency
#          BENCH_KEEP=1      keep the temp dir
#          BENCH_NO_BUILD=1  do not rebuild profctl
# Needs:   go, cc, perf, cargo, inferno (installed with cargo if missing).
set -euo pipefail

BENCH_NAME=go.sh
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SECS=${BENCH_SECONDS:-5}
F=${BENCH_FREQ:-999}
NCPU=$(nproc)
bench_setup go

SRC=$ROOT/profiler-cli/tests/workloads/gostack
export GOCACHE=$T/gocache GOPATH=$T/gopath GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0
(cd "$SRC" && go build -o "$T/gofull" . && go build -ldflags='-s -w' -o "$T/gostrip" .) ||
    die "go build failed"

# score FOLDED COMM: "samples named% whole%" for the workload's stacks in FOLDED.
score() {
    awk -v comm="$2" '{
            n = $NF; stack = substr($0, 1, length($0) - length($NF) - 1)
            k = split(stack, fr, ";")
            if (fr[1] != comm) next
            total += n
            leaf = 0; whole = 0; top = (fr[2] ~ /^runtime\.goexit/)
            for (i = 2; i <= k; i++) {
                if (fr[i] == "main.leaf") leaf = 1
                if (i + 2 <= k && fr[i] == "main.work" &&
                    (fr[i+1] == "main.caller" || fr[i+1] == "main.(*T).Method") && fr[i+2] == "main.leaf") whole = 1
            }
            # Unnamed frames: [unknown], [truncated], [binary] (perf), binary+0x…, 0x….
            if (stack !~ /(^|;)(\[[^;]*\]|[^;]*\+0x[0-9a-f]+|0x[0-9a-f]+)(;|$)/) named += n
            if (leaf) { hot += n; if (whole && top) ok += n }
        }
        END { printf "%d %.1f %.1f %d\n", total, (total ? 100 * named / total : 0), (hot ? 100 * ok / hot : 0), hot }' "$1"
}

echo "Go workload gostack $SECS s, $NCPU goroutines on $NCPU CPUs, $F Hz; $(go version | awk '{print $3}'), $(uname -r), $(perf --version)"
printf '%-8s %-26s %8s %13s %10s %22s\n' build profiler samples "stacks named" "hot" "hot with whole path"
for B in gofull gostrip; do
    for MODE in auto dwarf; do
        P=$T/$B.pc.$MODE
        "$PROFCTL" record --call-graph "$MODE" --folded "$P.folded" -o "$P.svg" -F "$F" \
            -- "$T/$B" "$SECS" "$NCPU" 2>"$P.err" || { cat "$P.err" >&2; die "profctl record failed"; }
        read -r S N W H < <(score "$P.folded" "$B")
        printf '%-8s %-26s %8d %12s%% %10d %21s%%\n' "$B" "profctl --call-graph $MODE" "$S" "$N" "$H" "$W"
    done
    for CG in fp dwarf,16384; do
        Q=$T/$B.perf.${CG%%,*}
        perf record -q --call-graph "$CG" -F "$F" -o "$Q.data" -- "$T/$B" "$SECS" "$NCPU" 2>"$Q.err" ||
            { cat "$Q.err" >&2; die "perf record failed"; }
        # No period field: inferno then counts samples, not nanoseconds of cpu-clock.
        perf script -F comm,pid,tid,time,event,ip,sym,dso -i "$Q.data" 2>/dev/null |
            inferno-collapse-perf >"$Q.folded" || die "perf script | collapse failed"
        read -r S N W H < <(score "$Q.folded" "$B")
        printf '%-8s %-26s %8d %12s%% %10d %21s%%\n' "$B" "perf --call-graph ${CG%%,*}" "$S" "$N" "$H" "$W"
    done
done
echo "hot: samples in main.leaf (unnamed leaves are not counted: perf names nothing in the stripped build)"
