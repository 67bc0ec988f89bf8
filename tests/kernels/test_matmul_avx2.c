/*
 * test_matmul_avx2.c - the AVX2 matmul kernels against the scalar reference
 * and, bit for bit, against ggml's own results.
 *
 * 1. Every weight type, odd row counts, two row ranges (as two threads),
 *    n_tok 1..9: avx2 equals ref within f32 rounding of the block sums
 *    (both dot the same quantized activations; only the order of the f32
 *    operations differs), and mm_prepare writes the same work bytes.
 * 2. Batch invariance: every type, a token's outputs in batches of any size,
 *    at any position, with any row split, equal its outputs alone, bitwise.
 * 3. tests/golden/kernels/vecdot.json (scripts/mkgolden-vecdot, made by
 *    llama.cpp's libggml through scripts/llamacpp-vecdot.c): raw weights,
 *    activations of 9 tokens and ggml's mul_mat outputs for each token
 *    alone, as f32 bit patterns; every batch of those tokens (each size and
 *    offset, several row splits) must reproduce them exactly.
 *
 * Every check runs for the "avx2" table and, on a CPU that has AVX-512
 * F/BW/VL/DQ + VNNI, for the "avx512" one; check 2 also runs the avx512
 * table's packed Q4_0 and IQ4_NL layouts (kernel_ops.mm_pack) against its
 * single-token outputs, and 4. requires the avx512 outputs to equal the
 * avx2 ones bit for bit: every type, three widths, batches of 1-130 tokens
 * (each side of every TILE_MIN), three row splits of 290 rows (more than a
 * legacy tile).
 * 5. A table's packed layout is cut by rows (ops.h): 64-row slices packed
 *    on their own are the whole matrix's bytes.
 *
 * Exit 77 (skip) on a CPU without AVX2/FMA/F16C.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ops.h"
#include "cpu/attn_avx2.h"
#include "cpu/matmul_avx2.h"
#include "kernel_test.h"
#include "qconv.h"
#include "qtypes.h"
#include "quant.h"
#include "../unit/t.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static float
frnd(void)
{
    return (float)((double)rnd() / 2147483648.0 - 1.0);
}

/* matrices test_invariance checked in a table's packed layout */
static int n_packed;

static const uint32_t types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
    GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
    GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
};

/* a weight quantized from f32 values with the project's quantizer */
static void *
make_weight(uint32_t t, int64_t rows, int64_t cols)
{
    size_t rb = qtype_row_bytes(t, cols);
    uint8_t *w = malloc(rb * (size_t)rows);
    float *tmp = malloc((size_t)(rows * cols) * sizeof(float));

    for (int64_t r = 0; r < rows; r++) {
        float sc = 0.02f + 0.1f * (float)(rnd() % 100) / 100.0f;
        for (int64_t c = 0; c < cols; c++)
            tmp[r * cols + c] = frnd() * sc + (c % 7 == 0 ? 0.01f : 0.0f);
    }
    size_t got = quant_chunk(t, tmp, w, rows, cols, NULL);
    CHECK_EQ(got, rb * (size_t)rows);
    free(tmp);
    return w;
}

