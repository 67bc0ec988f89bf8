/*
 * test_ops.c - every kernel of the dispatch table against a naive
 * double-precision computation on seeded inputs.
 *
 * Matmul is checked twice per weight type: with activations that the
 * activation quantizer represents exactly (powers of two times small
 * integers), where the integer block sums leave only f32 rounding; and with
 * random activations, against the error bound the quantization step
 * implies (ops.h).  The weights are random blocks with sane scales,
 * dequantized for the reference with the bit-exact qtype to_float.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "qblock.h"
#include "qconv.h"
#include "qtypes.h"
#include "../unit/t.h"

static uint64_t rng = 0x1234567887654321ull;

static uint32_t
rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* uniform in [-1, 1) */
static float
frnd(void)
{
    return (float)((double)rnd() / 2147483648.0 - 1.0);
}

static void
put_f16(uint8_t *p, float v)
{
    uint16_t h = qconv_fp32_to_fp16(v);
    memcpy(p, &h, 2);
}

/* offsets of the fp16 scale fields that must hold sane values */
struct fp16_fields {
    uint32_t type;
    int n;
    int off[2];
    float scale[2];             /* magnitude of the value to put there */
};

static const struct fp16_fields fields[] = {
    { GGML_TYPE_Q4_0, 1, { 0 }, { 0.02f } },
    { GGML_TYPE_Q4_1, 2, { 0, 2 }, { 0.02f, 0.1f } },
    { GGML_TYPE_Q5_0, 1, { 0 }, { 0.01f } },
    { GGML_TYPE_Q5_1, 2, { 0, 2 }, { 0.01f, 0.1f } },
    { GGML_TYPE_Q8_0, 1, { 0 }, { 0.002f } },
    { GGML_TYPE_Q2_K, 2, { 80, 82 }, { 0.01f, 0.01f } },
    { GGML_TYPE_Q3_K, 1, { 108 }, { 0.005f } },
    { GGML_TYPE_Q4_K, 2, { 0, 2 }, { 0.002f, 0.002f } },
    { GGML_TYPE_Q5_K, 2, { 0, 2 }, { 0.001f, 0.002f } },
    { GGML_TYPE_Q6_K, 1, { 208 }, { 0.0005f } },
    { GGML_TYPE_IQ4_NL, 1, { 0 }, { 0.001f } },
    { GGML_TYPE_IQ4_XS, 1, { 0 }, { 0.0005f } },
};

/* A random weight [rows, cols] of type t, and its dequantized f32 copy. */
static void *
make_weight(uint32_t t, int64_t rows, int64_t cols, float *deq)
{
    const struct qtype *qt = qtype_get(t);
    size_t rb = qtype_row_bytes(t, cols);
    uint8_t *w = malloc(rb * (size_t)rows);

    if (t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
        float *tmp = malloc((size_t)cols * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t c = 0; c < cols; c++)
                tmp[c] = frnd() * 0.1f;
            qt->from_float(tmp, w + (size_t)r * rb, cols);
        }
        free(tmp);
    } else {
        for (size_t i = 0; i < rb * (size_t)rows; i++)
            w[i] = (uint8_t)rnd();
        const struct fp16_fields *f = NULL;
        for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
            if (fields[i].type == t)
                f = &fields[i];
        for (int64_t b = 0; b < rows * cols / qt->blck; b++)
            for (int k = 0; k < f->n; k++)
                put_f16(w + (size_t)b * qt->bytes + f->off[k],
                        f->scale[k] * (k == 0 ? 0.5f + 0.5f * (float)(rnd() % 1000) / 1000.0f
                                              : frnd()));
    }
    for (int64_t r = 0; r < rows; r++)
        qt->to_float(w + (size_t)r * rb, deq + r * cols, cols);
    return w;
}

/* Activations the converters represent exactly: per 32-block, small
 * integers times 2^-6 with one element at +-127 * 2^-6 (the block maximum),
 * block sums below 2048 (so the Q8_1 fp16 sum is exact too). */
static void
exact_acts(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int k = (int)(rnd() % 121) - 60;
        if (i % 32 == 5)
            k = (rnd() & 1) ? 127 : -127;
        x[i] = (float)k * 0.015625f;
    }
}

static const uint32_t mm_types[] = {
    GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
    GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
    GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
};

/* activation quantization step of element c for weight type t, for the bound */
static double
act_err(uint32_t t, const float *x, int64_t c)
{
    if (t == GGML_TYPE_F32)
        return 0.0;
    if (t == GGML_TYPE_F16)
        return fabs(x[c]) * 0x1p-11;
    if (t == GGML_TYPE_BF16)
        return fabs(x[c]) * 0x1p-8;
    int blk = (t == GGML_TYPE_Q2_K || t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q4_K ||
               t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K || t == GGML_TYPE_IQ4_XS) ? 256 : 32;
    int64_t b0 = c / blk * blk;
    double amax = 0;
    for (int64_t i = b0; i < b0 + blk; i++)
        if (fabs(x[i]) > amax)
            amax = fabs(x[i]);
    /* half a step, plus the fp16 rounding of the block scale times 127 codes */
    return amax / 127.0 * (0.5 + (blk == 32 ? 127.0 * 0x1p-11 : 0.0));
}

