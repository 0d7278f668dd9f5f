/*
 * churn.c - process, binary, thread-name and JIT churn for soaking a whole-system recording.
 *
 *   churn drive SECONDS OUTFILE [RATE [DEPLOY_SECS]]
 *
 * For SECONDS, the driver keeps up, at once:
 *
 *  (a) execs: RATE times a second (default 50) it forks and execs this binary, through a
 *      symlink named churn_burn, in `burn` mode: ~5 ms of CPU in churn_child_hot, then exit;
 *  (b) deploys: every DEPLOY_SECS (default 2) it copies this binary to a new file
 *      DIR/churn_svc_NNN, starts it in `service` mode (service_hot: 10 ms of CPU every
 *      50 ms, forever), kills the previous generation and deletes its binary file;
 *  (c) renames: one process (symlink churn_names) whose 3 threads rename themselves every
 *      250 ms, cycling through RENAMES (names reused over and over), each burning ~4 ms in
 *      rename_hot under every name;
 *  (d) JIT (x86-64 only; skipped with a note elsewhere): one process (symlink churn_jit) that
 *      emits a new small spin-loop function every 250 ms into anonymous memory (written RW,
 *      then mprotect'ed RX), appends `START SIZE jit_fn_NNNN` to /tmp/perf-PID.map, and
 *      spends ~15% of a CPU calling the newest one, so the map keeps growing.
 *
 * Then it stops everything: the last service is killed and its binary deleted, so that no
 * deployed binary is left on disk nor mapped by any process; DIR and its symlinks are removed.
 * It writes OUTFILE (atomically) with what it did:
 *
 *   dir DIR
 *   execs N                  children started in burn mode
 *   exec_ok N                of which exited with status 0 (ran churn_child_hot)
 *   deploys N
 *   deployed PATH            one per generation, in order
 *   deleted PATH             one per generation, in order (all of them by the end)
 *   rename_names A B C D
 *   jit_pid PID | jit skipped MACHINE
 *   jit_map PATH             left in place for the profiler; whoever runs this removes it
 *   jit_functions N
 *   jit_fn NAME              one per function, in emission order
 *
 * Modes used by the driver (and runnable by hand): burn, service, rename, jit.
 * Build: cc -O1 -g -fno-omit-frame-pointer -pthread -o churn churn.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/utsname.h>
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

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_ns(long long ns)
{
    if (ns <= 0)
        return;
    struct timespec ts = {ns / 1000000000LL, ns % 1000000000LL};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Spins for `ns` of this thread's CPU time, inline: the function using it is the leaf. */
#define SPIN(ns)                                                                   \
    do {                                                                           \
        long long end_ = thread_cpu_ns() + (ns);                                   \
        unsigned long x_ = sink;                                                   \
        while (thread_cpu_ns() < end_)                                             \
            for (int i_ = 0; i_ < 20000; i_++)                                     \
                x_ = x_ * 6364136223846793005UL + 1442695040888963407UL;           \
        sink = x_;                                                                 \
    } while (0)

/* ------------------------------------------------------------------ the modes */

__attribute__((noinline)) void churn_child_hot(void)
{
    SPIN(5000000);
}

__attribute__((noinline)) void service_hot(void)
{
    SPIN(10000000);
}

__attribute__((noinline)) void rename_hot(void)
{
    SPIN(4000000);
}

static int burn_main(void)
{
    churn_child_hot();
    return 0;
}

static int service_main(void)
{
    for (;;) {
        service_hot();
        sleep_ns(40000000);
    }
    return 0;
}

static const char *const RENAMES[] = {"rn_alpha", "rn_beta", "rn_gamma", "rn_delta"};
#define NRENAMES (sizeof RENAMES / sizeof RENAMES[0])
#define RENAME_THREADS 3

static void *renamer(void *arg)
{
    unsigned i = (unsigned)(uintptr_t)arg;
    for (unsigned step = 0;; step++) {
        pthread_setname_np(pthread_self(), RENAMES[(i + step) % NRENAMES]);
        rename_hot();
        sleep_ns(246000000);
    }
    return NULL;
}

