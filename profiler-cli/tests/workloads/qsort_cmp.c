/*
 * qsort_cmp.c - CPU time spent in a comparator called by the C library's qsort.
 *
 *   main -> qsort (libc: qsort_r / msort_with_tmp / ..., no frame pointers) -> cmp_slow
 *
 * Debian's libc is built without frame pointers, so a frame-pointer walk from
 * cmp_slow loses main; a DWARF unwind (libc's .eh_frame) keeps it.  cmp_slow
 * burns a few hundred ns per call so that almost every sample lands in it.
 *
 * Usage: qsort_cmp SECONDS     (CPU seconds to burn, fractional ok)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))
#define N 4096

volatile unsigned long sink;
static unsigned long keys[N];

NOINLINE int cmp_slow(const void *pa, const void *pb)
{
    unsigned long a = *(const unsigned long *)pa, b = *(const unsigned long *)pb;
    unsigned long x = sink;
    for (int i = 0; i < 400; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
    return a < b ? -1 : a > b;
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 2.0;
    unsigned long r = 0x9e3779b97f4a7c15UL;
    unsigned long rounds = 0;
    while (cpu_seconds() < seconds) {
        for (int i = 0; i < N; i++) {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            keys[i] = r;
        }
        qsort(keys, N, sizeof keys[0], cmp_slow);
        rounds++;
    }
    printf("%lu rounds\n", rounds);
    return 0;
}
