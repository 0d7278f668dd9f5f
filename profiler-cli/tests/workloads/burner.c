/*
 * burner.c - burns CPU in child_hot for the CPU seconds given as argv[1].
 * Exec'd by forker; appears in profiles under the comm "burner".
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

static long long thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void child_hot(double seconds)
{
    long long end = thread_cpu_ns() + (long long)(seconds * 1e9);
    unsigned long x = sink;
    while (thread_cpu_ns() < end)
        for (int i = 0; i < 200000; i++)
            x = x * 2862933555777941757UL + 3037000493UL;
    sink = x;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CPU_SECONDS\n", argv[0]);
        return 2;
    }
    child_hot(atof(argv[1]));
    return 0;
}
