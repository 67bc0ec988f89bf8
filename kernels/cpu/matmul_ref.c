/*
 * matmul_ref.c - reference matmul of a weight [rows, cols] stored in any
 * supported ggml type by f32 activations, and the embedding row lookup.
 *
 * Numerics follow ggml's CPU backend, so that greedy decoding agrees with
 * llama.cpp token for token: the activations are first converted to the
 * weight type's "vec_dot type" and the dot products are taken against that:
 *
 *   weight                               activations
 *   F32                                  f32 as given
 *   F16, BF16                            rounded to f16 / bf16
 *   Q4_0, Q5_0, Q8_0, IQ4_NL             Q8_0 blocks (32, fp16 scale)
 *   Q4_1, Q5_1                           Q8_1 blocks (32, fp16 scale and sum)
 *   Q2_K..Q6_K, IQ4_XS                   Q8_K blocks (256, f32 scale, 16-sums)
 *
 * Q8_0 and Q8_1 are quantized as ggml's x86 code does (scale 127 / amax,
 * round half to even); Q8_K as quantize_row_q8_K_ref.  Products of the
 * integer codes are summed exactly in int32 per block (per super-block for
 * the k-quants, with the 6/8-bit sub-block scales applied in integers) and
 * then scaled in f32.
 *
 * Each weight row is decoded once per call into integer codes and scales
 * (or f32 for float types) in the caller's tmp buffer and then dotted with
 * every token's activations: one pass over the weights serves the batch.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"
#include "qconv.h"

#include "cpu/mm_layout.h"

int
ops_mm_supported_ref(uint32_t wtype)
{
    return act_type(wtype) != ACT_NONE;
}

size_t
ops_mm_work_size_ref(uint32_t wtype, int64_t n_tok, int64_t cols)
{
    return (size_t)n_tok * act_row_bytes(act_type(wtype), cols);
}

int64_t
ops_mm_tmp_floats_ref(int64_t cols)
{
    /* decoded row: int8 codes [cols] + per-block scales, < 1.5 cols bytes;
     * float types: cols floats */
    return cols + 16;
}

/* ---- activation conversion ---- */

/* Q8_0 / Q8_1 as ggml's x86 quantize_row_q8_0/_1: d = amax / 127 stored as
 * fp16, codes = round-half-even(x * (127 / amax)), s = fp16(d * sum). */
static void
quantize_q8_01(const float *x, int8_t *q, float *dd, float *ss, int64_t n)
{
    for (int64_t b = 0; b < n / 32; b++, x += 32, q += 32) {
        float amax = 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax)
                amax = fabsf(x[j]);
        float d = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int j = 0; j < 32; j++) {
            q[j] = (int8_t)nearbyintf(x[j] * id);
            sum += q[j];
        }
        dd[b] = qconv_fp16_to_fp32(qconv_fp32_to_fp16(d));
        ss[b] = qconv_fp16_to_fp32(qconv_fp32_to_fp16(d * (float)sum));
    }
}

/* round half to even, |f| <= 2^22 (ggml's nearest_int) */
static inline int
nearest_int(float f)
{
    float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

/* Q8_K as quantize_row_q8_K_ref: scale from the signed value of largest
 * magnitude, codes clamped to 127, sums of 16. */
static void
quantize_q8_k(const float *x, int8_t *q, float *dd, int16_t *bsums, int64_t n)
{
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K, q += QK_K, bsums += 16) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(q, 0, QK_K);
            memset(bsums, 0, 16 * sizeof(int16_t));
            dd[b] = 0.0f;
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = nearest_int(iscale * x[j]);
            q[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int s = 0; s < 16; s++) {
            int sum = 0;
            for (int j = 0; j < 16; j++)
                sum += q[16 * s + j];
            bsums[s] = (int16_t)sum;
        }
        dd[b] = 1.0f / iscale;
    }
}

