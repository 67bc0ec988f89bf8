/*
 * matmul_avx512.c - matmul kernels (batches, decode, and a packed Q4_0 /
 * IQ4_NL layout) for CPUs with AVX-512 F/BW/VL/DQ and VNNI, bit-identical with the
 * AVX2 kernels (cpu/matmul_avx2.c) and so with llama.cpp's AVX2 arithmetic.
 *
 * This file is compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq
 * -mavx512vnni -mfma -mf16c and is only entered through kernel_ops_avx512
 * after the run-time CPU check in kernels/dispatch.c.
 *
 * Same bits, fewer instructions:
 *   Q8_0, Q5_0, Q4_1, Q5_1 (ggml_vec_dot lanes): ggml's int32 lane k of a
 *       block is the sum of the products of bytes 4k..4k+3, which AVX2 gets
 *       from sign/maddubs/madd and VPDPBUSD in one instruction.  VPDPBUSD
 *       multiplies unsigned by signed bytes, so the weight codes are offset
 *       to unsigned (u = code + off: 128 for Q8_0 and for Q5_0 in batches,
 *       16 for Q5_0 in pair_dec, 0 for Q4_1/Q5_1) and each lane starts from
 *       -off * (the sum of the 4 activation codes of that lane), computed
 *       once per token and block (per pass of pair_dec's rows):
 *       the same exact integer per lane.  The f32 operations that follow
 *       (scale products, fused multiply-adds in block order, the horizontal
 *       sums) are the AVX2 kernels' own.  Batches: two unpacked rows share
 *       each activation load; batches of 2-32 tokens (a speculative
 *       verify; 5-32 of Q4_1, Q5_0, Q5_1) the same arithmetic on blocks
 *       decoded in registers, the rows prefetched (legacy_direct).
 *       Decode: Q8_0 4 rows per pass straight from the blocks; Q4_1, Q5_0,
 *       Q5_1 two rows per 512-bit register (their 8 + 8 lanes), 8 rows per
 *       pass, the 8 rows' scales converted and multiplied as one vector and
 *       the min terms' scalar chains in its lanes (pair_dec), which also
 *       takes their batches of 2-4 tokens (each row pair unpacked once for
 *       all of them).
 *   Q4_0, IQ4_NL (the repacked gemv chain: one f32 fma per block on the
 *       exact block sum): batches take 8 rows interleaved so that the sums
 *       land in the lanes with no horizontal adds (ileave_tiles).  A model
 *       packs its Q4_0 and IQ4_NL matrices at load (ops_mm_pack_avx512):
 *       then one rows-in-lanes kernel reads them for every batch size,
 *       decode included (its one token's block sum in four shorter VPDPBUSD
 *       chains; unpacked Q4_0 and IQ4_NL decode are the AVX2 kernel's).
 *   Q4_K batches: the same rows-in-lanes form, per 32-element sub-block,
 *       with the scales by VPMULLD and the mins by VPDPWSSD.
 *   F16: ggml_vec_dot_f16's four 8-lane accumulators are independent, so a
 *       512-bit register carries two of them (elements i..i+15 of a step of
 *       32 are accumulators 0 and 1): each lane sees the same operands in
 *       the same order, and the reduction is the AVX2 one.  Tiles of 4 rows
 *       x 4 tokens.
 * Everything else (F32, BF16, the decode of IQ4_NL, F16 and unpacked Q4_0,
 * batches below each type's TILE_MIN: 2-8 of the k-quants, Q4_K's too,
 * through ops_mm_kquant_small_avx2; rows too long for a tile) is the AVX2
 * kernels' (ops_mm_rows_avx2).
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"
#include "qblock.h"
#include "cpu/matmul_avx2.h"
#include "cpu/matmul_avx512.h"
#include "cpu/matmul_mirror_avx2.h"
#include "cpu/mm_layout.h"
#include "cpu/simd_avx2.h"

#define TG 8                    /* tokens per group */
/* Fewer tokens: the AVX2 paths, whose small-batch kernels stream the rows
 * where a tile unpacks them first; the k-quants' (ops_mm_kquant_small_avx2)
 * here up to 8 tokens, where the avx2 table stops at 7.  Timed on a Zen 4
 * (one thread, the models' shapes): the k-quant tiles tie with the small
 * kernel at 9-12 tokens and win at 16 (at 4-7 Q6_K's took 1.3-1.9x the
 * small kernel's time; at 8 tokens, best of 3, Q4_K
 * 576x1536 / 1536x1536 188.8 / 428.6 -> 137.8 / 364.0 us, Q6_K 149.8 /
 * 398.4 -> 130.6 / 345.1, Q5_K best of 2 1.24-1.3x with the small kernel;
 * at 9-12 the two are within this machine's noise), Q4_K's too since their
 * unpack is a transpose (6e5838f, against the kernels of then: 8-64 tokens
 * 1.2-1.4x faster than the AVX2 tiles, 4-7 tokens 1.2-1.7x slower than
 * the small kernel; 128 tokens 1.4-1.6x and 512 1.13x faster than the
 * scalar unpack that had kept them to 128 tokens and more).  Batches of
 * 2-32 tokens of Q8_0 and 5-32 of Q5_0, Q4_1 and Q5_1 take legacy_direct (the legacy tiles had paid from 4
 * tokens, Q8_0's from 5), longer ones the legacy tiles; rows of more than
 * 4096 columns fit neither and take the AVX2 kernels.  1-4 tokens of Q5_0,
 * Q4_1 and Q5_1 take pair_dec, rows of any length. */
#define TILE_MIN 4
#define TILE_MIN_KQ (OPS_MM_KSMALL_MAX + 1)
#define TILE_BYTES (40 * 1024)  /* unpacked weight rows per tile */
#define G_MAX_NB 128            /* blocks per row a group holds (4096 columns) */
/* The batch tiles of the quantized types (legacy_tiles, q4k_tiles and the
 * k-quant tiles of cpu/kquant_tiles.h) hold their unpacked rows in this
 * much L2: more rows share each fill of an activation group (about 4 rows'
 * arithmetic for the legacy types) and each pass over the batch's
 * activations (up to 3 MiB for 512 tokens, from L3). */
#define L2_TILE_BYTES (192 * 1024)
#define LEGACY_TILE_ROWS 256
/* f16_tiles: widened rows (f32) per tile; each tile streams the whole
 * batch's activations once (3 MiB for 512 tokens of 1536 columns) */
#define F16_TILE_BYTES (160 * 1024)

/* The start of each VPDPBUSD lane of an activation block q[32] whose weight
 * codes are stored as code + off (unsigned): -off * the sum of the lane's
 * 4 activation codes, so that the instruction leaves ggml's exact lane. */
static inline __m256i
lane_starts(const int8_t *q, int off)
{
    __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)q);
    return _mm256_sub_epi32(_mm256_setzero_si256(),
                            _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)off), y));
}

/* literal token counts 1..8 for the kernels' unrolled token loops */
#define BY_NT8(F) switch (nt) { case 1: F(1); break; case 2: F(2); break; case 3: F(3); break; \
                                case 4: F(4); break; case 5: F(5); break; case 6: F(6); break; \
                                case 7: F(7); break; default: F(8); break; }

/* A group of up to TG tokens' activations, per block: the scales with the
 * tokens in the lanes, and for each pair of tokens (2p, 2p + 1) their codes
 * and lane starts side by side in one 512-bit vector (the lower half token
 * 2p).  Tokens past nt repeat token 0 with scale 0 (dropped). */
#define TP (TG / 2)
struct vgroup {
    int nt;
    float dT[G_MAX_NB * TG] __attribute__((aligned(32)));   /* [block][token] */
    float sT[G_MAX_NB * TG] __attribute__((aligned(32)));   /* Q8_1 s */
    __m512i yP[G_MAX_NB * TP];  /* [block][pair] codes */
    __m512i cP[G_MAX_NB * TP];  /* [block][pair] -off * the 4-code lane sums */
};
/* per thread: legacy_tiles takes the first, legacy_direct one per group of
 * its batch (so it takes batches of up to DIRECT_GROUPS * TG tokens) */
#define DIRECT_GROUPS 4
#define DIRECT_PF_PASSES 4      /* legacy_direct prefetches this many row pairs ahead */
static __thread struct vgroup vgroup_tls[DIRECT_GROUPS];