static void
test_vs_ref(const struct kernel_ops *av, const struct kernel_ops *ref)
{
    const int64_t rows = 13, max_tok = 9;

    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        uint32_t t = types[ti];
        const struct qtype *qt = qtype_get(t);
        int kq = qt->blck == 256;
        int64_t col_set[3] = { kq ? 256 : 96, kq ? 768 : 576, qt->blck == 1 ? 44 : (kq ? 512 : 64) };
        for (int ci = 0; ci < 3; ci++) {
            int64_t cols = col_set[ci], ldx = cols + 3, ldy = rows + 2;
            void *w = make_weight(t, rows, cols);
            size_t rb = qtype_row_bytes(t, cols);
            float *x = malloc((size_t)(max_tok * ldx) * sizeof(float));
            float *ya = malloc((size_t)(max_tok * ldy) * sizeof(float));
            float *yr = malloc((size_t)(max_tok * ldy) * sizeof(float));
            float *tmp = malloc((size_t)ref->mm_tmp_floats(cols) * sizeof(float));
            for (int64_t i = 0; i < max_tok * ldx; i++)
                x[i] = frnd() * (1.0f + (float)(i % 5));
            for (int64_t n_tok = 1; n_tok <= max_tok; n_tok++) {
                size_t ws = ref->mm_work_size(t, n_tok, cols);
                CHECK_EQ(av->mm_work_size(t, n_tok, cols), ws);
                uint8_t *wa = malloc(ws + 1), *wr = malloc(ws + 1);
                av->mm_prepare(wa, t, x, ldx, n_tok, cols);
                ref->mm_prepare(wr, t, x, ldx, n_tok, cols);
                if (memcmp(wa, wr, ws) != 0) {
                    fprintf(stderr, "%s: prepare differs (n_tok %lld)\n", qt->name, (long long)n_tok);
                    CHECK(0);
                }
                for (int64_t i = 0; i < max_tok * ldy; i++)
                    ya[i] = yr[i] = -777.0f;
                av->mm_rows(ya, ldy, w, rb, t, wa, x, ldx, n_tok, cols, 0, 6, tmp);
                av->mm_rows(ya, ldy, w, rb, t, wa, x, ldx, n_tok, cols, 6, rows, tmp);
                ref->mm_rows(yr, ldy, w, rb, t, wr, x, ldx, n_tok, cols, 0, rows, tmp);
                int bad = 0;
                for (int64_t k = 0; k < n_tok; k++) {
                    for (int64_t r = 0; r < ldy; r++) {
                        double a = ya[k * ldy + r], b = yr[k * ldy + r];
                        if (r >= rows) {
                            bad += a != -777.0f;
                            continue;
                        }
                        /* magnitude of the terms: |W| |x| row sum, via the dequantized row */
                        double mag = 0;
                        float *row = malloc((size_t)cols * sizeof(float));
                        qt->to_float((const uint8_t *)w + (size_t)r * rb, row, cols);
                        for (int64_t c = 0; c < cols; c++)
                            mag += fabs((double)row[c] * x[k * ldx + c]);
                        free(row);
                        /* BF16 in a batch of one rounds products to f32 before adding */
                        double tol = 4e-6 * mag + 1e-6;
                        if (!(fabs(a - b) <= tol) && bad++ < 3)
                            fprintf(stderr, "%s cols %lld n_tok %lld tok %lld row %lld: avx2 %.9g "
                                    "ref %.9g (tol %.3g)\n", qt->name, (long long)cols,
                                    (long long)n_tok, (long long)k, (long long)r, a, b, tol);
                    }
                }
                CHECK_EQ(bad, 0);
                /* all rows in one range (the 8-row decode groups and the
                 * remainder) give the same bits as the two ranges above */
                for (int64_t i = 0; i < max_tok * ldy; i++)
                    yr[i] = -777.0f;
                av->mm_rows(yr, ldy, w, rb, t, wa, x, ldx, n_tok, cols, 0, rows, tmp);
                if (memcmp(ya, yr, (size_t)(n_tok * ldy) * sizeof(float)) != 0) {
                    fprintf(stderr, "%s cols %lld n_tok %lld: rows [0,%lld) differ from [0,6)+[6,%lld)\n",
                            qt->name, (long long)cols, (long long)n_tok, (long long)rows, (long long)rows);
                    CHECK(0);
                }
                free(wa), free(wr);
            }
            free(w), free(x), free(ya), free(yr), free(tmp);
        }
    }
}

/* ---- golden: ggml's own outputs ---- */

/* Every batch [t0, t0 + n) of the golden tokens, with two row splits: each
 * token's outputs must be ggml's for that token alone, bit for bit. */
