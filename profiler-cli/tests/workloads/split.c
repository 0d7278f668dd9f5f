/*
 * split.c - CPU workload with a known split of CPU time across three paths.
 *
 *   main -> work -> hot_a          ~60 %
 *   main -> work -> mid -> hot_b   ~30 %
 *   main -> hot_c                  ~10 %
 *
 * The work is interleaved in ~1 ms slices (each call's length randomly
 * varied by +-50 % so that it cannot alias with the sampling period).  Every hot function measures the
 * thread CPU time it consumed itself (CLOCK_THREAD_CPUTIME_ID around its
 * loop), so the profiler's shares can be judged against what was measured
 * rather than against wall-clock assumptions.
 *
 * Usage:
 *   split [--threads] [--rename] SECONDS|forever [OUTFILE]
 *
 *   SECONDS   CPU seconds to burn (per thread with --threads), fractional ok.
 *   forever   run until SIGINT/SIGTERM; OUTFILE is rewritten every ~100 ms
 *             and once more when the signal arrives.
 *   --threads two pthreads: one hot_a-heavy (6:3:1), one hot_b-heavy (1:6:3);
 *             the measurement is summed over both threads.
 *   --rename  the main thread names itself "split-renamed" (prctl PR_SET_NAME) right after
 *             it starts, and "split-again" a second later, as servers and setproctitle do.
 *   OUTFILE   where to write "hot_a NS\nhot_b NS\nhot_c NS\n" (default stdout).
 *
 * Every hot function calls clock_gettime, so it is not a leaf function and
 * keeps a frame: the frame-pointer unwind does not lose its caller.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

static volatile sig_atomic_t stop_requested;
volatile unsigned long sink;
volatile unsigned long calls_after;
/* loop iterations per "unit" of 0.1 ms, calibrated at start */
static unsigned long unit_iters = 100000;

static __thread long long t_ns[3];
static __thread unsigned long rng_state = 0x9e3779b97f4a7c15UL;
static long long total_ns[3];
static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *out_path;

static long long thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/*
 * Random factor in [512, 1536) / 1024 applied to every call's length: slices
 * of exactly equal length would alias with a sampling period of about the
 * same length (999 Hz ~ 1 ms) and bias the sample counts.
 */
static unsigned long jitter(unsigned long iters)
{
    unsigned long x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    return iters * (512 + (x >> 20) % 1024) / 1024;
}