static void
vgroup_fill(struct vgroup *g, enum act a, const uint8_t *act, size_t arb, int64_t t0, int nt,
            int64_t cols, int64_t nb, int off)
{
    struct act_row ar[TG];

    g->nt = nt;
    for (int t = 0; t < TG; t++) {
        act_row_at(&ar[t], a, act + (size_t)(t0 + (t < nt ? t : 0)) * arb, cols);
        for (int64_t b = 0; b < nb; b++) {
            g->dT[b * TG + t] = t < nt ? ar[t].d[b] : 0.0f;
            g->sT[b * TG + t] = t < nt && a == ACT_Q8_1 ? ar[t].s[b] : 0.0f;
        }
    }
    for (int64_t b = 0; b < nb; b++)
        for (int p = 0; p < TP; p++) {
            __m256i y0 = _mm256_loadu_si256((const __m256i *)(const void *)(ar[2 * p].q + 32 * b));
            __m256i y1 = _mm256_loadu_si256((const __m256i *)(const void *)(ar[2 * p + 1].q + 32 * b));
            __m256i c0 = lane_starts(ar[2 * p].q + 32 * b, off);
            __m256i c1 = lane_starts(ar[2 * p + 1].q + 32 * b, off);
            g->yP[b * TP + p] = _mm512_inserti64x4(_mm512_castsi256_si512(y0), y1, 1);
            g->cP[b * TP + p] = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
        }
}

/* 4 activation codes as one int32 (no aliasing of the int8 array) */
static inline int32_t
ld32(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Block b of a raw row of type (Q8_0, Q5_0, Q4_1, Q5_1) as the batch tiles
 * unpack it (ops_mm_avx2_unpack_legacy, then Q8_0 and Q5_0 offset by 128 to
 * unsigned), with its scale and min: F16C converts the halves exactly, as
 * the table does. */
static inline __attribute__((always_inline)) __m256i
raw_block(const uint8_t *row, uint32_t type, int64_t b, float *d, float *m)
{
    const __m256i x80 = _mm256_set1_epi8((char)0x80);

    switch (type) {
    case T_Q4_1: {
        const struct block_q4_1 *x = (const struct block_q4_1 *)(const void *)row + b;
        *d = _cvtsh_ss(x->d);
        *m = _cvtsh_ss(x->m);
        return nibbles32(x->qs);
    }
    case T_Q5_1: {
        const struct block_q5_1 *x = (const struct block_q5_1 *)(const void *)row + b;
        *d = _cvtsh_ss(x->d);
        *m = _cvtsh_ss(x->m);
        return _mm256_or_si256(nibbles32(x->qs), _mm256_and_si256(bits32(x->qh), _mm256_set1_epi8(0x10)));
    }
    case T_Q5_0: {
        const struct block_q5_0 *x = (const struct block_q5_0 *)(const void *)row + b;
        *d = _cvtsh_ss(x->d);
        __m256i hi = _mm256_andnot_si256(bits32(x->qh), _mm256_set1_epi8((char)0xf0));
        return _mm256_xor_si256(_mm256_or_si256(nibbles32(x->qs), hi), x80);
    }
    default: {  /* T_Q8_0 */
        const struct block_q8_0 *x = (const struct block_q8_0 *)(const void *)row + b;
        *d = _cvtsh_ss(x->d);
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)x->qs), x80);
    }
    }
}

/* Two unpacked rows (nr = 1 or 2; codes offset to unsigned) of a type with
 * ggml_vec_dot's lane arithmetic (Q8_0, Q5_0, Q4_1, Q5_1) against the
 * group's nt tokens, two tokens per 512-bit register: each half is
 * legacy_tile_row's 8-lane accumulator of cpu/matmul_avx2.c for one token
 * (lanes from VPDPBUSD, the scale product d_row * d_tok, a fused
 * multiply-add per block, hsum8 at the end, + the min term).  The 8 scale
 * products of a row and block come from one 256-bit multiply, and each
 * token pair's two from a permute (a 512-bit multiply per pair, most of
 * whose lanes repeat the same two products, cost 20%). */
static inline __attribute__((always_inline)) void
lanes_rows2(float *out, int64_t ldo, const uint8_t *u0, const uint8_t *u1, const float *d0,
            const float *d1, const float *m0, const float *m1, const struct vgroup *g, int np,
            int nr, int off, int has_min, int64_t nb, uint32_t raw, const char *pf, int64_t pf_lines)
{
    __m512 a0[TP], a1[TP];
    __m256 mc0 = _mm256_setzero_ps(), mc1 = _mm256_setzero_ps();
    int64_t pfl = 0, pfa = 0;

#pragma GCC unroll 4
    for (int p = 0; p < np; p++)
        a0[p] = a1[p] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512i x0, x1;
        float db0, db1, mb0 = 0.0f, mb1 = 0.0f;
        if (raw) {
            pf_spread(pf, &pfl, &pfa, pf_lines, nb);
            x0 = _mm512_broadcast_i64x4(raw_block(u0, raw, b, &db0, &mb0));
            x1 = _mm512_broadcast_i64x4(raw_block(u1, raw, b, &db1, &mb1));
        } else {
            x0 = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)(const void *)(u0 + 32 * b)));
            x1 = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i *)(const void *)(u1 + 32 * b)));
            db0 = d0[b];
            db1 = d1[b];
            if (has_min) {
                mb0 = m0[b];
                mb1 = m1[b];
            }
        }
        /* the 8 tokens' scale products with each row (ggml's scalar
         * d_row * d_tok), spread to token pairs by a permute */
        __m256 dT8 = _mm256_load_ps(g->dT + TG * b);
        __m512 pr0 = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(db0), dT8));
        __m512 pr1 = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(db1), dT8));
        if (has_min) {
            __m256 sT = _mm256_load_ps(g->sT + TG * b);
            mc0 = _mm256_fmadd_ps(_mm256_set1_ps(mb0), sT, mc0);
            mc1 = _mm256_fmadd_ps(_mm256_set1_ps(mb1), sT, mc1);
        }
#pragma GCC unroll 4
        for (int p = 0; p < np; p++) {
            __m512i y = g->yP[b * TP + p];
            __m512i c = off ? g->cP[b * TP + p] : _mm512_setzero_si512();
            const __m512i ix = _mm512_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p,
                                                 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,
                                                 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1);
            a0[p] = _mm512_fmadd_ps(_mm512_permutexvar_ps(ix, pr0),
                                    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(c, x0, y)), a0[p]);
            a1[p] = _mm512_fmadd_ps(_mm512_permutexvar_ps(ix, pr1),
                                    _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(c, x1, y)), a1[p]);
        }
    }
    float ms0[TG] __attribute__((aligned(32))), ms1[TG] __attribute__((aligned(32)));
    _mm256_store_ps(ms0, mc0);
    _mm256_store_ps(ms1, mc1);
    const int nt = g->nt;
#pragma GCC unroll 4
    for (int p = 0; p < np; p++)
        for (int h = 0; h < 2 && 2 * p + h < nt; h++) {
            int t = 2 * p + h;
            __m256 s0 = h ? _mm512_extractf32x8_ps(a0[p], 1) : _mm512_castps512_ps256(a0[p]);
            __m256 s1 = h ? _mm512_extractf32x8_ps(a1[p], 1) : _mm512_castps512_ps256(a1[p]);
            out[t * ldo] = has_min ? hsum8(s0) + ms0[t] : hsum8(s0);
            if (nr > 1)
                out[t * ldo + 1] = has_min ? hsum8(s1) + ms1[t] : hsum8(s1);
        }
}

/* Rows [r0, r1) of Q8_0, Q5_0, Q4_1 or Q5_1 for all n_tok tokens; 0 when a
 * row does not fit (the caller then takes the AVX2 path). */