static void
test_matmul(const struct kernel_ops *ops)
{
    const int64_t rows = 7, cols = 512, n_tok = 3, ldx = cols + 5, ldy = rows + 3;
    float *x = malloc((size_t)(n_tok * ldx) * sizeof(float));
    float *y = malloc((size_t)(n_tok * ldy) * sizeof(float));
    float *deq = malloc((size_t)(rows * cols) * sizeof(float));
    float *tmp = malloc((size_t)ops->mm_tmp_floats(cols) * sizeof(float));

    for (size_t ti = 0; ti < sizeof(mm_types) / sizeof(mm_types[0]); ti++) {
        uint32_t t = mm_types[ti];
        const char *tn = qtype_get(t)->name;
        CHECK(ops->mm_supported(t));
        void *w = make_weight(t, rows, cols, deq);
        size_t rb = qtype_row_bytes(t, cols);
        size_t ws = ops->mm_work_size(t, n_tok, cols);
        void *work = ws ? malloc(ws) : NULL;

        for (int pass = 0; pass < 2; pass++) {
            for (int64_t k = 0; k < n_tok; k++) {
                if (pass == 0)
                    exact_acts(x + k * ldx, cols);
                else
                    for (int64_t c = 0; c < cols; c++)
                        x[k * ldx + c] = frnd() * (k + 1);
            }
            for (int64_t i = 0; i < n_tok * ldy; i++)
                y[i] = -12345.0f;
            ops->mm_prepare(work, t, x, ldx, n_tok, cols);
            /* two row ranges, as two threads would do */
            ops->mm_rows(y, ldy, w, rb, t, work, x, ldx, n_tok, cols, 0, 3, tmp);
            ops->mm_rows(y, ldy, w, rb, t, work, x, ldx, n_tok, cols, 3, rows, tmp);
            int bad = 0;
            for (int64_t k = 0; k < n_tok; k++) {
                for (int64_t r = 0; r < rows; r++) {
                    double exact = 0, mag = 0, bound = 0;
                    for (int64_t c = 0; c < cols; c++) {
                        double wv = deq[r * cols + c], xv = x[k * ldx + c];
                        exact += wv * xv;
                        mag += fabs(wv * xv);
                        if (pass == 1)
                            bound += fabs(wv) * act_err(t, x + k * ldx, c);
                    }
                    if (pass == 1 && (t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1)) {
                        /* the block minimum meets the fp16-rounded activation sum */
                        const uint8_t *row = (const uint8_t *)w + (size_t)r * rb;
                        size_t bb = qtype_get(t)->bytes;
                        for (int64_t b = 0; b < cols / 32; b++) {
                            uint16_t mh;
                            memcpy(&mh, row + (size_t)b * bb + 2, 2);
                            double s = 0;
                            for (int c = 0; c < 32; c++)
                                s += fabs(x[k * ldx + 32 * b + c]);
                            bound += fabs(qconv_fp16_to_fp32(mh)) * (s + 1.0) * 0x1p-10;
                        }
                    }
                    double tol = bound + 2e-6 * mag + 1e-6;
                    double got = y[k * ldy + r];
                    if (!(fabs(got - exact) <= tol)) {
                        if (bad++ < 3)
                            fprintf(stderr, "matmul %s pass %d tok %lld row %lld: %.9g vs %.9g "
                                    "(tol %.3g)\n", tn, pass, (long long)k, (long long)r, got,
                                    exact, tol);
                    }
                }
                for (int64_t r = rows; r < ldy; r++)
                    if (y[k * ldy + r] != -12345.0f)
                        bad++;
            }
            CHECK_EQ(bad, 0);
        }

        /* get_row: the bit-exact dequantized row */
        float *row = malloc((size_t)cols * sizeof(float));
        ops->get_row(row, w, rb, t, 4, cols);
        CHECK(memcmp(row, deq + 4 * cols, (size_t)cols * sizeof(float)) == 0);
        free(row);
        free(work);
        free(w);
    }
    CHECK(!ops->mm_supported(GGML_TYPE_Q8_K));
    CHECK(!ops->mm_supported(GGML_TYPE_IQ2_XXS));
    CHECK(!ops->mm_supported(GGML_TYPE_I32));
    free(x), free(y), free(deq), free(tmp);
}

static void
test_rmsnorm(const struct kernel_ops *ops)
{
    const int64_t n = 300;
    float x[300], w[300], y[300];

    for (int64_t i = 0; i < n; i++) {
        x[i] = frnd() * 3.0f;
        w[i] = frnd();
    }
    for (int with_w = 0; with_w < 2; with_w++) {
        ops->rmsnorm(y, x, with_w ? w : NULL, n, 1e-5f);
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            s += (double)x[i] * x[i];
        double sc = 1.0 / sqrt(s / n + 1e-5);
        double err = 0;
        for (int64_t i = 0; i < n; i++) {
            double want = x[i] * sc * (with_w ? w[i] : 1.0);
            if (fabs(y[i] - want) > err)
                err = fabs(y[i] - want);
        }
        CHECK(err < 1e-5);
    }
    /* in place */
    float z[300];
    memcpy(z, x, sizeof(z));
    ops->rmsnorm(z, z, w, n, 1e-5f);
    ops->rmsnorm(y, x, w, n, 1e-5f);
    CHECK(memcmp(y, z, sizeof(z)) == 0);
}

/* head size 16 (n_rot 16 or 12: vector body and scalar tail) and 64 */
static void
test_rope(const struct kernel_ops *ops)
{
    const int64_t heads = 3;
    float x[192], y[192], r[192], cs[64], ff[32];

    for (int i = 0; i < 32; i++)
        ff[i] = 1.0f + (float)i;
    for (int style = 0; style < 2; style++) {
        for (int variant = 0; variant < 6; variant++) {
            int64_t hd = variant == 4 ? 64 : 16;
            /* variant 5: YaRN (scale 1/4, ramp over pairs 1 .. 5, magnitude 0.8 x) */
            struct rope_params p = { style ? ROPE_NEOX : ROPE_NORM,
                                     variant == 3 ? 12 : hd,
                                     variant == 1 ? 500000.0f : 10000.0f,
                                     variant == 2 || variant == 5 ? 0.25f : 1.0f,
                                     variant == 2 ? ff : NULL, variant == 5 ? 1.0f : 0.0f,
                                     variant == 5 ? 0.8f : 0.0f, { 1.0f, 5.0f } };
            int32_t pos = 37 + variant * 100;
            for (int i = 0; i < heads * hd; i++)
                x[i] = y[i] = r[i] = frnd();
            ops_rope_angles(cs, pos, &p);
            ops->rope(y, heads, hd, cs, &p);
            /* the reference's bits, whatever the table */
            ops_rope_ref(r, heads, hd, cs, &p);
            CHECK(memcmp(y, r, (size_t)(heads * hd) * sizeof(float)) == 0);
            int64_t half = p.n_rot / 2;
            double err = 0;
            for (int64_t h = 0; h < heads; h++) {
                for (int64_t i = 0; i < hd; i++) {
                    double want = x[h * hd + i];
                    if (i < p.n_rot) {
                        int64_t k = style ? (i < half ? i : i - half) : i / 2;
                        int64_t a = style ? k : 2 * k, b = style ? k + half : 2 * k + 1;
                        double te = pos * pow(p.freq_base, -2.0 * (double)k / (double)p.n_rot) /
                                    (p.freq_factors ? p.freq_factors[k] : 1.0);
                        double th = te * (double)p.freq_scale, mag = 1.0;
                        if (p.ext_factor != 0.0f) {
                            double y0 = (k - 1.0) / 4.0, rm = 1.0 - fmin(1.0, fmax(0.0, y0));
                            th = th * (1.0 - rm) + te * rm;
                            mag = 0.8 * (1.0 + 0.1 * log(4.0));
                        }
                        double xa = x[h * hd + a], xb = x[h * hd + b];
                        want = mag * ((i == a) ? xa * cos(th) - xb * sin(th)
                                               : xa * sin(th) + xb * cos(th));
                    }
                    if (fabs(y[h * hd + i] - want) > err)
                        err = fabs(y[h * hd + i] - want);
                }
            }
            /* f32 angles: error grows with pos * pair index */
            if (!(err < 2e-6 * pos * half + 1e-5))
                fprintf(stderr, "rope style %d variant %d: err %.3g\n", style, variant, err);
            CHECK(err < 2e-6 * pos * half + 1e-5);
        }
    }
    /* the tables against the reference on special inputs (infinities,
     * NaN, -0, subnormals) and a partial rotation (n_rot 48 of 64) */
    for (int style = 0; style < 2; style++) {
        static const float sp[] = { INFINITY, -INFINITY, NAN, -0.0f, 0.0f, 1e-40f, -3e-39f, 65504.0f };
        struct rope_params p = { style ? ROPE_NEOX : ROPE_NORM, 48, 10000.0f, 1.0f, NULL, 0, 0, { 0, 0 } };
        for (int i = 0; i < 128; i++)
            y[i] = r[i] = i % 5 == 0 ? sp[(i / 5) % 8] : frnd();
        ops_rope_angles(cs, 1234, &p);
        ops->rope(y, 2, 64, cs, &p);
        ops_rope_ref(r, 2, 64, cs, &p);
        for (int i = 0; i < 128; i++)
            CHECK(memcmp(&y[i], &r[i], 4) == 0 || (isnan(y[i]) && isnan(r[i])));
    }
    /* position 0 is the identity */
    struct rope_params p0 = { ROPE_NORM, 16, 10000.0f, 1.0f, NULL, 0, 0, { 0, 0 } };
    for (int i = 0; i < 48; i++)
        x[i] = y[i] = frnd();
    ops_rope_angles(cs, 0, &p0);
    ops->rope(y, heads, 16, cs, &p0);
    CHECK(memcmp(x, y, 48 * sizeof(float)) == 0);
}

