/*
 * quant_ref.c - scalar quantizers, bit-exact with ggml_quantize_chunk of the
 * llama.cpp peer (ggml-quants.c built with -O3, no -mfma, SSE2 float math).
 *
 * Exactness rests on three things, kept throughout this file:
 *   - every float expression is evaluated in ggml's order with ggml's types
 *     (float, never double; int operands converted where ggml converts them),
 *     and the file is built with -ffp-contract=off so nothing is fused;
 *   - integer codes are stored into the same narrow types ggml stores them
 *     into (uint8_t / int8_t), including ggml's wrap-around on overflow,
 *     because later steps read them back;
 *   - float -> small integer casts reproduce what x86 does (cvttss2si, then
 *     the low byte), so inputs that make ggml overflow a cast (NaN, Inf,
 *     scales that underflow) still give the same bytes.
 *
 * Every block is assembled in a local struct and memcpy'd into dst, so dst
 * needs no alignment.  No allocation; scratch lives on the stack.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "qconv.h"
#include "qtypes.h"
#include "quant.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "quant_ref.c writes little-endian block fields directly: big-endian hosts are not supported"
#endif

/* Groups whose largest magnitude is below this are quantized as all zero. */
#define GROUP_EPS 1e-15f

#define to_fp16 qconv_fp32_to_fp16
#define from_fp16 qconv_fp16_to_fp32

/* ---- numeric helpers ---- */

/* Round to nearest, ties to even, via the 1.5 * 2^23 bias: the float sum has
 * a unit last place, so the addition itself rounds.  Valid for |v| < 2^22;
 * outside that range the bit pattern is garbage exactly as in ggml. */
