/*
 * blas.c - priming OpenBLAS's work buffer (blas.h).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "blas.h"

#ifdef LLMKIT_HAVE_OPENBLAS
#include <cblas.h>

/* room to check for one buffer: BUFFER_SIZE 128 MiB + a page, with margin */
#define BUF_ROOM ((size_t)144 << 20)
/* large enough to take the buffered path (small products use none) */
#define PRIME_N 256

static bool primed;

/* writable, as OpenBLAS maps it: RLIMIT_DATA counts only writable private
 * mappings (never touched, so no memory is used) */
static bool
room_for(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);

    if (p == MAP_FAILED)
        return false;
    munmap(p, bytes);
    return true;
}

int
blas_prime(int n_threads)
{
    /* no new worker under a limit: each maps a buffer as it starts */
    if (n_threads > 0 && !blas_one_at_a_time())
        openblas_set_num_threads(n_threads);
    if (primed)
        return 0;
    if (!room_for(BUF_ROOM))
        return -1;
    float *a = calloc((size_t)3 * PRIME_N * PRIME_N, sizeof *a);
    if (!a)
        return -1;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, PRIME_N, PRIME_N, PRIME_N, 1.0f, a,
                PRIME_N, a + PRIME_N * PRIME_N, PRIME_N, 0.0f, a + 2 * PRIME_N * PRIME_N, PRIME_N);
    free(a);
    primed = true;
    return 0;
}

bool
blas_one_at_a_time(void)
{
    struct rlimit as, data;

    return (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) ||
           (getrlimit(RLIMIT_DATA, &data) == 0 && data.rlim_cur != RLIM_INFINITY);
}

/* a thread count OpenBLAS takes: NAME set to a positive number (empty, 0
 * or junk leaves it at one thread per core) */
static bool
has_count(char **envp, const char *name)
{
    size_t n = strlen(name);

    for (; *envp; envp++)
        if (!strncmp(*envp, name, n) && (*envp)[n] == '=')
            return atoi(*envp + n + 1) > 0;
    return false;
}

void
blas_preinit(int argc, char **argv, char **envp)
{
    (void)argc;
    if (!blas_one_at_a_time() || has_count(envp, "OPENBLAS_NUM_THREADS") ||
        has_count(envp, "GOTO_NUM_THREADS") || has_count(envp, "OMP_NUM_THREADS"))
        return;
    /* started through the dynamic loader (ld.so TOOL ...), /proc/self/exe
     * is the loader: no exec then */
    if (getauxval(AT_BASE) == 0)
        return;
    /* libc's own start-up resets the environment to envp after this runs,
     * so setenv() would not reach OpenBLAS's constructor: the program is
     * started again with the variable in its environment */
    size_t n = 0, k = 0;
    while (envp[n])
        n++;
    char **env = malloc((n + 2) * sizeof *env);
    if (!env)
        return;
    for (size_t i = 0; i < n; i++)      /* an unusable count replaced */
        if (strncmp(envp[i], "OPENBLAS_NUM_THREADS=", 21))
            env[k++] = envp[i];
    env[k++] = "OPENBLAS_NUM_THREADS=1";
    env[k] = NULL;
    execve("/proc/self/exe", argv, env);
    free(env);      /* no /proc: the workers start as they would have */
}

#else

void
blas_preinit(int argc, char **argv, char **envp)
{
    (void)argc;
    (void)argv;
    (void)envp;
}

int
blas_prime(int n_threads)
{
    (void)n_threads;
    return 0;
}

bool
blas_one_at_a_time(void)
{
    return false;
}

#endif