static void
test_softmax_silu(const struct kernel_ops *ops)
{
    float x[100], y[100], g[100], u[100];
    double mx = -INFINITY, s = 0;

    for (int i = 0; i < 100; i++) {
        x[i] = y[i] = frnd() * 20.0f;
        if (i % 9 == 0)
            x[i] = y[i] = -INFINITY;
    }
    for (int i = 0; i < 100; i++)
        if (x[i] > mx)
            mx = x[i];
    for (int i = 0; i < 100; i++)
        s += exp(x[i] - mx);
    ops->softmax(y, 100);
    double err = 0, tot = 0;
    for (int i = 0; i < 100; i++) {
        if (fabs(y[i] - exp(x[i] - mx) / s) > err)
            err = fabs(y[i] - exp(x[i] - mx) / s);
        tot += y[i];
    }
    CHECK(err < 1e-6);
    CHECK_NEAR(tot, 1.0, 1e-5);
    for (int i = 0; i < 10; i++)
        y[i] = -INFINITY;
    ops->softmax(y, 10);
    for (int i = 0; i < 10; i++)
        CHECK(y[i] == 0.0f);

    for (int i = 0; i < 100; i++) {
        g[i] = frnd() * 10.0f;
        u[i] = frnd();
    }
    ops->silu_mul(y, g, u, 100);
    err = 0;
    for (int i = 0; i < 100; i++) {
        double want = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
        if (fabs(y[i] - want) > err)
            err = fabs(y[i] - want);
    }
    CHECK(err < 1e-5);
    memcpy(y, g, sizeof(y));
    ops->silu_mul(y, y, u, 100);        /* in place on gate */
    ops->silu_mul(x, g, u, 100);
    CHECK(memcmp(x, y, sizeof(x)) == 0);
}

/* GeGLU: every variant gives the reference's bits (ggml's f16 table, the
 * +-10 cut-offs, rows with a tail), in place too; the reference is within
 * the f16 rounding of the exact tanh-GELU. */
static void
test_gelu(const struct kernel_ops *ops)
{
    enum { N = 1003 };
    static float g[N], u[N], y[N], want[N];
    double err = 0;

    for (int i = 0; i < N; i++) {
        g[i] = frnd() * 24.0f - 12.0f;
        u[i] = frnd() * 2.0f - 1.0f;
    }
    g[0] = -10.0f, g[1] = 10.0f, g[2] = -9.999f, g[3] = 9.999f, g[4] = 0.0f, g[5] = -0.0f;
    ops_gelu_mul_ref(want, g, u, N);
    ops->gelu_mul(y, g, u, N);
    CHECK(memcmp(y, want, sizeof(y)) == 0);
    memcpy(y, g, sizeof(y));
    ops->gelu_mul(y, y, u, N);          /* in place on gate */
    CHECK(memcmp(y, want, sizeof(y)) == 0);
    CHECK(want[0] == 0.0f && want[1] == 10.0f * u[1]);
    for (int i = 0; i < N; i++) {
        double x = g[i];
        double t = x <= -10 ? 0 : x >= 10 ? x : 0.5 * x * (1 + tanh(0.7978845608028654 * x * (1 + 0.044715 * x * x)));
        /* two f16 roundings: of the gate (GELU's slope is at most 1.13) and of GELU */
        double e = fabs(want[i] - t * u[i]) / ((fabs(x) + fabs(t)) * fabs(u[i]) + 1e-30);
        err = e > err ? e : err;
    }
    CHECK(err < 1.5e-3);
}

/* The sliding window: lo in the one-row kernel equals a mask of the slots
 * below it, bit for bit, and a split step equals its chunks computed one by
 * one under lo and combined; the tiled kernel with per-row lo
 * gives the reference's bits. */
