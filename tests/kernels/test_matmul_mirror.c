/*
 * test_matmul_mirror.c - the mirror matmul (kernel_ops_avx2.mm_rows_mirror,
 * llamafile tinyBLAS's order) bit for bit against ggml.
 *
 * 1. tests/golden/kernels/vecdot-tinyblas.json (scripts/mkgolden-vecdot
 *    --tinyblas, made by llama.cpp's libggml through
 *    scripts/llamacpp-vecdot.c): F32, F16 and BF16 weights (16x512, 12x136,
 *    20x64), activations of 9 tokens and ggml's mul_mat outputs for the
 *    batches of the first n tokens, n = 2..9 (1 and 2 threads agree); the
 *    kernel must reproduce every output exactly with any row split and
 *    padded row strides.  The golden also records how many outputs differ
 *    from the single-token (vec_dot) results, > 0 for every case, so this
 *    test would fail if the kernel fell back to mm_rows' order.
 * 2. Random weights (odd row count): a token's outputs are the same in any
 *    batch, at any position and row range; outputs are close to an exact
 *    (double) product; nothing outside [r0, r1) x n_tok is written; other
 *    types and cols % 8 != 0 write nothing.
 *
 * 3. Q4_K (ggml's repack gemm) and Q6_K (its tiled kernels),
 *    ops_mm_rows_mirror_ref the spec: random blocks, the avx2 kernel gives
 *    the reference's bits for any token count and row range, and outputs
 *    close to mm_rows' (the gemv's rounding).
 * 4. F32, F16 and BF16: the avx2 and avx512 tables' mm_rows (ggml_vec_dot's
 *    order) and mm_rows_mirror (tinyBLAS's) give the ref table's bits for
 *    1..17 tokens, widths with and without a remainder of 32 (and one not a
 *    multiple of 8), any row split; the ref's and the avx512 table's mirrors
 *    also reproduce the golden of 1.
 *
 * Exit 77 (skip) on a CPU without AVX2/FMA/F16C.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kernel_test.h"
#include "ops.h"
#include "qconv.h"
#include "qtypes.h"
#include "../unit/t.h"

static uint64_t rng = 0x243f6a8885a308d3ull;

static float
frnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(uint32_t)(rng >> 16) / 2147483648.0 - 1.0);
}

static int
test_golden(const struct kernel_ops *ko, const char *path, int verbose)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        fprintf(stderr, "%s: %s (run scripts/mkgolden-vecdot --tinyblas)\n", path, err.text);
        CHECK(0);
        return 0;
    }
    int64_t n_tok = json_integer_value(json_object_get(root, "n_tok"));
    json_t *cases = json_object_get(root, "cases"), *c;
    size_t ci;
    int n_cases = 0;
    CHECK(n_tok >= 2 && n_tok <= 64 && json_array_size(cases) > 0);
    json_array_foreach(cases, ci, c) {
        const char *name = json_string_value(json_object_get(c, "type"));
        uint32_t t = (uint32_t)json_integer_value(json_object_get(c, "id"));
        int64_t rows = json_integer_value(json_object_get(c, "rows"));
        int64_t cols = json_integer_value(json_object_get(c, "cols"));
        json_t *batches = json_object_get(c, "batches");
        uint8_t *w = NULL, *xb = NULL;
        long wn = kt_unhex(json_string_value(json_object_get(c, "w")), &w);
        long xn = kt_unhex(json_string_value(json_object_get(c, "x")), &xb);
        int ok = name && rows > 0 && rows <= 4096 && cols > 0 && cols % 8 == 0 &&
                 cols <= 65536 && qtype_get(t) && wn >= 0 && xn >= 0;
        size_t rb = ok ? qtype_row_bytes(t, cols) : 0;
        ok = ok && wn == (long)(rb * (size_t)rows) && xn == (long)(n_tok * cols * 4) &&
             (int64_t)json_array_size(batches) == n_tok - 1 &&
             json_integer_value(json_object_get(c, "differ_from_alone")) > 0;
        CHECK(ok);
        if (!ok) {
            free(w), free(xb);
            continue;
        }
        /* padded strides: x rows cols + 5 apart, y rows rows + 3 apart */
        int64_t ldx = cols + 5, ldy = rows + 3;
        float *x = malloc((size_t)(n_tok * ldx) * sizeof(float));
        float *y = malloc((size_t)(n_tok * ldy) * sizeof(float));
        for (int64_t k = 0; k < n_tok; k++)
            memcpy(x + k * ldx, xb + (size_t)(k * cols) * 4, (size_t)cols * 4);
        int bad = 0;
        for (int64_t n = 2; n <= n_tok; n++) {
            json_t *want = json_array_get(batches, (size_t)(n - 2));
            if ((int64_t)json_array_size(want) != n * rows) {
                CHECK(0);
                continue;
            }
            for (int64_t split = 0; split <= rows; split += (split == 0 ? 1 : 5)) {
                for (int64_t i = 0; i < n_tok * ldy; i++)
                    y[i] = -777.0f;
                kt_run_rows(ko, ko->mm_rows_mirror, t, w, rb, rows, cols, x, ldx, 0, n, split, y, ldy);
                for (int64_t k = 0; k < n; k++) {
                    for (int64_t r = 0; r < ldy; r++) {
                        float got = y[k * ldy + r];
                        if (r >= rows) {
                            bad += got != -777.0f;
                            continue;
                        }
                        uint32_t g, wv = (uint32_t)json_integer_value(
                                            json_array_get(want, (size_t)(k * rows + r)));
                        memcpy(&g, &got, 4);
                        if (g != wv && bad++ < 4) {
                            float f;
                            memcpy(&f, &wv, 4);
                            fprintf(stderr, "%s %lldx%lld n %lld split %lld tok %lld row %lld: "
                                    "got %.9g want %.9g\n", name, (long long)rows, (long long)cols,
                                    (long long)n, (long long)split, (long long)k, (long long)r,
                                    got, f);
                        }
                    }
                }
                for (int64_t i = n * ldy; i < n_tok * ldy; i++)
                    bad += y[i] != -777.0f;
            }
        }
        CHECK_EQ(bad, 0);
        if (verbose)
            fprintf(stderr, "golden %s %lldx%lld: %s\n", name, (long long)rows, (long long)cols,
                    bad ? "MISMATCH" : "bit-exact");
        n_cases++;
        free(w), free(xb), free(x), free(y);
    }
    json_decref(root);
    return n_cases;
}