static int
legacy_tiles(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
             enum act a, const uint8_t *act, size_t arb, int64_t n_tok, int64_t cols, int64_t r0,
             int64_t r1)
{
    const int64_t nb = cols / 32;
    /* Q4_1/Q5_1 codes are unsigned; Q8_0/Q5_0 signed, stored + 128 */
    const int has_min = type == T_Q4_1 || type == T_Q5_1, off = has_min ? 0 : 128;
    const size_t rowu = (size_t)cols + (size_t)nb * sizeof(float) * 2;
    static __thread uint8_t buf[L2_TILE_BYTES] __attribute__((aligned(64)));
    struct vgroup *const g = &vgroup_tls[0];

    if (2 * rowu > sizeof(buf) || nb > G_MAX_NB)
        return 0;
    int64_t R = (int64_t)(sizeof(buf) / rowu) & ~(int64_t)1;
    if (R > LEGACY_TILE_ROWS)
        R = LEGACY_TILE_ROWS;
    uint8_t *q = buf;
    float *d = (float *)(void *)(buf + (size_t)R * (size_t)cols);
    float *m = d + R * nb;

    for (int64_t rb = r0; rb < r1; rb += R) {
        int64_t nr = r1 - rb < R ? r1 - rb : R;
        for (int64_t i = 0; i < nr; i++) {
            uint8_t *qi = q + i * cols;
            ops_mm_avx2_unpack_legacy((int8_t *)qi, d + i * nb, m + i * nb,
                                      w + (size_t)(rb + i) * row_bytes, type, nb);
            if (off == 128)
                for (int64_t b = 0; b < nb; b++) {
                    __m256i *p = (__m256i *)(void *)(qi + 32 * b);
                    _mm256_store_si256(p, _mm256_xor_si256(_mm256_load_si256(p),
                                                           _mm256_set1_epi8((char)0x80)));
                }
        }
        for (int64_t t0 = 0; t0 < n_tok; t0 += TG) {
            int nt = n_tok - t0 < TG ? (int)(n_tok - t0) : TG;
            vgroup_fill(g, a, act, arb, t0, nt, cols, nb, off);
            for (int64_t i = 0; i < nr; i += 2) {
                int two = nr - i > 1 ? 2 : 1;
                float *out = y + t0 * ldy + rb + i;
                const uint8_t *u0 = q + i * cols, *u1 = q + (i + two - 1) * cols;
                const float *d0 = d + i * nb, *d1 = d + (i + two - 1) * nb;
                const float *m0 = m + i * nb, *m1 = m + (i + two - 1) * nb;
#define LR(o, hm, n) lanes_rows2(out, ldy, u0, u1, d0, d1, m0, m1, g, n, two, o, hm, nb, 0, NULL, 0)
#define LR_NP(o, hm) switch ((nt + 1) / 2) { case 1: LR(o, hm, 1); break; case 2: LR(o, hm, 2); break; \
                                             case 3: LR(o, hm, 3); break; default: LR(o, hm, 4); break; }
                if (has_min) {
                    LR_NP(0, 1);
                } else {
                    LR_NP(128, 0);
                }
#undef LR_NP
#undef LR
            }
        }
    }
    return 1;
}

/* Rows [r0, r1) of Q8_0, Q5_0, Q4_1 or Q5_1 (at most G_MAX_NB blocks) for
 * a batch of at most DIRECT_GROUPS * TG tokens, straight from the blocks:
 * lanes_rows2's arithmetic (so the tiles' bits) on each block decoded in
 * registers, where the tiles unpack rows into L2 first, and each row pair
 * against every group of the batch while it is in L1.  For the few tokens
 * of a speculative verify the unpack pass, which streams the weights from
 * memory while nothing computes, cost as much as the products; here the
 * loads (prefetched) overlap the arithmetic.  Timed on a Zen 4 (one thread,
 * build/mmbench): 4 tokens of SmolLM2's 49152x576 Q8_0 LM head 3.1 -> 1.9
 * ms, of its 576x576 Q4_1 37 -> 29 us; 8 and 16 tokens 1.2-1.8x faster
 * than the tiles; at 24-32 tokens the Q8_0 rows from memory 1.1-1.3x, the
 * Q4_1 rows in cache 0.9-1.0x (a 24-token tree's verify of SmolLM2 Q4_1
 * 16.7 -> 15.0 ms per pass). */
static void
legacy_direct(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
              enum act a, const uint8_t *act, size_t arb, int64_t n_tok, int64_t cols, int64_t r0,
              int64_t r1)
{
    const int64_t nb = cols / 32;
    const int ng = (int)((n_tok + TG - 1) / TG);
    const int64_t pf_lines = (int64_t)((2 * row_bytes + 63) / 64);

    for (int k = 0; k < ng; k++) {
        int nt = n_tok - k * TG < TG ? (int)(n_tok - k * TG) : TG;
        vgroup_fill(&vgroup_tls[k], a, act, arb, k * TG, nt, cols, nb,
                    type == T_Q4_1 || type == T_Q5_1 ? 0 : 128);
    }
    for (int64_t r = r0; r < r1; r += 2) {
        int two = r1 - r > 1 ? 2 : 1;
        const uint8_t *u0 = w + (size_t)r * row_bytes, *u1 = w + (size_t)(r + two - 1) * row_bytes;
        /* the rows four passes ahead, spread over the first group's blocks */
        const char *pf = (const char *)u0 + DIRECT_PF_PASSES * 2 * row_bytes;
        for (int k = 0; k < ng; k++) {
            const struct vgroup *g = &vgroup_tls[k];
            float *out = y + (int64_t)k * TG * ldy + r;
            int64_t pl = k == 0 ? pf_lines : 0;
#define LD(t, o, hm, n) lanes_rows2(out, ldy, u0, u1, NULL, NULL, NULL, NULL, g, n, two, o, hm, nb, t, pf, pl)
#define LD_NP(t, o, hm) switch ((g->nt + 1) / 2) { case 1: LD(t, o, hm, 1); break; case 2: LD(t, o, hm, 2); break; \
                                               case 3: LD(t, o, hm, 3); break; default: LD(t, o, hm, 4); break; }
            switch (type) {
            case T_Q4_1: LD_NP(T_Q4_1, 0, 1); break;
            case T_Q5_1: LD_NP(T_Q5_1, 0, 1); break;
            case T_Q5_0: LD_NP(T_Q5_0, 128, 0); break;
            default: LD_NP(T_Q8_0, 128, 0); break;
            }
#undef LD_NP
#undef LD
        }
    }
}

/* ---- Q4_0 / IQ4_NL: rows in the lanes ----
 *
 * Their chain wants, per row, token and block, the exact integer sum of the
 * 32 products.  The tile stores 8 rows interleaved: for block b, vector j
 * (j = 0..7) holds in lane k the 4 codes 4j..4j+3 of row k (offset to
 * unsigned).  VPDPBUSD of vector j with the token's 4 codes 4j..4j+3
 * broadcast adds each row's 4 products to its own lane, so 8 of them, from
 * -off * the sum of the token's 32 codes, give the 8 rows' block sums in the
 * lanes with no horizontal sums; then sacc = fma(float(sum), d_row * d_tok,
 * sacc) per lane, the chain's operation. */
struct ichunk {
    int n;                      /* tokens */
    const int8_t *q[TG];
    float dT[G_MAX_NB * TG];    /* [block][token] */
    int32_t cT[G_MAX_NB * TG];  /* [block][token]: -off * the sum of the 32 codes */
};

static void
ichunk_fill(struct ichunk *g, const uint8_t *act, size_t arb, int64_t t0, int nt, int64_t cols,
            int64_t nb, int off)
{
    struct act_row ar;
    g->n = nt;
    for (int t = 0; t < nt; t++) {
        act_row_at(&ar, ACT_Q8_0, act + (size_t)(t0 + t) * arb, cols);
        g->q[t] = ar.q;
        for (int64_t b = 0; b < nb; b++) {
            g->dT[b * TG + t] = ar.d[b];
            g->cT[b * TG + t] = hsum_epi32(lane_starts(ar.q + 32 * b, off));
        }
    }
}

/* One block of a group of 8 rows (x[j]: the interleaved codes 4j..4j+3, dr
 * the rows' scales) against the chunk's nt tokens, into sacc[t]. */
static inline __attribute__((always_inline)) void
rows8_block(__m256 *sacc, const __m256i *x, __m256 dr, const struct ichunk *g, int64_t b, int nt)
{
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        const int8_t *y = g->q[t] + 32 * b;
        __m256i acc = _mm256_set1_epi32(g->cT[b * TG + t]);
        if (nt <= 2) {
            /* few tokens: four shorter chains of VPDPBUSD, whose latency
             * would otherwise bound the decode (the int32 sums are exact,
             * so their order does not matter) */
            __m256i a[4];
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                a[j] = _mm256_dpbusd_epi32(j ? _mm256_setzero_si256() : acc, x[j],
                                           _mm256_set1_epi32(ld32(y + 4 * j)));
#pragma GCC unroll 4
            for (int j = 4; j < 8; j++)
                a[j - 4] = _mm256_dpbusd_epi32(a[j - 4], x[j], _mm256_set1_epi32(ld32(y + 4 * j)));
            acc = _mm256_add_epi32(_mm256_add_epi32(a[0], a[1]), _mm256_add_epi32(a[2], a[3]));
        } else {
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++)
                acc = _mm256_dpbusd_epi32(acc, x[j], _mm256_set1_epi32(ld32(y + 4 * j)));
        }
        __m256 dd = _mm256_mul_ps(dr, _mm256_set1_ps(g->dT[b * TG + t]));
        sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), dd, sacc[t]);
    }
}

/* one group of 8 interleaved rows (x: [nb][8 vectors], d: [nb][8]) against
 * the chunk's nt tokens; only the rows in keep are stored */
static inline __attribute__((always_inline)) void
ileave_rows8(float *out, int64_t ldo, const __m256i *x, const float *d, const struct ichunk *g,
             int nt, __mmask8 keep, int64_t nb)
{
    __m256 sacc[TG];

#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        sacc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i xb[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            xb[j] = x[8 * b + j];
        rows8_block(sacc, xb, _mm256_load_ps(d + 8 * b), g, b, nt);
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        _mm256_mask_storeu_ps(out + t * ldo, keep, sacc[t]);
}

