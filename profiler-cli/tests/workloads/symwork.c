/*
 * symwork.c - burns CPU in three always_inline functions nested in one
 * noinline function: main -> hot -> inl1 -> inl2 -> inl3 (the loop is in inl3).
 * Used by the symbolization tests (tests/integration/symbols.rs), built with
 * -O2 -g and then stripped, split, compressed or deleted in various ways.
 *
 *   symwork SECONDS|forever
 *
 * -DVARIANT=N changes one constant: a different build of the "same" program.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef VARIANT
#define VARIANT 0
#endif

volatile unsigned long sink;

static long long thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline __attribute__((always_inline)) unsigned long inl3(unsigned long x, int n)
{
    for (int i = 0; i < n; i++) {
        x = x * 2862933555777941757UL + 3037000493UL + VARIANT;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

static inline __attribute__((always_inline)) unsigned long inl2(unsigned long x, int n)
{
    return inl3(x ^ 0x55, n);
}

static inline __attribute__((always_inline)) unsigned long inl1(unsigned long x, int n)
{
    return inl2(x + 7, n);
}

/* Burns CPU for `seconds` of thread CPU time (forever when negative). */
__attribute__((noinline)) void hot(double seconds)
{
    long long end = thread_cpu_ns() + (long long)(seconds * 1e9);
    unsigned long x = sink;
    while (seconds < 0 || thread_cpu_ns() < end)
        x = inl1(x, 2000000);
    sink = x;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SECONDS|forever\n", argv[0]);
        return 2;
    }
    hot(strcmp(argv[1], "forever") == 0 ? -1.0 : atof(argv[1]));
    return 0;
}
