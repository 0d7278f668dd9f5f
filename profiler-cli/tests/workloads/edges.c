/*
 * edges.c - CPU spent where a DWARF unwinder meets its edge cases.
 *
 * Usage: edges MODE SECONDS
 *
 *   thread  a pthread burns CPU in thread_body -> thread_hot: its stacks must end at the
 *           thread's first frame (start_thread / clone3), not in garbage.
 *   signal  main -> signal_loop spins while SIGPROF (every 2 ms of process CPU) runs
 *           signal_handler -> signal_hot for about a third of the time: stacks in the handler
 *           must go through the kernel's signal frame (__restore_rt) back to signal_loop
 *           and main.
 *   vdso    main -> vdso_loop calls clock_gettime(CLOCK_MONOTONIC) back to back: most
 *           samples land in the vDSO, whose stacks must reach vdso_loop and main.
 *   plt     main -> plt_loop calls edge_tiny() of libedges.so through the PLT: some
 *           samples land in the PLT stub itself, and must still reach plt_loop and main.
 *
 * Built without frame pointers, so only DWARF call-frame information can unwind it.
 * Every mode prints "MODE CPU_NS" of the process CPU time it burnt.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))

int edge_tiny(int x); /* libedges.so */

volatile unsigned long sink;
static double seconds;

static long long cpu_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int burnt_enough(clockid_t clock, long long start)
{
    return cpu_ns(clock) - start >= (long long)(seconds * 1e9);
}

NOINLINE static void spin(unsigned long n)
{
    for (unsigned long i = 0; i < n; i++)
        sink += i * 7;
}

/* --- thread ------------------------------------------------------------------------- */

NOINLINE void thread_hot(void)
{
    spin(200000);
}

NOINLINE void *thread_body(void *arg)
{
    long long start = cpu_ns(CLOCK_THREAD_CPUTIME_ID);
    (void)arg;
    while (!burnt_enough(CLOCK_THREAD_CPUTIME_ID, start))
        thread_hot();
    return NULL;
}

NOINLINE static void run_thread(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, thread_body, NULL) != 0) {
        perror("pthread_create");
        exit(1);
    }
    pthread_join(t, NULL);
}

/* --- signal ------------------------------------------------------------------------- */

/* A third of each 2 ms SIGPROF period, by the thread's CPU clock: a fixed count of loops
 * would, on a slower CPU, outlast the period, and the handler would then run for ever. */
NOINLINE void signal_hot(void)
{
    long long start = cpu_ns(CLOCK_THREAD_CPUTIME_ID);
    while (cpu_ns(CLOCK_THREAD_CPUTIME_ID) - start < 700000)
        spin(20000);
}

NOINLINE void signal_handler(int sig)
{
    (void)sig;
    signal_hot();
}

NOINLINE void signal_loop(long long start)
{
    while (!burnt_enough(CLOCK_PROCESS_CPUTIME_ID, start))
        spin(100000);
}

NOINLINE static void run_signal(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = signal_handler;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval it = {{0, 2000}, {0, 2000}};
    long long start = cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
    setitimer(ITIMER_PROF, &it, NULL);
    signal_loop(start);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
}

/* --- vdso --------------------------------------------------------------------------- */

NOINLINE void vdso_loop(long long start)
{
    struct timespec ts;
    do {
        for (int i = 0; i < 1000; i++) {
            clock_gettime(CLOCK_MONOTONIC, &ts);
            sink += (unsigned long)ts.tv_nsec;
        }
    } while (!burnt_enough(CLOCK_PROCESS_CPUTIME_ID, start));
}

/* --- plt ---------------------------------------------------------------------------- */

NOINLINE void plt_loop(long long start)
{
    do {
        for (int i = 0; i < 100000; i++)
            sink += (unsigned long)edge_tiny(i);
    } while (!burnt_enough(CLOCK_PROCESS_CPUTIME_ID, start));
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: edges thread|signal|vdso|plt SECONDS\n");
        return 2;
    }
    seconds = atof(argv[2]);
    long long start = cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
    if (strcmp(argv[1], "thread") == 0)
        run_thread();
    else if (strcmp(argv[1], "signal") == 0)
        run_signal();
    else if (strcmp(argv[1], "vdso") == 0)
        vdso_loop(start);
    else if (strcmp(argv[1], "plt") == 0)
        plt_loop(start);
    else {
        fprintf(stderr, "edges: unknown mode %s\n", argv[1]);
        return 2;
    }
    printf("%s %lld\n", argv[1], cpu_ns(CLOCK_PROCESS_CPUTIME_ID) - start);
    return 0;
}
