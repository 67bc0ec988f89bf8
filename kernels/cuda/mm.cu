// mm.cu - the CUDA backend's matmul step (backend.h struct backend_matmul):
// activation conversion, then a dequantizing GEMV/GEMM over the weight rows
// kept on the device in their GGUF layout.
//
// Numerics follow the CPU reference (kernels/cpu/matmul_ref.c):
//   weight                     activations
//   F32                        f32 as given
//   F16, BF16                  rounded to f16 / bf16
//   Q4_0, Q5_0, Q8_0           Q8_0: d = fp16(amax / 127), codes round-half-even(x * 127 / amax)
//   Q4_1                       Q8_1: the same plus s = fp16(d * sum codes)
//   Q4_K, Q5_K, Q6_K           Q8_K: scale from the signed value of largest magnitude, sums of 16
// The activation conversion is the CPU's bit for bit.  The GEMV of the
// quantized types is ops_mm_rows_ref's bit for bit: integer code sums
// (__dp4a) per block (k-quants: per super-block, sub-block scales applied
// in integers), scaled and added unfused in the reference's order (see
// k_gemv); so is the float types' (ggml's vec_dot order: 32 accumulators).
// The tiled GEMM (prefill) agrees to f32 rounding: its sums are ordered
// otherwise, with fused multiply-adds.
//
// Kernels: one warp per weight row (a CTA holds MM_WARPS rows), each lane
// taking the row's 32-element units lane, lane + 32, ... (the widest loads
// the GGUF block alignment allows: 128-bit for Q4_K/Q5_K codes, 32-bit for
// Q4_1, 16-bit pairs for the 2-byte aligned Q4_0/Q5_0/Q8_0/Q6_K blocks;
// 128-bit for the int8 activations); a pass covers
// up to MM_NT tokens, so a decode step of up to MM_NT sequences reads each
// weight once, and longer batches run ceil(n_tok / MM_NT) passes over
// weights that then come from L2.  From 16 tokens on (prefill), a
// shared-memory tiled GEMM on dequantized tiles instead (all types but
// Q4_1); f32 SIMT arithmetic, no tensor cores yet.
//
// NOT YET RUN ON A GPU (see cuda_int.cuh).
#include <string.h>

#include "cuda_int.cuh"

#define MM_WARPS 4              // rows per CTA (one warp each)
#define MM_NT 8                 // tokens per pass of the GEMV

enum act { ACT_NONE, ACT_F32, ACT_F16, ACT_BF16, ACT_Q8_0, ACT_Q8_1, ACT_Q8_K };

static enum act
act_of(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_F32: return ACT_F32;
    case GGML_TYPE_F16: return ACT_F16;
    case GGML_TYPE_BF16: return ACT_BF16;
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q5_0: case GGML_TYPE_Q8_0: return ACT_Q8_0;
    case GGML_TYPE_Q4_1: return ACT_Q8_1;
    case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K: return ACT_Q8_K;
    default: return ACT_NONE;
    }
}

int
cu_mm_supports(uint32_t type)
{
    return act_of(type) != ACT_NONE;
}

// ---- the converted activations on the device ----
//
// One layout for every form (offsets 256-byte aligned), token-major:
//   xf  float [n_tok][cols]       F16/BF16: the rounded values
//   qs  int8  [n_tok][cols]       Q8_*: codes
//   d   float [n_tok][cols / 32]  Q8_0/Q8_1 scale (fp16-rounded) per 32;
//                                 Q8_K: [n_tok][cols / 256] scales
//   s   float [n_tok][cols / 32]  Q8_1: fp16(d * sum)
//   bs  int16 [n_tok][cols / 16]  Q8_K: sums of 16 codes
struct act_dev {
    float *xf;
    int8_t *qs;
    float *d, *s;
    int16_t *bs;
};

static size_t
al256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

static size_t
act_bytes(int64_t n_tok, int64_t cols, struct act_dev *a, uint8_t *base)
{
    size_t n = (size_t)n_tok, c = (size_t)cols, off = 0;
    size_t o_xf = off; off += al256(n * c * sizeof(float));
    size_t o_qs = off; off += al256(n * c);
    size_t o_d = off; off += al256(n * (c / 32) * sizeof(float));
    size_t o_s = off; off += al256(n * (c / 32) * sizeof(float));
    size_t o_bs = off; off += al256(n * (c / 16) * sizeof(int16_t));
    if (a && base) {
        a->xf = (float *)(base + o_xf);
        a->qs = (int8_t *)(base + o_qs);
        a->d = (float *)(base + o_d);
        a->s = (float *)(base + o_s);
        a->bs = (int16_t *)(base + o_bs);
    }
    return off;
}

