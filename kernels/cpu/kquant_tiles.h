/*
 * kquant_tiles.h - the k-quant batch kernels shared by cpu/matmul_avx2.c and
 * cpu/matmul_avx512.c (included by each, after its own TG and TILE_BYTES, and
 * optionally KQ_TILE_BYTES and KQ_TILE_ROWS, the row tile's size):
 * super-blocks unpacked once per row tile (struct ksb) and dotted with
 * groups of up to TG tokens in ggml_vec_dot's lanes.
 *
 * KQ_VNNI 1 (the AVX-512 file, compiled with AVX-512 VL and VNNI): each
 * chunk's scaled lane sums are added by one VPDPWSSD (the scale pairs times
 * the byte-pair sums, added to the lanes) instead of VPMADDWD and VPADDD:
 * the same exact int32 lanes, so the same bits; about 1.3x faster Q6_K
 * batches on Zen 4.
 */
#ifndef LLMKIT_KQUANT_TILES_H
#define LLMKIT_KQUANT_TILES_H

#ifndef KQ_VNNI
#define KQ_VNNI 0
#endif
/* unpacked super-blocks per row tile: bytes and rows at most */
#ifndef KQ_TILE_BYTES
#define KQ_TILE_BYTES (TILE_BYTES + 8 * 1024)
#endif
#ifndef KQ_TILE_ROWS
#define KQ_TILE_ROWS 16
#endif

/* ---- k-quants ---- */

/* An unpacked super-block: codes in element order (unsigned, or signed for
 * Q3_K / IQ4_XS), the int16 scale vector of each 32-chunk (lanes 0..7 scale
 * elements 0..15 of the chunk, lanes 8..15 elements 16..31) and the
 * per-type extras. */
struct ksb {
    __m256i q[8];
    __m256i sv[8];
    float d, dmin;
    int16_t mn[16];             /* Q2_K: per-16 mins; Q4_K/Q5_K: per-32 mins, each twice */
    int16_t sc16[16];           /* Q6_K: per-16 scales (for the bsums correction) */
};

static inline __m256i
scale_pair(int lo, int hi)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)lo)),
                                   _mm_set1_epi16((short)hi), 1);
}

static inline void
k4_scales(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

static inline __attribute__((always_inline)) void
k_unpack(const uint8_t *row, uint32_t type, int64_t b, struct ksb *k)
{
    const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);

    switch (type) {
    case T_Q2_K: {
        const struct block_q2_K *x = (const struct block_q2_K *)(const void *)row + b;
        k->d = h2f(x->d);
        k->dmin = h2f(x->dmin);
        for (int h = 0; h < 2; h++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs + 32 * h));
            for (int g = 0; g < 4; g++)
                k->q[4 * h + g] = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * g), m3);
        }
        for (int c = 0; c < 8; c++)
            k->sv[c] = scale_pair(x->scales[2 * c] & 15, x->scales[2 * c + 1] & 15);
        for (int s = 0; s < 16; s++)
            k->mn[s] = x->scales[s] >> 4;
        break;
    }
    case T_Q3_K: {
        const struct block_q3_K *x = (const struct block_q3_K *)(const void *)row + b;
        k->d = h2f(x->d);
        __m256i hm = _mm256_loadu_si256((const __m256i *)(const void *)x->hmask);
        for (int h = 0; h < 2; h++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(const void *)(x->qs + 32 * h));
            for (int g = 0; g < 4; g++) {
                int c = 4 * h + g;
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * g), m3);
                __m256i bit = _mm256_set1_epi8((char)(1 << c));
                __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                /* lo - 4 where the high bit is clear */
                k->q[c] = _mm256_sub_epi8(lo, _mm256_andnot_si256(set, _mm256_set1_epi8(4)));
            }
        }
        int sc[16];
        for (int j = 0; j < 16; j++) {
            int low = j < 8 ? x->scales[j] & 15 : x->scales[j - 8] >> 4;
            int high = (x->scales[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
            sc[j] = (low | high << 4) - 32;
        }
        for (int c = 0; c < 8; c++)
            k->sv[c] = scale_pair(sc[2 * c], sc[2 * c + 1]);
        break;
    }
    case T_Q4_K:
    case T_Q5_K: {
        const uint8_t *scales, *qs, *qh = NULL;
        if (type == T_Q4_K) {
            const struct block_q4_K *x = (const struct block_q4_K *)(const void *)row + b;
            k->d = h2f(x->d);
            k->dmin = h2f(x->dmin);
            scales = x->scales, qs = x->qs;
        } else {
            const struct block_q5_K *x = (const struct block_q5_K *)(const void *)row + b;
            k->d = h2f(x->d);
            k->dmin = h2f(x->dmin);
            scales = x->scales, qs = x->qs, qh = x->qh;
        }
        __m256i hb = qh ? _mm256_loadu_si256((const __m256i *)(const void *)qh) : _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i bits = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * c));
            __m256i lo = _mm256_and_si256(bits, m15);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m15);
            if (qh) {
                __m256i b0 = _mm256_set1_epi8((char)(1 << (2 * c)));
                __m256i b1 = _mm256_set1_epi8((char)(1 << (2 * c + 1)));
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, b0), b0),
                                                          _mm256_set1_epi8(16)));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, b1), b1),
                                                          _mm256_set1_epi8(16)));
            }
            k->q[2 * c] = lo;
            k->q[2 * c + 1] = hi;
        }
        for (int j = 0; j < 8; j++) {
            int s, m;
            k4_scales(scales, j, &s, &m);
            k->sv[j] = _mm256_set1_epi16((short)s);
            k->mn[2 * j] = k->mn[2 * j + 1] = (int16_t)m;
        }
        break;
    }
    case T_Q6_K: {
        const struct block_q6_K *x = (const struct block_q6_K *)(const void *)row + b;
        k->d = h2f(x->d);
        for (int h = 0; h < 2; h++) {
            __m256i l0 = _mm256_loadu_si256((const __m256i *)(const void *)(x->ql + 64 * h));
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(const void *)(x->ql + 64 * h + 32));
            __m256i hh = _mm256_loadu_si256((const __m256i *)(const void *)(x->qh + 32 * h));
            __m256i lo[4] = {
                _mm256_and_si256(l0, m15), _mm256_and_si256(l1, m15),
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m15),
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m15),
            };
            for (int g = 0; g < 4; g++) {
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hh, 2 * g), m3);
                k->q[4 * h + g] = _mm256_or_si256(lo[g], _mm256_slli_epi16(hi, 4));
            }
        }
        for (int c = 0; c < 8; c++)
            k->sv[c] = scale_pair(x->scales[2 * c], x->scales[2 * c + 1]);
        for (int s = 0; s < 16; s++)
            k->sc16[s] = x->scales[s];
        break;
    }
    default: {  /* T_IQ4_XS */
        const struct block_iq4_xs *x = (const struct block_iq4_xs *)(const void *)row + b;
        k->d = h2f(x->d);
        __m256i lut = iq4nl_lut();
        for (int ib = 0; ib < 8; ib++) {
            k->q[ib] = _mm256_shuffle_epi8(lut, nibbles32(x->qs + 16 * ib));
            int lo4 = (x->scales_l[ib / 2] >> (4 * (ib & 1))) & 15;
            int hi2 = (x->scales_h >> (2 * ib)) & 3;
            k->sv[ib] = _mm256_set1_epi16((short)((lo4 | hi2 << 4) - 32));
        }
        break;
    }
    }
}