/* row groups (8 rows each) per ileave tile: each tile refills the token
 * groups' block sums (ichunk_fill), 10% of an IQ4_NL prompt at 2 groups */
#define IL_GROUPS 16
/* Rows [r0, r1) of Q4_0 / IQ4_NL for all n_tok tokens; 0 when a row group
 * does not fit. */
static int
ileave_tiles(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
             const uint8_t *act, size_t arb, int64_t n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    const int64_t nb = cols / 32;
    const int off = type == T_Q4_0 ? 8 : 128;
    /* one group: 8 rows of codes and their scales */
    const size_t grp = (size_t)cols * 8 + (size_t)nb * 8 * sizeof(float);
    static __thread uint8_t buf[L2_TILE_BYTES] __attribute__((aligned(64)));
    static __thread struct ichunk g;
    int8_t codes[8][32 * 64] __attribute__((aligned(32)));
    float dr[8][64], mr[64];

    if (grp > sizeof(buf) || nb > 64)
        return 0;
    int64_t G = (int64_t)(sizeof(buf) / grp);
    if (G > IL_GROUPS)
        G = IL_GROUPS;
    for (int64_t rb = r0; rb < r1; rb += 8 * G) {
        int64_t nrt = r1 - rb < 8 * G ? r1 - rb : 8 * G;
        int64_t ng = (nrt + 7) / 8;
        for (int64_t gi = 0; gi < ng; gi++) {
            __m256i *x = (__m256i *)(void *)(buf + (size_t)gi * grp);
            float *d = (float *)(void *)(x + 8 * nb);
            for (int k = 0; k < 8; k++) {
                /* rows past the end repeat the group's first row (not stored) */
                int64_t r = rb + 8 * gi + k < r1 ? rb + 8 * gi + k : rb + 8 * gi;
                ops_mm_avx2_unpack_legacy(codes[k], dr[k], mr, w + (size_t)r * row_bytes, type, nb);
            }
            for (int64_t b = 0; b < nb; b++) {
                uint32_t v[8][8];
                for (int k = 0; k < 8; k++) {
                    for (int j = 0; j < 8; j++) {
                        uint32_t u;
                        memcpy(&u, codes[k] + 32 * b + 4 * j, 4);
                        v[j][k] = off == 128 ? u ^ 0x80808080u : u;
                    }
                    d[8 * b + k] = dr[k][b];
                }
                for (int j = 0; j < 8; j++)
                    x[8 * b + j] = _mm256_loadu_si256((const __m256i *)(const void *)v[j]);
            }
        }
        for (int64_t t0 = 0; t0 < n_tok; t0 += TG) {
            int nt = n_tok - t0 < TG ? (int)(n_tok - t0) : TG;
            ichunk_fill(&g, act, arb, t0, nt, cols, nb, off);
            for (int64_t gi = 0; gi < ng; gi++) {
                const __m256i *x = (const __m256i *)(const void *)(buf + (size_t)gi * grp);
                const float *d = (const float *)(const void *)(x + 8 * nb);
                int nr = nrt - 8 * gi < 8 ? (int)(nrt - 8 * gi) : 8;
                float *out = y + t0 * ldy + rb + 8 * gi;
#define IL(n) ileave_rows8(out, ldy, x, d, &g, n, (__mmask8)((1u << nr) - 1), nb)
                BY_NT8(IL)
#undef IL
            }
        }
    }
    return 1;
}

/* ---- Q4_0 and IQ4_NL packed at load (kernel_ops.mm_pack) ----
 *
 * (The two share the block layout: an fp16 scale and 16 nibble bytes; the
 * IQ4_NL codes go through its table, offset by 128 to unsigned.)
 * Per group of 8 rows (the last padded with zero rows) and block: the 8
 * rows' fp16 scales (16 bytes), then 4 vectors of 32 bytes, vector j lane k
 * = bytes 4j..4j+3 of row k's 16 nibble bytes.  Vector j & 15 is then the
 * interleaved codes 4j..4j+3 of ileave_tiles and (vector j >> 4) & 15 the
 * codes 16 + 4j..: the rows-in-lanes kernel reads the weights straight from
 * memory, one sequential stream, for any number of tokens. */
#define PK_BLOCK (16 + 128)

size_t
ops_mm_pack_size_avx512(uint32_t wtype, int64_t rows, int64_t cols)
{
    if ((wtype != T_Q4_0 && wtype != T_IQ4_NL) || cols % 32 || cols / 32 > G_MAX_NB || rows <= 0)
        return 0;
    return (size_t)((rows + 7) / 8) * (size_t)(cols / 32) * PK_BLOCK;
}

void
ops_mm_pack_avx512(void *dst, const void *w, size_t row_bytes, uint32_t wtype, int64_t rows,
                   int64_t cols)
{
    const int64_t nb = cols / 32;
    uint8_t *o = dst;

    (void)wtype;
    for (int64_t g = 0; g < (rows + 7) / 8; g++)
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *p = o + ((size_t)g * (size_t)nb + (size_t)b) * PK_BLOCK;
            memset(p, 0, PK_BLOCK);
            for (int k = 0; k < 8 && 8 * g + k < rows; k++) {
                const uint8_t *blk = (const uint8_t *)w + (size_t)(8 * g + k) * row_bytes +
                                     (size_t)b * sizeof(struct block_q4_0);
                memcpy(p + 2 * k, blk, 2);
                for (int j = 0; j < 4; j++)
                    memcpy(p + 16 + 32 * j + 4 * k, blk + 2 + 4 * j, 4);
            }
        }
}

static inline __attribute__((always_inline)) void
packed_rows8(float *out, int64_t ldo, const uint8_t *pk, uint32_t type, const struct ichunk *g,
             int nt, __mmask8 keep, int64_t nb, const char *pf, int64_t pf_lines)
{
    const __m256i m15 = _mm256_set1_epi8(15);
    /* IQ4_NL: the table's values + 128 (v ^ 0x80) */
    const __m256i lut = _mm256_xor_si256(iq4nl_lut(), _mm256_set1_epi8((char)0x80));
    __m256 sacc[TG];
    int64_t pfl = 0, pfa = 0;

#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        sacc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = pk + (size_t)b * PK_BLOCK;
        __m256i x[8];
        pf_spread(pf, &pfl, &pfa, pf_lines, nb);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(p + 16 + 32 * j));
            x[j] = _mm256_and_si256(v, m15);
            x[4 + j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m15);
            if (type == T_IQ4_NL) {
                x[j] = _mm256_shuffle_epi8(lut, x[j]);
                x[4 + j] = _mm256_shuffle_epi8(lut, x[4 + j]);
            }
        }
        __m256 dr = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
        rows8_block(sacc, x, dr, g, b, nt);
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        _mm256_mask_storeu_ps(out + t * ldo, keep, sacc[t]);
}

/* rows [r0, r1) of a packed Q4_0 or IQ4_NL matrix for all n_tok tokens:
 * whole groups are computed (each row's lane is independent of the others)
 * and only the rows in the range stored */
static void
packed_rows(float *y, int64_t ldy, const uint8_t *pk, uint32_t type, const uint8_t *act, size_t arb,
            int64_t n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    const int64_t nb = cols / 32;
    const size_t gbytes = (size_t)nb * PK_BLOCK;
    const int64_t pf_lines = (int64_t)((gbytes + 63) / 64);
    static __thread struct ichunk g;

    for (int64_t t0 = 0; t0 < n_tok; t0 += TG) {
        int nt = n_tok - t0 < TG ? (int)(n_tok - t0) : TG;
        ichunk_fill(&g, act, arb, t0, nt, cols, nb, type == T_Q4_0 ? 8 : 128);
        for (int64_t gi = r0 / 8; gi * 8 < r1; gi++) {
            int64_t lo = r0 > 8 * gi ? r0 - 8 * gi : 0, hi = r1 < 8 * gi + 8 ? r1 - 8 * gi : 8;
            __mmask8 keep = (__mmask8)(((1u << hi) - 1) & ~((1u << lo) - 1));
            const uint8_t *pg = pk + (size_t)gi * gbytes;
            /* decode streams the groups from memory: ask for the one after next */
            const char *pf = (const char *)pg + 2 * gbytes;
            float *out = y + t0 * ldy + 8 * gi;
#define PR(n) packed_rows8(out, ldy, pg, ty, &g, n, keep, nb, pf, n_tok == 1 ? pf_lines : 0)
#define PR_T(t) { const uint32_t ty = t; BY_NT8(PR) }
            if (type == T_Q4_0)
                PR_T(T_Q4_0)
            else
                PR_T(T_IQ4_NL)
#undef PR_T
#undef PR
        }
    }
}

