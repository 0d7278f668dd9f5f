#!/usr/bin/env bash
# bench/symbolize.sh - profctl's offline symbolization against binutils addr2line,
# llvm-symbolizer and elfutils eu-addr2line, by hand (not CI).
#
# The same N addresses (default 10,000), spread evenly over .text of a large binary with
# DWARF (default: the profctl debug build, target/debug/profctl, ~100 MB) and kept only when
# they fall inside a function symbol with a size (so no padding), are symbolized by:
#
#   profctl symbolize -q --elf BIN            < addrs   (target/release/profctl)
#   addr2line -a -f -i -C -e BIN              < addrs   (binutils)
#   llvm-symbolizer --obj BIN --inlining --demangle < addrs   (Debian llvm)
#   eu-addr2line -f -i -C -e BIN              < addrs   (elfutils)
#
# each run twice in a row: "cold" right after dropping the page cache
# (echo 3 > /proc/sys/vm/drop_caches: the binary, its DWARF and the tool itself come from
# disk), then "warm" (page cache full). Every run is a fresh process for every tool,
# profctl included: nothing is kept in memory between runs.
#
# profctl keeps an on-disk frame cache ($XDG_CACHE_HOME/profctl/frames/<build-id>.frames,
# shared with `profctl record`); here XDG_CACHE_HOME is a fresh, empty directory, so for
# profctl "cold" = empty frame cache + dropped page cache, and "warm" = warm page cache +
# the frame cache the cold run filled (the binary's DWARF is not opened). The other tools keep
# nothing on disk. A third profctl run, "warm, --no-cache" (warm page cache, frame cache
# neither read nor written: DWARF indexed again), is shown too.
#
# Prints wall times, ratios and PASS/FAIL for the targets:
#   cold: profctl faster than each tool;   warm: profctl >= 10x faster than each tool
#   (profctl's warm figure is the run with its frame cache; the --no-cache ratios are printed
#   for information, without a target);
# whether profctl printed the same with and without its frame cache; and the agreement of
# profctl with addr2line on function names + inline chains (innermost first) over all the
# addresses (addresses addr2line names `??` are left out).
#
# Usage:   bench/symbolize.sh             (root: drop_caches)
# Env:     BENCH_ADDRS=10000   BENCH_BIN=target/debug/profctl   NO_BUILD=1 (skip cargo build)
# Needs:   binutils, python3, llvm (llvm-symbolizer), elfutils (eu-addr2line):
#          apt-get update && apt-get install -y llvm elfutils
set -euo pipefail
cd "$(dirname "$0")/.."

N=${BENCH_ADDRS:-10000}
BIN=${BENCH_BIN:-target/debug/profctl}
PROFCTL=target/release/profctl

[ "$(id -u)" = 0 ] || { echo "run as root (drop_caches)" >&2; exit 1; }
for t in addr2line llvm-symbolizer eu-addr2line python3 nm readelf; do
    command -v "$t" >/dev/null || { echo "missing $t (apt-get install -y llvm elfutils binutils python3)" >&2; exit 1; }
done
if [ -z "${NO_BUILD:-}" ]; then
    cargo build -q --release --bin profctl
    [ "$BIN" = target/debug/profctl ] && cargo build -q --bin profctl
fi