/* float weight of the given type from f32 values */
static uint8_t *
make_weight(uint32_t t, int64_t rows, int64_t cols)
{
    size_t rb = qtype_row_bytes(t, cols);
    uint8_t *w = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            float v = frnd() * 0.05f;
            uint8_t *p = w + (size_t)r * rb;
            if (t == GGML_TYPE_F32) {
                memcpy(p + 4 * c, &v, 4);
            } else if (t == GGML_TYPE_F16) {
                uint16_t h = qconv_fp32_to_fp16(v);
                memcpy(p + 2 * c, &h, 2);
            } else {
                uint16_t h = qconv_fp32_to_bf16(v);
                memcpy(p + 2 * c, &h, 2);
            }
        }
    }
    return w;
}

static void
test_invariance(const struct kernel_ops *ko)
{
    static const uint32_t types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16 };
    const int64_t rows = 37, cols = 200, max_tok = 11, ldx = cols + 1, ldy = rows + 2;
    float *x = malloc((size_t)(max_tok * ldx) * sizeof(float));
    float *ya = malloc((size_t)(max_tok * ldy) * sizeof(float));
    float *yb = malloc((size_t)(max_tok * ldy) * sizeof(float));
    float *row = malloc((size_t)cols * sizeof(float));

    for (int64_t i = 0; i < max_tok * ldx; i++)
        x[i] = frnd() * ((i % ldx) % 13 == 2 ? 6.0f : 1.0f);
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        uint32_t t = types[ti];
        const struct qtype *qt = qtype_get(t);
        size_t rb = qtype_row_bytes(t, cols);
        uint8_t *w = make_weight(t, rows, cols);
        int bad = 0;
        /* each token alone (through the mirror kernel: a batch of one) */
        for (int64_t k = 0; k < max_tok; k++)
            kt_run_rows(ko, ko->mm_rows_mirror, t, w, rb, rows, cols, x, ldx, k, 1, 0, ya + k * ldy, ldy);
        for (int64_t k = 0; k < max_tok; k++) {
            for (int64_t r = 0; r < rows; r++) {
                /* exact product of the weight and the rounded activations */
                qt->to_float(w + (size_t)r * rb, row, cols);
                double s = 0, mag = 0;
                for (int64_t c = 0; c < cols; c++) {
                    float xv = x[k * ldx + c];
                    if (t == GGML_TYPE_F16)
                        xv = qconv_fp16_to_fp32(qconv_fp32_to_fp16(xv));
                    else if (t == GGML_TYPE_BF16)
                        xv = qconv_bf16_to_fp32(qconv_fp32_to_bf16(xv));
                    s += (double)row[c] * xv;
                    mag += fabs((double)row[c] * xv);
                }
                if (!(fabs(ya[k * ldy + r] - s) <= 1e-6 * mag + 1e-9) && bad++ < 3)
                    fprintf(stderr, "%s tok %lld row %lld: %.9g vs exact %.9g\n", qt->name,
                            (long long)k, (long long)r, ya[k * ldy + r], s);
            }
        }
        for (int64_t n = 2; n <= max_tok; n++) {
            for (int64_t t0 = 0; t0 + n <= max_tok; t0 += 2) {
                int64_t split = (n * 7 + t0) % (rows + 1);
                for (int64_t i = 0; i < max_tok * ldy; i++)
                    yb[i] = -777.0f;
                kt_run_rows(ko, ko->mm_rows_mirror, t, w, rb, rows, cols, x, ldx, t0, n, split, yb, ldy);
                for (int64_t k = 0; k < max_tok; k++)
                    for (int64_t r = 0; r < ldy; r++) {
                        float got = yb[k * ldy + r];
                        if (k >= n || r >= rows)
                            bad += got != -777.0f;
                        else
                            bad += memcmp(&got, &ya[(t0 + k) * ldy + r], 4) != 0;
                    }
            }
        }
        CHECK_EQ(bad, 0);
        free(w);
    }
    /* not the mirror's types or widths: nothing written */
    {
        uint8_t *w = make_weight(GGML_TYPE_F32, 4, 44);
        for (int64_t i = 0; i < max_tok * ldy; i++)
            yb[i] = -777.0f;
        ko->mm_rows_mirror(yb, ldy, w, 44 * 4, GGML_TYPE_F32, NULL, x, ldx, 3, 44, 0, 4, NULL);
        ko->mm_rows_mirror(yb, ldy, w, 18, GGML_TYPE_Q4_0, NULL, x, ldx, 3, 32, 0, 4, NULL);
        int touched = 0;
        for (int64_t i = 0; i < max_tok * ldy; i++)
            touched += yb[i] != -777.0f;
        CHECK_EQ(touched, 0);
        free(w);
    }
    free(x), free(ya), free(yb), free(row);
}