static void
test_attention_window(const struct kernel_ops *ops)
{
    const int64_t nq = 4, dk = 64, dv = 64, bs = 16;
    for (int f16 = 0; f16 < 2; f16++)
        for (int64_t n_kv = 40; n_kv <= 700; n_kv += 660) {
            size_t esz = f16 ? 2 : 4, krow = (size_t)dk * esz, vrow = (size_t)dv * esz;
            size_t block = (size_t)bs * (krow + vrow);
            int64_t nblk = (n_kv + bs - 1) / bs;
            uint8_t *pool = calloc((size_t)nblk, block);
            int32_t *table = malloc((size_t)nblk * sizeof(int32_t));
            uint8_t *vis = malloc((size_t)n_kv);
            float *q = malloc((size_t)(ATTN_TILE_Q * nq * dk) * 4);
            float *o1 = malloc((size_t)(ATTN_TILE_Q * nq * dv) * 4);
            float *o2 = malloc((size_t)(ATTN_TILE_Q * nq * dv) * 4);
            int64_t nscr = ops->attn_scratch_floats(nq, bs, dk, dv);
            int64_t nt = ops_attn_tiled_scratch_floats_ref(nq, dk, dv);
            if (ops->attn_tiled && ops->attn_tiled_scratch_floats(nq, dk, dv) > nt)
                nt = ops->attn_tiled_scratch_floats(nq, dk, dv);
            float *scr = aligned_alloc(64, (size_t)((nscr > nt ? nscr : nt) + 16 + 15) / 16 * 64);
            int64_t nkv[ATTN_TILE_Q], lo[ATTN_TILE_Q];
            for (int64_t b = 0; b < nblk; b++)
                table[b] = (int32_t)(nblk - 1 - b);     /* permuted blocks */
            for (size_t i = 0; i < (size_t)nblk * block / esz; i++) {
                float v = frnd() * 2.0f - 1.0f;
                if (f16) {
                    uint16_t h = qconv_fp32_to_fp16(v);
                    memcpy(pool + i * 2, &h, 2);
                } else {
                    memcpy(pool + i * 4, &v, 4);
                }
            }
            for (int64_t i = 0; i < ATTN_TILE_Q * nq * dk; i++)
                q[i] = frnd() * 2.0f - 1.0f;
            int64_t w = n_kv / 3;               /* the window */
            struct attn_args a = {
                q, o1, nq, dk, dv, 0.125f, pool, pool + (size_t)bs * krow, block,
                f16 ? GGML_TYPE_F16 : GGML_TYPE_F32, bs, table, n_kv, NULL, 0, NULL,
                n_kv - w,
                0,
            };
            ops->attn(&a, scr);
            if (ops_attn_chunks(a.kv_type, n_kv) == 1) {
                for (int64_t s = 0; s < n_kv; s++)
                    vis[s] = s >= n_kv - w;
                struct attn_args b = a;
                b.out = o2;
                b.vis = vis;
                b.lo = 0;
                ops->attn(&b, scr);
            } else {
                /* a split step: its slot-aligned chunks (a mask's would count
                 * visible slots, ops_attn_chunk), each under lo, combined */
                float part[4 * ATTN_PART(64)], ms[2 * 4];
                struct attn_args c;
                ops_attn_combine_begin(o2, ms, nq, dv);
                for (int64_t k = 0; k < ops_attn_chunks(a.kv_type, n_kv); k++) {
                    ops_attn_chunk(&c, &a, k, part);
                    ops->attn(&c, scr);
                    ops_attn_combine_add(o2, ms, part, nq, dv);
                }
                ops_attn_combine_end(o2, ms, nq, dv);
            }
            CHECK(memcmp(o1, o2, (size_t)(nq * dv) * 4) == 0);

            /* tiled: ATTN_TILE_Q rows ending at n_kv, each seeing its last w slots */
            if (!ops->attn_tiled)
                goto done;
            for (int64_t r = 0; r < ATTN_TILE_Q; r++) {
                nkv[r] = n_kv - ATTN_TILE_Q + r + 1;
                lo[r] = nkv[r] > w ? nkv[r] - w : 0;
            }
            struct attn_tiled_args t = {
                q, o1, nq * dk, nq * dv, ATTN_TILE_Q, nq, dk, dv, 0.125f, pool,
                pool + (size_t)bs * krow, block, f16 ? 1u : 0u, bs, table, nkv, lo, 0,
            };
            ops->attn_tiled(&t, scr);
            t.out = o2;
            ops_attn_tiled_ref(&t, scr);
            CHECK(memcmp(o1, o2, (size_t)(ATTN_TILE_Q * nq * dv) * 4) == 0);
            /* the window changes the result */
            t.lo = NULL;
            ops->attn_tiled(&t, scr);
            CHECK(memcmp(o1, o2, (size_t)(ATTN_TILE_Q * nq * dv) * 4) != 0);
        done:
            free(pool), free(table), free(vis), free(q), free(o1), free(o2), free(scr);
        }
}

/* MLA's absorbed attention: n_q query heads over one KV head whose K rows
 * are head_dim wide and whose V is a view of each K row's first head_dim_v
 * elements (v_base = k_base, v_stride = the K row's bytes).  The view gives
 * the bits of the same values stored as separate V rows, one-row (split
 * and not, f32, f16, q8_0) and tiled; and the result is within tolerance of
 * the f64 attention.  Shapes: DeepSeek-V2's 576/512 and a small 80/64. */