tmp=$(mktemp -d /tmp/bench-symbolize.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# The addresses: N evenly spaced over .text, those inside a sized function symbol.
python3 - "$BIN" "$N" > "$tmp/addrs" <<'EOF'
import bisect, subprocess, sys
binf, n = sys.argv[1], int(sys.argv[2])
start = size = None
for l in subprocess.run(["readelf", "-SW", binf], capture_output=True, text=True, check=True).stdout.splitlines():
    if " .text " in l:
        f = l.split("]", 1)[1].split()
        start, size = int(f[2], 16), int(f[4], 16)
funcs = []
for l in subprocess.run(["nm", "-S", "--defined-only", binf], capture_output=True, text=True, check=True).stdout.splitlines():
    p = l.split()
    if len(p) >= 4 and p[2] in ("t", "T", "w", "W") and int(p[1], 16) > 0:
        funcs.append((int(p[0], 16), int(p[0], 16) + int(p[1], 16)))
funcs.sort()
starts = [f[0] for f in funcs]
def inside(a):
    i = bisect.bisect_right(starts, a)
    return any(a < e for _, e in funcs[max(0, i - 64):i])
# Oversample so that about n addresses remain after dropping padding.
m = n * 11 // 10
out = [start + i * size // m for i in range(m)]
out = [a for a in out if inside(a)][:n]
print("\n".join(hex(a) for a in out))
EOF
count=$(wc -l < "$tmp/addrs")
echo "binary: $BIN ($(du -h "$BIN" | cut -f1)), $count addresses in function bodies over .text"
echo "profctl: $PROFCTL (release)"

now() { date +%s.%N; }
declare -A COLD WARM
run_tool() { # name, command...: cold (page cache dropped), then warm
    local name=$1; shift
    local t0 t1
    sync; echo 3 > /proc/sys/vm/drop_caches
    t0=$(now); "$@" < "$tmp/addrs" > "$tmp/$name.cold" 2>"$tmp/$name.err"; t1=$(now)
    COLD[$name]=$(echo "$t1 - $t0" | bc -l)
    t0=$(now); "$@" < "$tmp/addrs" > "$tmp/$name.out" 2>>"$tmp/$name.err"; t1=$(now)
    WARM[$name]=$(echo "$t1 - $t0" | bc -l)
    printf "%-26s cold %8.3f s   warm %8.3f s   (%s lines)\n" "$name" "${COLD[$name]}" "${WARM[$name]}" "$(wc -l < "$tmp/$name.out")"
}
run_warm() { # name, label, command...: warm only (page cache as the previous run left it)
    local name=$1 label=$2; shift 2
    local t0 t1
    t0=$(now); "$@" < "$tmp/addrs" > "$tmp/$name.out" 2>"$tmp/$name.err"; t1=$(now)
    WARM[$name]=$(echo "$t1 - $t0" | bc -l)
    printf "%-26s                  warm %8.3f s   (%s lines)\n" "$label" "${WARM[$name]}" "$(wc -l < "$tmp/$name.out")"
}

# profctl's frame cache starts empty: the cold run fills it, the warm run reads it.
cache="$tmp/xdg-cache"
mkdir "$cache"
run_tool profctl env XDG_CACHE_HOME="$cache" "$PROFCTL" symbolize -q --elf "$BIN"
run_warm profctl-nocache "profctl, warm, --no-cache" \
    env XDG_CACHE_HOME="$cache" "$PROFCTL" symbolize -q --no-cache --elf "$BIN"
echo "  (profctl's frame cache: $(find "$cache" -name '*.frames' | wc -l) file(s), $(find "$cache" -name '*.frames' -exec du -ck {} + | tail -1 | cut -f1) KiB; all of profctl's caches: $(du -sk "$cache" | cut -f1) KiB)"
run_tool addr2line addr2line -a -f -i -C -e "$BIN"
run_tool llvm-symbolizer llvm-symbolizer --obj "$BIN" --inlining --demangle
run_tool eu-addr2line eu-addr2line -f -i -C -e "$BIN"

echo
echo "targets: cold profctl < tool; warm profctl <= tool / 10 (every run a fresh process)"
echo "warm, for profctl: page cache warm and its on-disk frame cache filled by the cold run (DWARF not opened); the other tools keep no cache between runs"
for t in addr2line llvm-symbolizer eu-addr2line; do
    rc=$(echo "${COLD[$t]} / ${COLD[profctl]}" | bc -l)
    rw=$(echo "${WARM[$t]} / ${WARM[profctl]}" | bc -l)
    pc=$(echo "${COLD[profctl]} < ${COLD[$t]}" | bc -l)
    pw=$(echo "$rw >= 10" | bc -l)
    printf "vs %-16s cold: %6.2fx faster %s   warm: %6.2fx faster %s\n" "$t" "$rc" \
        "$([ "$pc" = 1 ] && echo PASS || echo FAIL)" "$rw" "$([ "$pw" = 1 ] && echo PASS || echo FAIL)"
done
echo "for information, profctl warm with --no-cache (page cache warm, no frame cache: DWARF indexed again):"
for t in addr2line llvm-symbolizer eu-addr2line; do
    rn=$(echo "${WARM[$t]} / ${WARM[profctl-nocache]}" | bc -l)
    printf "vs %-16s warm, --no-cache: %6.2fx faster\n" "$t" "$rn"
done
if cmp -s "$tmp/profctl.out" "$tmp/profctl-nocache.out" && cmp -s "$tmp/profctl.out" "$tmp/profctl.cold"; then
    echo "profctl output: identical with the frame cache (warm), filling it (cold) and without it (--no-cache)"
else
    echo "profctl output: DIFFERS between the cold, warm and --no-cache runs"
fi

echo
python3 - "$tmp/addr2line.out" "$tmp/profctl.out" <<'EOF'
import sys
def a2l(path):
    r, cur, lines = {}, None, open(path).read().splitlines()
    i = 0
    while i < len(lines):
        l = lines[i]
        if l.startswith("0x"):
            cur = int(l, 16); r[cur] = []; i += 1; continue
        r[cur].append(l); i += 2
    return r
def ours(path):
    r, cur = {}, None
    for l in open(path).read().splitlines():
        if l.startswith("    "):
            f = l[4:]
            if f.endswith(" (inlined)"): f = f[:-len(" (inlined)")]
            r[cur].append(f.rsplit(" at ", 1)[0])
        elif l.strip():
            cur = int(l.strip(), 16); r[cur] = []
    return r
A, P = a2l(sys.argv[1]), ours(sys.argv[2])
agree = bad = unknown = 0
examples = []
for a, want in A.items():
    if not want or want[0] == "??":
        unknown += 1; continue
    if P.get(a) == want: agree += 1
    else:
        bad += 1
        if len(examples) < 5: examples.append(f"  {a:#x}\n    addr2line: {' <- '.join(want)}\n    profctl:   {' <- '.join(P.get(a, []))}")
tot = agree + bad
print(f"agreement with addr2line (function names + inline chains): {agree}/{tot} = {100.0*agree/max(tot,1):.2f}% ({unknown} addresses named ?? by addr2line left out)")
for e in examples: print(e)
EOF