/* chunk c's byte-pair sums (int16; |sum| <= 2 * 63 * 127 for the
 * unsigned types, 2 * 128 * 127 for the signed ones) */
static inline __m256i
k_pairs(const struct ksb *k, const int8_t *y, int c, int is_signed)
{
    __m256i qy = _mm256_loadu_si256((const __m256i *)(const void *)(y + 32 * c));
    return is_signed ? _mm256_maddubs_epi16(_mm256_sign_epi8(k->q[c], k->q[c]),
                                            _mm256_sign_epi8(qy, k->q[c]))
                     : _mm256_maddubs_epi16(k->q[c], qy);
}

/* the sum over the 8 chunks of scale * (4-element lane sums) */
static inline __m256i
k_lanes(const struct ksb *k, const int8_t *y, int is_signed)
{
    __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++)
#if KQ_VNNI
        s = _mm256_dpwssd_epi32(s, k->sv[c], k_pairs(k, y, c, is_signed));
#else
        s = _mm256_add_epi32(s, _mm256_madd_epi16(k->sv[c], k_pairs(k, y, c, is_signed)));
#endif
    return s;
}

/* Q4_K/Q5_K: the exact sum over the 8 chunks of min * (the chunk's two
 * 16-element activation sums) */
static inline int32_t
k_msum(const struct ksb *k, const int16_t *bs)
{
    return hsum_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(const void *)k->mn),
                                        _mm256_loadu_si256((const __m256i *)(const void *)bs)));
}