void
ops_mm_prepare_ref(void *work, uint32_t wtype, const float *x, int64_t ldx, int64_t n_tok,
                   int64_t cols)
{
    enum act a = act_type(wtype);
    size_t rb = act_row_bytes(a, cols);

    for (int64_t t = 0; t < n_tok; t++) {
        const float *xt = x + t * ldx;
        void *yt = (uint8_t *)work + (size_t)t * rb;
        struct act_row r;
        switch (a) {
        case ACT_F16: {
            float *y = yt;
            for (int64_t i = 0; i < cols; i++)
                y[i] = qconv_fp16_to_fp32(qconv_fp32_to_fp16(xt[i]));
            break;
        }
        case ACT_BF16: {
            float *y = yt;
            for (int64_t i = 0; i < cols; i++)
                y[i] = qconv_bf16_to_fp32(qconv_fp32_to_bf16(xt[i]));
            break;
        }
        case ACT_Q8_0:
        case ACT_Q8_1:
            act_row_at(&r, a, yt, cols);
            quantize_q8_01(xt, (int8_t *)r.q, (float *)r.d, (float *)r.s, cols);
            break;
        case ACT_Q8_K:
            act_row_at(&r, a, yt, cols);
            quantize_q8_k(xt, (int8_t *)r.q, (float *)r.d, (int16_t *)r.bsums, cols);
            break;
        default:
            break;
        }
    }
}

/* ---- weight row decoding ----
 * Legacy 32-blocks: codes[cols], then d[nb], m[nb] floats.
 * K super-blocks:   codes[cols], then d[nb], dmin[nb] floats, then
 *                   sc[nb * 16], mn[nb * 16] int16 (per 16 elements;
 *                   32-element sub-blocks repeat their scale). */

struct decoded {
    int8_t *q;
    float *d, *m;
    int16_t *sc, *mn;
};

static void
decoded_layout(struct decoded *r, void *tmp, int64_t cols, int kq)
{
    uint8_t *p = tmp;
    int64_t nb = kq ? cols / QK_K : cols / 32;

    /* floats first (aligned), then int16, then the codes */
    r->d = (float *)(void *)p;
    r->m = r->d + nb;
    r->sc = (int16_t *)(void *)(r->m + nb);
    r->mn = r->sc + (kq ? nb * 16 : 0);
    r->q = (int8_t *)(r->mn + (kq ? nb * 16 : 0));
}

/* q[j] = low nibble - off, q[j + 16] = high nibble - off (restrict lets the
 * compiler vectorize these without alias checks) */
static inline void
unpack_nibbles(int8_t *restrict q, const uint8_t *restrict qs, int off)
{
    for (int j = 0; j < 16; j++)
        q[j] = (int8_t)((qs[j] & 15) - off);
    for (int j = 0; j < 16; j++)
        q[j + 16] = (int8_t)((qs[j] >> 4) - off);
}