int
cu_mm_reserve(struct cu *c, uint32_t type, int64_t max_tok, int64_t cols)
{
    if (act_of(type) == ACT_NONE || max_tok < 1 || cols < 1)
        return 0;
    // the kernels take rows in units of 32 elements (every quantized type's
    // block is; a float weight's row must be too): the interface's only
    // refusal is this one, the steps must then not run
    if (cols % 32)
        return -ENOMEM;
    return cu_scratch_get(c, &c->act, act_bytes(max_tok, cols, NULL, NULL)) ? 0 : -ENOMEM;
}

// F16/BF16: x rounded; one thread per element
__global__ void
k_act_round(float *y, const float *x, int64_t ldx, int64_t n_tok, int64_t cols, int bf)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_tok * cols)
        return;
    int64_t t = i / cols, k = i % cols;
    float v = x[t * ldx + k];
    y[i] = bf ? bf2f(f2bf(v)) : h2f(f2h(v));
}

// Q8_0 / Q8_1 as the CPU's quantize_q8_01: one warp per 32-block
__global__ void
k_act_q8_01(struct act_dev a, const float *x, int64_t ldx, int64_t n_tok, int64_t cols)
{
    int64_t nb = cols / 32, w = warp_item(n_tok * nb);
    int lane = threadIdx.x & 31;
    if (w < 0)
        return;
    int64_t t = w / nb, b = w % nb;
    float d;
    int q = warp_q8(x[t * ldx + b * 32 + lane], &d);
    int sum = q;
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    a.qs[t * cols + b * 32 + lane] = (int8_t)q;
    if (lane == 0) {
        a.d[t * nb + b] = h2f(f2h(d));
        a.s[t * nb + b] = h2f(f2h(d * (float)sum));
    }
}

// Q8_K as quantize_row_q8_K_ref: one warp per 256-block, 8 values a lane
__global__ void
k_act_q8_k(struct act_dev a, const float *x, int64_t ldx, int64_t n_tok, int64_t cols)
{
    int64_t nb = cols / 256, w = warp_item(n_tok * nb);
    int lane = threadIdx.x & 31;
    if (w < 0)
        return;
    int64_t t = w / nb, b = w % nb;
    const float *xb = x + t * ldx + b * 256;
    float v[8];
    // the first element of largest magnitude (the CPU's strict > scan)
    float best = -1.0f;
    int bi = 0;
    for (int j = 0; j < 8; j++) {
        v[j] = xb[lane * 8 + j];
        if (fabsf(v[j]) > best) {
            best = fabsf(v[j]);
            bi = lane * 8 + j;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ob = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ob > best || (ob == best && oi < bi)) {
            best = ob;
            bi = oi;
        }
    }
    int8_t *q = a.qs + t * cols + b * 256;
    int16_t *bs = a.bs + t * (cols / 16) + b * 16;
    if (best == 0.0f) {
        for (int j = 0; j < 8; j++)
            q[lane * 8 + j] = 0;
        if (lane < 16)
            bs[lane] = 0;
        if (lane == 0)
            a.d[t * nb + b] = 0.0f;
        return;
    }
    float max = xb[bi];
    float iscale = -127.0f / max;
    int s8 = 0;
    for (int j = 0; j < 8; j++) {
        int qv = __float2int_rn(iscale * v[j]);  // ggml's nearest_int: half to even
        qv = qv < 127 ? qv : 127;
        q[lane * 8 + j] = (int8_t)qv;
        s8 += qv;
    }
    // a sum of 16 = two neighbouring lanes
    int s16 = s8 + __shfl_xor_sync(0xffffffffu, s8, 1);
    if ((lane & 1) == 0)
        bs[lane / 2] = (int16_t)s16;
    if (lane == 0)
        a.d[t * nb + b] = 1.0f / iscale;
}

// the quantized activations as floats, codes times their block's scale,
// for the tiled GEMM (prefill): its products (q_w d_w)(q_x d_x) summed in
// f32 are the CPU's d_w d_x sum(q_w q_x) but for f32 rounding
__global__ void
k_act_deq(float *y, const int8_t *qs, const float *d, int64_t n_tok, int64_t cols, int blk)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_tok * cols)
        return;
    y[i] = (float)qs[i] * d[i / blk];
}

