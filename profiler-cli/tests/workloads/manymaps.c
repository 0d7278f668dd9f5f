/* manymaps FILE COUNT READY: maps FILE executable COUNT times (mappings that never merge),
 * writes READY, then forks children that exit at once, forever. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    int fd = open(argv[1], O_RDONLY);
    long count = atol(argv[2]);
    long mapped = 0;
    for (long i = 0; i < count; i++)
        if (mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) != MAP_FAILED)
            mapped++;
    FILE *ready = fopen(argv[3], "w");
    fprintf(ready, "%ld\n", mapped);
    fclose(ready);
    for (;;) {
        pid_t child = fork();
        if (child == 0)
            _exit(0);
        if (child > 0)
            waitpid(child, NULL, 0);
    }
}