static void
decode_legacy(const void *row, uint32_t type, int64_t cols, struct decoded *r)
{
    int64_t nb = cols / 32;

    for (int64_t b = 0; b < nb; b++) {
        int8_t *q = r->q + 32 * b;
        r->m[b] = 0.0f;
        switch (type) {
        case T_Q4_0: {
            const struct block_q4_0 *x = (const struct block_q4_0 *)row + b;
            r->d[b] = qconv_fp16_to_fp32(x->d);
            unpack_nibbles(q, x->qs, 8);
            break;
        }
        case T_Q4_1: {
            const struct block_q4_1 *x = (const struct block_q4_1 *)row + b;
            r->d[b] = qconv_fp16_to_fp32(x->d);
            r->m[b] = qconv_fp16_to_fp32(x->m);
            unpack_nibbles(q, x->qs, 0);
            break;
        }
        case T_Q5_0:
        case T_Q5_1: {
            const uint8_t *qs, *qhp;
            int off;
            if (type == T_Q5_0) {
                const struct block_q5_0 *x = (const struct block_q5_0 *)row + b;
                r->d[b] = qconv_fp16_to_fp32(x->d);
                qs = x->qs, qhp = x->qh, off = 16;
            } else {
                const struct block_q5_1 *x = (const struct block_q5_1 *)row + b;
                r->d[b] = qconv_fp16_to_fp32(x->d);
                r->m[b] = qconv_fp16_to_fp32(x->m);
                qs = x->qs, qhp = x->qh, off = 0;
            }
            uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 |
                          (uint32_t)qhp[3] << 24;
            for (int j = 0; j < 16; j++) {
                q[j] = (int8_t)(((qs[j] & 15) | ((qh >> j) & 1) << 4) - off);
                q[j + 16] = (int8_t)(((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - off);
            }
            break;
        }
        case T_Q8_0: {
            const struct block_q8_0 *x = (const struct block_q8_0 *)row + b;
            r->d[b] = qconv_fp16_to_fp32(x->d);
            memcpy(q, x->qs, 32);
            break;
        }
        case T_IQ4_NL: {
            const struct block_iq4_nl *x = (const struct block_iq4_nl *)row + b;
            r->d[b] = qconv_fp16_to_fp32(x->d);
            for (int j = 0; j < 16; j++) {
                q[j] = kvalues_iq4nl[x->qs[j] & 15];
                q[j + 16] = kvalues_iq4nl[x->qs[j] >> 4];
            }
            break;
        }
        default:
            break;
        }
    }
}

/* 6-bit scale and min codes of sub-block j (0..7) of Q4_K / Q5_K */
static void
scale_min_k4(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* k-quant unpacking helpers: plain loops over restrict pointers so the
 * compiler vectorizes them */
static inline void
unpack_lo_hi32(int8_t *restrict q, const uint8_t *restrict qs)
{
    for (int l = 0; l < 32; l++)
        q[l] = (int8_t)(qs[l] & 15);
    for (int l = 0; l < 32; l++)
        q[32 + l] = (int8_t)(qs[l] >> 4);
}

/* q[32g + l] = (qs[l] >> 2g) & 3 for g < 4: 128 elements from 32 bytes */
static inline void
unpack_crumbs(int8_t *restrict q, const uint8_t *restrict qs)
{
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++)
            q[32 * g + l] = (int8_t)((qs[l] >> (2 * g)) & 3);
}

/* q[32s + l] += add * bit s of m[l], for the 8 sub-blocks s of 32 */
static inline void
add_bits(int8_t *restrict q, const uint8_t *restrict m, int add, int base)
{
    for (int s8 = 0; s8 < 8; s8++)
        for (int l = 0; l < 32; l++)
            q[32 * s8 + l] = (int8_t)(q[32 * s8 + l] + base + add * ((m[l] >> s8) & 1));
}

static inline void
unpack_q6(int8_t *restrict q, const uint8_t *restrict ql, const uint8_t *restrict qh)
{
    for (int l = 0; l < 32; l++) {
        q[l] = (int8_t)(((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32);
        q[32 + l] = (int8_t)(((ql[32 + l] & 15) | ((qh[l] >> 2) & 3) << 4) - 32);
        q[64 + l] = (int8_t)(((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
        q[96 + l] = (int8_t)(((ql[32 + l] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
    }
}

static void
decode_kquant(const void *row, uint32_t type, int64_t cols, struct decoded *r)
{
    int64_t nb = cols / QK_K;

    for (int64_t b = 0; b < nb; b++) {
        int8_t *q = r->q + QK_K * b;
        int16_t *sc = r->sc + 16 * b, *mn = r->mn + 16 * b;
        r->m[b] = 0.0f;
        for (int s = 0; s < 16; s++)
            mn[s] = 0;
        switch (type) {
        case T_Q2_K: {
            const struct block_q2_K *x = (const struct block_q2_K *)row + b;
            r->d[b] = qconv_fp16_to_fp32(x->d);
            r->m[b] = qconv_fp16_to_fp32(x->dmin);
            unpack_crumbs(q, x->qs);
            unpack_crumbs(q + 128, x->qs + 32);
            for (int s = 0; s < 16; s++) {
                sc[s] = x->scales[s] & 15;
                mn[s] = x->scales[s] >> 4;
            }
            break;
        }
        case T_Q3_K: {
            const struct block_q3_K *x = (const struct block_q3_K *)row + b;
            r->d[b] = qconv_fp16_to_fp32(x->d);
            /* q = lo - 4 + 4 * high bit */
            unpack_crumbs(q, x->qs);
            unpack_crumbs(q + 128, x->qs + 32);
            add_bits(q, x->hmask, 4, -4);
            for (int k = 0; k < 16; k++) {
                int low = k < 8 ? x->scales[k] & 15 : x->scales[k - 8] >> 4;
                int high = (x->scales[8 + (k & 3)] >> (2 * (k >> 2))) & 3;
                sc[k] = (int16_t)((low | high << 4) - 32);
            }
            break;
        }
        case T_Q4_K:
        case T_Q5_K: {
            const uint8_t *scales, *qs, *qh = NULL;
            if (type == T_Q4_K) {
                const struct block_q4_K *x = (const struct block_q4_K *)row + b;
                r->d[b] = qconv_fp16_to_fp32(x->d);
                r->m[b] = qconv_fp16_to_fp32(x->dmin);
                scales = x->scales, qs = x->qs;
            } else {
                const struct block_q5_K *x = (const struct block_q5_K *)row + b;
                r->d[b] = qconv_fp16_to_fp32(x->d);
                r->m[b] = qconv_fp16_to_fp32(x->dmin);
                scales = x->scales, qs = x->qs, qh = x->qh;
            }
            for (int c = 0; c < 4; c++)
                unpack_lo_hi32(q + 64 * c, qs + 32 * c);
            if (qh)
                add_bits(q, qh, 16, 0);
            for (int j = 0; j < 8; j++) {
                int s, m;
                scale_min_k4(scales, j, &s, &m);
                sc[2 * j] = sc[2 * j + 1] = (int16_t)s;
                mn[2 * j] = mn[2 * j + 1] = (int16_t)m;
            }
            break;
        }
        case T_Q6_K: {
            const struct block_q6_K *x = (const struct block_q6_K *)row + b;
            r->d[b] = qconv_fp16_to_fp32(x->d);
            unpack_q6(q, x->ql, x->qh);
            unpack_q6(q + 128, x->ql + 64, x->qh + 32);
            for (int s = 0; s < 16; s++)
                sc[s] = x->scales[s];
            break;
        }
        case T_IQ4_XS: {
            const struct block_iq4_xs *x = (const struct block_iq4_xs *)row + b;
            r->d[b] = qconv_fp16_to_fp32(x->d);
            for (int ib = 0; ib < 8; ib++) {
                int lo4 = (x->scales_l[ib / 2] >> (4 * (ib & 1))) & 15;
                int hi2 = (x->scales_h >> (2 * ib)) & 3;
                sc[2 * ib] = sc[2 * ib + 1] = (int16_t)((lo4 | hi2 << 4) - 32);
                for (int j = 0; j < 16; j++) {
                    q[32 * ib + j] = kvalues_iq4nl[x->qs[16 * ib + j] & 15];
                    q[32 * ib + j + 16] = kvalues_iq4nl[x->qs[16 * ib + j] >> 4];
                }
            }
            break;
        }
        default:
            break;
        }
    }
}

/* ---- dot products ---- */

/* ggml_vec_dot_f32 / _f16 as ggml's AVX2 build computes them (vec.h,
 * simd-mappings.h: GGML_F32_STEP = GGML_F16_STEP = 32, EPR 8): element i < np
 * = n - n % 32 goes to lane i % 8 of accumulator (i / 8) % 4 by a fused
 * multiply-add; the accumulators are added lane-wise as (a0 + a2) + (a1 +
 * a3), then lanes k and k + 4 (s_k), then (s0 + s1) + (s2 + s3) (two hadds).
 * The leftovers: F32 fused into the sum one by one; F16 (dbl) products
 * rounded to f32 and summed in double. */
static float
dot_vec_f(const float *restrict w, const float *restrict x, int64_t n, int dbl)
{
    float a[4][8] = { { 0 } }, v[8], s[4];
    int64_t np = n & ~(int64_t)31, i;

    for (i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 8; k++)
                a[j][k] = fmaf(w[i + 8 * j + k], x[i + 8 * j + k], a[j][k]);
    for (int k = 0; k < 8; k++)
        v[k] = (a[0][k] + a[2][k]) + (a[1][k] + a[3][k]);
    for (int k = 0; k < 4; k++)
        s[k] = v[k] + v[k + 4];
    float sum = (s[0] + s[1]) + (s[2] + s[3]);
    if (!dbl) {
        for (i = np; i < n; i++)
            sum = fmaf(w[i], x[i], sum);
        return sum;
    }
    double sd = sum;
    for (i = np; i < n; i++)
        sd += (double)(w[i] * x[i]);
    return (float)sd;
}

/* ggml_vec_dot_bf16 (AVX2 build): as dot_vec_f's accumulation but with the
 * products rounded to f32 before the add, (c0 + c2) + (c1 + c3), mm_hsum8_ref,
 * leftovers in double. */
static float
dot_vec_bf16(const float *restrict w, const float *restrict x, int64_t n)
{
    float c[4][8] = { { 0 } }, v[8];
    int64_t np = n & ~(int64_t)31, i;

    for (i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 8; k++)
                c[j][k] = w[i + 8 * j + k] * x[i + 8 * j + k] + c[j][k];
    for (int k = 0; k < 8; k++)
        v[k] = (c[0][k] + c[2][k]) + (c[1][k] + c[3][k]);
    double sd = mm_hsum8_ref(v);
    for (i = np; i < n; i++)
        sd += (double)(w[i] * x[i]);
    return (float)sd;
}

static inline int32_t
dot_i8(const int8_t *a, const int8_t *b, int n)
{
    int32_t s = 0;
    for (int i = 0; i < n; i++)
        s += (int32_t)a[i] * (int32_t)b[i];
    return s;
}

/* Block sums go to 4 accumulators (block b to b % 4), added at the end:
 * independent chains instead of one long dependent one. */
static float
dot_q8_0(const struct decoded *r, const struct act_row *y, int64_t nb)
{
    float acc[4] = { 0 };
    for (int64_t b = 0; b < nb; b++) {
        int32_t si = dot_i8(r->q + 32 * b, y->q + 32 * b, 32);
        acc[b & 3] += (float)si * (r->d[b] * y->d[b]);
    }
    return (acc[0] + acc[2]) + (acc[1] + acc[3]);
}

static float
dot_q8_1(const struct decoded *r, const struct act_row *y, int64_t nb)
{
    float acc[4] = { 0 };
    for (int64_t b = 0; b < nb; b++) {
        int32_t si = dot_i8(r->q + 32 * b, y->q + 32 * b, 32);
        acc[b & 3] += (r->d[b] * y->d[b]) * (float)si + r->m[b] * y->s[b];
    }
    return (acc[0] + acc[2]) + (acc[1] + acc[3]);
}

static float
dot_q8_k(const struct decoded *r, const struct act_row *y, int64_t nb)
{
    float sum = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *q = r->q + QK_K * b, *yq = y->q + QK_K * b;
        const int16_t *sc = r->sc + 16 * b, *mn = r->mn + 16 * b, *bs = y->bsums + 16 * b;
        int32_t isum = 0, msum = 0;
        for (int s = 0; s < 16; s++) {
            isum += sc[s] * dot_i8(q + 16 * s, yq + 16 * s, 16);
            msum += mn[s] * bs[s];
        }
        sum += (r->d[b] * y->d[b]) * (float)isum - (r->m[b] * y->d[b]) * (float)msum;
    }
    return sum;
}

void
ops_mm_rows_ref(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                const void *work, const float *x, int64_t ldx, int64_t n_tok, int64_t cols,
                int64_t r0, int64_t r1, float *tmp)
{
    enum act a = act_type(wtype);
    size_t arb = act_row_bytes(a, cols);
    const uint8_t *wb = w, *act = work;
    struct decoded dec;

    decoded_layout(&dec, tmp, cols, a == ACT_Q8_K);
    for (int64_t r = r0; r < r1; r++) {
        const void *row = wb + (size_t)r * row_bytes;
        switch (a) {
        case ACT_F32:
            for (int64_t t = 0; t < n_tok; t++)
                y[t * ldy + r] = dot_vec_f(row, x + t * ldx, cols, 0);
            break;
        case ACT_F16:
        case ACT_BF16:
            if (a == ACT_F16)
                dequantize_row_f16_ref(row, tmp, cols);
            else
                dequantize_row_bf16_ref(row, tmp, cols);
            for (int64_t t = 0; t < n_tok; t++) {
                const float *xt = (const float *)(const void *)(act + (size_t)t * arb);
                y[t * ldy + r] = a == ACT_F16 ? dot_vec_f(tmp, xt, cols, 1)
                                              : dot_vec_bf16(tmp, xt, cols);
            }
            break;
        case ACT_Q8_0:
        case ACT_Q8_1:
            decode_legacy(row, wtype, cols, &dec);
            for (int64_t t = 0; t < n_tok; t++) {
                struct act_row ar;
                act_row_at(&ar, a, act + (size_t)t * arb, cols);
                y[t * ldy + r] = a == ACT_Q8_0 ? dot_q8_0(&dec, &ar, cols / 32)
                                               : dot_q8_1(&dec, &ar, cols / 32);
            }
            break;
        case ACT_Q8_K:
            decode_kquant(row, wtype, cols, &dec);
            for (int64_t t = 0; t < n_tok; t++) {
                struct act_row ar;
                act_row_at(&ar, a, act + (size_t)t * arb, cols);
                y[t * ldy + r] = dot_q8_k(&dec, &ar, cols / QK_K);
            }
            break;
        default:
            break;
        }
    }
}

/* ---- embedding rows ---- */

typedef void (*row_fn)(const void *x, float *y, int64_t n);

static row_fn
row_converter(uint32_t wtype)
{
    switch (wtype) {
    case T_F32: return dequantize_row_f32_ref;
    case T_F16: return dequantize_row_f16_ref;
    case T_BF16: return dequantize_row_bf16_ref;
    case T_Q4_0: return dequantize_row_q4_0_ref;
    case T_Q4_1: return dequantize_row_q4_1_ref;
    case T_Q5_0: return dequantize_row_q5_0_ref;
    case T_Q5_1: return dequantize_row_q5_1_ref;
    case T_Q8_0: return dequantize_row_q8_0_ref;
    case T_Q2_K: return dequantize_row_q2_k_ref;
    case T_Q3_K: return dequantize_row_q3_k_ref;
    case T_Q4_K: return dequantize_row_q4_k_ref;
    case T_Q5_K: return dequantize_row_q5_k_ref;
    case T_Q6_K: return dequantize_row_q6_k_ref;
    case T_IQ4_NL: return dequantize_row_iq4_nl_ref;
    case T_IQ4_XS: return dequantize_row_iq4_xs_ref;
    default: return NULL;
    }
}

void
ops_get_row_ref(float *y, const void *w, size_t row_bytes, uint32_t wtype, int64_t row,
                int64_t cols)
{
    row_fn conv = row_converter(wtype);

    if (conv)
        conv((const uint8_t *)w + (size_t)row * row_bytes, y, cols);
}