static int rename_main(void)
{
    pthread_t t[RENAME_THREADS];
    for (unsigned i = 0; i < RENAME_THREADS; i++)
        if (pthread_create(&t[i], NULL, renamer, (void *)(uintptr_t)i) != 0) {
            fprintf(stderr, "churn rename: pthread_create failed\n");
            return 1;
        }
    for (;;)
        pause();
}

static int is_x86_64(char *machine, size_t len)
{
    struct utsname u;
    if (uname(&u) != 0)
        return 0;
    snprintf(machine, len, "%s", u.machine);
    return strcmp(u.machine, "x86_64") == 0;
}

#define JIT_PAGE 4096
#define JIT_MAX 4096 /* functions (one page each): 16 MiB of address space */

static int jit_main(void)
{
    char machine[65];
    if (!is_x86_64(machine, sizeof machine)) {
        fprintf(stderr, "churn jit: %s is not x86-64; no JIT\n", machine);
        return 0;
    }
    unsigned char *mem = mmap(NULL, (size_t)JIT_PAGE * JIT_MAX, PROT_NONE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) {
        perror("churn jit: mmap");
        return 1;
    }
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *map = fopen(path, "a");
    if (!map) {
        perror(path);
        return 1;
    }
    unsigned long (*newest)(unsigned long) = NULL;
    long long next_emit = mono_ns();
    for (unsigned n = 0;; ) {
        if (n < JIT_MAX && mono_ns() >= next_emit) {
            unsigned char *page = mem + (size_t)n * JIT_PAGE;
            if (mprotect(page, JIT_PAGE, PROT_READ | PROT_WRITE) != 0) {
                perror("churn jit: mprotect RW");
                return 1;
            }
            memset(page, 0xcc, JIT_PAGE);
            /* Some padding (n % 16 nops), so that functions differ and do not start on the
             * page; then: mov %rdi,%rax; 1: dec %rax; jnz 1b; ret */
            unsigned char *fn = page + 64;
            size_t len = 0;
            for (unsigned k = 0; k < n % 16; k++)
                fn[len++] = 0x90;
            static const unsigned char body[] = {0x48, 0x89, 0xf8, 0x48, 0xff,
                                                 0xc8, 0x75, 0xfb, 0xc3};
            memcpy(fn + len, body, sizeof body);
            len += sizeof body;
            if (mprotect(page, JIT_PAGE, PROT_READ | PROT_EXEC) != 0) {
                perror("churn jit: mprotect RX");
                return 1;
            }
            fprintf(map, "%lx %zx jit_fn_%04u\n", (unsigned long)fn, len, n);
            fflush(map);
            newest = (unsigned long (*)(unsigned long))fn;
            n++;
            next_emit += 250000000LL;
        }
        /* ~15% of a CPU in the newest function. */
        if (newest) {
            long long end = thread_cpu_ns() + 15000000;
            while (thread_cpu_ns() < end)
                sink += newest(200000);
        }
        sleep_ns(85000000);
    }
}

/* ------------------------------------------------------------------ the driver */

static char self_path[PATH_MAX];
static char dir[64];
static atomic_int stopping;
static atomic_long execs, exec_ok, burn_reaped;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
#define MAX_DEPLOYS 100000
static char (*deployed)[PATH_MAX];
static char (*deleted)[PATH_MAX];
static long deploys, ndeleted;
static pid_t special[8]; /* service generations in flight, renamer, jit: not burn children */

static int is_special(pid_t pid)
{
    for (unsigned i = 0; i < sizeof special / sizeof special[0]; i++)
        if (special[i] == pid)
            return 1;
    return 0;
}

/* Fork and exec PATH MODE; the child retries while PATH is busy for writing (a copy's
 * descriptor inherited by a sibling forked meanwhile and not yet exec'd). */
static pid_t spawn(const char *path, const char *mode, int is_burn)
{
    if (!is_burn)
        pthread_mutex_lock(&lock); /* the reaper must see it as special before it can exit */
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 200; i++) {
            execl(path, path, mode, (char *)NULL);
            if (errno != ETXTBSY)
                break;
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
        _exit(127);
    }
    if (!is_burn) {
        if (pid > 0)
            for (unsigned i = 0; i < sizeof special / sizeof special[0]; i++)
                if (special[i] == 0) {
                    special[i] = pid;
                    break;
                }
        pthread_mutex_unlock(&lock);
    }
    return pid;
}