/* Q4_K (repack gemm) or Q6_K (tiled kernels): the avx2 kernel gives
 * ops_mm_rows_mirror_ref's bits over random blocks for any token count and
 * row range (20 rows: tiles of 8 and a remainder; 4096 columns: tiles of
 * fewer rows), outputs close to mm_rows' (the gemv's rounding, which
 * differs) */
static void
test_kmirror(const struct kernel_ops *ko, const struct kernel_ops *ref, uint32_t type,
             int64_t COLS)
{
    enum { ROWS = 20, NT = 7 };
    const int q6 = type == GGML_TYPE_Q6_K;
    const size_t bb = q6 ? 210 : 144, rb = (COLS / 256) * bb;
    uint8_t *w = malloc(ROWS * rb);
    float *x = malloc(NT * COLS * sizeof(float));
    float *ya = calloc(NT * ROWS, sizeof(float)), *yb = calloc(NT * ROWS, sizeof(float));
    float *yg = calloc(NT * ROWS, sizeof(float));
    size_t ws = ref->mm_work_size(type, NT, COLS);
    void *work = malloc(ws);
    float *tmp = malloc((size_t)ref->mm_tmp_floats(COLS) * sizeof(float) + 64);

    CHECK(w && x && ya && yb && yg && work && tmp);
    for (size_t i = 0; i < ROWS * rb; i++)
        w[i] = (uint8_t)(frnd() * 128 + 128);
    for (int64_t b = 0; b < ROWS * COLS / 256; b++) {
        uint16_t d = qconv_fp32_to_fp16(0.002f + 0.01f * fabsf(frnd()));
        uint16_t dm = qconv_fp32_to_fp16(0.001f + 0.005f * fabsf(frnd()));
        if (q6) {               /* ql, qh, scales, then d */
            memcpy(w + bb * b + 208, &d, 2);
        } else {                /* d, dmin, scales, qs */
            memcpy(w + bb * b, &d, 2);
            memcpy(w + bb * b + 2, &dm, 2);
        }
    }
    for (int64_t i = 0; i < NT * COLS; i++)
        x[i] = frnd() * (i % 37 == 0 ? 8.0f : 1.0f);
    ref->mm_prepare(work, type, x, COLS, NT, COLS);
    ops_mm_rows_mirror_ref(ya, ROWS, w, rb, type, work, x, COLS, NT, COLS, 0, ROWS, tmp);
    ref->mm_rows(yg, ROWS, w, rb, type, work, x, COLS, NT, COLS, 0, ROWS, tmp);
    /* the avx2 kernel: same bits, split into row ranges and token runs */
    for (int64_t t0 = 0; t0 < NT; t0 += 3) {
        int64_t n = NT - t0 < 3 ? NT - t0 : 3;
        size_t arb = ws / NT;
        ko->mm_rows_mirror(yb + t0 * ROWS, ROWS, w, rb, type,
                           (const uint8_t *)work + t0 * arb, x + t0 * COLS, COLS, n, COLS, 0, 5,
                           tmp);
        ko->mm_rows_mirror(yb + t0 * ROWS, ROWS, w, rb, type,
                           (const uint8_t *)work + t0 * arb, x + t0 * COLS, COLS, n, COLS, 5,
                           ROWS, tmp);
    }
    CHECK(memcmp(ya, yb, NT * ROWS * sizeof(float)) == 0);
    int ndiff = 0;
    for (int64_t i = 0; i < NT * ROWS; i++) {
        CHECK(fabsf(ya[i] - yg[i]) <= 1e-4f * (1.0f + fabsf(yg[i])));
        ndiff += ya[i] != yg[i];
    }
    CHECK(ndiff > 0);           /* the gemm rounds unlike the gemv */
    free(w), free(x), free(ya), free(yb), free(yg), free(work), free(tmp);
}