static inline __attribute__((always_inline)) void
kquant_row(float *out, int64_t ldo, const uint8_t *row, const struct ksb *pre, uint32_t type,
           const struct act_row *ar, int nt, int64_t nb)
{
    const int is_signed = type == T_Q3_K || type == T_IQ4_XS;
    __m256 acc[TG];
    float sacc[TG], macc[TG];
    struct ksb kl;

#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        acc[t] = _mm256_setzero_ps();
        sacc[t] = macc[t] = 0.0f;
    }
    for (int64_t b = 0; b < nb; b++) {
        const struct ksb *kp = pre ? pre + b : &kl;
        if (!pre)
            k_unpack(row, type, b, &kl);
#define k (*kp)
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            const int16_t *bs = ar[t].bsums + 16 * b;
            float yd = ar[t].d[b];
            __m256i sumi = type == T_Q4_K ? _mm256_setzero_si256()
                                          : k_lanes(&k, ar[t].q + QK_K * b, is_signed);
            switch (type) {
            case T_Q2_K: {
                /* lane m: mn[2m] bs[2m] + mn[2m+1] bs[2m+1] */
                __m256 mv = _mm256_cvtepi32_ps(_mm256_madd_epi16(
                    _mm256_loadu_si256((const __m256i *)(const void *)k.mn),
                    _mm256_loadu_si256((const __m256i *)(const void *)bs)));
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-yd * k.dmin), mv, acc[t]);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(yd * k.d), _mm256_cvtepi32_ps(sumi), acc[t]);
                break;
            }
            case T_Q4_K: {
                /* repacked gemv: exact integer sums, one chain for the
                 * scales and one for the mins, a step per super-block */
                int32_t msum = k_msum(&k, bs);
                sacc[t] = fmadd_ss((float)hsum_epi32(k_lanes(&k, ar[t].q + QK_K * b, 0)), k.d * yd,
                                   sacc[t]);
                macc[t] = fmadd_ss((float)msum, k.dmin * yd, macc[t]);
                break;
            }
            case T_Q5_K: {
                int32_t msum = k_msum(&k, bs);
                sacc[t] = fmadd_ss(-yd * k.dmin, (float)msum, sacc[t]);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(yd * k.d), _mm256_cvtepi32_ps(sumi), acc[t]);
                break;
            }
            case T_Q6_K: {
                /* lane m: 32 (bs[2m] sc[2m] + bs[2m+1] sc[2m+1]) */
                __m256i cl = _mm256_slli_epi32(_mm256_madd_epi16(
                    _mm256_loadu_si256((const __m256i *)(const void *)bs),
                    _mm256_loadu_si256((const __m256i *)(const void *)k.sc16)), 5);
                sumi = _mm256_sub_epi32(sumi, cl);
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(yd * k.d), _mm256_cvtepi32_ps(sumi), acc[t]);
                break;
            }
            default:    /* Q3_K, IQ4_XS */
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(k.d * yd), _mm256_cvtepi32_ps(sumi), acc[t]);
                break;
            }
        }
#undef k
    }
#pragma GCC unroll 8
    for (int t = 0; t < nt; t++) {
        float r;
        if (type == T_Q4_K)
            r = sacc[t] - macc[t];
        else if (type == T_Q5_K)
            r = hsum8(acc[t]) + sacc[t];
        else
            r = hsum8(acc[t]);
        out[t * ldo] = r;
    }
}

/* rows [rb, rb + nr) of w unpacked into buf, row i at buf + i * nb */
static inline void
k_unpack_rows(struct ksb *buf, const uint8_t *w, size_t row_bytes, uint32_t type, int64_t rb,
              int64_t nr, int64_t nb)
{
    for (int64_t i = 0; i < nr; i++)
        for (int64_t b = 0; b < nb; b++)
            k_unpack(w + (size_t)(rb + i) * row_bytes, type, b, &buf[i * nb + b]);
}

static int
kquant_tiles(float *y, int64_t ldy, const uint8_t *w, size_t row_bytes, uint32_t type,
             const uint8_t *act, size_t arb, int64_t n_tok, int64_t cols, int64_t r0, int64_t r1)
{
    const int64_t nb = cols / QK_K;
    size_t rowu = (size_t)nb * sizeof(struct ksb);
    static __thread struct ksb buf[KQ_TILE_BYTES / sizeof(struct ksb)];
    struct act_row ar[TG];

    if (rowu > sizeof(buf))
        return 0;
    int64_t R = (int64_t)(sizeof(buf) / rowu);
    if (R > KQ_TILE_ROWS)
        R = KQ_TILE_ROWS;
    for (int64_t rb = r0; rb < r1; rb += R) {
        int64_t nr = r1 - rb < R ? r1 - rb : R;
        k_unpack_rows(buf, w, row_bytes, type, rb, nr, nb);
        for (int64_t t0 = 0; t0 < n_tok; t0 += TG) {
            int nt = n_tok - t0 < TG ? (int)(n_tok - t0) : TG;
            for (int t = 0; t < nt; t++)
                act_row_at(&ar[t], ACT_Q8_K, act + (size_t)(t0 + t) * arb, cols);
            for (int64_t i = 0; i < nr; i++) {
                float *out = y + t0 * ldy + rb + i;
                const struct ksb *pre = buf + i * nb;
#define KT(ty, n) kquant_row(out, ldy, NULL, pre, ty, ar, n, nb)
#define KT_NT(ty) switch (nt) { case 1: KT(ty, 1); break; case 2: KT(ty, 2); break; \
                                case 3: KT(ty, 3); break; case 4: KT(ty, 4); break; \
                                case 5: KT(ty, 5); break; case 6: KT(ty, 6); break; \
                                case 7: KT(ty, 7); break; default: KT(ty, 8); break; }
                switch (type) {
                case T_Q2_K: KT_NT(T_Q2_K); break;
                case T_Q3_K: KT_NT(T_Q3_K); break;
                case T_Q4_K: KT_NT(T_Q4_K); break;
                case T_Q5_K: KT_NT(T_Q5_K); break;
                case T_Q6_K: KT_NT(T_Q6_K); break;
                default: KT_NT(T_IQ4_XS); break;
                }
#undef KT_NT
#undef KT
            }
        }
    }
    return 1;
}

#endif
