/*
 * qblock.h - byte layouts of the ggml quantization blocks.
 *
 * A quantized row of n elements is n / QK blocks stored back to back, with no
 * padding between them.  Every multi-byte field is little-endian; "fp16" is an
 * IEEE binary16 stored as a uint16.  The structs below mirror the on-disk
 * layout exactly (sizes and field offsets are _Static_assert'ed), so a block
 * may be memcpy'd from file bytes into a struct on a little-endian host.
 *
 * Element numbering inside a block: j = 0 .. QK-1.  The formulas next to each
 * struct are the dequantization, with float operations evaluated in exactly
 * the order written (a*b*c means (a*b)*c; no fused multiply-add).
 *
 * 32-element "nibble packing" (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and each 32-wide
 * sub-block of IQ4_XS): qs[i] (i = 0..15) holds element i in its low nibble
 * and element i + 16 in its high nibble.
 */
#ifndef LLMKIT_QBLOCK_H
#define LLMKIT_QBLOCK_H

#include <stddef.h>
#include <stdint.h>

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK4_NL 32
#define QK_K 256
#define K_SCALE_SIZE 12

#define QBLOCK_ASSERT(type, size) \
    _Static_assert(sizeof(struct type) == (size), #type " must be " #size " bytes")
#define QBLOCK_FIELD(type, field, off) \
    _Static_assert(offsetof(struct type, field) == (off), #type "." #field " must be at " #off)

/* ---- legacy 32-element blocks ---- */

/* Q4_0, 18 bytes.  0: fp16 d | 2: qs[16] (nibble-packed 4-bit codes q).
 * y_j = (q_j - 8) * d */
struct block_q4_0 {
    uint16_t d;
    uint8_t qs[QK4_0 / 2];
};
QBLOCK_ASSERT(block_q4_0, 18);
QBLOCK_FIELD(block_q4_0, qs, 2);

/* Q4_1, 20 bytes.  0: fp16 d | 2: fp16 m | 4: qs[16].
 * y_j = q_j * d + m */
struct block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[QK4_1 / 2];
};
QBLOCK_ASSERT(block_q4_1, 20);
QBLOCK_FIELD(block_q4_1, m, 2);
QBLOCK_FIELD(block_q4_1, qs, 4);

/* Q5_0, 22 bytes.  0: fp16 d | 2: qh[4] | 6: qs[16].
 * qh read as a little-endian uint32: bit j is the 5th bit of element j.
 * q_j = nibble_j | bit_j << 4;  y_j = (q_j - 16) * d */
struct block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
};
QBLOCK_ASSERT(block_q5_0, 22);
QBLOCK_FIELD(block_q5_0, qh, 2);
QBLOCK_FIELD(block_q5_0, qs, 6);

/* Q5_1, 24 bytes.  0: fp16 d | 2: fp16 m | 4: qh[4] | 8: qs[16].
 * q_j as in Q5_0 (0..31);  y_j = q_j * d + m */
struct block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
};
QBLOCK_ASSERT(block_q5_1, 24);
QBLOCK_FIELD(block_q5_1, m, 2);
QBLOCK_FIELD(block_q5_1, qh, 4);
QBLOCK_FIELD(block_q5_1, qs, 8);

/* Q8_0, 34 bytes.  0: fp16 d | 2: int8 qs[32].
 * y_j = qs_j * d */
struct block_q8_0 {
    uint16_t d;
    int8_t qs[QK8_0];
};
QBLOCK_ASSERT(block_q8_0, 34);
QBLOCK_FIELD(block_q8_0, qs, 2);

/* Q8_1, 36 bytes.  0: fp16 d | 2: fp16 s | 4: int8 qs[32].
 * y_j = qs_j * d;  s = fp16(d * sum(qs)) is used only by dot products.
 * (gguf-py's GGML_QUANT_SIZES says 40 bytes; that is stale.) */
struct block_q8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[QK8_1];
};
QBLOCK_ASSERT(block_q8_1, 36);
QBLOCK_FIELD(block_q8_1, s, 2);
QBLOCK_FIELD(block_q8_1, qs, 4);

/* IQ4_NL, 18 bytes.  0: fp16 d | 2: qs[16] (nibble-packed indices k).
 * y_j = d * kvalues_iq4nl[k_j] */
struct block_iq4_nl {
    uint16_t d;
    uint8_t qs[QK4_NL / 2];
};
QBLOCK_ASSERT(block_iq4_nl, 18);
QBLOCK_FIELD(block_iq4_nl, qs, 2);