static inline int
round_even(float v)
{
    float biased = v + 12582912.f;
    int32_t bits;

    memcpy(&bits, &biased, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

/* C cast float -> int32 as x86 performs it (cvttss2si): truncation, and
 * INT32_MIN for NaN and out-of-range values. */
static inline int32_t
trunc_x86(float v)
{
    if (v >= -2147483648.0f && v < 2147483648.0f)
        return (int32_t)v;
    return INT32_MIN;
}

/* (int8_t)v and (uint8_t)v of ggml's code on x86: the low byte of the above. */
static inline int8_t
trunc_i8(float v)
{
    return (int8_t)(uint8_t)((uint32_t)trunc_x86(v) & 0xff);
}

static inline uint8_t
trunc_u8(float v)
{
    return (uint8_t)((uint32_t)trunc_x86(v) & 0xff);
}

static inline int
imin(int a, int b)
{
    return a < b ? a : b;
}

static inline int
imax(int a, int b)
{
    return a > b ? a : b;
}

static inline int
clampi(int v, int lo, int hi)
{
    return imax(lo, imin(hi, v));
}

/* ---- scale searches shared by the k-quants and the weighted legacy types ---- */

/*
 * Symmetric codes l in [-nmax, nmax-1] for n values, stored as l + nmax, and
 * the scale minimizing sum w (x - scale*l)^2 over 19 trial inverse scales
 * around -nmax/max.  w = qw[i], or x[i]^2 without weights.  An all-zero group
 * leaves every code at 0 and returns 0.
 */
static float
search_sym(int n, int nmax, const float *x, int8_t *L, const float *qw)
{
    float max = 0, amax = 0;

    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }

    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(round_even(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;

    for (int is = -9; is <= 9; is++) {
        if (is == 0)
            continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(round_even(iscale * x[i]), -nmax, nmax - 1);
            float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = round_even(iscale * x[i]);
                L[i] = (int8_t)(nmax + clampi(l, -nmax, nmax - 1));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/*
 * Q3_K's unweighted search: codes in [-nmax, nmax-1] from -nmax/max, then up
 * to five passes of coordinate descent on sum x^2 (x - scale*l)^2, moving one
 * code at a time to its optimum given the others.  Codes come out as l + nmax
 * (0 for an all-zero group).
 */
static float
search_q3(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;

    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }

    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(round_even(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int nl = clampi(round_even(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (nl != L[i]) {
                    slx += w * x[i] * (float)nl;
                    sl2 += w * (float)nl * (float)nl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed)
            break;
    }
    for (int i = 0; i < n; i++)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/*
 * Affine codes l in [0, nmax] with x ~ scale*l - min_out (min_out >= 0):
 * start from the range [min(0, min x), max x], then try nstep + 1 inverse
 * scales (rmin + rdelta*is + nmax) / range, each followed by the weighted
 * least-squares scale and offset for its codes, keeping the one with the
 * smallest weighted error (|diff| when use_mad, else diff^2).
 *
 * The two ggml variants differ only in how they detect a flat group:
 * unweighted-era "x2" tests max == min and leaves L alone otherwise, "x3"
 * tests max <= min.  Both are needed for exactness.
 */
static float
search_affine(int n, int nmax, const float *x, const float *weights,
              uint8_t *L, float *min_out, uint8_t *Laux, float rmin,
              float rdelta, int nstep, int use_mad, int flat_is_le)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];

    for (int i = 1; i < n; i++) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (flat_is_le ? max <= min : max == min) {
        memset(L, 0, (size_t)n);
        *min_out = -min;
        return 0.f;
    }

    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_err = 0;
    for (int i = 0; i < n; i++) {
        int l = round_even(iscale * (x[i] - min));
        L[i] = (uint8_t)clampi(l, 0, nmax);
        float diff = scale * (float)L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_err += weights[i] * diff;
    }
    if (nstep < 1) {
        *min_out = -min;
        return scale;
    }

    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(round_even(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * (float)l;
            sum_l2 += w * (float)l * (float)l;
            sum_xl += w * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * (float)Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                err += weights[i] * diff;
            }
            if (err < best_err) {
                memcpy(L, Laux, (size_t)n);
                best_err = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *min_out = -min;
    return scale;
}

/*
 * Codes l in [0, nmax] for non-negative values (the sub-block scales and mins
 * of the weighted k-quants): the best of nine inverse scales around nmax/max
 * by weighted squared error, then coordinate descent as in search_q3.
 * Codes go through uint8_t as in ggml (a negative code would wrap).
 */
static float
search_pos(int n, int nmax, const float *x, uint8_t *L, const float *qw)
{
    float max = 0;

    for (int i = 0; i < n; i++)
        max = max > x[i] ? max : x[i];
    if (max < GROUP_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }

    float iscale = (float)nmax / max;
    for (int i = 0; i < n; i++)
        L[i] = (uint8_t)round_even(iscale * x[i]);
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * (float)L[i];
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0)
            continue;
        float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = imin(nmax, round_even(iscale_is * x[i]));
            float diff = x[i] - scale_is * (float)l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }

    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imin(nmax, round_even(iscale * x[i]));
        L[i] = (uint8_t)l;
        float w = qw[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = qw[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                int nl = imin(nmax, round_even(x[i] * sl2 / slx));
                if (nl != L[i]) {
                    slx += w * x[i] * (float)nl;
                    sl2 += w * (float)nl * (float)nl;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed)
            break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Imatrix weights of one group: qw[j] * sqrt(sigma2 + x[j]^2). */
static void
weights_imatrix(int n, const float *x, const float *qw, float sigma2, float *w)
{
    for (int j = 0; j < n; j++)
        w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
}

static float
sum_squares(const float *x, int64_t n)
{
    float s = 0;

    for (int64_t j = 0; j < n; j++)
        s += x[j] * x[j];
    return s;
}

static float
sum_floats(const float *x, int n)
{
    float s = 0;

    for (int j = 0; j < n; j++)
        s += x[j];
    return s;
}

/* 32 codes (0..15) into the nibble packing of the legacy blocks. */
static void
pack_nibbles32(uint8_t *qs, const uint8_t *L)
{
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

/* 32 five-bit codes into qs (low nibbles) and the 32-bit qh word. */
static void
pack_q5(uint8_t *qs, uint8_t qh_out[4], const uint8_t *L)
{
    uint32_t qh = 0;

    for (int j = 0; j < 16; j++) {
        uint8_t a = L[j], b = L[j + 16];
        qs[j] = (uint8_t)((a & 0x0f) | (b & 0x0f) << 4);
        qh |= ((a & 0x10u) >> 4) << j;
        qh |= ((b & 0x10u) >> 4) << (j + 16);
    }
    memcpy(qh_out, &qh, 4);
}

/* ---- legacy types without an imatrix (ggml's quantize_row_*_ref) ---- */

/* The element of largest magnitude (the first one on ties), and that magnitude. */
static float
signed_absmax(const float *x, int n, float *amax_out)
{
    float amax = 0, max = 0;

    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    *amax_out = amax;
    return max;
}

static void
min_max(const float *x, int n, float *min_out, float *max_out)
{
    float min = FLT_MAX, max = -FLT_MAX;

    for (int j = 0; j < n; j++) {
        if (x[j] < min)
            min = x[j];
        if (x[j] > max)
            max = x[j];
    }
    *min_out = min;
    *max_out = max;
}

static void
q4_0_plain(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK4_0, dst += sizeof(struct block_q4_0)) {
        struct block_q4_0 b;
        float amax;
        float max = signed_absmax(x, QK4_0, &amax);
        float d = max / -8.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;

        b.d = to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int8_t a = trunc_i8(x[j] * id + 8.5f);
            int8_t c = trunc_i8(x[j + 16] * id + 8.5f);
            uint8_t xa = (uint8_t)imin(15, a), xc = (uint8_t)imin(15, c);
            b.qs[j] = (uint8_t)(xa | xc << 4);
        }
        memcpy(dst, &b, sizeof b);
    }
}

static void
q4_1_plain(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK4_1, dst += sizeof(struct block_q4_1)) {
        struct block_q4_1 b;
        float min, max;

        min_max(x, QK4_1, &min, &max);
        float d = (max - min) / 15.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;

        b.d = to_fp16(d);
        b.m = to_fp16(min);
        for (int j = 0; j < 16; j++) {
            int8_t a = trunc_i8((x[j] - min) * id + 0.5f);
            int8_t c = trunc_i8((x[j + 16] - min) * id + 0.5f);
            uint8_t xa = (uint8_t)imin(15, a), xc = (uint8_t)imin(15, c);
            b.qs[j] = (uint8_t)(xa | xc << 4);
        }
        memcpy(dst, &b, sizeof b);
    }
}

static void
q5_0_plain(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK5_0, dst += sizeof(struct block_q5_0)) {
        struct block_q5_0 b;
        uint8_t L[QK5_0];
        float amax;
        float max = signed_absmax(x, QK5_0, &amax);
        float d = max / -16.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;

        b.d = to_fp16(d);
        for (int j = 0; j < QK5_0; j++)
            L[j] = (uint8_t)imin(31, trunc_i8(x[j] * id + 16.5f));
        pack_q5(b.qs, b.qh, L);
        memcpy(dst, &b, sizeof b);
    }
}

static void
q5_1_plain(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK5_1, dst += sizeof(struct block_q5_1)) {
        struct block_q5_1 b;
        uint8_t L[QK5_1];
        float min, max;

        min_max(x, QK5_1, &min, &max);
        float d = (max - min) / 31.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;

        b.d = to_fp16(d);
        b.m = to_fp16(min);
        for (int j = 0; j < QK5_1; j++)
            L[j] = trunc_u8((x[j] - min) * id + 0.5f);
        pack_q5(b.qs, b.qh, L);
        memcpy(dst, &b, sizeof b);
    }
}

static void
q8_0_plain(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK8_0, dst += sizeof(struct block_q8_0)) {
        struct block_q8_0 b;
        float amax = 0;

        for (int j = 0; j < QK8_0; j++) {
            float a = fabsf(x[j]);
            amax = amax > a ? amax : a;
        }
        float d = amax / 127.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;

        b.d = to_fp16(d);
        for (int j = 0; j < QK8_0; j++)
            b.qs[j] = trunc_i8(roundf(x[j] * id));
        memcpy(dst, &b, sizeof b);
    }
}

/* ---- legacy types with an imatrix (ggml's quantize_row_*_impl) ----
 * sigma2 is the mean square over the whole row. */

static void
q4_0_weighted(const float *x, uint8_t *dst, int64_t n, const float *qw)
{
    float sigma2 = sum_squares(x, n) / (float)n;

    for (int64_t ib = 0; ib < n / QK4_0; ib++, x += QK4_0, qw += QK4_0,
         dst += sizeof(struct block_q4_0)) {
        struct block_q4_0 b;
        float w[QK4_0];
        int8_t L[QK4_0];

        weights_imatrix(QK4_0, x, qw, sigma2, w);
        b.d = to_fp16(search_sym(QK4_0, 8, x, L, w));
        pack_nibbles32(b.qs, (const uint8_t *)L);
        memcpy(dst, &b, sizeof b);
    }
}

static void
q5_0_weighted(const float *x, uint8_t *dst, int64_t n, const float *qw)
{
    float sigma2 = sum_squares(x, n) / (float)n;

    for (int64_t ib = 0; ib < n / QK5_0; ib++, x += QK5_0, qw += QK5_0,
         dst += sizeof(struct block_q5_0)) {
        struct block_q5_0 b;
        float w[QK5_0];
        int8_t L[QK5_0];

        weights_imatrix(QK5_0, x, qw, sigma2, w);
        b.d = to_fp16(search_sym(QK5_0, 16, x, L, w));
        pack_q5(b.qs, b.qh, (const uint8_t *)L);
        memcpy(dst, &b, sizeof b);
    }
}

/* Q4_1 (nmax 15) and Q5_1 (nmax 31): affine search, then the matching packing. */
static void
q_1_weighted(const float *x, uint8_t *dst, int64_t n, const float *qw, int nmax)
{
    float sigma2 = sum_squares(x, n) / (float)n;

    for (int64_t ib = 0; ib < n / 32; ib++, x += 32, qw += 32) {
        float w[32], min;
        uint8_t L[32], Laux[32];

        weights_imatrix(32, x, qw, sigma2, w);
        float d = search_affine(32, nmax, x, w, L, &min, Laux, -0.9f, 0.05f, 36, 0, 1);
        if (nmax == 15) {
            struct block_q4_1 b;
            b.d = to_fp16(d);
            b.m = to_fp16(-min);
            pack_nibbles32(b.qs, L);
            memcpy(dst, &b, sizeof b);
            dst += sizeof b;
        } else {
            struct block_q5_1 b;
            b.d = to_fp16(d);
            b.m = to_fp16(-min);
            pack_q5(b.qs, b.qh, L);
            memcpy(dst, &b, sizeof b);
            dst += sizeof b;
        }
    }
}

/* ---- k-quant packing helpers ---- */

/* 256 2-bit codes: qs[32h + l] holds elements 128h + l + 32g at bits 2g. */
static void
pack_2bit(uint8_t *qs, const uint8_t *L)
{
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 |
                                      L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

/* The 12-byte packing of eight 6-bit scales and mins (Q4_K, Q5_K). */
static void
pack_scale_min(uint8_t s[K_SCALE_SIZE], const uint8_t *ls, const uint8_t *lm)
{
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xf) | (lm[j] & 0xf) << 4);
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

static void
unpack_scale_min(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xf) | (q[j - 4] >> 6) << 4);
        *m = (uint8_t)((q[j + 4] >> 4) | (q[j] >> 6) << 4);
    }
}

/* Requantize each 32-group of a Q4_K/Q5_K super-block against the stored
 * (fp16-rounded) scales; groups with a zero scale keep their codes. */
static void
requant_scale_min(const float *x, uint8_t *L, uint16_t dh, uint16_t mh,
                  const uint8_t *scales, int nmax)
{
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t sc, m;
        unpack_scale_min(j, scales, &sc, &m);
        const float d = from_fp16(dh) * (float)sc;
        if (d == 0)
            continue;
        const float dm = from_fp16(mh) * (float)m;
        for (int ii = 0; ii < 32; ii++) {
            int l = round_even((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)clampi(l, 0, nmax);
        }
    }
}

static void
pack_q4_k_codes(uint8_t *qs, const uint8_t *L)
{
    for (int j = 0; j < QK_K; j += 64, qs += 32)
        for (int l = 0; l < 32; l++)
            qs[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
}

static void
pack_q5_k_codes(uint8_t *qs, uint8_t *qh, const uint8_t *L)
{
    uint8_t m1 = 1, m2 = 2;

    memset(qh, 0, QK_K / 8);
    for (int n = 0; n < QK_K; n += 64, qs += 32) {
        for (int j = 0; j < 32; j++) {
            int l1 = L[n + j], l2 = L[n + j + 32];
            if (l1 > 15) {
                l1 -= 16;
                qh[j] |= m1;
            }
            if (l2 > 15) {
                l2 -= 16;
                qh[j] |= m2;
            }
            qs[j] = (uint8_t)(l1 | l2 << 4);
        }
        m1 = (uint8_t)(m1 << 2);
        m2 = (uint8_t)(m2 << 2);
    }
}

/* Q3_K scale codes (0..63) into the 12-byte layout. */
static void
pack_q3_scales(uint8_t s[12], int j, int l)
{
    if (j < 8)
        s[j] = (uint8_t)(l & 0xf);
    else
        s[j - 8] |= (uint8_t)((l & 0xf) << 4);
    l >>= 4;
    s[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
}

/* Requantize a Q3_K super-block against the stored scales, then split the
 * codes (0..7) into hmask bits and 2-bit qs. */
static void
finish_q3_k(const float *x, int8_t *L, struct block_q3_K *b)
{
    for (int j = 0; j < QK_K / 16; j++) {
        int8_t sc = (int8_t)(j < 8 ? b->scales[j] & 0xf : b->scales[j - 8] >> 4);
        sc = (int8_t)((sc | ((b->scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32);
        float d = from_fp16(b->d) * (float)sc;
        if (d == 0)
            continue;
        for (int ii = 0; ii < 16; ii++) {
            int l = clampi(round_even(x[16 * j + ii] / d), -4, 3);
            L[16 * j + ii] = (int8_t)(l + 4);
        }
    }

    memset(b->hmask, 0, sizeof b->hmask);
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < QK_K; j++) {
        if (L[j] > 3) {
            b->hmask[m] |= hm;
            L[j] = (int8_t)(L[j] - 4);
        }
        if (++m == QK_K / 8) {
            m = 0;
            hm = (uint8_t)(hm << 1);
        }
    }
    pack_2bit(b->qs, (const uint8_t *)L);
}

/* Requantize a Q6_K super-block against its stored scales and pack it. */
static void
finish_q6_k(const float *x, int8_t *L, struct block_q6_K *b)
{
    for (int j = 0; j < QK_K / 16; j++) {
        float d = from_fp16(b->d) * (float)b->scales[j];
        if (d == 0)
            continue;
        for (int ii = 0; ii < 16; ii++) {
            int l = clampi(round_even(x[16 * j + ii] / d), -32, 31);
            L[16 * j + ii] = (int8_t)(l + 32);
        }
    }

    uint8_t *ql = b->ql, *qh = b->qh;
    const uint8_t *u = (const uint8_t *)L;
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; l++) {
            uint8_t q1 = u[j + l] & 0xf, q2 = u[j + l + 32] & 0xf;
            uint8_t q3 = u[j + l + 64] & 0xf, q4 = u[j + l + 96] & 0xf;
            ql[l] = (uint8_t)(q1 | q3 << 4);
            ql[l + 32] = (uint8_t)(q2 | q4 << 4);
            qh[l] = (uint8_t)(u[j + l] >> 4 | (u[j + l + 32] >> 4) << 2 |
                              (u[j + l + 64] >> 4) << 4 | (u[j + l + 96] >> 4) << 6);
        }
    }
}

/* ---- Q2_K ---- */

static void
q2_k_plain(const float *x, uint8_t *dst, int64_t nb)
{
    const float q4scale = 15.f;

    for (int64_t i = 0; i < nb; i++, x += QK_K, dst += sizeof(struct block_q2_K)) {
        struct block_q2_K b;
        uint8_t L[QK_K], Laux[16];
        float w[16], mins[QK_K / 16], scales[QK_K / 16];
        float max_scale = 0, max_min = 0;

        for (int j = 0; j < QK_K / 16; j++) {
            for (int l = 0; l < 16; l++)
                w[l] = fabsf(x[16 * j + l]);
            scales[j] = search_affine(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux,
                                      -0.5f, 0.1f, 15, 1, 0);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }

        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; j++)
                b.scales[j] = (uint8_t)round_even(iscale * scales[j]);
            b.d = to_fp16(max_scale / q4scale);
        } else {
            memset(b.scales, 0, sizeof b.scales);
            b.d = to_fp16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; j++)
                b.scales[j] |= (uint8_t)((unsigned)round_even(iscale * mins[j]) << 4);
            b.dmin = to_fp16(max_min / q4scale);
        } else {
            b.dmin = to_fp16(0.f);
        }

        for (int j = 0; j < QK_K / 16; j++) {
            const float d = from_fp16(b.d) * (float)(b.scales[j] & 0xf);
            if (d == 0)
                continue;
            const float dm = from_fp16(b.dmin) * (float)(b.scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (uint8_t)clampi(round_even((x[16 * j + ii] + dm) / d), 0, 3);
        }
        pack_2bit(b.qs, L);
        memcpy(dst, &b, sizeof b);
    }
}

static void
q2_k_weighted(const float *x, uint8_t *dst, int64_t nb, const float *qw)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K, qw += QK_K, dst += sizeof(struct block_q2_K)) {
        struct block_q2_K b;
        uint8_t L[QK_K], Laux[16], Ls[QK_K / 16], Lm[QK_K / 16];
        float w[16], sw[QK_K / 16], mins[QK_K / 16], scales[QK_K / 16];
        float sigma2 = sum_squares(x, QK_K) / (float)QK_K;

        for (int j = 0; j < QK_K / 16; j++) {
            weights_imatrix(16, x + 16 * j, qw + 16 * j, sigma2, w);
            sw[j] = sum_floats(w, 16);
            scales[j] = search_affine(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux,
                                      -0.9f, 0.05f, 36, 0, 1);
        }

        float dm = search_pos(QK_K / 16, 15, scales, Ls, sw);
        float mm = search_pos(QK_K / 16, 15, mins, Lm, sw);
        b.d = to_fp16(dm);
        b.dmin = to_fp16(mm);
        dm = from_fp16(b.d);
        mm = from_fp16(b.dmin);
        for (int j = 0; j < QK_K / 16; j++)
            b.scales[j] = (uint8_t)(Ls[j] | Lm[j] << 4);

        for (int j = 0; j < QK_K / 16; j++) {
            const float d = dm * (float)(b.scales[j] & 0xf);
            if (d == 0)
                continue;
            const float m = mm * (float)(b.scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (uint8_t)clampi(round_even((x[16 * j + ii] + m) / d), 0, 3);
        }
        pack_2bit(b.qs, L);
        memcpy(dst, &b, sizeof b);
    }
}