static int
test_golden(const struct kernel_ops *av, const char *path, int verbose)
{
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        fprintf(stderr, "%s: %s (run scripts/mkgolden-vecdot)\n", path, err.text);
        CHECK(0);
        return 0;
    }
    int64_t rows = json_integer_value(json_object_get(root, "rows"));
    int64_t cols = json_integer_value(json_object_get(root, "cols"));
    int64_t n_tok = json_integer_value(json_object_get(root, "n_tok"));
    uint8_t *xb = NULL;
    const char *xs = json_string_value(json_object_get(root, "x"));
    long xn = kt_unhex(xs ? xs : "", &xb);
    int ok = rows > 0 && cols > 0 && n_tok > 0 && xn == (long)(n_tok * cols * 4);
    CHECK(ok);
    if (!ok) {
        free(xb);
        json_decref(root);
        return 0;
    }
    const float *x = (const float *)(const void *)xb;
    json_t *cases = json_object_get(root, "types");
    size_t i;
    json_t *c;
    int n_cases = 0;
    float *y = malloc((size_t)(n_tok * rows) * sizeof(float));
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "type"));
        uint32_t t = (uint32_t)json_integer_value(json_object_get(c, "id"));
        const char *path_kind = json_string_value(json_object_get(c, "path"));
        json_t *alone = json_object_get(c, "alone");
        uint8_t *w = NULL;
        long wn = kt_unhex(json_string_value(json_object_get(c, "w")), &w);
        size_t rb = qtype_row_bytes(t, cols);
        ok = wn == (long)(rb * (size_t)rows) && (int64_t)json_array_size(alone) == n_tok * rows;
        CHECK(ok);
        if (!ok) {
            free(w);
            continue;
        }
        int bad = 0;
        for (int64_t n = 1; n <= n_tok; n++) {
            for (int64_t t0 = 0; t0 + n <= n_tok; t0++) {
                for (int64_t split = 0; split <= rows; split += 3) {
                    kt_run_rows(av, av->mm_rows, t, w, rb, rows, cols, x, cols, t0, n, split, y, rows);
                    for (int64_t k = 0; k < n * rows; k++) {
                        size_t gi = (size_t)(t0 * rows + k);
                        uint32_t want = (uint32_t)json_integer_value(json_array_get(alone, gi)), got;
                        memcpy(&got, &y[k], 4);
                        if (got != want) {
                            float wf;
                            memcpy(&wf, &want, 4);
                            if (bad++ < 2 || verbose)
                                fprintf(stderr, "golden %s (%s) batch [%lld, +%lld) split %lld "
                                        "token %lld row %lld: %.9g vs ggml alone %.9g\n", name,
                                        path_kind, (long long)t0, (long long)n, (long long)split,
                                        (long long)(t0 + k / rows), (long long)(k % rows), y[k], wf);
                        }
                    }
                    n_cases++;
                }
            }
        }
        if (verbose)
            fprintf(stderr, "golden %-7s %-12s: %s\n", name, path_kind, bad ? "DIFFERS" : "bit-exact");
        CHECK_EQ(bad, 0);
        free(w);
    }
    free(y);
    free(xb);
    json_decref(root);
    return n_cases;
}

/* ---- batch invariance ----
 * A token's outputs must not depend on the batch it shares or its place in
 * it, nor on how the rows are split across threads: for every type, tokens
 * computed in batches of 1..9, 16, 37 and 70 at several offsets, with
 * several row splits, equal the same tokens computed alone, bit for bit.
 * Rows and batch sizes are chosen to leave partial row tiles and token
 * groups in the kernels. */
/* The two widths checks 2 and 4 take per type: the first as before; the
 * second with F16 rows a multiple of 32 and legacy rows in several 16-row
 * tiles of the AVX-512 kernels. */
static int64_t
test_cols(const struct qtype *qt, int wi)
{
    if (qt->blck == 256)
        return 512 * (wi + 1);
    if (qt->blck == 1)
        return wi == 2 ? 1160 : wi ? 576 : 72;
    /* 4128: rows past the avx512 groups' 4096 columns, and a tile row
     * that fills the AVX2 tile's buffer (whose unpack once wrote mins past
     * it for the types without) */
    return wi == 2 ? 4128 : wi ? 1536 : 576;
}

/* Tokens [t0, t0 + n) of x in one batch, rows split at split, against
 * alone[token][row]; the number of tokens that differ (or that wrote past
 * the rows); the first few reported while seen (the caller's count so far)
 * is small.  t may carry OPS_MM_PACKED (w then the packed matrix). */