static void
test_attention_mla(const struct kernel_ops *ops)
{
    static const int64_t lens[] = { 37, 700 };
    const int64_t nq = 16, bs = 16;

    for (int shape = 0; shape < 2; shape++)
        for (uint32_t kt = 0; kt < 3; kt++)
            for (size_t li = 0; li < 2; li++) {
                uint32_t kv_type = kt == 2 ? GGML_TYPE_Q8_0 : kt;
                int64_t dk = shape ? 80 : 576, dv = shape ? 64 : 512, n_kv = lens[li];
                if (kv_type == GGML_TYPE_Q8_0 && dk % 32)
                    continue;
                size_t krow = kv_type == GGML_TYPE_Q8_0 ? (size_t)(dk / 32) * 34
                                                         : (size_t)dk * (kt ? 2 : 4);
                size_t vrow = kv_type == GGML_TYPE_Q8_0 ? (size_t)(dv / 32) * 34
                                                         : (size_t)dv * (kt ? 2 : 4);
                int64_t nblk = (n_kv + bs - 1) / bs;
                size_t kblock = (size_t)bs * krow, sblock = (size_t)bs * (krow + vrow);
                uint8_t *kpool = calloc((size_t)nblk, kblock);
                uint8_t *spool = calloc((size_t)nblk, sblock);  /* K then V rows per block */
                int32_t *table = malloc((size_t)nblk * sizeof(int32_t));
                float *q = malloc((size_t)(ATTN_TILE_Q * nq * dk) * 4);
                float *o1 = malloc((size_t)(ATTN_TILE_Q * nq * dv) * 4);
                float *o2 = malloc((size_t)(ATTN_TILE_Q * nq * dv) * 4);
                float *row = malloc((size_t)dk * 4), *back = malloc((size_t)dk * 4);
                double *K = malloc((size_t)(n_kv * dk) * sizeof(double));
                int64_t nscr = ops->attn_scratch_floats(nq, bs, dk, dv);
                int64_t nt = ops_attn_tiled_scratch_floats_ref(nq, dk, dv);
                if (ops->attn_tiled && ops->attn_tiled_scratch_floats(nq, dk, dv) > nt)
                    nt = ops->attn_tiled_scratch_floats(nq, dk, dv);
                if (ops_attn_scratch_floats_ref(nq, bs, dk, dv) > nscr)
                    nscr = ops_attn_scratch_floats_ref(nq, bs, dk, dv);
                float *scr = aligned_alloc(64, (size_t)((nscr > nt ? nscr : nt) + 16 + 15) / 16 * 64);
                int64_t nkv[ATTN_TILE_Q];

                for (int64_t b = 0; b < nblk; b++)
                    table[b] = (int32_t)(nblk - 1 - b);         /* permuted blocks */
                for (int64_t s = 0; s < n_kv; s++) {
                    size_t b = (size_t)table[s / bs];
                    uint8_t *kr = kpool + b * kblock + (size_t)(s % bs) * krow;
                    uint8_t *sk = spool + b * sblock + (size_t)(s % bs) * krow;
                    uint8_t *sv = spool + b * sblock + kblock + (size_t)(s % bs) * vrow;
                    for (int64_t i = 0; i < dk; i++)
                        row[i] = frnd() * 2.0f - 1.0f;
                    ops_kv_row_put(kv_type, kr, row, dk);
                    ops_kv_row_put(kv_type, sk, row, dk);
                    ops_kv_row_get(kv_type, back, kr, dk);
                    ops_kv_row_put(kv_type, sv, back, dv);  /* the same values, apart */
                    for (int64_t i = 0; i < dk; i++)
                        K[s * dk + i] = back[i];
                }
                for (int64_t i = 0; i < ATTN_TILE_Q * nq * dk; i++)
                    q[i] = (frnd() * 2.0f - 1.0f) * 0.2f;
                float scale = 1.0f / sqrtf(192.0f);
                struct attn_args a = {
                    q, o1, nq, dk, dv, scale, kpool, kpool, kblock, kv_type, bs, table, n_kv,
                    NULL, 0, NULL, 0, krow,
                };
                ops->attn(&a, scr);
                struct attn_args b = a;
                b.out = o2;
                b.k_base = spool;
                b.v_base = spool + kblock;
                b.block_stride = sblock;
                b.v_stride = 0;
                ops->attn(&b, scr);
                CHECK(memcmp(o1, o2, (size_t)(nq * dv) * 4) == 0);
                /* the f64 attention (f16: the query rounded; q8_0: loose) */
                double err = 0, mag = 0;
                for (int64_t h = 0; h < nq; h++) {
                    double mx = -INFINITY, sum = 0, *sc = malloc((size_t)n_kv * sizeof(double));
                    for (int64_t s = 0; s < n_kv; s++) {
                        double d = 0;
                        for (int64_t i = 0; i < dk; i++) {
                            float qi = q[h * dk + i];
                            if (kt == 1)
                                qi = qconv_fp16_to_fp32(qconv_fp32_to_fp16(qi));
                            d += (double)qi * K[s * dk + i];
                        }
                        sc[s] = d * scale;
                        mx = sc[s] > mx ? sc[s] : mx;
                    }
                    for (int64_t s = 0; s < n_kv; s++)
                        sum += (sc[s] = exp(sc[s] - mx));
                    for (int64_t i = 0; i < dv; i++) {
                        double o = 0;
                        for (int64_t s = 0; s < n_kv; s++)
                            o += sc[s] / sum * K[s * dk + i];
                        err = fmax(err, fabs(o - o1[h * dv + i]));
                        mag = fmax(mag, fabs(o));
                    }
                    free(sc);
                }
                /* f16: the accumulator's f16 rounding; q8_0: the query's and keys' codes */
                CHECK(err < (kv_type == GGML_TYPE_Q8_0 ? 2e-2 : kt == 1 ? 5e-3 : 1e-5) * (mag + 1e-3));

                /* tiled rows (f32, f16): the view gives the separate rows' bits,
                 * and the reference's */
                if (ops->attn_tiled && kv_type != GGML_TYPE_Q8_0 && n_kv >= ATTN_TILE_Q) {
                    for (int64_t r = 0; r < ATTN_TILE_Q; r++)
                        nkv[r] = n_kv - ATTN_TILE_Q + r + 1;
                    struct attn_tiled_args t = {
                        q, o1, nq * dk, nq * dv, ATTN_TILE_Q, nq, dk, dv, scale, kpool, kpool,
                        kblock, kt, bs, table, nkv, NULL, krow,
                    };
                    ops->attn_tiled(&t, scr);
                    struct attn_tiled_args u = t;
                    u.out = o2;
                    u.k_base = spool;
                    u.v_base = spool + kblock;
                    u.block_stride = sblock;
                    u.v_stride = 0;
                    ops_attn_tiled_ref(&u, scr);
                    CHECK(memcmp(o1, o2, (size_t)(ATTN_TILE_Q * nq * dv) * 4) == 0);
                }
                free(kpool), free(spool), free(table), free(q), free(o1), free(o2);
                free(row), free(back), free(K), free(scr);
            }
}

/* Paged attention: a sequence of n_kv slots in permuted physical blocks of
 * a small pool, K/V in f32 or f16, optional visibility. */