/* ---- Q3_K ---- */

static void
q3_k_plain(const float *x, uint8_t *dst, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K, dst += sizeof(struct block_q3_K)) {
        struct block_q3_K b;
        int8_t L[QK_K];
        float scales[QK_K / 16];
        float max_scale = 0, amax = 0;

        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = search_q3(16, 4, x + 16 * j, L + 16 * j);
            float a = fabsf(scales[j]);
            if (a > amax) {
                amax = a;
                max_scale = scales[j];
            }
        }

        memset(b.scales, 0, sizeof b.scales);
        if (max_scale != 0) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++) {
                int8_t l = (int8_t)round_even(iscale * scales[j]);
                l = (int8_t)(clampi(l, -32, 31) + 32);
                pack_q3_scales(b.scales, j, l);
            }
            b.d = to_fp16(1 / iscale);
        } else {
            b.d = to_fp16(0.f);
        }
        finish_q3_k(x, L, &b);
        memcpy(dst, &b, sizeof b);
    }
}

static void
q3_k_weighted(const float *x, uint8_t *dst, int64_t nb, const float *qw)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K, qw += QK_K, dst += sizeof(struct block_q3_K)) {
        struct block_q3_K b;
        int8_t L[QK_K], Ls[QK_K / 16];
        float w[16], sw[QK_K / 16], scales[QK_K / 16];
        float sigma2 = 2.0f * sum_squares(x, QK_K) / (float)QK_K;

        for (int j = 0; j < QK_K / 16; j++) {
            weights_imatrix(16, x + 16 * j, qw + 16 * j, sigma2, w);
            sw[j] = sum_floats(w, 16);
            scales[j] = search_sym(16, 4, x + 16 * j, L + 16 * j, w);
        }

        memset(b.scales, 0, sizeof b.scales);
        float d_block = search_sym(QK_K / 16, 32, scales, Ls, sw);
        for (int j = 0; j < QK_K / 16; j++)
            pack_q3_scales(b.scales, j, Ls[j]);
        b.d = to_fp16(d_block);
        finish_q3_k(x, L, &b);
        memcpy(dst, &b, sizeof b);
    }
}