/* ---- Q4_K batches: rows in the lanes ----
 *
 * Q4_K takes the repacked gemv chain (kquant_row of cpu/matmul_avx2.c): per
 * row, token and super-block the exact sums isum = sum of sc * q * y and
 * msum = sum of mn * (the activations' 32-element sums), then
 * sacc = fma(isum, d * yd, sacc), macc = fma(msum, dmin * yd, macc), and
 * sacc - macc at the end.  As ileave_tiles for Q4_0, a tile group holds 8
 * rows interleaved (vector i of sub-block j, lane k: row k's codes
 * 32j + 4i .. + 3), so 8 VPDPBUSD with the token's codes broadcast give the
 * 8 rows' sub-block sums in the lanes; one VPMULLD by the rows' scales per
 * sub-block, and the mins by VPDPWSSD on int16 pairs. */
#define K4_SB_BYTES (2048 + 8 * 32 + 4 * 32 + 2 * 32)   /* codes, sc, mn pairs, d, dmin */
#define K4_MAX_SB 16                                    /* super-blocks per row (4096 columns) */

/* v[k] (8 dwords each) transposed: v[i] lane k = the old v[k] lane i */
static inline __attribute__((always_inline)) void
transpose8_epi32(__m256i *v)
{
    __m256i t[8], u[8];
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        t[2 * p] = _mm256_unpacklo_epi32(v[2 * p], v[2 * p + 1]);       /* a0 b0 a1 b1 | a4 .. */
        t[2 * p + 1] = _mm256_unpackhi_epi32(v[2 * p], v[2 * p + 1]);   /* a2 b2 a3 b3 | a6 .. */
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {   /* rows 0-3, then 4-7 */
        __m256i *a = t + 4 * h;
        u[4 * h] = _mm256_unpacklo_epi64(a[0], a[2]);                   /* a0 b0 c0 d0 | a4 .. */
        u[4 * h + 1] = _mm256_unpackhi_epi64(a[0], a[2]);               /* a1 .. | a5 .. */
        u[4 * h + 2] = _mm256_unpacklo_epi64(a[1], a[3]);               /* a2 .. | a6 .. */
        u[4 * h + 3] = _mm256_unpackhi_epi64(a[1], a[3]);               /* a3 .. | a7 .. */
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x20);
        v[4 + i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x31);
    }
}

static void
q4k_group_unpack(uint8_t *dst, const uint8_t *w, size_t row_bytes, int64_t rows_left, int64_t nsb)
{
    const __m256i m15 = _mm256_set1_epi8(15);

    for (int64_t b = 0; b < nsb; b++) {
        uint8_t *o = dst + (size_t)b * K4_SB_BYTES;
        int32_t sc[8][8];       /* [sub-block][row] */
        int16_t mn[8][8][2];    /* [pair][row][2] */
        float d[8], dm[8];
        const struct block_q4_K *x[8];
        for (int k = 0; k < 8; k++) {
            /* rows past the end repeat row 0 (their lanes are not stored) */
            x[k] = (const struct block_q4_K *)(const void *)(
                w + (size_t)(k < rows_left ? k : 0) * row_bytes) + b;
            d[k] = _cvtsh_ss(x[k]->d);
            dm[k] = _cvtsh_ss(x[k]->dmin);
            for (int j = 0; j < 8; j++) {
                const uint8_t *q = x[k]->scales;
                int s6, m6;
                if (j < 4) {
                    s6 = q[j] & 63;
                    m6 = q[j + 4] & 63;
                } else {
                    s6 = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4;
                    m6 = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
                }
                sc[j][k] = s6;
                mn[j / 2][k][j % 2] = (int16_t)m6;
            }
        }
        /* sub-block j of a row: its 32 codes in element order, the low
         * (j even) or high nibbles of qs[32 (j / 2) ..]; vector i of the
         * tile's sub-block j holds in lane k row k's codes 4i .. 4i + 3:
         * the 8 rows' codes as 8 x 8 dwords, transposed */
#pragma GCC unroll 1
        for (int j = 0; j < 8; j++) {
            __m256i v[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(x[k]->qs + 32 * (j / 2)));
                v[k] = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(q, 4) : q, m15);
            }
            transpose8_epi32(v);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                _mm256_storeu_si256((__m256i *)(void *)(o + 256 * j + 32 * i), v[i]);
        }
        memcpy(o + 2048, sc, sizeof sc);
        memcpy(o + 2048 + 256, mn, 4 * 8 * 2 * sizeof(int16_t));
        memcpy(o + 2048 + 256 + 128, d, sizeof d);
        memcpy(o + 2048 + 256 + 128 + 32, dm, sizeof dm);
    }
}

static inline __attribute__((always_inline)) void
q4k_rows8(float *out, int64_t ldo, const uint8_t *u, const struct act_row *ar, int nt,
          __mmask8 keep, int64_t nsb)
{
    __m256 sacc[TG], macc[TG];

#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        sacc[t] = macc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nsb; b++) {
        const uint8_t *o = u + (size_t)b * K4_SB_BYTES;
        __m256 d = _mm256_loadu_ps((const float *)(const void *)(o + 2048 + 384));
        __m256 dm = _mm256_loadu_ps((const float *)(const void *)(o + 2048 + 416));
#pragma GCC unroll 1
        for (int t = 0; t < nt; t++) {
            const int8_t *y = ar[t].q + 256 * b;
            const int16_t *bs = ar[t].bsums + 16 * b;
            __m256i isum = _mm256_setzero_si256(), msum = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                const __m256i *x = (const __m256i *)(const void *)(o + 256 * j);
                __m256i a = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++)
                    a = _mm256_dpbusd_epi32(a, _mm256_loadu_si256(x + i),
                                            _mm256_set1_epi32(ld32(y + 32 * j + 4 * i)));
                isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(
                    a, _mm256_loadu_si256((const __m256i *)(const void *)(o + 2048 + 32 * j))));
            }
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
                /* (32-element sums of sub-blocks 2p, 2p + 1) as an int16 pair */
                int16_t s0 = (int16_t)(bs[4 * p] + bs[4 * p + 1]), s1 = (int16_t)(bs[4 * p + 2] + bs[4 * p + 3]);
                uint32_t pr = (uint16_t)s0 | (uint32_t)(uint16_t)s1 << 16;
                msum = _mm256_dpwssd_epi32(msum, _mm256_loadu_si256((const __m256i *)(const void *)(o + 2048 + 256 + 32 * p)),
                                           _mm256_set1_epi32((int)pr));
            }
            __m256 yd = _mm256_set1_ps(ar[t].d[b]);
            sacc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, yd), sacc[t]);
            macc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dm, yd), macc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++)
        _mm256_mask_storeu_ps(out + t * ldo, keep, _mm256_sub_ps(sacc[t], macc[t]));
}

/* Rows [r0, r1) of Q4_K for all n_tok tokens; 0 when a group does not fit. */
static int
q4k_tiles(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, const uint8_t *act,
          size_t arb, int64_t n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    const int64_t nsb = cols / 256;
    const size_t grp = (size_t)nsb * K4_SB_BYTES;
    /* up to 16 groups (128 rows) per tile */
    static __thread uint8_t buf[L2_TILE_BYTES] __attribute__((aligned(64)));

    if (nsb > K4_MAX_SB || grp > sizeof(buf))
        return 0;
    int64_t G = (int64_t)(sizeof(buf) / grp);
    if (G > 16)
        G = 16;
    for (int64_t rb = r0; rb < r1; rb += 8 * G) {
        int64_t nrt = r1 - rb < 8 * G ? r1 - rb : 8 * G, ng = (nrt + 7) / 8;
        for (int64_t gi = 0; gi < ng; gi++)
            q4k_group_unpack(buf + (size_t)gi * grp, w + (size_t)(rb + 8 * gi) * row_bytes, row_bytes,
                             nrt - 8 * gi, nsb);
        for (int64_t t0 = 0; t0 < n_tok; t0 += TG) {
            int nt = n_tok - t0 < TG ? (int)(n_tok - t0) : TG;
            struct act_row ar[TG];
            for (int t = 0; t < nt; t++)
                act_row_at(&ar[t], ACT_Q8_K, act + (size_t)(t0 + t) * arb, cols);
            for (int64_t gi = 0; gi < ng; gi++) {
                int nr = nrt - 8 * gi < 8 ? (int)(nrt - 8 * gi) : 8;
                float *out = y + t0 * ldy + rb + 8 * gi;
                q4k_rows8(out, ldy, buf + (size_t)gi * grp, ar, nt, (__mmask8)((1u << nr) - 1), nsb);
            }
        }
    }
    return 1;
}