static int
batch_vs_alone(const struct kernel_ops *av, uint32_t t, const void *w, size_t rb, int64_t rows,
               int64_t cols, const float *x, int64_t ldx, int64_t t0, int64_t n, int64_t split,
               float *y, int64_t ldy, const float *alone, int seen)
{
    int bad = 0;
    for (int64_t i = 0; i < n * ldy; i++)
        y[i] = -777.0f;
    kt_run_rows(av, av->mm_rows, t, w, rb, rows, cols, x, ldx, t0, n, split, y, ldy);
    for (int64_t k = 0; k < n; k++) {
        if (memcmp(y + k * ldy, alone + (t0 + k) * rows, (size_t)rows * sizeof(float)) != 0 &&
            seen + bad++ < 3)
            fprintf(stderr, "%s%s: token %lld in batch [%lld, +%lld) split %lld differs from "
                    "alone\n", qtype_get(t & ~OPS_MM_PACKED)->name,
                    t & OPS_MM_PACKED ? " packed" : "", (long long)(t0 + k), (long long)t0,
                    (long long)n, (long long)split);
        if (y[k * ldy + rows] != -777.0f)
            bad++;
    }
    return bad;
}

static void
test_invariance(const struct kernel_ops *av)
{
    const int64_t rows = 37, max_tok = 140;
    /* 8: the avx512 table's k-quants through the small kernel (4 + 4
     * tokens); 9 and up its k-quant tiles (TILE_MIN_KQ); the Q4_K tiles'
     * last token group of every size */
    static const int64_t ns[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 37, 70, 128, 129, 131, 133, 135 };
    /* (4: a range ending on 4 rows and one on 1, pair_dec's last passes) */
    static const int64_t splits[] = { 0, 4, 5, 8, 16, 37 };

    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        uint32_t t = types[ti];
        const struct qtype *qt = qtype_get(t);
      for (int wi = 0; wi < 3; wi++) {
        int64_t cols = test_cols(qt, wi);
        int64_t ldx = cols + 5, ldy = rows + 3;
        void *w = make_weight(t, rows, cols);
        size_t rb = qtype_row_bytes(t, cols);
        float *x = malloc((size_t)(max_tok * ldx) * sizeof(float));
        float *alone = malloc((size_t)(max_tok * rows) * sizeof(float));
        float *y = malloc((size_t)(max_tok * ldy) * sizeof(float));
        for (int64_t i = 0; i < max_tok * ldx; i++)
            x[i] = frnd() * (i % 61 == 7 ? 6.0f : 1.0f);
        for (int64_t k = 0; k < max_tok; k++)
            kt_run_rows(av, av->mm_rows, t, w, rb, rows, cols, x, ldx, k, 1, rows, alone + k * rows, rows);
        int bad = 0;
        /* the table's own layout (kernel_ops.mm_pack): the same bits for
         * every token, batch and row split */
        size_t pb = av->mm_pack_size ? av->mm_pack_size(t, rows, cols) : 0;
        if (pb) {
            void *pk = aligned_alloc(64, (pb + 63) & ~(size_t)63);
            av->mm_pack(pk, w, rb, t, rows, cols);
            for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
                for (size_t si = 0; si < sizeof(splits) / sizeof(splits[0]); si++) {
                    int64_t n = ns[ni], t0 = max_tok - n;
                    bad += batch_vs_alone(av, t | OPS_MM_PACKED, pk, rb, rows, cols, x, ldx, t0, n,
                                          splits[si], y, ldy, alone, bad);
                }
            free(pk);
            n_packed++;
        }
        for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
            int64_t n = ns[ni];
            int64_t offs[3] = { 0, 3, max_tok - n };
            for (int oi = 0; oi < 3; oi++) {
                int64_t t0 = offs[oi];
                if (t0 + n > max_tok)
                    continue;
                for (size_t si = 0; si < sizeof(splits) / sizeof(splits[0]); si++) {
                    bad += batch_vs_alone(av, t, w, rb, rows, cols, x, ldx, t0, n, splits[si], y,
                                          ldy, alone, bad);
                }
            }
        }
        CHECK_EQ(bad, 0);
        free(w), free(x), free(alone), free(y);
      }
    }
}