// ---- weight units: 32 elements as 8 words of 4 int8 codes ----

struct unit {
    int q[8];
    float d, m;                 // block scale, Q4_1 min / k-quant dmin
    int sc0, sc1;               // k-quant scales of the unit's two 16s (Q4/5_K: equal)
    int mn;                     // Q4/5_K min code
};

static __device__ __forceinline__ int
nib4(uint32_t w, int hi)
{
    return (int)(hi ? (w >> 4) & 0x0f0f0f0fu : w & 0x0f0f0f0fu);
}

// the 4 5th bits of elements j..j+3 (bit j of qh) as 0x10 per byte
static __device__ __forceinline__ int
bits5(uint32_t qh, int j)
{
    uint32_t b = (qh >> j) & 15u;
    return (int)(((b & 1u) << 4) | ((b & 2u) << 11) | ((b & 4u) << 18) | ((b & 8u) << 25));
}

static __device__ __forceinline__ void
load_unit(const uint8_t *row, uint32_t type, int64_t u, struct unit *o)
{
    o->m = 0.0f;                // (no min: Q4_0, Q5_0, Q8_0, Q6_K)
    o->mn = 0;
    switch (type) {
    case GGML_TYPE_Q4_0: {
        const uint8_t *b = row + u * 18;
        o->d = h2f(ld16(b));
        for (int k = 0; k < 4; k++) {
            uint32_t w = ld32a2(b + 2 + 4 * k);
            o->q[k] = __vsub4(nib4(w, 0), 0x08080808);
            o->q[k + 4] = __vsub4(nib4(w, 1), 0x08080808);
        }
        break;
    }
    case GGML_TYPE_Q4_1: {
        const uint8_t *b = row + u * 20;
        o->d = h2f(ld16(b));
        o->m = h2f(ld16(b + 2));
        for (int k = 0; k < 4; k++) {
            uint32_t w = ld32a4(b + 4 + 4 * k);
            o->q[k] = nib4(w, 0);
            o->q[k + 4] = nib4(w, 1);
        }
        break;
    }
    case GGML_TYPE_Q5_0: {
        const uint8_t *b = row + u * 22;
        o->d = h2f(ld16(b));
        uint32_t qh = ld32a2(b + 2);
        for (int k = 0; k < 4; k++) {
            uint32_t w = ld32a2(b + 6 + 4 * k);
            o->q[k] = __vsub4(nib4(w, 0) | bits5(qh, 4 * k), 0x10101010);
            o->q[k + 4] = __vsub4(nib4(w, 1) | bits5(qh, 16 + 4 * k), 0x10101010);
        }
        break;
    }
    case GGML_TYPE_Q8_0: {
        const uint8_t *b = row + u * 34;
        o->d = h2f(ld16(b));
        for (int k = 0; k < 8; k++)
            o->q[k] = (int)ld32a2(b + 2 + 4 * k);
        break;
    }
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: {
        int64_t sb = u >> 3;
        int j = (int)(u & 7);
        const int q5 = type == GGML_TYPE_Q5_K;
        const uint8_t *b = row + sb * (q5 ? 176 : 144);
        const uint8_t *qs = b + (q5 ? 48 : 16) + 32 * (j >> 1);
        o->d = h2f(ld16(b));
        o->m = h2f(ld16(b + 2));
        scale_min_k4(b + 4, j, &o->sc0, &o->mn);
        o->sc1 = o->sc0;
        // (a super-block is 144 / 176 bytes: qs and qh are 16-byte aligned)
        const uint4 *q4 = (const uint4 *)(const void *)qs;
        const uint4 *h4 = (const uint4 *)(const void *)(b + 16);
        for (int k2 = 0; k2 < 2; k2++) {
            uint4 w4 = q4[k2];
            uint4 hh = q5 ? h4[k2] : make_uint4(0, 0, 0, 0);
            uint32_t wv[4] = { w4.x, w4.y, w4.z, w4.w }, hv[4] = { hh.x, hh.y, hh.z, hh.w };
            for (int k1 = 0; k1 < 4; k1++) {
                int v = nib4(wv[k1], j & 1);
                if (q5)                 // qh[l], l = 4k..4k+3: bit j of each
                    v |= (int)(((hv[k1] >> j) & 0x01010101u) << 4);
                o->q[4 * k2 + k1] = v;
            }
        }
        break;
    }
    case GGML_TYPE_Q6_K: {
        int64_t sb = u >> 3;
        int j = (int)(u & 7), h = j >> 2, g = j & 3;
        const uint8_t *b = row + sb * 210;
        const uint8_t *ql = b + 64 * h + 32 * (g & 1);
        const uint8_t *qh = b + 128 + 32 * h;
        o->d = h2f(ld16(b + 208));
        o->sc0 = (int8_t)b[192 + 2 * j];
        o->sc1 = (int8_t)b[192 + 2 * j + 1];
        for (int k = 0; k < 8; k++) {
            uint32_t w = ld32a2(ql + 4 * k);
            uint32_t hb = (ld32a2(qh + 4 * k) >> (2 * g)) & 0x03030303u;
            int lo = nib4(w, g >= 2);
            o->q[k] = __vsub4(lo | (int)(hb << 4), 0x20202020);
        }
        break;
    }
    default:
        break;
    }
}

