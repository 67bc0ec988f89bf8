/*
 * replay.c - runs a libFuzzer harness over saved inputs without libFuzzer,
 * so that `make check-fuzz` replays every corpus with the normal compiler
 * (in the manner of zstd's tests/fuzz/regression_driver.c).
 *
 *   replay_NAME FILE|DIR...
 *
 * Each FILE (and each regular file directly inside a DIR) is read whole and
 * passed to LLVMFuzzerTestOneInput().  Exit status 0 when every input ran; a
 * harness bug shows up as a crash or abort (or a sanitizer report in the
 * asan/ubsan builds).  1 when an input could not be read.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads path into a malloc'd buffer (never NULL on success, even when empty). */
static int
read_input(const char *path, uint8_t **out, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t cap = 0, n = 0;

    if (!fp)
        return -1;
    for (;;) {
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 65536;
            uint8_t *nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                fclose(fp);
                errno = ENOMEM;
                return -1;
            }
            buf = nb;
            cap = nc;
        }
        size_t k = fread(buf + n, 1, cap - n, fp);
        n += k;
        if (k == 0)
            break;
    }
    if (ferror(fp)) {
        int e = errno;
        free(buf);
        fclose(fp);
        errno = e;
        return -1;
    }
    fclose(fp);
    *out = buf;
    *len = n;
    return 0;
}

static int
run_file(const char *path)
{
    uint8_t *buf;
    size_t len;

    if (read_input(path, &buf, &len) != 0) {
        fprintf(stderr, "replay: cannot read '%s': %s\n", path, strerror(errno));
        return 1;
    }
    /* An exact-size copy, so that ASan catches reads past the end. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        fprintf(stderr, "replay: out of memory\n");
        return 1;
    }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
run_dir(const char *dir)
{
    DIR *dp = opendir(dir);
    struct dirent *de;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int fail = 0;

    if (!dp) {
        fprintf(stderr, "replay: cannot open '%s': %s\n", dir, strerror(errno));
        return 1;
    }
    while ((de = readdir(dp))) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof(*names));
            if (!nn)
                break;
            names = nn;
        }
        size_t l = strlen(dir) + strlen(de->d_name) + 2;
        names[n] = malloc(l);
        if (!names[n])
            break;
        snprintf(names[n], l, "%s/%s", dir, de->d_name);
        n++;
    }
    closedir(dp);
    qsort(names, n, sizeof(*names), cmp_str); /* same order every run */
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
            fail |= run_file(names[i]);
        free(names[i]);
    }
    free(names);
    return fail;
}

int
main(int argc, char **argv)
{
    int fail = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
            fail |= run_dir(argv[i]);
        else
            fail |= run_file(argv[i]);
    }
    return fail ? 1 : 0;
}