/* ---- k-quants: the AVX2 tiles with VPDPWSSD (cpu/kquant_tiles.h) ---- */

#define KQ_VNNI 1
#define KQ_TILE_BYTES L2_TILE_BYTES
#define KQ_TILE_ROWS 64
#include "cpu/kquant_tiles.h"

/* ---- F16 ---- */

/* 4 widened rows (w, stride cols; cols % 32 == 0) x nt <= 4 tokens: ggml_vec_dot_f16
 * in two passes, accumulators 0,1 (elements i..i+15 of each step of 32),
 * then 2,3 (i+16..i+31): per pass 16 registers acc[r][t], lanes 0..7 the
 * first accumulator of the pair, 8..15 the second.  Then per output
 * (a0 + a2 | a1 + a3), (a0 + a2) + (a1 + a3), and avx2_reduce1's halves
 * and two horizontal adds, four outputs at a time (the same additions). */
static void
f16_block4(float *y, int64_t ldy, const float *w, int64_t cols, int nr, const float *const *xs,
           int nt)
{
    __m512 part[4][4];          /* the first pass (accumulators 0, 1) */
    __m512 acc[4][4];

#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
                acc[r][t] = _mm512_setzero_ps();
        for (int64_t i = 16 * h; i < cols; i += 32) {
            __m512 x0 = _mm512_loadu_ps(xs[0] + i), x1 = _mm512_loadu_ps(xs[1] + i);
            __m512 x2 = _mm512_loadu_ps(xs[2] + i), x3 = _mm512_loadu_ps(xs[3] + i);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                __m512 wv = _mm512_loadu_ps(w + r * cols + i);
                acc[r][0] = _mm512_fmadd_ps(wv, x0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(wv, x1, acc[r][1]);
                acc[r][2] = _mm512_fmadd_ps(wv, x2, acc[r][2]);
                acc[r][3] = _mm512_fmadd_ps(wv, x3, acc[r][3]);
            }
        }
        if (h == 0)
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
                for (int t = 0; t < 4; t++)
                    part[r][t] = acc[r][t];
    }
    /* all 4 tokens (the second pass stays in registers), the first nt
     * stored, the first nr rows of each */
    const __mmask8 rows = (__mmask8)((1u << nr) - 1);
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++) {
        __m128 q[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            __m512 s = _mm512_add_ps(part[r][t], acc[r][t]);
            __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
            q[r] = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
        }
        /* hadd(hadd(q0, q1), hadd(q2, q3)) lane r = (q_r0 + q_r1) + (q_r2 + q_r3),
         * what two hadds of q_r with itself leave in lane 0 */
        __m128 o = _mm_hadd_ps(_mm_hadd_ps(q[0], q[1]), _mm_hadd_ps(q[2], q[3]));
        if (t < nt)
            _mm_mask_storeu_ps(y + t * ldy, rows, o);
    }
}

static int
f16_tiles(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, const uint8_t *act,
          size_t arb, int64_t n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    static __thread float buf[F16_TILE_BYTES / sizeof(float)] __attribute__((aligned(64)));
    size_t rowu = (size_t)cols * sizeof(float);

    if (cols % 32 || 4 * rowu > sizeof(buf))
        return 0;
    int64_t R = (int64_t)(sizeof(buf) / rowu) & ~(int64_t)3;
    for (int64_t rb = r0; rb < r1; rb += R) {
        int64_t nr = r1 - rb < R ? r1 - rb : R;
        for (int64_t i = 0; i < nr; i++) {
            const uint16_t *row = (const uint16_t *)(const void *)(w + (size_t)(rb + i) * row_bytes);
            for (int64_t c = 0; c < cols; c += 16)
                _mm512_store_ps(buf + i * cols + c,
                                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(row + c))));
        }
        /* rows past nr read a valid row of the tile; their results are dropped */
        for (int64_t i = nr; i < ((nr + 3) & ~(int64_t)3); i++)
            memcpy(buf + i * cols, buf, rowu);
        for (int64_t t0 = 0; t0 < n_tok; t0 += 4) {
            int nt = n_tok - t0 < 4 ? (int)(n_tok - t0) : 4;
            const float *xs[4];
            for (int t = 0; t < 4; t++)
                xs[t] = (const float *)(const void *)(act + (size_t)(t0 + (t < nt ? t : 0)) * arb);
            for (int64_t i = 0; i < nr; i += 4)
                f16_block4(y + t0 * ldy + rb + i, ldy, buf + i * cols, cols,
                           nr - i < 4 ? (int)(nr - i) : 4, xs, nt);
        }
    }
    return 1;
}

/* ---- decode (one token; Q4_1, Q5_0 and Q5_1 up to PD_TOK tokens) ---- */

#define DR 4                    /* rows per pass of the lanes decode */
#define DEC_MAX_NB 1024         /* blocks per row of q8_0_decode */

/* nr (<= DR) rows of Q8_0 against one token: ggml_vec_dot's lanes (as
 * legacy_rows1 of cpu/matmul_avx2.c), each from one VPDPBUSD on the codes
 * offset to unsigned (code ^ 0x80 = code + 128) started from c[b] = -128 *
 * the lane sums of the token's block b. */
static inline __attribute__((always_inline)) void
lanes_dec(float *out, const uint8_t *row0, size_t row_bytes, const struct act_row *ar,
          const __m256i *c, int nr, int64_t nb, const char *pf, int64_t pf_lines)
{
    __m256 acc[DR];
    int64_t pfl = 0, pfa = 0;

#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        acc[i] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(ar->q + 32 * b));
        float da = ar->d[b];
        pf_spread(pf, &pfl, &pfa, pf_lines, nb);
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            const struct block_q8_0 *q = (const struct block_q8_0 *)(const void *)(row0 + (size_t)i * row_bytes) + b;
            __m256i x = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)q->qs),
                                         _mm256_set1_epi8((char)0x80));
            acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(q->d) * da),
                                     _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(c[b], x, y)), acc[i]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
        out[i] = hsum8(acc[i]);
}

#define PD 4                    /* row pairs per pass of pair_dec */
/* pair_dec takes 1..PD_TOK tokens (a decode, the smallest verify passes
 * and batches): each row pair's unpacked codes (two rows per register) and
 * each pass's scales (8 rows' gathered and converted at once) serve them
 * all, and an odd count is not padded to pairs.  legacy_direct, which
 * takes more tokens, works 2 rows per pass, decodes each row's block on
 * its own (256 bits, its scales converted one by one) and pads the tokens
 * to pairs (3 cost it as much as 4).  Timed on a Zen 4 (one thread,
 * build/mmbench, the old kernels -> pair_dec; one token 26 us): Q4_1
 * 576x1536, 2 / 3 / 4 tokens 52.7 / 72.0 / 73.0 -> 40.3 / 54.0 / 69.3 us;
 * Q5_0 1.3 / 1.7 / 1.1x and Q5_1 1.1x (4 tokens) faster.  More tokens:
 * legacy_direct (5-8 here spill registers: 0.9-2.6x its time). */
#define PD_TOK 4

/* 2 * np (np <= PD) rows of Q4_1, Q5_0 or Q5_1 against nt (<= PD_TOK)
 * tokens, two rows per 512-bit register: ggml_vec_dot's eight int32 lanes
 * of row A in register lanes 0..3 and 8..11, row B's in 4..7 and 12..15
 * (128-bit quarters: A's low nibbles, B's low, A's high, B's high; the
 * token's block as y.lo, y.lo, y.hi, y.hi), from one VPDPBUSD per token for
 * both rows on the unsigned codes (Q5: the high bits added as 16 by a byte
 * mask in the same order; Q5_0's codes offset by 16, the lanes started
 * from -16 * the token's lane sums), and the lane-wise acc = fma(d * da,
 * lanes, acc).  The 8 rows' d (and m) come in one vector per block: d * da
 * for all of them by one multiply per token, spread to the pairs by a
 * permute, and the min terms' scalar chains sacc = fma(m, s, sacc) in the 8
 * lanes of one register per token.  The result is hsum_float_8 of each
 * row's two quarters (+ sacc), token t's into out[t * ldo].  Rows past nr
 * (2 * np - 1 or 2 * np) repeat the last row. */
