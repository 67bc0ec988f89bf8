/*
 * qgrid.c - the integer-grid linear and the quantized model (qgrid.h): the
 * parts every method and writer shares.  The writers are qmodel_gguf.c
 * (GGUF) and qmodel_hf.c (GPTQ/AWQ directories, qmodel_read_hf).
 */
#include "qgrid.h"

#include <stdlib.h>
#include <string.h>

#include "qconv.h"

int
qgrid_alloc(struct qgrid *g, int bits, int64_t group_size, bool sym, int64_t rows, int64_t cols,
            struct diag *d)
{
    memset(g, 0, sizeof *g);
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
        return diag_set(d, ST_RANGE, "%d-bit grid not supported (2, 3, 4 or 8)", bits);
    if (rows <= 0 || cols <= 0 || rows > (INT64_C(1) << 31) || cols > (INT64_C(1) << 31))
        return diag_set(d, ST_RANGE, "grid shape %lld x %lld out of range", (long long)rows,
                        (long long)cols);
    if (group_size == 0 || group_size < -1)
        return diag_set(d, ST_RANGE, "group size %lld: need -1 or a positive size",
                        (long long)group_size);
    int64_t gs = group_size < 0 ? cols : group_size;
    g->bits = bits;
    g->group_size = group_size;
    g->sym = sym;
    g->rows = rows;
    g->cols = cols;
    g->n_groups = (cols + gs - 1) / gs;
    g->q = malloc((size_t)(rows * cols));
    g->scale = malloc((size_t)(g->n_groups * rows) * sizeof *g->scale);
    g->zero = malloc((size_t)(g->n_groups * rows) * sizeof *g->zero);
    g->g_idx = malloc((size_t)cols * sizeof *g->g_idx);
    if (!g->q || !g->scale || !g->zero || !g->g_idx) {
        qgrid_free(g);
        return diag_set(d, ST_NOMEM, "out of memory for a %lld x %lld grid", (long long)rows,
                        (long long)cols);
    }
    for (int64_t c = 0; c < cols; c++)
        g->g_idx[c] = (int32_t)(c / gs);
    return 0;
}

void
qgrid_free(struct qgrid *g)
{
    if (!g)
        return;
    free(g->q);
    free(g->scale);
    free(g->zero);
    free(g->g_idx);
    memset(g, 0, sizeof *g);
}

void
qgrid_dequant_row(const struct qgrid *g, int64_t r, float *out)
{
    const uint8_t *q = g->q + r * g->cols;
    for (int64_t c = 0; c < g->cols; c++) {
        int64_t k = (int64_t)g->g_idx[c] * g->rows + r;
        float w = (float)((int32_t)q[c] - g->zero[k]) * g->scale[k];
        out[c] = qconv_fp16_to_fp32(qconv_fp32_to_fp16(w));
    }
}

int
qformat_parse(const char *s)
{
    static const char *const names[] = {
        [QF_GGUF] = "gguf", [QF_GPTQ] = "gptq", [QF_GPTQ_V2] = "gptq_v2", [QF_AWQ] = "awq",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (s && strcmp(s, names[i]) == 0)
            return (int)i;
    return -1;
}

int
qmodel_write(const struct qmodel *qm, const char *out, enum qformat f, bool force,
             const struct run_callbacks *cb, struct diag *d)
{
    if (f == QF_GGUF)
        return qmodel_write_gguf(qm, out, force, cb, d);
    if (f == QF_GPTQ || f == QF_GPTQ_V2 || f == QF_AWQ)
        return qmodel_write_hf(qm, out, f, force, cb, d);
    return diag_set(d, ST_RANGE, "unknown output format %d", (int)f);
}

void
qmodel_release(struct qmodel *qm)
{
    if (!qm)
        return;
    for (int64_t i = 0; i < qm->n; i++) {
        free(qm->t[i].name);
        if (qm->t[i].g) {
            qgrid_free(qm->t[i].g);
            free(qm->t[i].g);
        }
        free(qm->t[i].f32);
    }
    free(qm->t);
    memset(qm, 0, sizeof *qm);
}