/* ---- Q4_K and Q5_K (nmax 15 / 31) ---- */

/* Unweighted: per-group affine search with weights av_x + |x|, scales and
 * mins coded against the largest of each. */
static void
q45_k_plain_scales(const float *x, uint8_t *L, int nmax, float rmin, int nstep,
                   uint8_t scales_out[K_SCALE_SIZE], uint16_t *dh, uint16_t *mh)
{
    uint8_t Laux[32], ls[8], lm[8];
    float w[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;

    for (int j = 0; j < QK_K / 32; j++) {
        float av_x = sqrtf(sum_squares(x + 32 * j, 32) / 32.0f);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = search_affine(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux,
                                  rmin, 0.1f, nstep, 0, 0);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }

    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t a = (uint8_t)round_even(inv_scale * scales[j]);
        uint8_t c = (uint8_t)round_even(inv_min * mins[j]);
        ls[j] = a < 63 ? a : 63;
        lm[j] = c < 63 ? c : 63;
    }
    memset(scales_out, 0, K_SCALE_SIZE);
    pack_scale_min(scales_out, ls, lm);
    *dh = to_fp16(max_scale / 63.f);
    *mh = to_fp16(max_min / 63.f);
}

/* Weighted: imatrix weights, the "x3" affine search, then the scales and
 * mins themselves searched (search_pos) with the groups' weight sums. */
