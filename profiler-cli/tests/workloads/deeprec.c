/*
 * deeprec.c - CPU time at the bottom of a deep recursion with big frames.
 *
 *   main -> recurse x DEPTH -> bottom      (bottom burns the CPU)
 *
 * Every recurse frame holds a 256-byte array that is written and read, so a
 * frame is ~300 bytes: at the default depth of 110 the user stack below main
 * is ~33 KiB, well over a 16 KiB stack copy, while the frame-pointer chain
 * (built with frame pointers) is ~115 entries, within the kernel's default
 * kernel.perf_event_max_stack of 127.  So a DWARF unwind of the copy runs out
 * inside the recursion, and the kernel's frame-pointer chain reaches main.
 *
 * Usage: deeprec SECONDS [DEPTH]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))

volatile unsigned long sink;
static double deadline;

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* burns ~20 ms between clock reads; returns whether the time is up */
NOINLINE int bottom(void)
{
    unsigned long x = sink;
    for (unsigned long i = 0; i < 20000000UL; i++)
        x = x * 2862933555777941757UL + 3037000493UL;
    sink = x;
    return cpu_seconds() >= deadline;
}

NOINLINE int recurse(int depth)
{
    volatile unsigned char pad[256];
    pad[depth & 255] = (unsigned char)depth;
    int done;
    if (depth <= 1) {
        do
            done = bottom();
        while (!done);
    } else {
        done = recurse(depth - 1);
    }
    /* reading pad after the call: no tail call, the frame stays */
    return done + pad[depth & 255] * 0;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 2.0;
    int depth = argc > 2 ? atoi(argv[2]) : 110;
    deadline = seconds;
    int done = recurse(depth);
    printf("done %d\n", done);
    return 0;
}
