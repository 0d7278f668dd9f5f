/*
 * longnames.c - deep stacks through a function with a very long name, on threads that keep
 * renaming themselves, so that nearly every sample is a distinct folded line whose text is
 * depth x name length (a daemon's query must bound that while building it).
 *
 *   main -> THREADS x run -> LONG_NAME x (1..MAX_DEPTH) -> burn
 *
 * Build with -DLONG_NAME=<a long identifier> (tens of thousands of characters). Usage: longnames THREADS
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_DEPTH 120

volatile unsigned long sink;

__attribute__((noinline)) void LONG_NAME(int depth)
{
    if (depth > 0)
        LONG_NAME(depth - 1);
    else
        for (int i = 0; i < 100000; i++)
            sink += i;
    sink++;
}

static void *run(void *arg)
{
    unsigned seed = (unsigned)(long)arg;
    char name[16];
    for (unsigned k = 0;; k++) {
        if (k % 8 == 0) {
            snprintf(name, sizeof name, "n%ld.%u", (long)arg, k);
            pthread_setname_np(pthread_self(), name);
        }
        LONG_NAME(1 + rand_r(&seed) % MAX_DEPTH);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long threads = argc > 1 ? atol(argv[1]) : 1;
    pthread_t t;
    for (long i = 0; i < threads; i++)
        pthread_create(&t, NULL, run, (void *)i);
    pause();
    return 0;
}