static void
q45_k_weighted_scales(const float *x, const float *qw, uint8_t *L, int nmax, int clamp_codes,
                      uint8_t scales_out[K_SCALE_SIZE], uint16_t *dh, uint16_t *mh)
{
    uint8_t Laux[32], Ls[8], Lm[8];
    float w[32], sw[QK_K / 32], mins[QK_K / 32], scales[QK_K / 32];
    float sigma2 = 2.0f * sum_squares(x, QK_K) / (float)QK_K;

    for (int j = 0; j < QK_K / 32; j++) {
        weights_imatrix(32, x + 32 * j, qw + 32 * j, sigma2, w);
        sw[j] = sum_floats(w, 32);
        scales[j] = search_affine(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux,
                                  -0.9f, 0.05f, 36, 0, 1);
    }
    float d_block = search_pos(QK_K / 32, 63, scales, Ls, sw);
    float m_block = search_pos(QK_K / 32, 63, mins, Lm, sw);
    if (clamp_codes) {
        /* Q5_K clamps the codes to 63, Q4_K does not (a wrapped code stays). */
        for (int j = 0; j < 8; j++) {
            Ls[j] = Ls[j] < 63 ? Ls[j] : 63;
            Lm[j] = Lm[j] < 63 ? Lm[j] : 63;
        }
    }
    memset(scales_out, 0, K_SCALE_SIZE);
    pack_scale_min(scales_out, Ls, Lm);
    *dh = to_fp16(d_block);
    *mh = to_fp16(m_block);
}

