/*
 * forker.c - parent that burns CPU in parent_hot, then forks and execs a
 * child binary (burner), waits for it, and exits.
 *
 * Usage: forker BURNER_PATH PARENT_SECONDS CHILD_SECONDS
 *
 * The child runs "burner CHILD_SECONDS" and so shows up under the comm
 * "burner"; the parent's samples are under "forker".
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

volatile unsigned long sink;

static long long thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void parent_hot(double seconds)
{
    long long end = thread_cpu_ns() + (long long)(seconds * 1e9);
    unsigned long x = sink;
    while (thread_cpu_ns() < end)
        for (int i = 0; i < 200000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s BURNER PARENT_SECONDS CHILD_SECONDS\n", argv[0]);
        return 2;
    }
    parent_hot(atof(argv[2]));
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        execl(argv[1], "burner", argv[3], (char *)NULL);
        perror("execl");
        _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) < 0) {
        perror("waitpid");
        return 2;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
