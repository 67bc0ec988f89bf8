/*
 * fuzz_qhf.c - libFuzzer harness for the GPTQ / AWQ directory reader
 * (qmodel_read_hf, qgrid.h): the quantization config and the packed
 * qweight / qzeros / scales / g_idx tensors.
 *
 * Input: u16 little-endian length L, L bytes of config.json, the rest
 * model.safetensors; both are written into a fresh temporary directory
 * that qmodel_read_hf reads.  A directory that reads must give grids that
 * keep qgrid.h's invariants (integers and zeros within the bits, g_idx
 * within the groups, shapes as declared), or the harness aborts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qgrid.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
put(const char *dir, const char *name, const uint8_t *p, size_t n)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (!(f = fopen(path, "wb")))
        return -1;
    if (n && fwrite(p, 1, n, f) != n) {
        fclose(f);
        return -1;
    }
    return fclose(f);
}

static void
check(const struct qmodel *qm)
{
    for (int64_t i = 0; i < qm->n; i++) {
        const struct qgrid *g = qm->t[i].g;
        if (!g || !qm->t[i].name || g->rows <= 0 || g->cols <= 0 || g->n_groups <= 0)
            abort();
        for (int64_t k = 0; k < g->rows * g->cols; k++)
            if (g->q[k] >> g->bits)
                abort();
        for (int64_t k = 0; k < g->rows * g->n_groups; k++)
            if (g->zero[k] < 0 || g->zero[k] >> g->bits)
                abort();
        for (int64_t c = 0; c < g->cols; c++)
            if (g->g_idx[c] < 0 || g->g_idx[c] >= g->n_groups)
                abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char dir[] = "/tmp/fuzz_qhf_XXXXXX", path[512];
    struct qmodel qm;
    struct diag d;
    size_t len;

    if (size < 2)
        return 0;
    len = (size_t)data[0] | (size_t)data[1] << 8;
    if (len > size - 2)
        len = size - 2;
    if (!mkdtemp(dir))
        return 0;
    if (put(dir, "config.json", data + 2, len) == 0 &&
        put(dir, "model.safetensors", data + 2 + len, size - 2 - len) == 0 &&
        qmodel_read_hf(dir, &qm, &d) == 0) {
        check(&qm);
        qmodel_release(&qm);
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
    return 0;
}
