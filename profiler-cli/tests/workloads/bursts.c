/*
 * bursts.c - one thread busy in bursts on a schedule of its own, measuring itself.
 *
 *   bursts OUTFILE PHASE SECONDS...
 *
 * Waits until the UNIX time is PHASE seconds past a multiple of 5 (fractions allowed: a
 * phase such as 2.37 keeps every edge of the schedule off the whole seconds and off the
 * 5-s boundaries), then runs the schedule: SECONDS alternate busy and paused, busy first
 * (`bursts out 2.37 8 20 8`: 8 s busy, 20 s paused, 8 s busy). Busy, the main thread spins in
 * burn() until the period's end (CLOCK_REALTIME); paused, it sleeps until it (an absolute
 * clock_nanosleep, so the edges are where the schedule says). OUTFILE gets a line per busy
 * period, "busy START END CPU_NS": its start and end (UNIX seconds, 9 decimals) and the CPU
 * time the thread used in it (CLOCK_THREAD_CPUTIME_ID), and a line per wall-clock second it
 * was busy in, "second UNIX_SECOND CPU_NS" (the CPU time it used in the part of that second
 * inside the busy period), so that a profile's cores can be judged, second by second, against
 * what the thread got on a shared machine.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))

volatile unsigned long sink;

static long long clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(long long realtime_ns)
{
    struct timespec ts = {realtime_ns / 1000000000LL, realtime_ns % 1000000000LL};
    while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

/* The CPU time used in each wall-clock second while busy: (second, ns), in order. */
static long long sec_of[4096], cpu_in[4096];
static int seconds;

static void note_second(long long second, long long cpu_ns)
{
    if (seconds > 0 && sec_of[seconds - 1] == second) {
        cpu_in[seconds - 1] += cpu_ns;
    } else if (seconds < 4096) {
        sec_of[seconds] = second;
        cpu_in[seconds++] = cpu_ns;
    }
}

NOINLINE void burn(long long until_ns)
{
    unsigned long x = sink;
    long long now = clock_ns(CLOCK_REALTIME), cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    long long second = now / 1000000000LL;
    while (now < until_ns) {
        for (int i = 0; i < 20000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
        now = clock_ns(CLOCK_REALTIME);
        if (now / 1000000000LL != second || now >= until_ns) {
            long long c = clock_ns(CLOCK_THREAD_CPUTIME_ID);
            note_second(second, c - cpu);
            cpu = c;
            second = now / 1000000000LL;
        }
    }
    sink = x;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s OUTFILE PHASE SECONDS...\n", argv[0]);
        return 2;
    }
    FILE *out = fopen(argv[1], "w");
    if (!out) {
        perror("fopen");
        return 2;
    }
    long long phase = (long long)(atof(argv[2]) * 1e9);
    long long five = 5000000000LL;
    long long now = clock_ns(CLOCK_REALTIME);
    long long at = now - now % five + phase;
    while (at < now + 200000000LL)
        at += five;
    sleep_until(at);
    for (int i = 3; i < argc; i++) {
        long long end = at + (long long)(atof(argv[i]) * 1e9);
        if ((i - 3) % 2 == 0) {
            long long cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
            burn(end);
            cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
            fprintf(out, "busy %lld.%09lld %lld.%09lld %lld\n", at / 1000000000LL,
                    at % 1000000000LL, end / 1000000000LL, end % 1000000000LL, cpu);
        } else {
            sleep_until(end);
        }
        at = end;
    }
    for (int k = 0; k < seconds; k++)
        fprintf(out, "second %lld %lld\n", sec_of[k], cpu_in[k]);
    return fclose(out) == 0 ? 0 : 2;
}