/* 4. The avx512 table against the avx2 one, bit for bit. */
static void
test_same_bits(const struct kernel_ops *av, const struct kernel_ops *a5)
{
    /* more rows than one legacy tile holds (256), split anywhere */
    const int64_t rows = 290, max_tok = 130;
    /* each side of every TILE_MIN (matmul_avx512.c), and of
     * legacy_direct's groups of 8 tokens and of its 32 */
    static const int64_t ns[] = { 1, 2, 3, 4, 5, 8, 9, 16, 17, 19, 32, 33, 130 };
    static const int64_t splits[] = { 0, 13, 141 };

    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        uint32_t t = types[ti];
        const struct qtype *qt = qtype_get(t);
        for (int wi = 0; wi < 3; wi++) {
            int64_t cols = test_cols(qt, wi), ldx = cols + 1, ldy = rows + 1;
            size_t rb = qtype_row_bytes(t, cols);
            void *w = make_weight(t, rows, cols);
            float *x = malloc((size_t)(max_tok * ldx) * sizeof(float));
            float *y2 = malloc((size_t)(2 * max_tok * ldy) * sizeof(float)), *y5 = y2 + max_tok * ldy;
            for (int64_t i = 0; i < max_tok * ldx; i++)
                x[i] = frnd() * (i % 53 == 3 ? 5.0f : 1.0f);
            for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++)
                for (size_t si = 0; si < sizeof(splits) / sizeof(splits[0]); si++) {
                    int64_t n = ns[ni];
                    for (int64_t i = 0; i < n * ldy; i++)
                        y2[i] = y5[i] = -777.0f;
                    kt_run_rows(av, av->mm_rows, t, w, rb, rows, cols, x, ldx, 0, n, splits[si], y2, ldy);
                    kt_run_rows(a5, a5->mm_rows, t, w, rb, rows, cols, x, ldx, 0, n, splits[si], y5, ldy);
                    if (memcmp(y2, y5, (size_t)(n * ldy) * sizeof(float)) != 0) {
                        fprintf(stderr, "%s cols %lld, %lld tokens, split %lld: avx512 differs from avx2\n",
                                qt->name, (long long)cols, (long long)n, (long long)splits[si]);
                        CHECK(0);
                    }
                }
            free(w), free(x), free(y2);
        }
    }
}

/* The attention kernel's vector expf must equal the C library's expf bit for
 * bit (ggml calls expf): a sweep over every 97th float bit pattern from
 * -120 to +100 plus the special values. */
static void
test_expf(void)
{
    enum { N = 4096 };
    static float x[N], y[N];
    int64_t bad = 0, n = 0;
    static const float special[] = { 0.0f, -0.0f, 1.0f, -1.0f, 88.0f, 88.72f, 89.0f, -87.0f,
                                     -103.0f, -103.5f, -104.0f, -150.0f, 1e-30f, -1e-30f,
                                     INFINITY, -INFINITY, NAN };
    uint32_t lo, hi;
    float f = -120.0f;
    memcpy(&hi, &f, 4);                 /* negative: bit patterns grow toward -120 */
    f = 100.0f;
    memcpy(&lo, &f, 4);
    for (int pass = 0; pass < 3; pass++) {
        uint64_t u = pass == 0 ? 0x80000000u : 0, end = pass == 0 ? hi : lo;
        if (pass == 2) {
            memcpy(x, special, sizeof(special));
            u = end = 0;
        }
        while (pass == 2 || u < end) {
            int k = 0;
            if (pass == 2)
                k = (int)(sizeof(special) / sizeof(special[0]));
            else
                for (; k < N && u < end; k++, u += 97) {
                    uint32_t b = (uint32_t)u;
                    memcpy(&x[k], &b, 4);
                }
            ops_expf_libm_avx2(y, x, k);
            for (int i = 0; i < k; i++) {
                float want = expf(x[i]);
                if (memcmp(&want, &y[i], 4) != 0 && !(isnan(want) && isnan(y[i])) && bad++ < 3)
                    fprintf(stderr, "expf(%a): %a, libm %a\n", (double)x[i], (double)y[i],
                            (double)want);
            }
            n += k;
            if (pass == 2)
                break;
        }
    }
    CHECK(n > 10000000);
    CHECK_EQ(bad, 0);
}

