/*
 * waits.c - a thread with a known split of wall-clock time between running and waiting,
 * for off-CPU and wall-clock profiles.
 *
 *   waits split SECONDS OUTFILE [--libc] [--rename]
 *     The main thread (comm "waits") runs rounds of about 10 ms for SECONDS of wall time:
 *       main -> round -> spin        ~20 %  on CPU
 *       main -> round -> nap         ~30 %  in nanosleep
 *       main -> round -> wait_pipe   ~50 %  blocked reading a pipe a second thread
 *                                          ("feeder") writes to after a delay
 *     each call's length randomly varied by +-50 %. Every function measures the wall time it
 *     took itself (CLOCK_MONOTONIC around its body) and OUTFILE gets
 *     "spin NS\nnap NS\nwait_pipe NS\n".
 *     The system calls are made inline (no C library wrapper between the function and the
 *     kernel), so that a frame-pointer walk sees the function that waits; with --libc they
 *     go through the C library's read() and nanosleep() (for DWARF unwinding). With
 *     --rename the main thread names itself "waits-renamed" (prctl PR_SET_NAME) right after
 *     it starts and "waits-again" a second later.
 *
 *   waits busy SECONDS OUTFILE RATE
 *     The split above in rounds five times shorter (about 2 ms: some 1000 switches a second
 *     of its own), beside two threads (comm "pinger" and "ponger") passing a byte back and
 *     forth through pipes, paced in 1 ms batches to about RATE switches a second together:
 *     a switch-heavy process whose quiet thread's split is known.
 *
 *   waits lock SECONDS
 *     Four threads (comm "locker") contend on one mutex for SECONDS: each takes it in
 *     take_lock and holds it about 1 ms (hold); the others wait in the kernel's futex wait.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

static int use_libc;
static long long round_ns = 10000000;
static int req_pipe[2], data_pipe[2];
static long long measured[3];
static unsigned long rng_state = 0x9e3779b97f4a7c15UL;
volatile unsigned long sink;
volatile unsigned long calls_after;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* `base` scaled by a random factor in [0.5, 1.5). */
static long long jitter(long long base)
{
    unsigned long x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    return base * (512 + (long long)((x >> 20) % 1024)) / 1024;
}

NOINLINE void spin(long long ns)
{
    long long t0 = now_ns(), end = t0 + ns;
    unsigned long x = sink;
    while (now_ns() < end)
        for (int i = 0; i < 1000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
    measured[0] += now_ns() - t0;
}

NOINLINE void nap(long long ns)
{
    long long t0 = now_ns();
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
#if defined(__x86_64__)
    if (!use_libc) {
        long ret;
        __asm__ volatile("syscall"
                         : "=a"(ret)
                         : "a"((long)SYS_nanosleep), "D"(&ts), "S"(0L)
                         : "rcx", "r11", "memory");
        (void)ret;
    } else
#endif
        nanosleep(&ts, NULL);
    measured[1] += now_ns() - t0;
    calls_after++;
}

NOINLINE void wait_pipe(long long ns)
{
    long long t0 = now_ns();
    long long delay = ns;
    char c;
    if (write(req_pipe[1], &delay, sizeof delay) != sizeof delay)
        exit(3);
#if defined(__x86_64__)
    if (!use_libc) {
        long ret;
        do {
            __asm__ volatile("syscall"
                             : "=a"(ret)
                             : "a"((long)SYS_read), "D"((long)data_pipe[0]), "S"(&c), "d"(1L)
                             : "rcx", "r11", "memory");
        } while (ret != 1);
    } else
#endif
        while (read(data_pipe[0], &c, 1) != 1) {
        }
    measured[2] += now_ns() - t0;
    calls_after++;
}

NOINLINE void round_once(void)
{
    spin(jitter(round_ns / 5));
    nap(jitter(round_ns * 3 / 10));
    wait_pipe(jitter(round_ns / 2));
    calls_after++;
}

/* Sleeps the delay each request asks for, then writes a byte; ends when the pipe closes. */
static void *feeder(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, "feeder");
    long long delay;
    while (read(req_pipe[0], &delay, sizeof delay) == sizeof delay) {
        struct timespec ts = {delay / 1000000000LL, delay % 1000000000LL};
        nanosleep(&ts, NULL);
        if (write(data_pipe[1], "x", 1) != 1)
            break;
    }
    return NULL;
}

