/*
 * cpuwrap.c - run a command and write the CPU time of its whole process tree.
 *
 *   cpuwrap OUTFILE COMMAND [ARGS...]
 *
 * Forks, execs COMMAND, waits for it and writes one line to OUTFILE:
 *
 *   WALL_S USER_S SYS_S EXIT
 *
 * USER_S/SYS_S are the rusage of COMMAND and of every descendant it waited
 * for (microsecond resolution, unlike GNU time's %U/%S at 10 ms), plus
 * cpuwrap's own (tiny) CPU time.  Exits with COMMAND's exit status.
 *
 * bench/record.sh uses it twice per profiler run: around the profiler (whose
 * rusage then includes the workload it launched and reaped) and around the
 * workload inside the profiler's `-- COMMAND`; the difference is the
 * profiler's own CPU time.  SIGINT/SIGTERM are forwarded to COMMAND.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile pid_t child;

static void forward(int sig)
{
    if (child > 0)
        kill(child, sig);
}

static double tv(struct timeval t)
{
    return (double)t.tv_sec + (double)t.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s OUTFILE COMMAND [ARGS...]\n", argv[0]);
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        fprintf(stderr, "cpuwrap: exec %s: %s\n", argv[2], strerror(errno));
        _exit(127);
    }
    child = pid;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            perror("waitpid");
            return 2;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);

    struct rusage self, kids;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &kids);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

    FILE *f = fopen(argv[1], "w");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    fprintf(f, "%.6f %.6f %.6f %d\n",
            (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
            tv(self.ru_utime) + tv(kids.ru_utime),
            tv(self.ru_stime) + tv(kids.ru_stime), code);
    fclose(f);
    return code;
}