/* The attention kernel's head-major fast path equals its slot-major loop bit
 * for bit (the loop whose results tests/kernels/test_ggml_exact.c checks
 * against ggml) on SmolLM2-shaped heads and on key sizes with a tail past
 * the 32-element steps (40, 72) or none (128), with large scores (many new
 * maxima and tiny weights), f16 and f32 caches, with and without masks,
 * blocks of 16 slots and of other sizes (1, 7, 17, 100: runs of visible
 * slots end at block edges) in a shuffled table, whole steps and chunk
 * calls (s0 anywhere, the state into part). */
static void
test_attn_paths(const struct kernel_ops *av)
{
    static const int64_t shapes[][2] = { { 64, 64 }, { 40, 32 }, { 72, 96 }, { 128, 128 } };
    static const int64_t sizes[] = { 16, 1, 7, 17, 100 };
    const int64_t nq = 3;
    int bad = 0;

    for (int trial = 0; trial < 160; trial++) {
        const int64_t dk = shapes[trial / 2 % 4][0], dv = shapes[trial / 2 % 4][1];
        const int64_t bs = sizes[trial / 16 % 5];
        int64_t nkv = 1 + (int64_t)(rnd() % 700), nblk = (nkv + bs - 1) / bs;
        int f16 = trial % 2 == 0;
        size_t esz = f16 ? 2 : 4;
        /* blocks as the pool lays them out: keys [bs][dk], then values [bs][dv] */
        const size_t stride = (size_t)(bs * (dk + dv)) * esz;
        uint8_t *kp = malloc((size_t)nblk * stride);
        uint8_t *vp = kp + (size_t)(bs * dk) * esz;
        for (int64_t i = 0; i < nblk * bs * (dk + dv); i++) {
            float x = frnd() * (i % (bs * (dk + dv)) < bs * dk ? 2.0f : 1.0f);
            if (f16) {
                uint16_t h = qconv_fp32_to_fp16(x);
                memcpy(kp + 2 * i, &h, 2);
            } else {
                memcpy(kp + 4 * i, &x, 4);
            }
        }
        float q[3 * 128], o1[3 * ATTN_PART(128)], o2[3 * ATTN_PART(128)];
        for (int i = 0; i < nq * dk; i++)
            q[i] = frnd() * (trial % 3 == 0 ? 1.5f : 15.0f);
        int32_t *tab = malloc((size_t)nblk * sizeof(int32_t));
        uint8_t *vis = malloc((size_t)nkv);
        for (int64_t i = 0; i < nblk; i++)
            tab[i] = (int32_t)i;
        for (int64_t i = nblk - 1; i > 0; i--) {
            int64_t j = (int64_t)(rnd() % (uint64_t)(i + 1));
            int32_t t = tab[i];
            tab[i] = tab[j], tab[j] = t;
        }
        for (int64_t i = 0; i < nkv; i++)
            vis[i] = rnd() % 5 != 0 || i == nkv - 1;
        float *scr = malloc((size_t)av->attn_scratch_floats(nq, bs, dk, dv) * sizeof(float));
        struct attn_args a = { q, o1, nq, dk, dv, 0.125f, kp, vp, stride,
                               f16 ? 1u : 0u, bs, tab, nkv, trial / 8 % 2 ? vis : NULL,
                               0, NULL, 0, 0 };
        /* every third trial one chunk call: slots s0 .. n_kv-1, state into part */
        int chunk = trial % 3 == 1;
        size_t nout = (size_t)(nq * (chunk ? ATTN_PART(dv) : dv));
        if (chunk) {
            a.s0 = (int64_t)(rnd() % (uint64_t)nkv);
            a.part = o1;
        }
        av->attn(&a, scr);
        a.out = o2;
        if (chunk)
            a.part = o2;
        ops_attn_slotwise_avx2(&a, scr);
        if (memcmp(o1, o2, nout * sizeof(float)) != 0 && bad++ < 3)
            fprintf(stderr, "attention trial %d (n_kv %lld, s0 %lld, block %lld, dk %lld, dv %lld, %s): "
                    "fast path differs\n", trial, (long long)nkv, (long long)a.s0, (long long)bs,
                    (long long)dk, (long long)dv, f16 ? "f16" : "f32");
        free(kp), free(tab), free(vis), free(scr);
    }
    CHECK_EQ(bad, 0);
}