NOINLINE void hot_a(unsigned long units)
{
    long long t0 = thread_cpu_ns();
    unsigned long x = sink, n = jitter(units * unit_iters);
    for (unsigned long i = 0; i < n; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
    t_ns[0] += thread_cpu_ns() - t0;
}

NOINLINE void hot_b(unsigned long units)
{
    long long t0 = thread_cpu_ns();
    unsigned long x = sink, n = jitter(units * unit_iters);
    for (unsigned long i = 0; i < n; i++)
        x = x * 2862933555777941757UL + 3037000493UL;
    sink = x;
    t_ns[1] += thread_cpu_ns() - t0;
}

NOINLINE void hot_c(unsigned long units)
{
    long long t0 = thread_cpu_ns();
    unsigned long x = sink, n = jitter(units * unit_iters);
    for (unsigned long i = 0; i < n; i++)
        x = x * 3202034522624059733UL + 4354685564936845319UL;
    sink = x;
    t_ns[2] += thread_cpu_ns() - t0;
}

NOINLINE void mid(unsigned long b_units)
{
    hot_b(b_units);
    calls_after++; /* no tail call: keep mid on the stack */
}

NOINLINE void work(unsigned long a_units, unsigned long b_units)
{
    hot_a(a_units);
    mid(b_units);
    calls_after++;
}

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

/* --rename: the second rename, a second after the first (prctl is a plain system call). */
static void on_alarm(int sig)
{
    (void)sig;
    prctl(PR_SET_NAME, "split-again");
}

static void calibrate(void)
{
    /* time a short run of the same kind of loop; take the fastest of 3 */
    long long best = -1;
    for (int r = 0; r < 3; r++) {
        long long t0 = thread_cpu_ns();
        unsigned long x = sink;
        for (unsigned long i = 0; i < 20000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
        sink = x;
        long long dt = thread_cpu_ns() - t0;
        if (best < 0 || dt < best)
            best = dt;
    }
    if (best <= 0)
        best = 1;
    unit_iters = (unsigned long)(20000.0 * 100000.0 / (double)best);
    if (unit_iters < 1000)
        unit_iters = 1000;
}

static void write_results(void)
{
    long long ns[3];
    pthread_mutex_lock(&total_lock);
    memcpy(ns, total_ns, sizeof ns);
    pthread_mutex_unlock(&total_lock);

    FILE *f = stdout;
    char tmp[4096];
    /* Written beside and renamed over OUTFILE, so readers never see half a file; but never
     * renamed over something that is not a regular file (split 5 /dev/null would replace the
     * device with a file). */
    struct stat st;
    int atomic = out_path && (stat(out_path, &st) != 0 || S_ISREG(st.st_mode));
    if (out_path && !atomic) {
        f = fopen(out_path, "w");
        if (!f) {
            perror("fopen");
            exit(2);
        }
    } else if (out_path) {
        snprintf(tmp, sizeof tmp, "%s.tmp", out_path);
        f = fopen(tmp, "w");
        if (!f) {
            perror("fopen");
            exit(2);
        }
    }
    fprintf(f, "hot_a %lld\nhot_b %lld\nhot_c %lld\n", ns[0], ns[1], ns[2]);
    if (out_path) {
        fclose(f);
        if (atomic)
            rename(tmp, out_path);
    } else {
        fflush(f);
    }
}

/* publish this thread's accumulators into the totals and reset them */
static void flush_thread(void)
{
    pthread_mutex_lock(&total_lock);
    for (int i = 0; i < 3; i++) {
        total_ns[i] += t_ns[i];
        t_ns[i] = 0;
    }
    pthread_mutex_unlock(&total_lock);
}

struct weights {
    unsigned long a, b, c;
    double seconds; /* < 0: forever */
};

/* the slice loop; a macro (not even an inline function, which DWARF would show as a frame)
 * so that main calls work/hot_c directly */
#define run(w, publisher)                                                                  \
    do {                                                                                   \
        long long target_ = (w)->seconds < 0 ? -1 : (long long)((w)->seconds * 1e9);       \
        long long done_ = 0;                                                               \
        unsigned long slices_ = 0;                                                         \
        while (!stop_requested && (target_ < 0 || done_ < target_)) {                      \
            work((w)->a, (w)->b);                                                          \
            hot_c((w)->c);                                                                 \
            done_ = t_ns[0] + t_ns[1] + t_ns[2];                                           \
            if (target_ < 0 && ++slices_ % 100 == 0) {                                     \
                /* forever mode: publish periodically */                                   \
                flush_thread();                                                            \
                done_ = 0;                                                                 \
                if (publisher)                                                             \
                    write_results();                                                       \
            }                                                                              \
        }                                                                                  \
        flush_thread();                                                                    \
    } while (0)

static void *worker(void *arg)
{
    rng_state ^= (unsigned long)(size_t)arg * 0x2545f4914f6cdd1dUL;
    const struct weights *w = arg;
    run(w, 0);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = 0, rename_self = 0, argi = 1;
    for (; argi < argc && strncmp(argv[argi], "--", 2) == 0; argi++) {
        if (strcmp(argv[argi], "--threads") == 0)
            threads = 1;
        else if (strcmp(argv[argi], "--rename") == 0)
            rename_self = 1;
        else
            break;
    }
    if (argi >= argc) {
        fprintf(stderr, "usage: %s [--threads] [--rename] SECONDS|forever [OUTFILE]\n", argv[0]);
        return 2;
    }
    if (rename_self) {
        prctl(PR_SET_NAME, "split-renamed");
        signal(SIGALRM, on_alarm);
        alarm(1);
    }
    double seconds = strcmp(argv[argi], "forever") == 0 ? -1.0 : atof(argv[argi]);
    if (argi + 1 < argc)
        out_path = argv[argi + 1];

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    calibrate();

    if (threads) {
        struct weights w[2] = {{6, 3, 1, seconds}, {1, 6, 3, seconds}};
        pthread_t th[2];
        for (int i = 0; i < 2; i++)
            if (pthread_create(&th[i], NULL, worker, &w[i]) != 0) {
                perror("pthread_create");
                return 2;
            }
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
    } else {
        struct weights w = {6, 3, 1, seconds};
        struct weights *wp = &w;
        run(wp, 1);
    }
    write_results();
    return 0;
}