static void *reaper(void *arg)
{
    (void)arg;
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == ECHILD && atomic_load(&stopping) == 2)
                return NULL;
            sleep_ns(5000000);
            continue;
        }
        pthread_mutex_lock(&lock);
        int sp = is_special(pid);
        if (sp)
            for (unsigned i = 0; i < sizeof special / sizeof special[0]; i++)
                if (special[i] == pid)
                    special[i] = 0;
        pthread_mutex_unlock(&lock);
        if (!sp) {
            atomic_fetch_add(&burn_reaped, 1);
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                atomic_fetch_add(&exec_ok, 1);
        }
    }
}

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    if (out < 0) {
        close(in);
        return -1;
    }
    char buf[65536];
    ssize_t n;
    int rc = 0;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n) {
            rc = -1;
            break;
        }
    if (n < 0)
        rc = -1;
    close(in);
    if (close(out) != 0)
        rc = -1;
    return rc;
}

static double deploy_secs = 2.0;

static void *deployer(void *arg)
{
    (void)arg;
    pid_t current = 0;
    char current_path[PATH_MAX] = "";
    while (!atomic_load(&stopping)) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/churn_svc_%03ld", dir, deploys);
        if (copy_file(self_path, path) != 0) {
            perror("churn: copying the service binary");
            break;
        }
        pid_t pid = spawn(path, "service", 0);
        if (pid < 0) {
            perror("churn: fork (service)");
            unlink(path);
            break;
        }
        pthread_mutex_lock(&lock);
        if (deploys < MAX_DEPLOYS)
            snprintf(deployed[deploys], PATH_MAX, "%s", path);
        deploys++;
        pthread_mutex_unlock(&lock);
        /* The new generation runs beside the old one for a moment, as in a real deploy. */
        sleep_ns(300000000);
        if (current > 0) {
            kill(current, SIGKILL);
            unlink(current_path);
            pthread_mutex_lock(&lock);
            if (ndeleted < MAX_DEPLOYS)
                snprintf(deleted[ndeleted++], PATH_MAX, "%s", current_path);
            pthread_mutex_unlock(&lock);
        }
        current = pid;
        snprintf(current_path, sizeof current_path, "%s", path);
        long long end = mono_ns() + (long long)(deploy_secs * 1e9) - 300000000LL;
        while (!atomic_load(&stopping) && mono_ns() < end)
            sleep_ns(20000000);
    }
    if (current > 0) {
        kill(current, SIGKILL);
        unlink(current_path);
        pthread_mutex_lock(&lock);
        if (ndeleted < MAX_DEPLOYS)
            snprintf(deleted[ndeleted++], PATH_MAX, "%s", current_path);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

static int drive_main(double seconds, const char *outfile, double rate)
{
    prctl(PR_SET_NAME, "churn_drv");
    if (!realpath("/proc/self/exe", self_path)) {
        perror("churn: realpath /proc/self/exe");
        return 1;
    }
    snprintf(dir, sizeof dir, "/tmp/churn.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("churn: mkdtemp");
        return 1;
    }
    deployed = calloc(MAX_DEPLOYS, PATH_MAX);
    deleted = calloc(MAX_DEPLOYS, PATH_MAX);
    if (!deployed || !deleted) {
        fprintf(stderr, "churn: out of memory\n");
        return 1;
    }
    char burn_link[PATH_MAX], names_link[PATH_MAX], jit_link[PATH_MAX];
    snprintf(burn_link, sizeof burn_link, "%s/churn_burn", dir);
    snprintf(names_link, sizeof names_link, "%s/churn_names", dir);
    snprintf(jit_link, sizeof jit_link, "%s/churn_jit", dir);
    if (symlink(self_path, burn_link) || symlink(self_path, names_link) ||
        symlink(self_path, jit_link)) {
        perror("churn: symlink");
        return 1;
    }
    char machine[65];
    int jit = is_x86_64(machine, sizeof machine);

    pthread_t reap, deploy;
    pthread_create(&reap, NULL, reaper, NULL);
    pid_t names_pid = spawn(names_link, "rename", 0);
    pid_t jit_pid = jit ? spawn(jit_link, "jit", 0) : 0;
    pthread_create(&deploy, NULL, deployer, NULL);

    long long start = mono_ns();
    long long end = start + (long long)(seconds * 1e9);
    long long period = (long long)(1e9 / rate);
    long long next = start;
    long fork_failures = 0;
    while (mono_ns() < end) {
        pid_t pid = spawn(burn_link, "burn", 1);
        if (pid < 0)
            fork_failures++;
        else
            atomic_fetch_add(&execs, 1);
        next += period;
        long long now = mono_ns();
        if (now - next > 1000000000LL) /* fell behind by a second: do not burst */
            next = now;
        sleep_ns(next - now);
    }
    atomic_store(&stopping, 1);
    pthread_join(deploy, NULL);
    if (names_pid > 0)
        kill(names_pid, SIGKILL);
    if (jit_pid > 0)
        kill(jit_pid, SIGKILL);
    atomic_store(&stopping, 2);
    pthread_join(reap, NULL);
    unlink(burn_link);
    unlink(names_link);
    unlink(jit_link);
    rmdir(dir);

    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp", outfile);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        perror(tmp);
        return 1;
    }
    fprintf(f, "dir %s\n", dir);
    fprintf(f, "execs %ld\n", atomic_load(&execs));
    fprintf(f, "exec_ok %ld\n", atomic_load(&exec_ok));
    fprintf(f, "fork_failures %ld\n", fork_failures);
    fprintf(f, "seconds %.3f\n", (mono_ns() - start) / 1e9);
    fprintf(f, "deploys %ld\n", deploys);
    for (long i = 0; i < deploys && i < MAX_DEPLOYS; i++)
        fprintf(f, "deployed %s\n", deployed[i]);
    for (long i = 0; i < ndeleted; i++)
        fprintf(f, "deleted %s\n", deleted[i]);
    fprintf(f, "rename_names");
    for (unsigned i = 0; i < NRENAMES; i++)
        fprintf(f, " %s", RENAMES[i]);
    fprintf(f, "\n");
    if (jit_pid > 0) {
        char map_path[64];
        snprintf(map_path, sizeof map_path, "/tmp/perf-%d.map", (int)jit_pid);
        fprintf(f, "jit_pid %d\njit_map %s\n", (int)jit_pid, map_path);
        FILE *m = fopen(map_path, "r");
        char line[256];
        long n = 0;
        static char names[JIT_MAX][64];
        while (m && fgets(line, sizeof line, m)) {
            char name[64];
            if (sscanf(line, "%*x %*x %63s", name) == 1 && n < JIT_MAX)
                snprintf(names[n++], sizeof names[0], "%s", name);
        }
        if (m)
            fclose(m);
        fprintf(f, "jit_functions %ld\n", n);
        for (long i = 0; i < n; i++)
            fprintf(f, "jit_fn %s\n", names[i]);
    } else {
        fprintf(f, "jit skipped %s\n", machine);
    }
    if (fclose(f) != 0 || rename(tmp, outfile) != 0) {
        perror(outfile);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "burn"))
        return burn_main();
    if (!strcmp(mode, "service"))
        return service_main();
    if (!strcmp(mode, "rename"))
        return rename_main();
    if (!strcmp(mode, "jit"))
        return jit_main();
    if (!strcmp(mode, "drive") && argc >= 4 && argc <= 6) {
        double rate = argc > 4 ? atof(argv[4]) : 50.0;
        if (argc > 5)
            deploy_secs = atof(argv[5]);
        if (!(rate > 0) || !(deploy_secs >= 0.5)) {
            fprintf(stderr, "churn: RATE must be > 0 and DEPLOY_SECS >= 0.5\n");
            return 2;
        }
        return drive_main(atof(argv[2]), argv[3], rate);
    }
    fprintf(stderr,
            "usage: %s drive SECONDS OUTFILE [RATE [DEPLOY_SECS]]\n"
            "       %s burn | service | rename | jit\n",
            argv[0], argv[0]);
    return 2;
}
