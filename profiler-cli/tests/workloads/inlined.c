/*
 * inlined.c - a CPU workload whose hot code is partly an always_inline function, for the pprof
 * tests (built -O2 -g): the split of CPU time between the two paths is set on the command line.
 *
 *   main -> hot_a                          PERCENT_A %
 *   main -> outer_b -> inl_spin (inlined)  the rest
 *
 * Usage: inlined SECONDS PERCENT_A
 *   SECONDS    CPU seconds to burn, fractional ok.
 *   PERCENT_A  0..100: the share of it spent in hot_a; each function measures its own thread
 *              CPU time in ~1 ms slices.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))

volatile unsigned long sink;

static long long cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline __attribute__((always_inline)) unsigned long inl_spin(unsigned long n)
{
    unsigned long x = sink;
    for (unsigned long i = 0; i < n; i++)
        x = x * 2862933555777941757UL + 3037000493UL;
    return x;
}

NOINLINE void hot_a(long long ns)
{
    long long end = cpu_ns() + ns;
    while (cpu_ns() < end) {
        unsigned long x = sink;
        for (int i = 0; i < 2000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
        sink = x;
    }
}

NOINLINE void outer_b(long long ns)
{
    long long end = cpu_ns() + ns;
    while (cpu_ns() < end)
        sink = inl_spin(2000);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: inlined SECONDS PERCENT_A\n");
        return 2;
    }
    long long total = (long long)(atof(argv[1]) * 1e9);
    long long pct = atoll(argv[2]);
    long long slice = 1000000;
    long long start = cpu_ns();
    while (cpu_ns() - start < total) {
        if (pct > 0)
            hot_a(slice * pct / 100);
        if (pct < 100)
            outer_b(slice * (100 - pct) / 100);
    }
    return 0;
}
