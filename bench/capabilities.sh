#!/usr/bin/env bash
# bench/capabilities.sh - which capabilities whole-system profiling needs, measured (by hand, as
# root): `profctl record` of the whole system (the daemon's recorder and symbolizer) runs as a
# non-root uid holding only the capabilities given (setpriv: inheritable, ambient and bounding
# sets), first with every candidate, then with each one dropped in turn, and a table says what
# still works:
#
#   starts    the events open on every CPU (perf_event_open for the whole system)
#   kernel    kernel frames are named (/proc/kallsyms addresses)
#   other     another user's process is named: its binary sits in that user's 0700 directory
#   deleted   a process whose binary was deleted before recording is named
#
# Candidates: CAP_PERFMON, CAP_SYSLOG, CAP_SYS_PTRACE, CAP_CHECKPOINT_RESTORE,
# CAP_DAC_READ_SEARCH, CAP_IPC_LOCK. Runs keep the caller's RLIMIT_MEMLOCK (printed; the unit
# sets LimitMEMLOCK=infinity, which this script cannot do where root lacks CAP_SYS_RESOURCE).
#
# Usage: bench/capabilities.sh   (root; uses target/release/profctl, else target/debug/profctl;
#        PROFCTL=path to choose; run under `flock /tmp/profctl-sampling.lock` on a shared machine)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
[ "$(id -u)" = 0 ] || { echo "capabilities.sh: run as root" >&2; exit 2; }
for t in cc setpriv capsh; do command -v "$t" >/dev/null || { echo "capabilities.sh: missing $t" >&2; exit 2; }; done
PROFCTL=${PROFCTL:-}
if [ -z "$PROFCTL" ]; then
    for p in "$ROOT/target/release/profctl" "$ROOT/target/debug/profctl"; do
        [ -x "$p" ] && { PROFCTL=$p; break; }
    done
fi
[ -x "${PROFCTL:-}" ] || { echo "capabilities.sh: build profctl first (cargo build --release --bin profctl)" >&2; exit 2; }

PROFILER_UID=${PROFILER_UID:-64101}   # the profiler's uid (no passwd entry needed)
OTHER_UID=${OTHER_UID:-64102}         # another user's
SECONDS_EACH=${SECONDS_EACH:-4}
T=$(mktemp -d /tmp/profctl-caps.XXXXXX)
chmod 0755 "$T"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ "${BENCH_KEEP:-0}" = 1 ] || rm -rf "$T"
}
trap cleanup EXIT

# A spinner whose hot function also makes a system call (so kernel frames appear).
cat >"$T/capwork.c" <<'EOF'
#define _GNU_SOURCE
#include <unistd.h>
#include <sys/syscall.h>
volatile unsigned long sink;
__attribute__((noinline)) void capwork_hot(void)
{
    for (int i = 0; i < 100000; i++)
        sink = sink * 6364136223846793005UL + 1;
    syscall(SYS_getppid);
}
int main(void) { for (;;) capwork_hot(); }
EOF
cc -O1 -g -fno-omit-frame-pointer -o "$T/capwork" "$T/capwork.c"

# Another user's process, its binary in that user's 0700 directory.
install -d -m 0700 -o "$OTHER_UID" -g "$OTHER_UID" "$T/private"
install -m 0755 -o "$OTHER_UID" -g "$OTHER_UID" "$T/capwork" "$T/private/capother"
setpriv --reuid="$OTHER_UID" --regid="$OTHER_UID" --clear-groups -- "$T/private/capother" &
pids+=($!)
# A process of the profiler's own user whose binary is deleted.
install -d -m 0755 "$T/del"
install -m 0755 "$T/capwork" "$T/del/capdeleted"
setpriv --reuid="$PROFILER_UID" --regid="$PROFILER_UID" --clear-groups -- "$T/del/capdeleted" &
pids+=($!)
sleep 0.5
rm -f "$T/del/capdeleted"

install -d -m 0700 -o "$PROFILER_UID" -g "$PROFILER_UID" "$T/cache"
# The profiler's own copy, where its uid can read it.
install -m 0755 "$PROFCTL" "$T/profctl"
PROFCTL_SOURCE=$PROFCTL
PROFCTL=$T/profctl

# Kernel-only names to look for.
KERNEL_RE='(^|;)(do_syscall_64|entry_SYSCALL_64[a-z_]*|__x64_sys_getppid|__do_sys_getppid|x64_sys_call)(;|$)'

# run LABEL CAPS: record with CAPS (comma-separated names without cap_), print a row.
n=0
run() {
    local label=$1 caps=$2
    n=$((n + 1))
    # A cache of its own: kernel symbols and frames cached by an earlier run would hide what
    # this one cannot read.
    local cache="$T/cache$n"
    install -d -m 0700 -o "$PROFILER_UID" -g "$PROFILER_UID" "$cache"
    local out="$cache/run.folded" err="$T/run$n.err"
    local set="-all"
    local c
    for c in ${caps//,/ }; do set="$set,+$c"; done
    rm -f "$out"
    local started=no kernel=no other=no deleted=no
    if (setpriv --reuid="$PROFILER_UID" --regid="$PROFILER_UID" --clear-groups \
        --inh-caps="$set" --ambient-caps="$set" --bounding-set="$set" -- \
        env XDG_CACHE_HOME="$cache" HOME="$cache" \
        "$PROFCTL" record -q -F 499 -d "$SECONDS_EACH" --folded "$out") 2>"$err" && [ -s "$out" ]; then
        started=yes
        grep -Eq "$KERNEL_RE" "$out" && kernel=yes
        grep -q '^capother;.*capwork_hot' "$out" && other=yes
        grep -q '^capdeleted;.*capwork_hot' "$out" && deleted=yes
    fi
    printf '| %-34s | %-7s | %-6s | %-5s | %-7s | %s\n' "$label" "$started" "$kernel" "$other" "$deleted" \
        "$(grep -m1 -iE 'error|permission|denied|cannot' "$err" | cut -c1-90 || true)"
}

ALL=perfmon,syslog,sys_ptrace,checkpoint_restore,dac_read_search,ipc_lock
echo "profctl: $PROFCTL_SOURCE; profiler uid $PROFILER_UID, other user $OTHER_UID; kernel $(uname -r); perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid), kptr_restrict $(cat /proc/sys/kernel/kptr_restrict), RLIMIT_MEMLOCK $(ulimit -l) KiB"
printf '| %-34s | %-7s | %-6s | %-5s | %-7s | %s\n' "capabilities" "starts" "kernel" "other" "deleted" "first error"
run "all six" "$ALL"
for drop in ${ALL//,/ }; do
    run "without $drop" "$(echo ",$ALL," | sed "s/,$drop,/,/; s/^,//; s/,$//")"
done
run "perfmon only" "perfmon"
run "none" ""
