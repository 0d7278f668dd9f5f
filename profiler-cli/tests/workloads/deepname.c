/* deepname: THREADS threads (default 2) recurse to a random depth up to 1000 through one
 * function whose name is F (built with -DF=<a 4000-character name>), and keep renaming
 * themselves, so that nearly every sample is a distinct deep stack of long names. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

volatile long sink;

__attribute__((noinline)) void F(int depth)
{
    if (depth > 0)
        F(depth - 1);
    else
        for (int i = 0; i < 200000; i++)
            sink += i;
    sink++;
}

static void *run(void *arg)
{
    unsigned seed = (unsigned)(long)arg;
    char name[16];
    for (unsigned k = 0;; k++) {
        if (!(k & 15)) {
            snprintf(name, sizeof name, "d%ld.%u", (long)arg, k);
            pthread_setname_np(pthread_self(), name);
        }
        F(1 + rand_r(&seed) % 1000);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t t;
    long threads = argc > 1 ? atol(argv[1]) : 2;
    for (long i = 0; i < threads; i++)
        pthread_create(&t, NULL, run, (void *)i);
    pause();
    return 0;
}