/* mm_prepare on edge rows writes the reference's bytes: an all-zero block,
 * a block whose largest magnitude occurs as -a before +a (the first one sets
 * the scale's sign), exact halves after scaling, tiny and huge values, and
 * (Q8_K only, whose reference ignores them in the maximum) a NaN. */
static void
test_prepare_edges(const struct kernel_ops *av, const struct kernel_ops *ref)
{
    static const uint32_t pt[] = { GGML_TYPE_Q4_K, GGML_TYPE_Q8_0, GGML_TYPE_Q4_1, GGML_TYPE_F16,
                                   GGML_TYPE_BF16 };
    const int64_t cols = 1024, n_tok = 3;
    float *x = malloc((size_t)(n_tok * cols) * sizeof(float));

    for (size_t pi = 0; pi < sizeof(pt) / sizeof(pt[0]); pi++) {
        uint32_t t = pt[pi];
        for (int64_t i = 0; i < n_tok * cols; i++)
            x[i] = frnd() * 3.0f;
        for (int64_t i = 0; i < 256; i++)
            x[i] = 0.0f;                                    /* token 0, block 0: zeros */
        x[256 + 5] = -4.0f, x[256 + 77] = 4.0f;            /* block 1: -a first */
        for (int64_t i = 512; i < 768; i++)
            x[i] = (float)((i % 9) - 4) * 0.5f;             /* block 2: halves */
        x[768 + 3] = 1e-30f, x[768 + 4] = 3e30f;            /* block 3: tiny and huge */
        if (t == GGML_TYPE_Q4_K) {
            x[cols + 100] = NAN;                            /* token 1 */
            /* token 2, block 0: values whose scaled code differs when the
             * product and the rounding addition are fused (ggml rounds the
             * product first) */
            float *b = x + 2 * cols, iscale;
            int found = 0;
            b[0] = 3.0f;
            iscale = -127.0f / b[0];
            for (int k = 0; k < 200000 && found < 255; k++) {
                float c = (float)(k % 120) + 0.5f, v = c / -iscale;
                uint32_t u;
                memcpy(&u, &v, 4);
                u += (uint32_t)(k / 120) - 800;
                memcpy(&v, &u, 4);
                volatile float prod = iscale * v;
                float unf = prod + 12582912.0f, fus = fmaf(iscale, v, 12582912.0f);
                if (unf != fus && fabsf(v) < 3.0f)
                    b[1 + found++] = v;
            }
            CHECK(found > 8);
        }
        size_t ws = ref->mm_work_size(t, n_tok, cols);
        uint8_t *wa = malloc(ws + 1), *wr = malloc(ws + 1);
        av->mm_prepare(wa, t, x, cols, n_tok, cols);
        ref->mm_prepare(wr, t, x, cols, n_tok, cols);
        if (memcmp(wa, wr, ws) != 0) {
            fprintf(stderr, "%s: prepare differs from ref on edge rows\n", qtype_get(t)->name);
            CHECK(0);
        }
        free(wa), free(wr);
    }
    free(x);
}

/* A table's packed layout is cut by rows (ops.h): rows [64k, 64k + n)
 * packed on their own are the whole matrix's bytes at mm_pack_size(64k),
 * and no more of them (mm_pack_size(n) bytes), as the model packs a large
 * matrix in slices and the CPU backend each slice in runs of 64-row units
 * on its workers.  The slices are written last to first, so that one
 * that wrote past its end spoils the next one's bytes, and the bytes past
 * the matrix are marked. */