static void
q4_k_row(const float *x, uint8_t *dst, int64_t nb, const float *qw)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K, dst += sizeof(struct block_q4_K)) {
        struct block_q4_K b;
        uint8_t L[QK_K];

        if (qw) {
            q45_k_weighted_scales(x, qw, L, 15, 0, b.scales, &b.d, &b.dmin);
            qw += QK_K;
        } else {
            q45_k_plain_scales(x, L, 15, -1.f, 20, b.scales, &b.d, &b.dmin);
        }
        requant_scale_min(x, L, b.d, b.dmin, b.scales, 15);
        pack_q4_k_codes(b.qs, L);
        memcpy(dst, &b, sizeof b);
    }
}

static void
q5_k_row(const float *x, uint8_t *dst, int64_t nb, const float *qw)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K, dst += sizeof(struct block_q5_K)) {
        struct block_q5_K b;
        uint8_t L[QK_K];

        if (qw) {
            q45_k_weighted_scales(x, qw, L, 31, 1, b.scales, &b.d, &b.dmin);
            qw += QK_K;
        } else {
            q45_k_plain_scales(x, L, 31, -0.5f, 15, b.scales, &b.d, &b.dmin);
        }
        requant_scale_min(x, L, b.d, b.dmin, b.scales, 31);
        pack_q5_k_codes(b.qs, b.qh, L);
        memcpy(dst, &b, sizeof b);
    }
}