static void
test_attention(const struct kernel_ops *ops)
{
    const int64_t nq = 3, hd = 8, hdv = 6, bs = 4, n_phys = 6;
    const int64_t n_heads_kv = 2, head = 1;     /* the tested head within a block */
    const size_t krow_f = (size_t)hd, vrow_f = (size_t)hdv;

    for (int f16 = 0; f16 < 2; f16++) {
        size_t esz = f16 ? 2 : 4;
        /* block layout like the KV pool: K [heads][bs][hd] then V [heads][bs][hdv] */
        size_t kbytes = (size_t)n_heads_kv * bs * krow_f * esz;
        size_t block = kbytes + (size_t)n_heads_kv * bs * vrow_f * esz;
        uint8_t *pool = calloc((size_t)n_phys, block);
        int32_t table[4] = { 4, 1, 5, 0 };
        double K[16][8], Vv[16][6];
        float q[3 * 8], out[3 * 6];
        float *scr = malloc((size_t)ops->attn_scratch_floats(nq, bs, hd, hdv) * sizeof(float));
        uint8_t vis[16];

        for (int64_t s = 0; s < 16; s++) {
            uint8_t *b = pool + (size_t)table[s / bs] * block;
            uint8_t *kr = b + ((size_t)head * bs + (size_t)(s % bs)) * krow_f * esz;
            uint8_t *vr = b + kbytes + ((size_t)head * bs + (size_t)(s % bs)) * vrow_f * esz;
            for (int64_t i = 0; i < hd; i++) {
                float v = frnd() * 2.0f;
                if (f16) {
                    uint16_t h = qconv_fp32_to_fp16(v);
                    memcpy(kr + 2 * i, &h, 2);
                    v = qconv_fp16_to_fp32(h);
                } else {
                    memcpy(kr + 4 * i, &v, 4);
                }
                K[s][i] = v;
            }
            for (int64_t i = 0; i < hdv; i++) {
                float v = frnd();
                if (f16) {
                    uint16_t h = qconv_fp32_to_fp16(v);
                    memcpy(vr + 2 * i, &h, 2);
                    v = qconv_fp16_to_fp32(h);
                } else {
                    memcpy(vr + 4 * i, &v, 4);
                }
                Vv[s][i] = v;
            }
        }
        for (int i = 0; i < nq * hd; i++)
            q[i] = frnd() * 3.0f;

        for (int variant = 0; variant < 4; variant++) {
            int64_t n_kv = variant == 0 ? 13 : variant == 1 ? 16 : variant == 2 ? 5 : 1;
            int masked = variant == 2 || variant == 0;
            for (int64_t s = 0; s < 16; s++)
                vis[s] = !masked || (s % 3 != 1);
            struct attn_args a = {
                q, out, nq, hd, hdv, 0.35f,
                pool + (size_t)head * bs * krow_f * esz,
                pool + kbytes + (size_t)head * bs * vrow_f * esz,
                block, f16 ? GGML_TYPE_F16 : GGML_TYPE_F32, bs, table, n_kv,
                masked ? vis : NULL, 0, NULL, 0, 0,
            };
            ops->attn(&a, scr);
            double err = 0;
            for (int64_t h = 0; h < nq; h++) {
                double sc[16], mx = -INFINITY, sum = 0;
                for (int64_t s = 0; s < n_kv; s++) {
                    double dsum = 0;
                    for (int64_t i = 0; i < hd; i++)
                        dsum += (double)q[h * hd + i] * K[s][i];
                    sc[s] = vis[s] ? dsum * 0.35 : -INFINITY;
                    if (sc[s] > mx)
                        mx = sc[s];
                }
                for (int64_t s = 0; s < n_kv; s++)
                    sum += (sc[s] = vis[s] ? exp(sc[s] - mx) : 0.0);
                for (int64_t i = 0; i < hdv; i++) {
                    double o = 0;
                    for (int64_t s = 0; s < n_kv; s++)
                        o += sc[s] * Vv[s][i];
                    o /= sum;
                    if (fabs(out[h * hdv + i] - o) > err)
                        err = fabs(out[h * hdv + i] - o);
                }
            }
            /* f16 cache: the query is rounded to f16 and the accumulator
             * rounded after each slot (|v| < 1), as llama.cpp does */
            double tol = f16 ? (double)n_kv * 0x1p-11 + 1e-5 : 1e-5;
            if (!(err < tol))
                fprintf(stderr, "attention f16=%d variant %d: err %.3g\n", f16, variant, err);
            CHECK(err < tol);
        }
        /* nothing visible: zeros */
        memset(vis, 0, sizeof(vis));
        struct attn_args z = {
            q, out, nq, hd, hdv, 0.35f, pool, pool + kbytes, block,
            f16 ? GGML_TYPE_F16 : GGML_TYPE_F32, bs, table, 9, vis, 0, NULL, 0, 0,
        };
        ops->attn(&z, scr);
        for (int i = 0; i < nq * hdv; i++)
            CHECK(out[i] == 0.0f);
        free(scr);
        free(pool);
    }
}

/* A step over more than ATTN_SPLIT_MIN slots (split KV): close to the f64
 * attention; the same bits as its chunks run one by one with s0 and part
 * and combined (what the forward pass does over the pool); and, for an f16
 * cache, not the bits of the unsplit walk (one chunk call over all the
 * slots), so the split is in effect.  Head sizes 64 (the avx2 fast path) and
 * 8/6 (its slot-major loop). */