static int run_split(double seconds, const char *out)
{
    pthread_t t;
    if (pipe(req_pipe) || pipe(data_pipe) || pthread_create(&t, NULL, feeder, NULL))
        return 2;
    long long end = now_ns() + (long long)(seconds * 1e9);
    while (now_ns() < end)
        round_once();
    FILE *f = fopen(out, "w");
    if (!f)
        return 2;
    fprintf(f, "spin %lld\nnap %lld\nwait_pipe %lld\n", measured[0], measured[1], measured[2]);
    fclose(f);
    return 0;
}

static int ping[2], pong[2];
static double pong_rate;
static long long pong_end;

static void *ponger(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, "ponger");
    char c;
    while (read(ping[0], &c, 1) == 1)
        if (write(pong[1], &c, 1) != 1)
            break;
    return NULL;
}

/* Round trips through ponger, paced in 1 ms batches to pong_rate switches a second. */
static void *pinger(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, "pinger");
    long long start = now_ns(), trips = 0;
    char c = 'x';
    for (long long tick = start; tick < pong_end; tick += 1000000) {
        long long due = (long long)((double)(tick + 1000000 - start) / 1e9 * pong_rate / 2);
        for (; trips < due; trips++)
            if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
                exit(3);
        long long left = tick + 1000000 - now_ns();
        if (left > 0) {
            struct timespec ts = {0, left};
            nanosleep(&ts, NULL);
        }
    }
    close(ping[1]);
    return NULL;
}

static int run_busy(double seconds, const char *out, double rate)
{
    pthread_t a, b;
    pong_rate = rate;
    pong_end = now_ns() + (long long)(seconds * 1e9);
    round_ns /= 5;
    if (pipe(ping) || pipe(pong) || pthread_create(&b, NULL, ponger, NULL) ||
        pthread_create(&a, NULL, pinger, NULL))
        return 2;
    int ret = run_split(seconds, out);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return ret;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long long lock_end;

NOINLINE void hold(void)
{
    long long end = now_ns() + 1000000;
    unsigned long x = sink;
    while (now_ns() < end)
        x = x * 2862933555777941757UL + 3037000493UL;
    sink = x;
}

NOINLINE void take_lock(void)
{
    pthread_mutex_lock(&lock);
    hold();
    pthread_mutex_unlock(&lock);
    calls_after++;
}

static void *locker(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, "locker");
    while (now_ns() < lock_end)
        take_lock();
    return NULL;
}

static int run_lock(double seconds)
{
    pthread_t t[4];
    lock_end = now_ns() + (long long)(seconds * 1e9);
    for (int i = 0; i < 4; i++)
        if (pthread_create(&t[i], NULL, locker, NULL))
            return 2;
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    return 0;
}

/* --rename: the second rename, a second after the first (prctl is a plain system call). */
static void on_alarm(int sig)
{
    (void)sig;
    prctl(PR_SET_NAME, "waits-again");
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "split")) {
        for (int i = 4; i < argc; i++) {
            if (!strcmp(argv[i], "--libc")) {
                use_libc = 1;
            } else if (!strcmp(argv[i], "--rename")) {
                prctl(PR_SET_NAME, "waits-renamed");
                signal(SIGALRM, on_alarm);
                alarm(1);
            }
        }
        return run_split(atof(argv[2]), argv[3]);
    }
    if (argc >= 5 && !strcmp(argv[1], "busy"))
        return run_busy(atof(argv[2]), argv[3], atof(argv[4]));
    if (argc >= 3 && !strcmp(argv[1], "lock"))
        return run_lock(atof(argv[2]));
    fprintf(stderr, "usage: waits split SECONDS OUTFILE [--libc] [--rename] | waits busy SECONDS OUTFILE "
                    "RATE | waits lock SECONDS\n");
    return 2;
}
