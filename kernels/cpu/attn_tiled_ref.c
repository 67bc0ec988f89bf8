/*
 * attn_tiled_ref.c - reference of the tiled attention (ops.h, struct
 * attn_tiled_args): the arithmetic of llama.cpp's CPU flash attention for
 * ubatches of at least 64 query rows (ggml_compute_forward_flash_attn_ext_tiled
 * on an AVX2/FMA build), in plain C with fmaf for each of ggml's fused
 * multiply-adds (this file is compiled with -ffp-contract=off, so nothing
 * else is fused):
 *
 *   scores  ggml's simd_gemm: each element is one fma chain over the head
 *           dimension starting from 0 (the query stays f32, keys are
 *           converted exactly), then multiplied by scale (ggml_vec_scale_f32)
 *           and added to the mask (0 or -inf; ggml_vec_add_f32)
 *   max     over the tile's 64 entries; a row with no visible slot in the
 *           tile is left alone (ggml skips it, or zeroes its weights: the
 *           same result)
 *   rescale when the maximum grows: ms = expf(Mold - Mnew) (libm), the
 *           accumulator and S multiplied by it
 *   softmax ggml_vec_soft_max_f32: p = ggml_v_expf(s - M) 8 lanes at a
 *           time, each group of 8 summed as ((p0+p4)+(p2+p6)) + ((p1+p5)+
 *           (p3+p7)) in f32, the group sums added in double, S = (float)(S +
 *           sum)
 *   values  simd_gemm again: acc[d] = fma(p_j, v_j[d], acc[d]) for j in slot
 *           order (zero weights change nothing and are skipped)
 *   output  acc * (1 / S) (0 when S is 0)
 *
 * Scratch: acc [n_q][dv] and M, S [n_q] for one row at a time, and one
 * tile's scores [64].
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"
#include "qconv.h"

int64_t
ops_attn_tiled_scratch_floats_ref(int64_t n_q, int64_t head_dim, int64_t head_dim_v)
{
    (void)head_dim;
    return n_q * head_dim_v + 2 * n_q + ATTN_TILE_KV;
}

static inline float
f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t
u_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* One lane of ggml's vectorised exp (ggml_v_expf, AVX2 form): 2^n * (1 + p(b))
 * with n = round(x / ln 2), b = x - n ln 2 in two steps, a degree-5
 * polynomial; lanes with |n| > 126 scale in two factors, |n| > 192
 * saturate. */
static float
vexpf(float x)
{
    const float shift = 0x1.8p23f, inv_ln2 = 0x1.715476p+0f;
    const float ln2_hi = 0x1.62e4p-1f, ln2_lo = 0x1.7f7d1cp-20f;
    const float c0 = 0x1.ffffecp-1f, c1 = 0x1.fffdb6p-2f, c2 = 0x1.555e66p-3f;
    const float c3 = 0x1.573e2ep-5f, c4 = 0x1.0e4020p-7f;
    float z = fmaf(x, inv_ln2, shift);
    float n = z - shift;
    float r = fmaf(-n, ln2_hi, x);
    float b = fmaf(-n, ln2_lo, r);
    uint32_t e = u_of(z) << 23;
    float k = f_of(e + u_of(1.0f));
    float absn = fabsf(n);
    float u = b * b;
    float p = fmaf(fmaf(fmaf(c4, b, c3), u, fmaf(c2, b, c1)), u, c0 * b);

    if (!(absn > 126.0f))
        return fmaf(p, k, k);
    uint32_t neg = n <= 0.0f ? 0x82000000u : 0u;
    float s1 = f_of(neg + 0x7f000000u), s2 = f_of(e - neg);
    if (absn > 192.0f)
        return s1 * s1;
    return fmaf(s2, p, s2) * s1;
}

