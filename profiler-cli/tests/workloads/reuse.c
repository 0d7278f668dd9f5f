/*
 * reuse.c - two processes on one pid: A (binary reuse_a, hot function a_hot) runs and exits,
 * then B (binary reuse_b, hot function b_hot) is started on the very same pid.
 *
 * Built twice from this file, with the same flags: reuse_a as is and reuse_b with -DREUSE_B.
 * The two binaries differ only in the hot function's name (a_hot / b_hot, same length), so
 * their code is laid out alike, and A and B are started without address-space randomization
 * (as non-PIE and static binaries always are): B's samples carry the same addresses as A's,
 * and only the process model's knowledge of which binary the pid runs *now* names them right.
 *
 *   reuse_X run SECONDS            burn SECONDS of CPU in X_hot, then exit
 *   reuse_a drive REUSE_B CYCLES A_SECONDS B_SECONDS OUTFILE
 *
 * The driver (comm reuse_drv) runs CYCLES times: start A (itself, `run A_SECONDS`), wait for
 * it, start B (`REUSE_B run B_SECONDS`) on A's pid, wait for it. B is placed on the pid with
 * clone3(set_tid) (root, Linux 5.5+), else by writing /proc/sys/kernel/ns_last_pid and
 * forking until the pid comes back (bounded). OUTFILE (written atomically) gets one line per
 * cycle:
 *
 *   cycle N A_PID B_PID METHOD      METHOD: clone3 | ns_last_pid | failed
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef REUSE_B
#define HOT b_hot
#else
#define HOT a_hot
#endif

volatile unsigned long sink;

static long long thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void HOT(double seconds)
{
    long long end = thread_cpu_ns() + (long long)(seconds * 1e9);
    unsigned long x = sink;
    while (thread_cpu_ns() < end)
        for (int i = 0; i < 20000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
}

/* In the child: no address-space randomization, then exec PATH run SECONDS. */
static void exec_run(const char *path, const char *seconds)
{
    personality(ADDR_NO_RANDOMIZE);
    execl(path, path, "run", seconds, (char *)NULL);
    _exit(127);
}

static int wait_ok(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Fork a child on pid `want` that execs PATH run SECONDS; returns its pid (or -1) and the
 * method that placed it. */
static pid_t spawn_on(pid_t want, const char *path, const char *seconds, const char **method)
{
    pid_t tid = want;
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.exit_signal = SIGCHLD;
    args.set_tid = (uint64_t)(uintptr_t)&tid;
    args.set_tid_size = 1;
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0)
        exec_run(path, seconds);
    if (pid > 0) {
        *method = "clone3";
        return (pid_t)pid;
    }
    fprintf(stderr, "reuse: clone3(set_tid=%d): %s; trying ns_last_pid\n", (int)want,
            strerror(errno));
    for (int attempt = 0; attempt < 100; attempt++) {
        FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");
        if (!f || fprintf(f, "%d", (int)want - 1) < 0 || fclose(f) != 0) {
            perror("reuse: /proc/sys/kernel/ns_last_pid");
            break;
        }
        pid_t p = fork();
        if (p == 0) {
            if (getpid() == want)
                exec_run(path, seconds);
            _exit(99);
        }
        if (p < 0)
            break;
        if (p == want) {
            *method = "ns_last_pid";
            return p;
        }
        waitpid(p, NULL, 0); /* another process took the pid first: try again */
    }
    *method = "failed";
    return -1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "run")) {
        HOT(atof(argv[2]));
        return 0;
    }
    if (argc != 7 || strcmp(argv[1], "drive")) {
        fprintf(stderr,
                "usage: %s run SECONDS\n"
                "       %s drive REUSE_B CYCLES A_SECONDS B_SECONDS OUTFILE\n",
                argv[0], argv[0]);
        return 2;
    }
    prctl(PR_SET_NAME, "reuse_drv");
    const char *reuse_b = argv[2];
    int cycles = atoi(argv[3]);
    const char *outfile = argv[6];
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        perror("reuse: readlink /proc/self/exe");
        return 1;
    }
    self[n] = 0;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", outfile);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        perror(tmp);
        return 1;
    }
    int rc = 0;
    for (int c = 0; c < cycles; c++) {
        pid_t a = fork();
        if (a == 0)
            exec_run(self, argv[4]);
        if (a < 0 || !wait_ok(a)) {
            fprintf(stderr, "reuse: A failed\n");
            rc = 1;
            break;
        }
        const char *method = "failed";
        pid_t b = spawn_on(a, reuse_b, argv[5], &method);
        if (b > 0 && !wait_ok(b)) {
            fprintf(stderr, "reuse: B failed\n");
            rc = 1;
        }
        fprintf(out, "cycle %d %d %d %s\n", c, (int)a, (int)b, method);
        if (b < 0)
            rc = 1;
    }
    if (fclose(out) != 0 || rename(tmp, outfile) != 0) {
        perror(outfile);
        return 1;
    }
    return rc;
}