static void
test_attention_split(const struct kernel_ops *ops)
{
    static const int64_t lens[] = { 511, 512, 700, 1030 };
    const int64_t nq = 3, bs = 16;
    int differs = 0;

    for (int shape = 0; shape < 2; shape++)
        for (int f16 = 0; f16 < 2; f16++)
            for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
                int64_t n_kv = lens[li], dk = shape ? 8 : 64, dv = shape ? 6 : 64;
                int64_t nblk = (n_kv + bs - 1) / bs;
                size_t esz = f16 ? 2 : 4, krow = (size_t)dk * esz, vrow = (size_t)dv * esz;
                size_t block = (size_t)bs * (krow + vrow);
                uint8_t *pool = malloc((size_t)nblk * block);
                int32_t *table = malloc((size_t)nblk * sizeof(int32_t));
                uint8_t *vis = malloc((size_t)n_kv);
                double *K = malloc((size_t)(n_kv * dk) * sizeof(double));
                double *Vd = malloc((size_t)(n_kv * dv) * sizeof(double));
                double *sc = malloc((size_t)n_kv * sizeof(double));
                float q[3 * 64], out[3 * 64], chunks[3 * 64], one[3 * 64];
                int64_t nscr = ops->attn_scratch_floats(nq, bs, dk, dv);
                float *scr = malloc((size_t)nscr * sizeof(float));
                float *part = malloc((size_t)(nq * ATTN_PART(dv)) * sizeof(float));
                float ms[6];
                int masked = li % 2 == 1;

                for (int64_t b = 0; b < nblk; b++)
                    table[b] = (int32_t)((b * 5 + 2) % nblk);
                if (nblk % 5 == 0)
                    for (int64_t b = 0; b < nblk; b++)
                        table[b] = (int32_t)(nblk - 1 - b);
                for (int64_t s = 0; s < n_kv; s++) {
                    uint8_t *kr = pool + (size_t)table[s / bs] * block + (size_t)(s % bs) * krow;
                    uint8_t *vr = pool + (size_t)table[s / bs] * block + (size_t)bs * krow +
                                  (size_t)(s % bs) * vrow;
                    for (int64_t i = 0; i < dk + dv; i++) {
                        float v = frnd() * (i < dk ? 2.0f : 1.0f);
                        uint8_t *dst = i < dk ? kr + (size_t)i * esz : vr + (size_t)(i - dk) * esz;
                        if (f16) {
                            uint16_t h = qconv_fp32_to_fp16(v);
                            memcpy(dst, &h, 2);
                            v = qconv_fp16_to_fp32(h);
                        } else {
                            memcpy(dst, &v, 4);
                        }
                        if (i < dk)
                            K[s * dk + i] = v;
                        else
                            Vd[s * dv + i - dk] = v;
                    }
                    /* (1030 slots: the first 300 slots masked) */
                    vis[s] = !masked || (s % 7 != 3 && (n_kv < 1000 || s >= 300));
                }
                for (int64_t i = 0; i < nq * dk; i++)
                    q[i] = frnd() * 2.0f;
                struct attn_args a = {
                    q, out, nq, dk, dv, 0.3f, pool, pool + (size_t)bs * krow, block,
                    f16 ? GGML_TYPE_F16 : GGML_TYPE_F32, bs, table, n_kv, masked ? vis : NULL,
                    0, NULL, 0, 0,
                };
                ops->attn(&a, scr);

                /* the f64 attention (f16: the query rounded as the kernels do) */
                double err = 0;
                for (int64_t h = 0; h < nq; h++) {
                    double mx = -INFINITY, sum = 0;
                    for (int64_t s = 0; s < n_kv; s++) {
                        double d = 0;
                        for (int64_t i = 0; i < dk; i++) {
                            float qi = q[h * dk + i];
                            if (f16)
                                qi = qconv_fp16_to_fp32(qconv_fp32_to_fp16(qi));
                            d += (double)qi * K[s * dk + i];
                        }
                        sc[s] = vis[s] ? d * 0.3 : -INFINITY;
                        mx = sc[s] > mx ? sc[s] : mx;
                    }
                    for (int64_t s = 0; s < n_kv; s++)
                        sum += (sc[s] = vis[s] ? exp(sc[s] - mx) : 0.0);
                    for (int64_t i = 0; i < dv; i++) {
                        double o = 0;
                        for (int64_t s = 0; s < n_kv; s++)
                            o += sc[s] * Vd[s * dv + i];
                        o /= sum;
                        double e = fabs(out[h * dv + i] - o);
                        if (!(e <= err))
                            err = e;            /* (a NaN too) */
                    }
                }
                /* f16: accumulators rounded per slot, at most 256 slots per chunk */
                double tol = f16 ? 256 * 0x1p-12 : 1e-5;
                if (!(err < tol))
                    fprintf(stderr, "%s split attention n_kv %lld f16=%d dk %lld: err %.3g\n",
                            ops->name, (long long)n_kv, f16, (long long)dk, err);
                CHECK(err < tol);

                /* chunk by chunk, combined: chunks of ATTN_SPLIT_KV visible
                 * slots (all slots without a mask) */
                struct attn_args c = a;
                int64_t n_vis = 0;
                for (int64_t s = 0; s < n_kv; s++)
                    n_vis += vis[s];
                CHECK_EQ(ops_attn_n_vis(&a), n_vis);
                int64_t nch = ops_attn_chunks(a.kv_type, n_vis);
                CHECK_EQ(nch, n_vis < ATTN_SPLIT_MIN ? 1 : (n_vis + ATTN_SPLIT_KV - 1) / ATTN_SPLIT_KV);
                c.out = chunks;
                ops_attn_combine_begin(chunks, ms, nq, dv);
                for (int64_t k = 0; k < nch; k++) {
                    if (nch == 1) {         /* (ops_attn_chunk is for split steps) */
                        c.s0 = 0;
                        c.part = part;
                    } else {
                        ops_attn_chunk(&c, &a, k, part);
                        int64_t cv = 0;
                        for (int64_t s = c.s0; s < c.n_kv; s++)
                            cv += vis[s];
                        CHECK(vis[c.s0]);
                        CHECK_EQ(cv, k < nch - 1 ? ATTN_SPLIT_KV : n_vis - k * ATTN_SPLIT_KV);
                    }
                    c.out = chunks;
                    ops->attn(&c, scr);
                    ops_attn_combine_add(chunks, ms, part, nq, dv);
                }
                ops_attn_combine_end(chunks, ms, nq, dv);
                CHECK(memcmp(out, chunks, (size_t)(nq * dv) * sizeof(float)) == 0);

                /* the unsplit walk: one chunk call over every slot */
                c.s0 = 0;
                c.n_kv = n_kv;
                c.out = one;
                ops->attn(&c, scr);
                ops_attn_combine_begin(one, ms, nq, dv);
                ops_attn_combine_add(one, ms, part, nq, dv);
                ops_attn_combine_end(one, ms, nq, dv);
                if (nch == 1)
                    CHECK(memcmp(out, one, (size_t)(nq * dv) * sizeof(float)) == 0);
                else if (f16 && memcmp(out, one, (size_t)(nq * dv) * sizeof(float)) != 0)
                    differs++;
                free(pool), free(table), free(vis), free(K), free(Vd), free(sc), free(scr);
                free(part);
            }
    CHECK(differs > 0);
}

/* The one-row attention of every table against the avx2 table's, bit for
 * bit (the avx512 table shares heads' key and value widening: its own
 * kernel, cpu/attn_avx512.c), over 300 random shapes, each drawn on its
 * own: 1-16 heads (groups of up to 4, as even as they go), key widths
 * 32-576 and 40 (not a multiple of 32: the avx2 path), value widths 16-512
 * and 40, f32 and f16 caches and q8_0, 1-1100 slots (split from 257 on), a
 * mask or not, a window anywhere or none, and scores from mild to steep
 * (exponents past expf's fast range, a new maximum at most slots); the
 * whole step, and each chunk of a split one into part; outputs prefilled
 * with different bytes, so that one left unwritten differs. */
static size_t
kv_dtype_row_bytes_t(uint32_t kt, int64_t n)
{
    return kt == GGML_TYPE_Q8_0 ? (size_t)(n / 32) * 34 : (size_t)n * (kt == GGML_TYPE_F16 ? 2 : 4);
}