/* ---- Q6_K: the same code path with and without weights (qw raw imatrix) ---- */

static void
q6_k_row(const float *x, uint8_t *dst, int64_t nb, const float *qw)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K, dst += sizeof(struct block_q6_K)) {
        struct block_q6_K b;
        int8_t L[QK_K];
        float scales[QK_K / 16];
        float max_scale = 0, max_abs = 0;

        for (int ib = 0; ib < QK_K / 16; ib++) {
            const float *w = qw ? qw + QK_K * i + 16 * ib : NULL;
            scales[ib] = search_sym(16, 32, x + 16 * ib, L + 16 * ib, w);
            float a = fabsf(scales[ib]);
            if (a > max_abs) {
                max_abs = a;
                max_scale = scales[ib];
            }
        }

        if (max_abs < GROUP_EPS) {
            memset(&b, 0, sizeof b);
            b.d = to_fp16(0.f);
            memcpy(dst, &b, sizeof b);
            continue;
        }

        float iscale = -128.f / max_scale;
        b.d = to_fp16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ib++)
            b.scales[ib] = (int8_t)imin(127, round_even(iscale * scales[ib]));
        finish_q6_k(x, L, &b);
        memcpy(dst, &b, sizeof b);
    }
}

/* ---- IQ4_NL / IQ4_XS: non-linear 4-bit code book ---- */

/* Index of the code book entry nearest to v (ties to the lower entry, except
 * that the bisection's final comparison is strict as in ggml). */