static void
test_pack_slices(const struct kernel_ops *av)
{
    const int64_t rows = 150, cols = 576;

    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        uint32_t t = types[ti];
        size_t pb = av->mm_pack_size ? av->mm_pack_size(t, rows, cols) : 0;
        if (!pb)
            continue;
        void *w = make_weight(t, rows, cols);
        size_t rb = qtype_row_bytes(t, cols);
        size_t pad = ((pb + 63) & ~(size_t)63) + 64;
        uint8_t *whole = aligned_alloc(64, pad), *cut = aligned_alloc(64, pad);
        memset(whole, 0x11, pad);
        memset(cut, 0x22, pad);
        av->mm_pack(whole, w, rb, t, rows, cols);
        CHECK_EQ(av->mm_pack_size(t, 0, cols), 0);
        for (int64_t r = (rows - 1) / 64 * 64; r >= 0; r -= 64) {
            int64_t n = rows - r < 64 ? rows - r : 64;
            size_t at = av->mm_pack_size(t, r, cols);
            CHECK_EQ(av->mm_pack_size(t, r + n, cols) - at, av->mm_pack_size(t, n, cols));
            av->mm_pack(cut + at, (const uint8_t *)w + (size_t)r * rb, rb, t, n, cols);
        }
        /* (a slice that wrote into the next one's bytes, written before it,
         * differs below; past the matrix, the marks must stay) */
        for (size_t i = pb; i < pad; i++)
            if (whole[i] != 0x11 || cut[i] != 0x22) {
                fprintf(stderr, "%s: packed past the matrix's %zu bytes\n", qtype_get(t)->name, pb);
                CHECK(0);
                break;
            }
        if (memcmp(whole, cut, pb) != 0) {
            fprintf(stderr, "%s: packed in slices of 64 rows differs from packed whole\n",
                    qtype_get(t)->name);
            CHECK(0);
        }
        free(whole), free(cut), free(w);
    }
}

int
main(int argc, char **argv)
{
    const struct kernel_ops *av = ops_select("avx2"), *ref = ops_select("ref");
    int verbose = argc > 1 && strcmp(argv[1], "-v") == 0;

    if (!av) {
        fprintf(stderr, "test_matmul_avx2: no AVX2/FMA/F16C here, skipped\n");
        return 77;
    }
    CHECK(ref != NULL);
    const struct kernel_ops *a5 = ops_select("avx512");
    CHECK(ops_select("auto") == (a5 ? a5 : av));
    if (!a5)
        fprintf(stderr, "test_matmul_avx2: avx512 kernels unavailable (CPU, or LLMKIT_NO_AVX512): the avx512 "
                "table's checks skipped\n");
    const char *g = getenv("LLMKIT_GOLDEN_VECDOT");
    int native = ops_mm_avx2_split256(0);
    /* the 256-bit decode forms, then the 128-bit-half ones, whatever this CPU
     * would choose; the avx512 table (AVX2 decode, AVX-512 batch tiles) the
     * same way: ggml's bits, batch invariant, so also the avx2 table's */
    const struct kernel_ops *tabs[2] = { av, a5 };
    for (int k = 0; k < 2 && tabs[k]; k++)
        for (int split = 0; split < 2; split++) {
            ops_mm_avx2_split256(split);
            test_vs_ref(tabs[k], ref);
            test_invariance(tabs[k]);
            int n = test_golden(tabs[k], g && *g ? g : "tests/golden/kernels/vecdot.json", verbose);
            CHECK(n > 0);
        }
    ops_mm_avx2_split256(native);
    /* the avx512 table packs Q4_0 and IQ4_NL (the two widths of up to 4096
     * columns, both decode forms) */
    CHECK_EQ(n_packed, a5 ? 8 : 0);
    if (a5) {
        test_same_bits(av, a5);
        test_pack_slices(a5);
    }
    test_prepare_edges(av, ref);
    test_expf();
    test_attn_paths(av);
    T_DONE();
}