// f32 values of elements 32u .. 32u+31 of a float-type row into v
static __device__ __forceinline__ void
load_unit_f(const uint8_t *row, uint32_t type, int64_t u, float *v)
{
    // (rows of a multiple of 32 elements in 256-byte aligned buffers: the
    // units are 16-byte aligned, 128-bit loads)
    if (type == GGML_TYPE_F32) {
        const float4 *p = (const float4 *)(const void *)row + u * 8;
        for (int k = 0; k < 8; k++) {
            float4 f = p[k];
            v[4 * k] = f.x, v[4 * k + 1] = f.y, v[4 * k + 2] = f.z, v[4 * k + 3] = f.w;
        }
    } else {
        const uint4 *p = (const uint4 *)(const void *)row + u * 4;
        for (int k = 0; k < 4; k++) {
            uint4 w = p[k];
            uint32_t h[4] = { w.x, w.y, w.z, w.w };
            for (int i = 0; i < 4; i++) {
                uint16_t lo = (uint16_t)(h[i] & 0xffff), hi = (uint16_t)(h[i] >> 16);
                v[8 * k + 2 * i] = type == GGML_TYPE_F16 ? h2f(lo) : bf2f(lo);
                v[8 * k + 2 * i + 1] = type == GGML_TYPE_F16 ? h2f(hi) : bf2f(hi);
            }
        }
    }
}

// the 32 values of unit u (elements 32u .. 32u+31) of a weight row as f32,
// as the CPU's dequantize_row_* (get_rows, the tiled GEMM's weight tiles)
static __device__ void
deq_unit(const uint8_t *row, uint32_t type, int64_t u, float *v)
{
    if (type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_BF16) {
        load_unit_f(row, type, u, v);
        return;
    }
    struct unit un;
    load_unit(row, type, u, &un);
    for (int e = 0; e < 32; e++) {
        float code = (float)(int8_t)((un.q[e / 4] >> (8 * (e % 4))) & 255);
        switch (type) {
        case GGML_TYPE_Q4_1: v[e] = code * un.d + un.m; break;
        case GGML_TYPE_Q4_K:
        case GGML_TYPE_Q5_K: v[e] = (un.d * (float)un.sc0) * code - un.m * (float)un.mn; break;
        case GGML_TYPE_Q6_K: v[e] = (un.d * (float)(e < 16 ? un.sc0 : un.sc1)) * code; break;
        default: v[e] = code * un.d; break;
        }
    }
}

// ---- the GEMV: one warp per row of the step's weights ----

struct mm_w {
    const uint8_t *w;
    size_t row_bytes;
    float *y;
    int64_t ldy;
    const float *bias;
    int64_t rows;
};

struct mm_args {
    struct mm_w w[BACKEND_MM_MAX];
    int nw;
    uint32_t type;
    int64_t cols, n_tok;
    const float *x;             // F32: the activations as given
    int64_t ldx;
    struct act_dev a;
};