static inline int
iq4_nearest(float v)
{
    const int8_t *val = kvalues_iq4nl;

    if (v <= val[0])
        return 0;
    if (v >= val[15])
        return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < val[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - (float)val[hi - 1] < (float)val[hi] - v ? hi - 1 : hi;
}

/*
 * One super-block of sb elements (32 for IQ4_NL, 256 for IQ4_XS) in 32-wide
 * blocks: per block, the best scale over 15 trial inverse scales around
 * values[0]/max (weights qw * sqrt(sigma2 + x^2), or x^2 without an imatrix);
 * for IQ4_XS the block scales are then coded in 6 bits against
 * d = -max_scale/32 and the codes recomputed.  Writes *dh, q4 (sb/2 bytes)
 * and, for sb > 32, scales_h / scales_l.
 */
static void
iq4_super_block(int sb, const float *x, const float *qw, uint16_t *dh, uint8_t *q4,
                uint16_t *scales_h, uint8_t *scales_l)
{
    const int8_t *values = kvalues_iq4nl;
    const int ntry = 7;
    uint8_t L[QK_K];
    float scales[QK_K / 32], w[32];
    float max_scale = 0, amax_scale = 0;
    float sigma2 = sum_squares(x, sb);

    sigma2 *= 2.f / (float)sb;
    memset(q4, 0, (size_t)sb / 2);
    *dh = to_fp16(0.f);

    for (int ib = 0; ib < sb / 32; ib++) {
        const float *xb = x + 32 * ib;
        uint8_t *Lb = L + 32 * ib;

        if (qw)
            weights_imatrix(32, xb, qw + 32 * ib, sigma2, w);
        else
            for (int j = 0; j < 32; j++)
                w[j] = xb[j] * xb[j];

        float amax = 0, max = 0;
        for (int j = 0; j < 32; j++) {
            float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax < GROUP_EPS) {
            scales[ib] = 0;
            continue;
        }

        float d = -max / (float)values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            int l = iq4_nearest(id * xb[j]);
            Lb[j] = (uint8_t)l;
            float q = (float)values[l];
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; itry++) {
            id = (float)(itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; j++) {
                float q = (float)values[iq4_nearest(id * xb[j])];
                sumqx += w[j] * q * xb[j];
                sumq2 += w[j] * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if (fabsf(d) > amax_scale) {
            amax_scale = fabsf(d);
            max_scale = d;
        }
    }

    if (sb > 32) {
        float d = -max_scale / 32;
        float id = d != 0 ? 1 / d : 0.f;

        *scales_h = 0;
        *dh = to_fp16(d);
        for (int ib = 0; ib < sb / 32; ib++) {
            int l = clampi(round_even(id * scales[ib]), -32, 31);
            float dl = d * (float)l;
            float idl = dl != 0 ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++)
                L[32 * ib + j] = (uint8_t)iq4_nearest(idl * x[32 * ib + j]);
            l += 32;
            uint8_t l_l = (uint8_t)(l & 0xf), l_h = (uint8_t)(l >> 4);
            if (ib % 2 == 0)
                scales_l[ib / 2] = l_l;
            else
                scales_l[ib / 2] |= (uint8_t)(l_l << 4);
            *scales_h |= (uint16_t)(l_h << 2 * (ib % 8));
        }
    } else {
        *dh = to_fp16(scales[0]);
        float id = scales[0] != 0 ? 1 / scales[0] : 0;
        for (int j = 0; j < sb; j++)
            L[j] = (uint8_t)iq4_nearest(id * x[j]);
    }

    for (int i = 0; i < sb / 32; i++)
        for (int j = 0; j < 16; j++)
            q4[16 * i + j] = (uint8_t)(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

static void
iq4_nl_row(const float *x, uint8_t *dst, int64_t nb, const float *qw)
{
    for (int64_t i = 0; i < nb; i++, x += QK4_NL, dst += sizeof(struct block_iq4_nl)) {
        struct block_iq4_nl b;
        iq4_super_block(QK4_NL, x, qw ? qw + QK4_NL * i : NULL, &b.d, b.qs, NULL, NULL);
        memcpy(dst, &b, sizeof b);
    }
}

static void
iq4_xs_row(const float *x, uint8_t *dst, int64_t nb, const float *qw)
{
    for (int64_t i = 0; i < nb; i++, x += QK_K, dst += sizeof(struct block_iq4_xs)) {
        struct block_iq4_xs b;
        iq4_super_block(QK_K, x, qw ? qw + QK_K * i : NULL, &b.d, b.qs, &b.scales_h, b.scales_l);
        memcpy(dst, &b, sizeof b);
    }
}

/* ---- public API ---- */

int
quant_supported(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_F32:
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16:
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q3_K:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K:
    case GGML_TYPE_IQ4_NL:
    case GGML_TYPE_IQ4_XS:
        return 1;
    default:
        return 0;
    }
}

int
quant_needs_imatrix(uint32_t type)
{
    /* llama.cpp's tensor_requires_imatrix() (src/llama-quant.cpp) */
    switch (type) {
    case GGML_TYPE_IQ3_XXS:
    case GGML_TYPE_IQ2_XXS:
    case GGML_TYPE_IQ2_XS:
    case GGML_TYPE_IQ2_S:
    case GGML_TYPE_IQ1_M:
    case GGML_TYPE_IQ1_S:
        return 1;
    default:
        return 0;
    }
}

size_t
quant_row_size(uint32_t type, int64_t n)
{
    if (!quant_supported(type) || n <= 0)
        return 0;
    return qtype_row_bytes(type, n);
}

/* One row of n elements (n a multiple of the block size) into dst. */
static void
quant_row(uint32_t type, const float *x, uint8_t *dst, int64_t n, const float *qw)
{
    switch (type) {
    case GGML_TYPE_F32:
        quantize_row_f32_ref(x, dst, n);
        break;
    case GGML_TYPE_F16:
        quantize_row_f16_ref(x, dst, n);
        break;
    case GGML_TYPE_BF16:
        quantize_row_bf16_ref(x, dst, n);
        break;
    case GGML_TYPE_Q4_0:
        if (qw)
            q4_0_weighted(x, dst, n, qw);
        else
            q4_0_plain(x, dst, n / QK4_0);
        break;
    case GGML_TYPE_Q4_1:
        if (qw)
            q_1_weighted(x, dst, n, qw, 15);
        else
            q4_1_plain(x, dst, n / QK4_1);
        break;
    case GGML_TYPE_Q5_0:
        if (qw)
            q5_0_weighted(x, dst, n, qw);
        else
            q5_0_plain(x, dst, n / QK5_0);
        break;
    case GGML_TYPE_Q5_1:
        if (qw)
            q_1_weighted(x, dst, n, qw, 31);
        else
            q5_1_plain(x, dst, n / QK5_1);
        break;
    case GGML_TYPE_Q8_0:
        q8_0_plain(x, dst, n / QK8_0);   /* ggml ignores the imatrix here */
        break;
    case GGML_TYPE_Q2_K:
        if (qw)
            q2_k_weighted(x, dst, n / QK_K, qw);
        else
            q2_k_plain(x, dst, n / QK_K);
        break;
    case GGML_TYPE_Q3_K:
        if (qw)
            q3_k_weighted(x, dst, n / QK_K, qw);
        else
            q3_k_plain(x, dst, n / QK_K);
        break;
    case GGML_TYPE_Q4_K:
        q4_k_row(x, dst, n / QK_K, qw);
        break;
    case GGML_TYPE_Q5_K:
        q5_k_row(x, dst, n / QK_K, qw);
        break;
    case GGML_TYPE_Q6_K:
        q6_k_row(x, dst, n / QK_K, qw);
        break;
    case GGML_TYPE_IQ4_NL:
        iq4_nl_row(x, dst, n / QK4_NL, qw);
        break;
    case GGML_TYPE_IQ4_XS:
        iq4_xs_row(x, dst, n / QK_K, qw);
        break;
    }
}

size_t
quant_chunk(uint32_t type, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
            const float *imatrix)
{
    size_t row_size = quant_row_size(type, n_per_row);

    if (row_size == 0 || nrows < 0)
        return 0;
    uint8_t *out = dst;
    for (int64_t r = 0; r < nrows; r++)
        quant_row(type, src + r * n_per_row, out + (size_t)r * row_size, n_per_row, imatrix);
    return (size_t)nrows * row_size;
}
