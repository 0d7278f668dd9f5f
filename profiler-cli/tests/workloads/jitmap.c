/*
 * jitmap.c - "JIT" code: copies a tiny counting loop into anonymous
 * executable memory, writes /tmp/perf-PID.map naming it `jitted_hot` (as
 * node --perf-basic-prof or perf-map-agent do), and calls it until SECONDS of
 * CPU time have passed. The map is left in place (a profiler reads it after the
 * process exits); whoever runs this removes it (the pid is printed first: `pid N`).
 *
 *   jitmap SECONDS
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static long long thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* x86-64: mov rax, rdi; loop: dec rax; jnz loop; ret */
static const unsigned char code[] = {
    0x48, 0x89, 0xf8,       /* mov  %rdi,%rax */
    0x48, 0xff, 0xc8,       /* dec  %rax      */
    0x75, 0xfb,             /* jnz  -5        */
    0xc3,                   /* ret            */
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[1]);
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    size_t len = 4096;
    unsigned char *mem = mmap(NULL, len, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    /* Some padding first, so the function does not start at the mapping. */
    memset(mem, 0xcc, len);
    unsigned char *fn = mem + 256;
    memcpy(fn, code, sizeof code);
    if (mprotect(mem, len, PROT_READ | PROT_EXEC) != 0) {
        perror("mprotect");
        return 1;
    }
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    fprintf(f, "%lx %zx jitted_hot\n", (unsigned long)fn, sizeof code);
    fclose(f);

    unsigned long (*jitted)(unsigned long) = (unsigned long (*)(unsigned long))fn;
    long long end = thread_cpu_ns() + (long long)(seconds * 1e9);
    unsigned long total = 0;
    while (thread_cpu_ns() < end)
        total += jitted(20000000);
    printf("%lu\n", total);
    return 0;
}