template <int NT>
__global__ void __launch_bounds__(MM_WARPS * 32)
k_gemv(struct mm_args p)
{
    int lane = threadIdx.x & 31;
    int64_t r = (int64_t)blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    int wi = 0;
    while (wi < p.nw && r >= p.w[wi].rows)
        r -= p.w[wi++].rows;
    if (wi >= p.nw)
        return;
    const struct mm_w *W = &p.w[wi];
    const uint8_t *row = W->w + (size_t)r * W->row_bytes;
    const int64_t nu = p.cols / 32, c = p.cols;
    // (grid.y is capped at 65535: passes beyond it loop)
    for (int64_t t0 = (int64_t)blockIdx.y * NT; t0 < p.n_tok; t0 += (int64_t)gridDim.y * NT) {
    int nt = p.n_tok - t0 < NT ? (int)(p.n_tok - t0) : NT;
    float acc[NT];
    for (int k = 0; k < NT; k++)
        acc[k] = 0.0f;

    if (p.type == GGML_TYPE_F32 || p.type == GGML_TYPE_F16 || p.type == GGML_TYPE_BF16) {
        // the reference's dot_vec_f / dot_vec_bf16 (ggml_vec_dot_* of the
        // AVX2 build): element 32u + e into accumulator e (lane e), units in
        // order, fused multiply-adds (BF16: the product rounded, then the
        // add); then (a[e] + a[e+16]) + (a[e+8] + a[e+24]) for e < 8, lanes
        // k and k + 4, and (s0 + s1) + (s2 + s3) (BF16: (s0 + s2) + (s1 +
        // s3)).  A warp reads 32 consecutive elements a unit: coalesced.
        const int bf = p.type == GGML_TYPE_BF16;
        for (int64_t u = 0; u < nu; u++) {
            const int64_t e = u * 32 + lane;
            float wv = p.type == GGML_TYPE_F32 ? ((const float *)(const void *)row)[e]
                       : p.type == GGML_TYPE_F16 ? h2f(((const uint16_t *)(const void *)row)[e])
                                                 : bf2f(((const uint16_t *)(const void *)row)[e]);
            for (int k = 0; k < NT; k++) {
                if (k >= nt)
                    break;
                float xv = p.type == GGML_TYPE_F32 ? p.x[(t0 + k) * p.ldx + e]
                                                   : p.a.xf[(t0 + k) * c + e];
                acc[k] = bf ? __fadd_rn(__fmul_rn(wv, xv), acc[k]) : __fmaf_rn(wv, xv, acc[k]);
            }
        }
        for (int k = 0; k < NT; k++) {
            float t = __fadd_rn(acc[k], __shfl_down_sync(0xffffffffu, acc[k], 16));
            float v = __fadd_rn(t, __shfl_down_sync(0xffffffffu, t, 8));
            float sk = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, 4));
            float q = __fadd_rn(sk, __shfl_down_sync(0xffffffffu, sk, bf ? 2 : 1));
            float r = __fadd_rn(q, __shfl_down_sync(0xffffffffu, q, bf ? 1 : 2));
            acc[k] = __shfl_sync(0xffffffffu, r, 0);
        }
    } else {
        // the reference's order of the f32 sums (matmul_ref.c): legacy
        // blocks b into 4 accumulators by b % 4, each in block order, then
        // (a0 + a2) + (a1 + a3); k-quant super-blocks from integer sums, into
        // one accumulator in order.  Lanes 0..3 (legacy) or lane 0 (k-quants)
        // take the units' partials by shuffles, in order; all products and
        // sums unfused: the bits of ops_mm_rows_ref
        const int kq = p.type == GGML_TYPE_Q4_K || p.type == GGML_TYPE_Q5_K ||
                       p.type == GGML_TYPE_Q6_K;
        for (int64_t u0 = 0; u0 < nu; u0 += 32) {
            const int64_t u = u0 + lane;
            const int valid = u < nu;
            struct unit un;
            if (valid)
                load_unit(row, p.type, u, &un);
            for (int k = 0; k < NT; k++) {
                if (k >= nt)
                    break;
                int64_t t = t0 + k;
                int lo = 0, hi = 0;
                if (valid) {
                    const int4 *yq = (const int4 *)(const void *)(p.a.qs + t * c + u * 32);
                    int4 y0 = yq[0], y1 = yq[1];
                    lo = __dp4a(un.q[0], y0.x, lo);
                    lo = __dp4a(un.q[1], y0.y, lo);
                    lo = __dp4a(un.q[2], y0.z, lo);
                    lo = __dp4a(un.q[3], y0.w, lo);
                    hi = __dp4a(un.q[4], y1.x, hi);
                    hi = __dp4a(un.q[5], y1.y, hi);
                    hi = __dp4a(un.q[6], y1.z, hi);
                    hi = __dp4a(un.q[7], y1.w, hi);
                }
                if (kq) {
                    // integer sums of the super-block: its 8 units are lanes
                    // 8m .. 8m+7 (256 = 8 x 32 and nu % 8 == 0)
                    int isum = 0, msum = 0;
                    if (valid) {
                        const int16_t *bs = p.a.bs + t * (c / 16) + 2 * u;
                        isum = un.sc0 * lo + un.sc1 * hi;
                        msum = un.mn * (bs[0] + bs[1]);
                    }
                    for (int o = 1; o < 8; o <<= 1) {
                        isum += __shfl_xor_sync(0xffffffffu, isum, o);
                        msum += __shfl_xor_sync(0xffffffffu, msum, o);
                    }
                    float part = 0.0f;
                    if (valid) {
                        float dy = p.a.d[t * (c / 256) + (u >> 3)];
                        part = __fsub_rn(__fmul_rn(__fmul_rn(un.d, dy), (float)isum),
                                         __fmul_rn(__fmul_rn(un.m, dy), (float)msum));
                    }
                    for (int m = 0; m < 4; m++) {
                        float v = __shfl_sync(0xffffffffu, part, 8 * m);
                        if (lane == 0 && u0 + 8 * m < nu)
                            acc[k] = __fadd_rn(acc[k], v);
                    }
                } else {
                    float part = 0.0f;
                    if (valid) {
                        float dy = p.a.d[t * nu + u];
                        part = p.type == GGML_TYPE_Q4_1
                                   ? __fadd_rn(__fmul_rn(__fmul_rn(un.d, dy), (float)(lo + hi)),
                                               __fmul_rn(un.m, p.a.s[t * nu + u]))
                                   : __fmul_rn((float)(lo + hi), __fmul_rn(un.d, dy));
                    }
                    for (int m = 0; m < 8; m++) {
                        float v = __shfl_sync(0xffffffffu, part, (lane & 3) + 4 * m);
                        if (lane < 4 && u0 + lane + 4 * m < nu)
                            acc[k] = __fadd_rn(acc[k], v);
                    }
                }
            }
        }
        if (!kq) {
            for (int k = 0; k < NT; k++) {
                float a0 = __shfl_sync(0xffffffffu, acc[k], 0);
                float a1 = __shfl_sync(0xffffffffu, acc[k], 1);
                float a2 = __shfl_sync(0xffffffffu, acc[k], 2);
                float a3 = __shfl_sync(0xffffffffu, acc[k], 3);
                acc[k] = __fadd_rn(__fadd_rn(a0, a2), __fadd_rn(a1, a3));
            }
        }
        for (int k = 0; k < NT; k++) {
            if (k >= nt)
                break;
            if (lane == 0)
                W->y[(t0 + k) * W->ldy + r] = W->bias ? __fadd_rn(acc[k], W->bias[r]) : acc[k];
        }
        continue;
    }
    for (int k = 0; k < NT; k++) {
        if (k >= nt)
            break;
        if (lane == 0)
            W->y[(t0 + k) * W->ldy + r] = W->bias ? __fadd_rn(acc[k], W->bias[r]) : acc[k];
    }
    }
}