static inline __attribute__((always_inline)) void
pair_dec(float *out, int64_t ldo, const uint8_t *row0, size_t row_bytes, uint32_t type,
         const struct act_row *ar, int nt, int np, int nr, int64_t nb, const char *pf,
         int64_t pf_lines)
{
    const int has_min = type != T_Q5_0;
    const size_t bsz = type == T_Q4_1 ? sizeof(struct block_q4_1)
                     : type == T_Q5_0 ? sizeof(struct block_q5_0) : sizeof(struct block_q5_1);
    /* offsets of the high bits and the nibbles in a block */
    const size_t oqh = type == T_Q5_0 ? 2 : 4, oqs = type == T_Q4_1 ? 4 : type == T_Q5_0 ? 6 : 8;
    const __m512i m15 = _mm512_set1_epi8(15), b16 = _mm512_set1_epi8(16);
    const __m512i yidx = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3);
    const uint8_t *rp[2 * PD];
    __m512i didx[PD];
    __m512 acc[PD][PD_TOK];
    __m256 sacc[PD_TOK];
    int64_t pfl = 0, pfa = 0;

#pragma GCC unroll 8
    for (int i = 0; i < 2 * PD; i++)
        rp[i] = row0 + (size_t)(i < nr ? i : nr - 1) * row_bytes;
#pragma GCC unroll 4
    for (int p = 0; p < np; p++) {
        /* lanes of row 2p: 0..3, 8..11; of row 2p + 1: 4..7, 12..15 */
        didx[p] = _mm512_or_si512(_mm512_set1_epi32(2 * p),
                                  _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1));
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
            acc[p][t] = _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
        sacc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)b * bsz;
        __m512i y[PD_TOK], c0[PD_TOK];
        __m512 dd16[PD_TOK];
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            const __m256i *q = (const __m256i *)(const void *)(ar[t].q + 32 * b);
            y[t] = _mm512_permutexvar_epi64(yidx, _mm512_castsi256_si512(_mm256_loadu_si256(q)));
            /* Q5_0: each lane from -16 * the sum of its 4 codes (exact) */
            c0[t] = type == T_Q5_0
                        ? _mm512_sub_epi32(_mm512_setzero_si512(),
                                           _mm512_dpbusd_epi32(_mm512_setzero_si512(), b16, y[t]))
                        : _mm512_setzero_si512();
        }
        pf_spread(pf, &pfl, &pfa, pf_lines, nb);
        /* the 8 rows' first 4 bytes of block b: d (and m) */
        __m128i g0 = _mm_cvtsi32_si128(ld32((const int8_t *)(rp[0] + o)));
        __m128i g1 = _mm_cvtsi32_si128(ld32((const int8_t *)(rp[4] + o)));
        /* (constant lane numbers: clang, the fuzz build, requires them) */
        g0 = _mm_insert_epi32(g0, ld32((const int8_t *)(rp[1] + o)), 1);
        g1 = _mm_insert_epi32(g1, ld32((const int8_t *)(rp[5] + o)), 1);
        g0 = _mm_insert_epi32(g0, ld32((const int8_t *)(rp[2] + o)), 2);
        g1 = _mm_insert_epi32(g1, ld32((const int8_t *)(rp[6] + o)), 2);
        g0 = _mm_insert_epi32(g0, ld32((const int8_t *)(rp[3] + o)), 3);
        g1 = _mm_insert_epi32(g1, ld32((const int8_t *)(rp[7] + o)), 3);
        __m256i g = _mm256_inserti128_si256(_mm256_castsi128_si256(g0), g1, 1);
        __m256 dh = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(g));
        __m256 mh = has_min ? _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(g, 16)))
                            : _mm256_setzero_ps();
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            dd16[t] = _mm512_castps256_ps512(_mm256_mul_ps(dh, _mm256_set1_ps(ar[t].d[b])));
            if (has_min)
                sacc[t] = _mm256_fmadd_ps(mh, _mm256_set1_ps(ar[t].s[b]), sacc[t]);
        }
#pragma GCC unroll 4
        for (int p = 0; p < np; p++) {
            const uint8_t *ba = rp[2 * p] + o, *bb = rp[2 * p + 1] + o;
            __m256i q = _mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(ba + oqs))),
                _mm_loadu_si128((const __m128i *)(const void *)(bb + oqs)), 1);
            __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(q), q, 1);
            x = _mm512_and_si512(_mm512_mask_srli_epi16(x, (__mmask32)0xffff0000u, x, 4), m15);
            if (type != T_Q4_1) {
                uint32_t ha, hb;
                memcpy(&ha, ba + oqh, 4);
                memcpy(&hb, bb + oqh, 4);
                /* element j's bit, in the quarters' order */
                uint64_t k = (uint64_t)(ha & 0xffff) | (uint64_t)(hb & 0xffff) << 16 |
                             (uint64_t)(ha >> 16) << 32 | (uint64_t)(hb >> 16) << 48;
                x = _mm512_mask_add_epi8(x, (__mmask64)k, x, b16);
            }
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                __m512i l = _mm512_dpbusd_epi32(c0[t], x, y[t]);
                acc[p][t] = _mm512_fmadd_ps(_mm512_permutexvar_ps(didx[p], dd16[t]),
                                            _mm512_cvtepi32_ps(l), acc[p][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        float sm[8];
        _mm256_storeu_ps(sm, sacc[t]);
#pragma GCC unroll 4
        for (int p = 0; p < np; p++) {
            /* row A's lanes: quarters 0 (low) and 2 (high); row B's: 1 and 3 */
            __m512 a = acc[p][t];
            float ra = hsum8_halves(_mm512_castps512_ps128(a), _mm512_extractf32x4_ps(a, 2));
            float rb = hsum8_halves(_mm512_extractf32x4_ps(a, 1), _mm512_extractf32x4_ps(a, 3));
            out[t * ldo + 2 * p] = has_min ? ra + sm[2 * p] : ra;
            if (2 * p + 1 < nr)
                out[t * ldo + 2 * p + 1] = has_min ? rb + sm[2 * p + 1] : rb;
        }
    }
}

/* rows [r0, r1) of Q4_1, Q5_0 or Q5_1 for n_tok (<= PD_TOK) tokens */
static void
legacy_pairs(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
             const uint8_t *act, size_t arb, int n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    struct act_row ar[PD_TOK];
    const int64_t nb = cols / 32;
    const int64_t pf_lines = (int64_t)((2 * PD * row_bytes + 63) / 64);

    for (int t = 0; t < n_tok; t++)
        act_row_at(&ar[t], type == T_Q5_0 ? ACT_Q8_0 : ACT_Q8_1, act + (size_t)t * arb, cols);
    for (int64_t r = r0; r < r1; r += 2 * PD) {
        int nr = r1 - r < 2 * PD ? (int)(r1 - r) : 2 * PD;
        const uint8_t *row0 = w + (size_t)r * row_bytes;
        const char *pf = (const char *)row0 + 4 * PD * row_bytes;
        /* instantiated for literal token and row pair counts (and type) */
#define PDN(ty, k, n) pair_dec(y + r, ldy, row0, row_bytes, ty, ar, k, n, nr, nb, pf, pf_lines)
#define PD_NP(ty, k) switch ((nr + 1) / 2) { \
            case 1: PDN(ty, k, 1); break; case 2: PDN(ty, k, 2); break; \
            case 3: PDN(ty, k, 3); break; default: PDN(ty, k, 4); break; }
#define PD_NT(ty) switch (n_tok) { case 1: PD_NP(ty, 1); break; case 2: PD_NP(ty, 2); break; \
                                   case 3: PD_NP(ty, 3); break; default: PD_NP(ty, 4); break; }
        if (type == T_Q4_1) {
            PD_NT(T_Q4_1);
        } else if (type == T_Q5_0) {
            PD_NT(T_Q5_0);
        } else {
            PD_NT(T_Q5_1);
        }
#undef PD_NT
#undef PD_NP
#undef PDN
    }
}

/* rows [r0, r1) of Q8_0 for one token; 0 when a row is too long (the
 * caller then takes the AVX2 path) */
static int
q8_0_decode(float *y, const uint8_t *w, size_t row_bytes, const uint8_t *act, int64_t cols,
            int64_t r0, int64_t r1)
{
    struct act_row ar;
    const int64_t nb = cols / 32;
    __m256i c[DEC_MAX_NB];

    if (nb > DEC_MAX_NB)
        return 0;
    act_row_at(&ar, ACT_Q8_0, act, cols);
    for (int64_t b = 0; b < nb; b++)
        c[b] = lane_starts(ar.q + 32 * b, 128);
    const int64_t pf_lines = (int64_t)((DR * row_bytes + 63) / 64);
    for (int64_t r = r0; r < r1; r += DR) {
        int nr = r1 - r < DR ? (int)(r1 - r) : DR;
        const uint8_t *row0 = w + (size_t)r * row_bytes;
        const char *pf = (const char *)row0 + 2 * DR * row_bytes;
#define LD(n) lanes_dec(y + r, row0, row_bytes, &ar, c, n, nb, pf, pf_lines)
        switch (nr) { case 1: LD(1); break; case 2: LD(2); break; case 3: LD(3); break; default: LD(4); break; }
#undef LD
    }
    return 1;
}