static inline float
kv_elem(const uint8_t *row, int64_t i, int f16)
{
    if (f16) {
        uint16_t h;
        memcpy(&h, row + 2 * i, 2);
        return qconv_fp16_to_fp32(h);
    }
    float f;
    memcpy(&f, row + 4 * i, 4);
    return f;
}

void
ops_attn_tiled_ref(const struct attn_tiled_args *a, float *scratch)
{
    const int64_t nq = a->n_q, dk = a->head_dim, dv = a->head_dim_v, bs = a->block_size;
    const int f16 = a->kv_type == 1;
    const size_t esz = f16 ? 2 : 4;
    float *acc = scratch, *M = acc + nq * dv, *S = M + nq, *sc = S + nq;

    for (int64_t r = 0; r < a->n_rows; r++) {
        const int64_t nkv = a->n_kv[r], lo = a->lo ? a->lo[r] : 0;

        memset(acc, 0, (size_t)(nq * dv) * sizeof(float));
        for (int64_t h = 0; h < nq; h++) {
            M[h] = -INFINITY;
            S[h] = 0.0f;
        }
        /* tiles wholly below the window hold nothing visible: skipped */
        for (int64_t s0 = lo / ATTN_TILE_KV * ATTN_TILE_KV; s0 < nkv; s0 += ATTN_TILE_KV) {
            for (int64_t h = 0; h < nq; h++) {
                const float *q = a->q + r * a->ldq + h * dk;
                float *ah = acc + h * dv;

                for (int64_t j = 0; j < ATTN_TILE_KV; j++) {
                    int64_t s = s0 + j;
                    if (s >= nkv || s < lo) {
                        sc[j] = -INFINITY;
                        continue;
                    }
                    const uint8_t *krow = a->k_base + (size_t)a->table[s / bs] * a->block_stride +
                                          (size_t)(s % bs) * (size_t)dk * esz;
                    float x = 0.0f;
                    for (int64_t d = 0; d < dk; d++)
                        x = fmaf(q[d], kv_elem(krow, d, f16), x);
                    sc[j] = x * a->scale + 0.0f;
                }
                float tmax = -INFINITY;
                for (int64_t j = 0; j < ATTN_TILE_KV; j++)
                    tmax = tmax > sc[j] ? tmax : sc[j];
                if (tmax == -INFINITY)
                    continue;
                float mnew = fmaxf(M[h], tmax);
                if (mnew > M[h]) {
                    float ms = expf(M[h] - mnew);
                    for (int64_t d = 0; d < dv; d++)
                        ah[d] *= ms;
                    S[h] *= ms;
                }
                M[h] = mnew;
                double sum = 0.0;
                for (int64_t j = 0; j < ATTN_TILE_KV; j += 8) {
                    float *p = sc + j;
                    for (int i = 0; i < 8; i++)
                        p[i] = vexpf(p[i] - mnew);
                    float t0 = p[4] + p[0], t1 = p[5] + p[1], t2 = p[6] + p[2], t3 = p[7] + p[3];
                    sum += (double)((t0 + t2) + (t1 + t3));
                }
                S[h] = (float)((double)S[h] + sum);
                for (int64_t j = 0; j < ATTN_TILE_KV; j++) {
                    int64_t s = s0 + j;
                    if (sc[j] == 0.0f)
                        continue;
                    const uint8_t *vrow = a->v_base + (size_t)a->table[s / bs] * a->block_stride +
                                          (size_t)(s % bs) * ops_attn_v_stride(a->kv_type, dv,
                                                                               a->v_stride);
                    for (int64_t d = 0; d < dv; d++)
                        ah[d] = fmaf(sc[j], kv_elem(vrow, d, f16), ah[d]);
                }
            }
        }
        for (int64_t h = 0; h < nq; h++) {
            float inv = S[h] == 0.0f ? 0.0f : 1.0f / S[h];
            float *out = a->out + r * a->ldo + h * dv;
            for (int64_t d = 0; d < dv; d++)
                out[d] = acc[h * dv + d] * inv;
        }
    }
}
