/*
 * mmbench.c - single-thread matmul speed of the kernel tables (ref and the
 * best one here, or the one named):
 * decode-like (n_tok = 1) and prefill-like (n_tok = 512) on SmolLM2-135M
 * shapes, mm_prepare + mm_rows per call.
 *
 *   build/mmbench [n_tok_prefill [avx512|avx2|ref [TYPE...]]]
 *
 * A second argument runs only that kernel table; further arguments restrict
 * the weight types (names as in qtypes, e.g. q4_1 q6_K).  MMBENCH_ROWS=N
 * replaces the row counts (e.g. 49152, an output layer that does not fit the
 * caches, to see decode as DRAM-bound).
 *
 * Prints one line per type, shape, batch and kernel: time per call, GFLOP/s
 * (2 rows cols n_tok) and the weight bytes streamed per second.  A weight
 * type that the table packs at load (mm_pack, as the model does) runs from
 * its packed layout, and its kernel name says so ("avx512p").
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ops.h"
#include "benchtime.h"
#include "qtypes.h"
#include "quant.h"


static uint64_t rs = 88172645463325252ull;

static float
frnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((double)(rs >> 11) * 0x1p-53 * 2.0 - 1.0);
}

struct mm_call {
    const struct kernel_ops *o;
    uint32_t t;
    const void *w;
    size_t rb;
    int64_t rows, cols, n_tok;
    const float *x;
    float *y, *tmp;
    void *work;
};

static void
mm_call(void *p)
{
    const struct mm_call *c = p;
    c->o->mm_prepare(c->work, c->t & ~(uint32_t)OPS_MM_PACKED, c->x, c->cols, c->n_tok, c->cols);
    c->o->mm_rows(c->y, c->rows, c->w, c->rb, c->t, c->work, c->x, c->cols, c->n_tok, c->cols, 0,
                  c->rows, c->tmp);
}

/* seconds per call, best of a few repetitions of enough calls for ~0.05 s */
static double
time_mm(const struct kernel_ops *o, uint32_t t, const void *w, size_t rb, int64_t rows,
        int64_t cols, const float *x, int64_t n_tok, float *y, void *work, float *tmp)
{
    struct mm_call c = { o, t, w, rb, rows, cols, n_tok, x, y, tmp, work };
    return bench_best(mm_call, &c, 4);
}

int
main(int argc, char **argv)
{
    char *end = NULL;
    int64_t prefill = argc > 1 ? strtoll(argv[1], &end, 10) : 512;
    static const uint32_t types[] = {
        GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
        GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
        GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS, GGML_TYPE_F16,
    };
    const char *only = argc > 2 ? argv[2] : NULL;

    if (argc > 1 && (*end || prefill < 1 || prefill > 65536)) {
        fprintf(stderr, "usage: mmbench [n_tok_prefill (1..65536) [avx512|avx2|ref [TYPE...]]]\n");
        return 2;
    }
    /* ref, and the fastest table here or the one named */
    const char *kn[2] = { "ref", only && strcmp(only, "ref") != 0 ? only : "auto" };
    const struct kernel_ops *ko[2] = { ops_select("ref"), ops_select(kn[1]) };

    if (ko[1] == ko[0] || (only && strcmp(only, "ref") == 0))
        ko[1] = NULL;
    if (only && strcmp(only, "ref") != 0)
        ko[0] = NULL;
    if (ko[1]) {
        kn[1] = ko[1]->name;
    } else if (only && strcmp(only, "ref") != 0) {
        fprintf(stderr, "mmbench: no %s kernels here\n", only);
        return 1;
    } else if (!only) {
        fprintf(stderr, "mmbench: no SIMD kernels here; ref only\n");
    }
    printf("%-6s %-10s %5s %-5s %10s %9s %8s %8s\n", "type", "rows x cols", "n_tok", "kern",
           "us/call", "GFLOP/s", "GB/s(w)", "speedup");
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        uint32_t t = types[ti];
        if (argc > 3) {
            int want = 0;
            for (int i = 3; i < argc; i++)
                want |= strcasecmp(argv[i], qtype_get(t)->name) == 0;
            if (!want)
                continue;
        }
        int kq = qtype_get(t)->blck == 256;
        /* (rows, cols): attention-like 576x576, FFN 1536x576 and ffn_down
         * 576x1536; k-quants need cols % 256 == 0, so they run 576x1536 and
         * 1536x1536 */
        int64_t shapes[3][2] = { { 576, kq ? 1536 : 576 }, { 1536, kq ? 1536 : 576 }, { 576, 1536 } };
        const char *er = getenv("MMBENCH_ROWS");
        for (int si = 0; si < 3 - kq; si++) {
            int64_t rows = er && atoll(er) > 0 ? atoll(er) : shapes[si][0], cols = shapes[si][1];
            size_t rb = qtype_row_bytes(t, cols);
            float *wf = malloc((size_t)(rows * cols) * sizeof(float));
            for (int64_t i = 0; i < rows * cols; i++)
                wf[i] = frnd() * 0.05f;
            void *w = aligned_alloc(64, (rb * (size_t)rows + 63) / 64 * 64);
            quant_chunk(t, wf, w, rows, cols, NULL);
            free(wf);
            float *x = malloc((size_t)(prefill * cols) * sizeof(float));
            for (int64_t i = 0; i < prefill * cols; i++)
                x[i] = frnd();
            float *y = malloc((size_t)(prefill * rows) * sizeof(float));
            float *tmp = malloc((size_t)ops_mm_tmp_floats_ref(cols) * sizeof(float) + 64);
            int64_t nts[2] = { 1, prefill };
            for (int ni = 0; ni < 2; ni++) {
                int64_t n_tok = nts[ni];
                double tref = 0;
                for (int k = 0; k < 2; k++) {
                    if (!ko[k])
                        continue;
                    /* 64-byte aligned, as the forward pass allocates it */
                    void *work = aligned_alloc(64, (ko[k]->mm_work_size(t, n_tok, cols) + 127) / 64 * 64);
                    size_t pb = ko[k]->mm_pack_size ? ko[k]->mm_pack_size(t, rows, cols) : 0;
                    void *pk = pb ? aligned_alloc(64, (pb + 63) / 64 * 64) : NULL;
                    if (pk)
                        ko[k]->mm_pack(pk, w, rb, t, rows, cols);
                    double dt = pk ? time_mm(ko[k], t | OPS_MM_PACKED, pk, rb, rows, cols, x, n_tok, y, work, tmp)
                                   : time_mm(ko[k], t, w, rb, rows, cols, x, n_tok, y, work, tmp);
                    free(work);
                    free(pk);
                    char kname[16];
                    snprintf(kname, sizeof(kname), "%s%s", kn[k], pk ? "p" : "");
                    if (k == 0)
                        tref = dt;
                    printf("%-6s %4lldx%-5lld %5lld %-5s %10.1f %9.2f %8.2f %7.2fx\n",
                           qtype_get(t)->name, (long long)rows, (long long)cols, (long long)n_tok,
                           kname, dt * 1e6, 2.0 * (double)(rows * cols * n_tok) / dt * 1e-9,
                           (double)(rb * (size_t)rows) / dt * 1e-9, tref > 0 ? tref / dt : 0.0);
                    fflush(stdout);
                }
            }
            free(w), free(x), free(y), free(tmp);
        }
    }
    return 0;
}