void
ops_mm_rows_avx512(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                   const void *work, const float *x, int64_t ldx, int64_t n_tok, int64_t cols,
                   int64_t r0, int64_t r1, float *tmp)
{
    if (wtype & OPS_MM_PACKED) {
        /* Q4_0 and IQ4_NL (ops_mm_pack_size_avx512) */
        packed_rows(y, ldy, w, wtype & ~(uint32_t)OPS_MM_PACKED, work, act_row_bytes(ACT_Q8_0, cols),
                    n_tok, cols, r0, r1);
        return;
    }
    enum act a = act_type(wtype);
    size_t arb = act_row_bytes(a, cols);

    if (n_tok >= 1 && n_tok <= PD_TOK && (wtype == T_Q5_0 || wtype == T_Q4_1 || wtype == T_Q5_1)) {
        legacy_pairs(y, ldy, w, row_bytes, wtype, work, arb, (int)n_tok, cols, r0, r1);
        return;
    }
    if (n_tok == 1 && wtype == T_Q8_0 && q8_0_decode(y, w, row_bytes, work, cols, r0, r1))
        return;
    if (n_tok >= 2 && n_tok <= DIRECT_GROUPS * TG && cols / 32 <= G_MAX_NB &&
        (wtype == T_Q8_0 || wtype == T_Q5_0 || wtype == T_Q4_1 || wtype == T_Q5_1)) {
        legacy_direct(y, ldy, w, row_bytes, wtype, a, work, arb, n_tok, cols, r0, r1);
        return;
    }
    if (a == ACT_Q8_K && n_tok >= 2 && n_tok < TILE_MIN_KQ &&
        ops_mm_kquant_small_avx2(y, ldy, w, row_bytes, wtype, work, n_tok, cols, r0, r1))
        return;
    if (n_tok >= TILE_MIN) {
        if (wtype == T_F16 && f16_tiles(y, ldy, w, row_bytes, work, arb, n_tok, cols, r0, r1))
            return;
        if (wtype == T_Q4_K && n_tok >= TILE_MIN_KQ &&
            q4k_tiles(y, ldy, w, row_bytes, work, arb, n_tok, cols, r0, r1))
            return;
        if (a == ACT_Q8_K && wtype != T_Q4_K && n_tok >= TILE_MIN_KQ &&
            kquant_tiles(y, ldy, w, row_bytes, wtype, work, arb, n_tok, cols, r0, r1))
            return;
        if ((wtype == T_Q4_0 || wtype == T_IQ4_NL) &&
            ileave_tiles(y, ldy, w, row_bytes, wtype, work, arb, n_tok, cols, r0, r1))
            return;
        if ((a == ACT_Q8_0 || a == ACT_Q8_1) && wtype != T_Q4_0 && wtype != T_IQ4_NL &&
            legacy_tiles(y, ldy, w, row_bytes, wtype, a, work, arb, n_tok, cols, r0, r1))
            return;
    }
    ops_mm_rows_avx2(y, ldy, w, row_bytes, wtype, work, x, ldx, n_tok, cols, r0, r1, tmp);
}

int
ops_avx512_probe(void)
{
    volatile int seed = 1;
    __m512i a = _mm512_set1_epi32(seed);
    __m256i b = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), _mm256_set1_epi8(2));
    a = _mm512_add_epi32(a, _mm512_castsi256_si512(b));
    /* lane 0: 1 + 4 * (1 * 2) */
    return _mm_cvtsi128_si32(_mm512_castsi512_si128(a)) == 9;
}

/* ---- llamafile tinyBLAS's float order (mm_rows_mirror) ----
 *
 * ops_mm_rows_mirror_avx2's arithmetic with two weight rows per zmm: lanes
 * 0-7 are an 8-lane accumulator of row i, lanes 8-15 one of row i + 1, each
 * lane the same chain of fused multiply-adds as tinyBLAS<8, __m256>'s, then
 * each half through hsum8.  Tiles of 8 rows x 4 tokens (16 accumulators)
 * over row blocks that stay in L2; the other rows and tokens through the
 * avx2 kernel. */
#define MR_ROWS 8
#define MR_TOK 4
#define MR_BLOCK_BYTES (96 * 1024)

static inline __attribute__((always_inline)) __m512
load_w2x8(const uint8_t *w0, const uint8_t *w1, uint32_t type, int64_t l)
{
    if (type == T_F32)
        return _mm512_insertf32x8(
            _mm512_castps256_ps512(_mm256_loadu_ps((const float *)(const void *)w0 + l)),
            _mm256_loadu_ps((const float *)(const void *)w1 + l), 1);
    __m256i h = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(w0 + 2 * l))),
        _mm_loadu_si128((const __m128i *)(const void *)(w1 + 2 * l)), 1);
    if (type == T_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) void
mirror_tile84(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
              const float *const *xt, int64_t r, int64_t cols)
{
    const uint8_t *w0 = w + (size_t)r * row_bytes;
    __m512 c[4][MR_TOK];

    for (int p = 0; p < 4; p++)
        for (int j = 0; j < MR_TOK; j++)
            c[p][j] = _mm512_setzero_ps();
    for (int64_t l = 0; l < cols; l += 8) {
        __m512 b[MR_TOK];
#pragma GCC unroll 4
        for (int j = 0; j < MR_TOK; j++)
            b[j] = _mm512_broadcast_f32x8(_mm256_loadu_ps(xt[j] + l));
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m512 a = load_w2x8(w0 + 2 * p * row_bytes, w0 + (2 * p + 1) * row_bytes, type, l);
#pragma GCC unroll 4
            for (int j = 0; j < MR_TOK; j++)
                c[p][j] = _mm512_fmadd_ps(a, b[j], c[p][j]);
        }
    }
    for (int j = 0; j < MR_TOK; j++)
        for (int p = 0; p < 4; p++) {
            y[j * ldy + r + 2 * p] = hsum8(_mm512_castps512_ps256(c[p][j]));
            y[j * ldy + r + 2 * p + 1] = hsum8(_mm512_extractf32x8_ps(c[p][j], 1));
        }
}

static void
mirror_float(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
             const float *x0, int64_t ldxt, int64_t n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    int64_t rb = MR_BLOCK_BYTES / (int64_t)row_bytes / MR_ROWS * MR_ROWS;

    if (rb < MR_ROWS)
        rb = MR_ROWS;
    for (int64_t b0 = r0; b0 < r1; b0 += rb) {
        int64_t b1 = b0 + rb < r1 ? b0 + rb : r1;
        for (int64_t t0 = 0; t0 < n_tok; t0 += MR_TOK) {
            const float *xt[MR_TOK];
            for (int j = 0; j < MR_TOK; j++)
                xt[j] = x0 + (t0 + j) * ldxt;
            for (int64_t r = b0; r < b1; r += MR_ROWS)
                mirror_tile84(y + t0 * ldy, ldy, w, row_bytes, type, xt, r, cols);
        }
    }
}

void
ops_mm_rows_mirror_avx512(float *y, int64_t ldy, const void *w, size_t row_bytes, uint32_t wtype,
                          const void *work, const float *x, int64_t ldx, int64_t n_tok,
                          int64_t cols, int64_t r0, int64_t r1, float *tmp)
{
    int fl = wtype == T_F32 || wtype == T_F16 || wtype == T_BF16;
    int64_t nt = n_tok / MR_TOK * MR_TOK, re = r0 + (r1 - r0) / MR_ROWS * MR_ROWS;

    if (!fl || cols % 8 != 0 || nt == 0 || re == r0) {
        ops_mm_rows_mirror_avx2(y, ldy, w, row_bytes, wtype, work, x, ldx, n_tok, cols, r0, r1, tmp);
        return;
    }
    const float *x0 = wtype == T_F32 ? x : (const float *)work;
    int64_t ldxt = wtype == T_F32 ? ldx : cols;
    if (wtype == T_F32)
        mirror_float(y, ldy, w, row_bytes, T_F32, x0, ldxt, nt, cols, r0, re);
    else if (wtype == T_F16)
        mirror_float(y, ldy, w, row_bytes, T_F16, x0, ldxt, nt, cols, r0, re);
    else
        mirror_float(y, ldy, w, row_bytes, T_BF16, x0, ldxt, nt, cols, r0, re);
    if (re < r1)
        ops_mm_rows_mirror_avx2(y, ldy, w, row_bytes, wtype, work, x, ldx, nt, cols, re, r1, tmp);
    if (nt < n_tok)
        ops_mm_rows_mirror_avx2(y + nt * ldy, ldy, w, row_bytes, wtype,
                                wtype == T_F32 ? NULL : (const float *)work + nt * cols,
                                x + nt * ldx, ldx, n_tok - nt, cols, r0, r1, tmp);
}
