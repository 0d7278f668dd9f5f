/*
 * switcher.c - a load of context switches at a set rate, for bench/offcpu.sh.
 *
 *   switcher RATE SECONDS
 *
 * Two threads pass a byte back and forth through two pipes, each blocking in read() until the
 * other writes: every round trip switches each thread out once. The main thread paces the
 * round trips in 1 ms batches so that the two threads switch out about RATE times a second
 * together (plus the pacing sleeps), for SECONDS. Prints the round trips done.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ping[2], pong[2];

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *echo(void *arg)
{
    (void)arg;
    char c;
    while (read(ping[0], &c, 1) == 1)
        if (write(pong[1], &c, 1) != 1)
            break;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: switcher RATE SECONDS\n");
        return 2;
    }
    double rate = atof(argv[1]), seconds = atof(argv[2]);
    pthread_t t;
    if (pipe(ping) || pipe(pong) || pthread_create(&t, NULL, echo, NULL))
        return 2;
    long long start = now_ns(), end = start + (long long)(seconds * 1e9);
    long long trips = 0;
    char c = 'x';
    for (long long tick = start; tick < end; tick += 1000000) {
        /* Round trips due by the end of this millisecond. */
        long long due = (long long)((double)(tick + 1000000 - start) / 1e9 * rate / 2);
        for (; trips < due; trips++)
            if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
                return 3;
        long long left = tick + 1000000 - now_ns();
        if (left > 0) {
            struct timespec ts = {0, left};
            nanosleep(&ts, NULL);
        }
    }
    close(ping[1]);
    pthread_join(t, NULL);
    printf("%lld\n", trips);
    return 0;
}