static void
test_float_ref(const struct kernel_ops *ko, const struct kernel_ops *ref)
{
    static const uint32_t types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16 };
    static const int64_t col_set[] = { 8, 44, 64, 136, 200, 512 };
    /* 20 rows split 3 + 17: the avx512 kernel's 8-row tiles and both edges */
    const int64_t rows = 20, max_tok = 17;
    int ndiff = 0;

    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        for (size_t ci = 0; ci < sizeof(col_set) / sizeof(col_set[0]); ci++) {
            uint32_t t = types[ti];
            int64_t cols = col_set[ci], ldx = cols + 3, ldy = rows + 1;
            size_t rb = qtype_row_bytes(t, cols);
            uint8_t *w = make_weight(t, rows, cols);
            float *x = malloc((size_t)(max_tok * ldx) * sizeof(float));
            float *yr = malloc((size_t)(max_tok * ldy) * sizeof(float));
            float *yk = malloc((size_t)(max_tok * ldy) * sizeof(float));
            float *yv = malloc((size_t)(max_tok * ldy) * sizeof(float));
            for (int64_t i = 0; i < max_tok * ldx; i++)
                x[i] = frnd() * ((i % ldx) % 7 == 3 ? 5.0f : 1.0f);
            for (int64_t n = 1; n <= max_tok; n++) {
                for (int mirror = 0; mirror < 2; mirror++) {
                    for (int64_t i = 0; i < max_tok * ldy; i++)
                        yr[i] = yk[i] = -777.0f;
                    kt_run_rows(ref, mirror ? ref->mm_rows_mirror : ref->mm_rows, t, w, rb, rows,
                                cols, x, ldx, 0, n, rows, yr, ldy);
                    kt_run_rows(ko, mirror ? ko->mm_rows_mirror : ko->mm_rows, t, w, rb, rows,
                                cols, x, ldx, 0, n, 3, yk, ldy);
                    if (memcmp(yr, yk, (size_t)(max_tok * ldy) * sizeof(float)) != 0) {
                        fprintf(stderr, "%s: %s %s cols %lld n %lld differs from ref\n", ko->name,
                                qtype_get(t)->name, mirror ? "mm_rows_mirror" : "mm_rows",
                                (long long)cols, (long long)n);
                        CHECK(0);
                    }
                    if (!mirror) {
                        memcpy(yv, yr, (size_t)(max_tok * ldy) * sizeof(float));
                        continue;
                    }
                    /* the mirror writes its outputs (cols % 8 == 0) and
                     * rounds unlike vec_dot for some of them */
                    for (int64_t i = 0; i < n * ldy; i++) {
                        int mine = i % ldy < rows && cols % 8 == 0;
                        CHECK(mine ? yr[i] != -777.0f : yr[i] == -777.0f);
                        ndiff += mine && yr[i] != yv[i];
                    }
                }
            }
            free(w), free(x), free(yr), free(yk), free(yv);
        }
    }
    CHECK(ndiff > 0);
}