/* The non-linear 4-bit code book of IQ4_NL and IQ4_XS. */
static const int8_t kvalues_iq4nl[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* ---- k-quants: 256-element super-blocks ----
 * Index helpers for element e (0..255): h = e >> 7 (128-half), g = (e >> 5) & 3
 * (32-group in the half), l = e & 31, c = e >> 6 (64-chunk), s16 = e >> 4,
 * s32 = e >> 5. */

/* Q2_K, 84 bytes.  0: scales[16] | 16: qs[64] | 80: fp16 d | 82: fp16 dmin.
 * scales[s16]: low nibble = scale code, high nibble = min code.
 * q = (qs[32h + l] >> 2g) & 3;  y = (d * (sc & 15)) * q - dmin * (sc >> 4) */
struct block_q2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d;
    uint16_t dmin;
};
QBLOCK_ASSERT(block_q2_K, 84);
QBLOCK_FIELD(block_q2_K, qs, 16);
QBLOCK_FIELD(block_q2_K, d, 80);
QBLOCK_FIELD(block_q2_K, dmin, 82);

/* Q3_K, 110 bytes.  0: hmask[32] | 32: qs[64] | 96: scales[12] | 108: fp16 d.
 * lo = (qs[32h + l] >> 2g) & 3;  hb = (hmask[l] >> s32) & 1;
 * q = lo - (hb ? 0 : 4) in [-4, 3].
 * 6-bit scale code of sub-block k (0..15): low 4 bits = scales[k] & 15 (k < 8)
 * or scales[k - 8] >> 4 (k >= 8); high 2 bits = (scales[8 + (k & 3)] >> 2(k >> 2)) & 3.
 * y = (d * (code(s16) - 32)) * q */
struct block_q3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};
QBLOCK_ASSERT(block_q3_K, 110);
QBLOCK_FIELD(block_q3_K, qs, 32);
QBLOCK_FIELD(block_q3_K, scales, 96);
QBLOCK_FIELD(block_q3_K, d, 108);

/* Q4_K, 144 bytes.  0: fp16 d | 2: fp16 dmin | 4: scales[12] | 16: qs[128].
 * scales packs eight 6-bit scale codes sc_j and eight 6-bit min codes m_j
 * (sub-blocks of 32):  j < 4: sc_j = scales[j] & 63, m_j = scales[j + 4] & 63;
 * j >= 4: sc_j = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4,
 *         m_j = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4.
 * qs[32c + l] holds element 64c + l (low nibble) and 64c + 32 + l (high).
 * y = (d * sc_{s32}) * q - dmin * m_{s32} */
struct block_q4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
QBLOCK_ASSERT(block_q4_K, 144);
QBLOCK_FIELD(block_q4_K, dmin, 2);
QBLOCK_FIELD(block_q4_K, scales, 4);
QBLOCK_FIELD(block_q4_K, qs, 16);

/* Q5_K, 176 bytes.  0: fp16 d | 2: fp16 dmin | 4: scales[12] (as Q4_K) |
 * 16: qh[32] | 48: qs[128] (low 4 bits, packed as Q4_K).
 * 5th bit of element e = (qh[l] >> s32) & 1;  q = nibble + 16 * bit;
 * y = (d * sc_{s32}) * q - dmin * m_{s32} */
struct block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
QBLOCK_ASSERT(block_q5_K, 176);
QBLOCK_FIELD(block_q5_K, scales, 4);
QBLOCK_FIELD(block_q5_K, qh, 16);
QBLOCK_FIELD(block_q5_K, qs, 48);

/* Q6_K, 210 bytes.  0: ql[128] | 128: qh[64] | 192: int8 scales[16] | 208: fp16 d.
 * byte = ql[64h + 32(g & 1) + l];  lo = g < 2 ? byte & 15 : byte >> 4;
 * hi = (qh[32h + l] >> 2g) & 3;  q = (lo | hi << 4) - 32 in [-32, 31];
 * y = (d * scales[s16]) * q */
struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
QBLOCK_ASSERT(block_q6_K, 210);
QBLOCK_FIELD(block_q6_K, qh, 128);
QBLOCK_FIELD(block_q6_K, scales, 192);
QBLOCK_FIELD(block_q6_K, d, 208);

/* Q8_K, 292 bytes (activation type).  0: float32 d | 4: int8 qs[256] |
 * 260: int16 bsums[16] (sum of each group of 16 qs; unused by to_float).
 * y = d * qs */
struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
QBLOCK_ASSERT(block_q8_K, 292);
QBLOCK_FIELD(block_q8_K, qs, 4);
QBLOCK_FIELD(block_q8_K, bsums, 260);

/* IQ4_XS, 136 bytes.  0: fp16 d | 2: uint16 scales_h | 4: scales_l[4] | 8: qs[128].
 * Sub-block ib (0..7, 32 elements): ls = lo4 | hi2 << 4 where
 * lo4 = (scales_l[ib / 2] >> 4(ib & 1)) & 15 and hi2 = (scales_h >> 2ib) & 3;
 * qs[16ib .. 16ib + 15] are nibble-packed like IQ4_NL.
 * y = (d * (ls - 32)) * kvalues_iq4nl[k] */
struct block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
};
QBLOCK_ASSERT(block_iq4_xs, 136);
QBLOCK_FIELD(block_iq4_xs, scales_h, 2);
QBLOCK_FIELD(block_iq4_xs, scales_l, 4);
QBLOCK_FIELD(block_iq4_xs, qs, 8);

#endif