static void
test_attention_tables(void)
{
    const struct kernel_ops *b = ops_select("avx2");
    static const int64_t dks[] = { 32, 64, 96, 128, 256, 576, 40 };
    static const int64_t dvs[] = { 16, 32, 48, 64, 96, 128, 256, 512, 40 };
    static const int64_t lens[] = { 1, 7, 8, 9, 63, 64, 65, 200, 257, 700 };
    int own = 0;                /* cases the table's own fast path takes */

    if (!b)
        return;
    for (const char *const *nm = ops_names(); *nm; nm++) {
        const struct kernel_ops *o = strcmp(*nm, "auto") == 0 ? NULL : ops_select(*nm);
        if (!o || o == b || o == &kernel_ops_ref)
            continue;
        for (int it = 0; it < 300; it++) {
            int64_t nq = 1 + (int64_t)(rnd() % (rnd() % 4 ? 9 : 16));
            int64_t dk = dks[rnd() % 7], dv = dvs[rnd() % 9], bs = 16;
            int64_t n_kv = rnd() % 3 ? lens[rnd() % 10] : 1 + (int64_t)(rnd() % 1100);
            uint32_t kt = rnd() % 7 == 0 ? GGML_TYPE_Q8_0 : rnd() % 3 ? GGML_TYPE_F16 : GGML_TYPE_F32;
            if (kt == GGML_TYPE_Q8_0 && (dk % 32 || dv % 32))
                kt = GGML_TYPE_F16;
            int masked = rnd() % 3 == 0, drift = rnd() % 3 == 0;
            int64_t lo = rnd() % 3 == 0 ? (int64_t)(rnd() % (uint32_t)n_kv) : 0;
            size_t krow = kv_dtype_row_bytes_t(kt, dk), vrow = kv_dtype_row_bytes_t(kt, dv);
            size_t block = (size_t)bs * (krow + vrow);
            int64_t nblk = (n_kv + bs - 1) / bs;
            uint8_t *pool = calloc((size_t)nblk, block), *vis = malloc((size_t)n_kv);
            int32_t *table = malloc((size_t)nblk * sizeof(int32_t));
            float *q = malloc((size_t)(nq * dk) * 4), *row = malloc((size_t)(dk + dv) * 4);
            size_t ob = (size_t)(nq * (dv + 2)) * 4;
            float *o1 = malloc(ob), *o2 = malloc(ob);
            int64_t ns = o->attn_scratch_floats(nq, bs, dk, dv), nb = b->attn_scratch_floats(nq, bs, dk, dv);
            float *scr = aligned_alloc(64, (size_t)((ns > nb ? ns : nb) + 15) / 16 * 64);
            float steep = rnd() % 4 == 0 ? 40.0f : rnd() % 3 == 0 ? 4.0f : 1.0f;
            for (int64_t k = 0; k < nblk; k++)
                table[k] = (int32_t)(nblk - 1 - k);
            for (int64_t sl = 0; sl < n_kv; sl++) {
                uint8_t *blk = pool + (size_t)table[sl / bs] * block;
                /* keys drifting upward: a new maximum at most slots */
                for (int64_t i = 0; i < dk; i++)
                    row[i] = frnd() + (drift ? 0.01f * (float)sl : 0.0f);
                ops_kv_row_put(kt, blk + (size_t)(sl % bs) * krow, row, dk);
                for (int64_t i = 0; i < dv; i++)
                    row[i] = frnd();
                ops_kv_row_put(kt, blk + (size_t)bs * krow + (size_t)(sl % bs) * vrow, row, dv);
                /* some runs of masked slots longer than a chunk of 64 */
                vis[sl] = !masked || (sl / 80) % 3 != 1 ? rnd() % 4 != 0 || sl == n_kv - 1 : 0;
            }
            for (int64_t i = 0; i < nq * dk; i++)
                q[i] = frnd() * steep;
            struct attn_args a = {
                q, o1, nq, dk, dv, 1.0f / sqrtf((float)dk), pool, pool + (size_t)bs * krow, block,
                kt, bs, table, n_kv, masked ? vis : NULL, 0, NULL, lo, 0,
            };
            memset(o1, 0x55, ob);
            memset(o2, 0xaa, ob);
            o->attn(&a, scr);
            a.out = o2;
            b->attn(&a, scr);
            CHECK(memcmp(o1, o2, (size_t)(nq * dv) * 4) == 0);
            /* each chunk of a split step (state into part) */
            for (int64_t k = 0; ops_attn_chunks(kt, ops_attn_n_vis(&a)) > 1 &&
                                k < ops_attn_chunks(kt, ops_attn_n_vis(&a)); k++) {
                struct attn_args c;
                memset(o1, 0x55, ob);
                memset(o2, 0xaa, ob);
                ops_attn_chunk(&c, &a, k, o1);
                o->attn(&c, scr);
                ops_attn_chunk(&c, &a, k, o2);
                b->attn(&c, scr);
                CHECK(memcmp(o1, o2, (size_t)(nq * ATTN_PART(dv)) * 4) == 0);
            }
            own += kt != GGML_TYPE_Q8_0 && dk % 32 == 0 && dv % 16 == 0;
            free(pool), free(vis), free(table), free(q), free(row), free(o1), free(o2), free(scr);
        }
    }
    /* about two thirds of the shapes reach the avx512 kernel's own path */
    CHECK(!ops_select("avx512") || own > 150);
}

static void
test_dispatch(void)
{
    const struct kernel_ops *r = ops_select("ref");
    CHECK(r == &kernel_ops_ref);
    CHECK(r && r->available());
    CHECK(ops_select("auto") != NULL);
    CHECK(ops_select("no-such") == NULL);
    CHECK(ops_select("") == NULL);
    setenv("LLMKIT_KERNEL", "ref", 1);
    CHECK(ops_select(NULL) == &kernel_ops_ref);
    setenv("LLMKIT_KERNEL", "bogus", 1);
    CHECK(ops_select(NULL) == NULL);
    unsetenv("LLMKIT_KERNEL");
    CHECK(ops_select(NULL) != NULL);
    const char *const *names = ops_names();
    int n = 0, has_ref = 0;
    for (; names[n]; n++)
        has_ref |= strcmp(names[n], "ref") == 0;
    CHECK(has_ref);
    CHECK(r->mm_supported && r->mm_work_size && r->mm_prepare && r->mm_rows && r->mm_tmp_floats &&
          r->get_row && r->rmsnorm && r->rope && r->softmax && r->silu_mul && r->gelu_mul && r->attn &&
          r->attn_scratch_floats);
}

int
main(void)
{
    const struct kernel_ops *ops;

    test_dispatch();
    /* every implementation this CPU can run, against the same f64 truths */
    for (const char *const *nm = ops_names(); *nm; nm++) {
        if (strcmp(*nm, "auto") == 0)
            continue;
        ops = ops_select(*nm);
        if (!ops) {
            fprintf(stderr, "test_ops: kernels '%s' not available on this CPU, skipped\n", *nm);
            continue;
        }
        test_matmul(ops);
        test_rmsnorm(ops);
        test_rope(ops);
        test_softmax_silu(ops);
        test_gelu(ops);
        test_attention(ops);
        test_attention_window(ops);
        test_attention_split(ops);
        test_attention_mla(ops);
    }
    test_attention_tables();
    T_DONE();
}