int
main(int argc, char **argv)
{
    const struct kernel_ops *av = ops_select("avx2"), *ref = ops_select("ref");
    int verbose = argc > 1 && strcmp(argv[1], "-v") == 0;

    CHECK(ref != NULL && ref->mm_rows_mirror == ops_mm_rows_mirror_ref);
    /* the reference's tinyBLAS order against ggml's own outputs */
    const char *g = getenv("LLMKIT_GOLDEN_TINYBLAS");
    if (!g || !*g)
        g = "tests/golden/kernels/vecdot-tinyblas.json";
    if (ref) {
        int n = test_golden(ref, g, verbose);
        CHECK(n == 9 || (getenv("LLMKIT_GOLDEN_TINYBLAS") && n > 0));
    }
    if (!av) {
        fprintf(stderr, "test_matmul_mirror: no AVX2/FMA/F16C here, skipped\n");
        return t_fail ? t_fail : 77;
    }
    CHECK(av->mm_rows_mirror != NULL);
    if (!av->mm_rows_mirror)
        T_DONE();
    test_invariance(av);
    test_kmirror(av, ref, GGML_TYPE_Q4_K, 512);
    test_kmirror(av, ref, GGML_TYPE_Q4_K, 4096);
    test_kmirror(av, ref, GGML_TYPE_Q6_K, 512);
    test_kmirror(av, ref, GGML_TYPE_Q6_K, 4096);
    test_float_ref(av, ref);
    const struct kernel_ops *a5 = ops_select("avx512");
    if (a5) {
        test_kmirror(a5, ref, GGML_TYPE_Q4_K, 512);
        test_kmirror(a5, ref, GGML_TYPE_Q4_K, 4096);
        test_kmirror(a5, ref, GGML_TYPE_Q6_K, 512);
        test_kmirror(a5, ref, GGML_TYPE_Q6_K, 4096);
        test_float_ref(a5, ref);
        CHECK(test_golden(a5, g, verbose) == 9 || getenv("LLMKIT_GOLDEN_TINYBLAS"));
    }
    int n = test_golden(av, g, verbose);
    CHECK(n == 9 || (getenv("LLMKIT_GOLDEN_TINYBLAS") && n > 0));
    T_DONE();
}
