/*
 * proccpu PID: the CPU time of process PID so far, in nanoseconds, from its process CPU-time
 * clock (every thread, those that ended included), for bench/lib.sh cpu_snapshot. Built
 * static: it runs for well under a millisecond and maps no shared library, so a profiler
 * being measured has next to nothing new to name when it runs (a python3 doing the same made
 * profilerd name libpython's frames inside the window it measured).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: proccpu PID\n");
        return 2;
    }
    unsigned pid = (unsigned)strtoul(argv[1], NULL, 10);
    /* MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED) of the kernel's posix-timers.h. */
    clockid_t clock = (clockid_t)((~pid << 3) | 2u);
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0) {
        perror("proccpu: clock_gettime");
        return 1;
    }
    printf("%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    return 0;
}