// ---- tiled GEMM (prefill): dequantized weight tiles of 64 rows x 32 and
// activation tiles of 32 x 64 tokens through shared memory (f32 as given
// for F32 weights, the rounded or dequantized activations otherwise), 256
// threads each computing 4 x 4 outputs

#define TG_M 64                 // weight rows per tile
#define TG_N 64                 // tokens per tile
#define TG_K 32

__global__ void __launch_bounds__(256)
k_gemm_f(struct mm_args p, int wi)
{
    __shared__ float ws[TG_K][TG_M + 1];
    __shared__ float xs[TG_K][TG_N + 1];
    const struct mm_w *W = &p.w[wi];
    int64_t r0 = (int64_t)blockIdx.x * TG_M;
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const float *xsrc = p.type == GGML_TYPE_F32 ? p.x : p.a.xf;
    int64_t ldx = p.type == GGML_TYPE_F32 ? p.ldx : p.cols;
    for (int64_t t0 = (int64_t)blockIdx.y * TG_N; t0 < p.n_tok; t0 += (int64_t)gridDim.y * TG_N) {
    float acc[4][4] = { { 0 } };

    for (int64_t k0 = 0; k0 < p.cols; k0 += TG_K) {
        // (TG_K = 32: one unit of each of the tile's rows, decoded once)
        for (int rr = threadIdx.x; rr < TG_M; rr += 256) {
            int64_t r = r0 + rr;
            float v[32];
            if (r < W->rows)
                deq_unit(W->w + (size_t)r * W->row_bytes, p.type, k0 / 32, v);
            for (int kk = 0; kk < TG_K; kk++)
                ws[kk][rr] = r < W->rows ? v[kk] : 0.0f;
        }
        for (int i = threadIdx.x; i < TG_N * TG_K; i += 256) {
            int tt = i / TG_K, kk = i % TG_K;
            int64_t t = t0 + tt;
            xs[kk][tt] = t < p.n_tok ? xsrc[t * ldx + k0 + kk] : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < TG_K; kk++) {
            float a[4], b[4];
            for (int i = 0; i < 4; i++) {
                a[i] = ws[kk][ty * 4 + i];
                b[i] = xs[kk][tx * 4 + i];
            }
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++) {
        int64_t r = r0 + ty * 4 + i;
        if (r >= W->rows)
            continue;
        for (int j = 0; j < 4; j++) {
            int64_t t = t0 + tx * 4 + j;
            if (t < p.n_tok)
                W->y[t * W->ldy + r] = acc[i][j] + (W->bias ? W->bias[r] : 0.0f);
        }
    }
    }
}

// ---- the step ----

// whether a step of n_tok tokens by a weight of this type takes the tiled
// GEMM: 16 tokens and more, every type but Q4_1 (its Q8_1 activation sum
// is rounded to fp16 on the CPU, which only the GEMV reproduces)
static int
tiled(uint32_t type, int64_t n_tok)
{
    return n_tok >= 16 && type != GGML_TYPE_Q4_1;
}

// converts the n_tok rows of x for weight type `type` into c->act
static int
prepare(struct cu *c, uint32_t type, const float *x, int64_t ldx, int64_t n_tok, int64_t cols,
        struct act_dev *a)
{
    uint8_t *base = (uint8_t *)cu_scratch_get(c, &c->act, act_bytes(n_tok, cols, NULL, NULL));
    if (!base)
        return -ENOMEM;
    act_bytes(n_tok, cols, a, base);
    switch (act_of(type)) {
    case ACT_F16:
    case ACT_BF16:
        k_act_round<<<cu_blocks(n_tok * cols, 256), 256, 0, c->stream>>>(
            a->xf, x, ldx, n_tok, cols, act_of(type) == ACT_BF16);
        CU_LAUNCHED("act_round");
        break;
    case ACT_Q8_0:
    case ACT_Q8_1:
        k_act_q8_01<<<cu_blocks(n_tok * (cols / 32) * 32, 256), 256, 0, c->stream>>>(*a, x, ldx,
                                                                                      n_tok, cols);
        CU_LAUNCHED("act_q8_01");
        break;
    case ACT_Q8_K:
        k_act_q8_k<<<cu_blocks(n_tok * (cols / 256) * 32, 256), 256, 0, c->stream>>>(
            *a, x, ldx, n_tok, cols);
        CU_LAUNCHED("act_q8_k");
        break;
    default:
        break;
    }
    if (tiled(type, n_tok) && (act_of(type) == ACT_Q8_0 || act_of(type) == ACT_Q8_K)) {
        // (d is per 32 for Q8_0, per 256 for Q8_K, token-major either way)
        k_act_deq<<<cu_blocks(n_tok * cols, 256), 256, 0, c->stream>>>(
            a->xf, a->qs, a->d, n_tok, cols, act_of(type) == ACT_Q8_K ? 256 : 32);
        CU_LAUNCHED("act_deq");
    }
    return 0;
}

void
cu_matmul(struct cu *c, const struct backend_matmul *mm)
{
    int64_t n_tok = mm->n_tok;
    if (n_tok < 1 || mm->nw < 1)
        return;
    const int64_t cols = mm->w[0]->cols;
    const float *x = (const float *)cu_in(c, mm->x, ((size_t)((n_tok - 1) * mm->ldx + cols)) *
                                                        sizeof(float), ST_IN0);
    float *ydev[BACKEND_MM_MAX];
    size_t ybytes[BACKEND_MM_MAX];

    for (int i = 0; i < mm->nw; i++) {
        const struct backend_weight *w = mm->w[i];
        ybytes[i] = (size_t)((n_tok - 1) * mm->ldy[i] + w->rows) * sizeof(float);
        ydev[i] = (float *)cu_out(c, mm->y[i], ybytes[i], ST_OUT0 + i, mm->ldy[i] != w->rows);
    }
    for (int i = 0; i < mm->nw;) {
        int k = i + 1;
        while (k < mm->nw && mm->w[k]->type == mm->w[i]->type)
            k++;
        const struct backend_weight *w0 = mm->w[i];
        struct mm_args p;
        memset(&p, 0, sizeof(p));
        p.nw = k - i;
        p.type = w0->type;
        p.cols = w0->cols;
        p.n_tok = n_tok;
        p.x = x;
        p.ldx = mm->ldx;
        int64_t rows = 0;
        for (int q = i; q < k; q++) {
            const struct backend_weight *w = mm->w[q];
            const void *wd = w->packed ? w->packed : w->data;
            // weights are device memory after pack(); a weight handed in
            // from the host (a caller that skipped the pack) is mirrored once
            if (!cu_is_dev(c, wd))
                wd = cu_const(c, wd, w->row_bytes * (size_t)w->rows);
            p.w[q - i].w = (const uint8_t *)wd;
            p.w[q - i].row_bytes = w->row_bytes;
            p.w[q - i].y = ydev[q];
            p.w[q - i].ldy = mm->ldy[q];
            p.w[q - i].bias = mm->bias[q] ? (const float *)cu_const(c, mm->bias[q],
                                                                     (size_t)w->rows * sizeof(float))
                                          : NULL;
            p.w[q - i].rows = w->rows;
            rows += w->rows;
        }
        if (prepare(c, p.type, x, mm->ldx, n_tok, cols, &p.a) < 0)
            cu_fail("matmul: activation scratch", cudaErrorMemoryAllocation, __FILE__, __LINE__);
        if (tiled(p.type, n_tok)) {
            for (int q = 0; q < p.nw; q++) {
                unsigned nty = cu_blocks(n_tok, TG_N);
                dim3 g(cu_blocks(p.w[q].rows, TG_M), nty < 65535 ? nty : 65535);
                k_gemm_f<<<g, 256, 0, c->stream>>>(p, q);
                CU_LAUNCHED("gemm_f");
            }
        } else {
            unsigned passes = cu_blocks(n_tok, MM_NT);
            dim3 g(cu_blocks(rows, MM_WARPS), passes < 65535 ? passes : 65535);
            if (n_tok == 1)
                k_gemv<1><<<g.x, MM_WARPS * 32, 0, c->stream>>>(p);
            else if (n_tok <= 2)
                k_gemv<2><<<g.x, MM_WARPS * 32, 0, c->stream>>>(p);
            else if (n_tok <= 4)
                k_gemv<4><<<g.x, MM_WARPS * 32, 0, c->stream>>>(p);
            else
                k_gemv<MM_NT><<<g, MM_WARPS * 32, 0, c->stream>>>(p);
            CU_LAUNCHED("gemv");
        }
        i = k;
    }
    for (int i = 0; i < mm->nw; i++)
        cu_out_done(c, mm->y[i], ydev[i], ybytes[i]);
}

// ---- get_rows ----

// one thread per 32-element unit of the rows asked
__global__ void
k_get_rows(float *y, const uint8_t *w, size_t row_bytes, uint32_t type, int64_t cols,
           const int32_t *ids, int64_t n)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, nu = cols / 32;
    if (i >= n * nu)
        return;
    int64_t t = i / nu, u = i % nu;
    float v[32];
    deq_unit(w + (size_t)ids[t] * row_bytes, type, u, v);
    for (int e = 0; e < 32; e++)
        y[t * cols + u * 32 + e] = v[e];
}

void
cu_get_rows_dev(struct cu *c, float *y, const void *w, size_t row_bytes, uint32_t type,
                int64_t cols, const int32_t *ids_dev, int64_t n)
{
    if (n < 1)
        return;
    k_get_rows<<<cu_blocks(n * (cols / 32), 128), 128, 0, c->stream>>>(
        y, (const uint8_t *)w, row_bytes, type, cols, ids_dev, n);
    CU_LAUNCHED("get_rows");
}
