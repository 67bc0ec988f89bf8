/*
 * test_qtypes.c - the type table, fp16/bf16 scalar conversions and every
 * to_float against goldens made by gguf-py (scripts/mkgolden-dequant).
 *
 * Goldens are read from tests/golden/dequant relative to the working
 * directory (make runs tests from the repository root), or from
 * $LLMKIT_TOP/tests/golden/dequant.
 */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qblock.h"
#include "qconv.h"
#include "qtypes.h"
#include "t.h"

static char golden_dir[4096];

/* read_golden() : the whole of golden_dir/name into a malloc'd buffer. */
static void *
read_golden(const char *name, size_t *len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", golden_dir, name);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "test_qtypes: cannot open '%s'\n", path);
        return NULL;
    }
    void *buf = NULL;
    long n = -1;
    if (fseek(fp, 0, SEEK_END) == 0 && (n = ftell(fp)) >= 0 && fseek(fp, 0, SEEK_SET) == 0) {
        buf = malloc(n ? (size_t)n : 1);
        if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
    }
    fclose(fp);
    if (!buf)
        fprintf(stderr, "test_qtypes: cannot read '%s'\n", path);
    *len = buf ? (size_t)n : 0;
    return buf;
}

static uint32_t
f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float
bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- table ---- */

static void
test_table(void)
{
    static const struct { uint32_t id; const char *name; int blck; size_t bytes; } want[] = {
        {GGML_TYPE_F32, "F32", 1, 4}, {GGML_TYPE_F16, "F16", 1, 2},
        {GGML_TYPE_Q4_0, "Q4_0", 32, 18}, {GGML_TYPE_Q4_1, "Q4_1", 32, 20},
        {GGML_TYPE_Q5_0, "Q5_0", 32, 22}, {GGML_TYPE_Q5_1, "Q5_1", 32, 24},
        {GGML_TYPE_Q8_0, "Q8_0", 32, 34}, {GGML_TYPE_Q8_1, "Q8_1", 32, 36},
        {GGML_TYPE_Q2_K, "Q2_K", 256, 84}, {GGML_TYPE_Q3_K, "Q3_K", 256, 110},
        {GGML_TYPE_Q4_K, "Q4_K", 256, 144}, {GGML_TYPE_Q5_K, "Q5_K", 256, 176},
        {GGML_TYPE_Q6_K, "Q6_K", 256, 210}, {GGML_TYPE_Q8_K, "Q8_K", 256, 292},
        {GGML_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66}, {GGML_TYPE_IQ2_XS, "IQ2_XS", 256, 74},
        {GGML_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98}, {GGML_TYPE_IQ1_S, "IQ1_S", 256, 50},
        {GGML_TYPE_IQ4_NL, "IQ4_NL", 32, 18}, {GGML_TYPE_IQ3_S, "IQ3_S", 256, 110},
        {GGML_TYPE_IQ2_S, "IQ2_S", 256, 82}, {GGML_TYPE_IQ4_XS, "IQ4_XS", 256, 136},
        {GGML_TYPE_I8, "I8", 1, 1}, {GGML_TYPE_I16, "I16", 1, 2},
        {GGML_TYPE_I32, "I32", 1, 4}, {GGML_TYPE_I64, "I64", 1, 8},
        {GGML_TYPE_F64, "F64", 1, 8}, {GGML_TYPE_IQ1_M, "IQ1_M", 256, 56},
        {GGML_TYPE_BF16, "BF16", 1, 2}, {GGML_TYPE_TQ1_0, "TQ1_0", 256, 54},
        {GGML_TYPE_TQ2_0, "TQ2_0", 256, 66}, {GGML_TYPE_MXFP4, "MXFP4", 32, 17},
        {GGML_TYPE_NVFP4, "NVFP4", 64, 36}, {GGML_TYPE_Q1_0, "Q1_0", 128, 18},
        {GGML_TYPE_Q2_0, "Q2_0", 64, 18},
    };
    int seen[GGML_TYPE_COUNT] = {0};

    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const struct qtype *t = qtype_get(want[i].id);
        CHECK(t != NULL);
        if (!t)
            continue;
        seen[want[i].id] = 1;
        CHECK_STR(t->name, want[i].name);
        CHECK_EQ(t->blck, want[i].blck);
        CHECK_EQ(t->bytes, want[i].bytes);
        CHECK_EQ(qtype_by_name(want[i].name), want[i].id);
        /* lower-case lookup */
        char lower[16];
        size_t k;
        for (k = 0; want[i].name[k] && k < sizeof lower - 1; k++)
            lower[k] = (char)tolower((unsigned char)want[i].name[k]);
        lower[k] = 0;
        CHECK_EQ(qtype_by_name(lower), want[i].id);
        CHECK_EQ(qtype_row_bytes(want[i].id, 0), 0);
        CHECK_EQ(qtype_row_bytes(want[i].id, (int64_t)want[i].blck * 7), 7 * want[i].bytes);
        if (want[i].blck > 1)
            CHECK_EQ(qtype_row_bytes(want[i].id, want[i].blck + 1), 0);
        CHECK_EQ(qtype_row_bytes(want[i].id, -(int64_t)want[i].blck), 0);
    }
    /* removed ids and the rest of the range are not types */
    for (uint32_t id = 0; id < GGML_TYPE_COUNT + 5; id++) {
        if (id < GGML_TYPE_COUNT && seen[id])
            continue;
        CHECK(qtype_get(id) == NULL);
        CHECK_EQ(qtype_row_bytes(id, 256), 0);
    }
    CHECK(qtype_get(UINT32_MAX) == NULL);
    CHECK(qtype_get(4) == NULL && qtype_get(5) == NULL);
    for (uint32_t id = 31; id <= 33; id++)
        CHECK(qtype_get(id) == NULL);
    for (uint32_t id = 36; id <= 38; id++)
        CHECK(qtype_get(id) == NULL);
    CHECK_EQ(qtype_by_name("q4_k"), GGML_TYPE_Q4_K);
    CHECK_EQ(qtype_by_name("bf16"), GGML_TYPE_BF16);
    CHECK_EQ(qtype_by_name("Q4_2"), -1);
    CHECK_EQ(qtype_by_name("Q4_K_M"), -1);   /* a mix, not a type */
    CHECK_EQ(qtype_by_name(""), -1);
    CHECK_EQ(qtype_by_name(NULL), -1);
    /* overflow is refused, not wrapped */
    CHECK_EQ(qtype_row_bytes(GGML_TYPE_I64, INT64_MAX), 0);
    CHECK_EQ(qtype_row_bytes(GGML_TYPE_F32, INT64_MAX), 0);

    /* the table agrees with the block structs */
    CHECK_EQ(qtype_get(GGML_TYPE_Q4_0)->bytes, sizeof(struct block_q4_0));
    CHECK_EQ(qtype_get(GGML_TYPE_Q8_1)->bytes, sizeof(struct block_q8_1));
    CHECK_EQ(qtype_get(GGML_TYPE_Q4_K)->bytes, sizeof(struct block_q4_K));
    CHECK_EQ(qtype_get(GGML_TYPE_Q8_K)->bytes, sizeof(struct block_q8_K));
    CHECK_EQ(qtype_get(GGML_TYPE_IQ4_XS)->bytes, sizeof(struct block_iq4_xs));

    /* what is computable */
    static const uint32_t conv[] = {
        GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1,
        GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0, GGML_TYPE_Q8_1, GGML_TYPE_Q2_K,
        GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_Q8_K,
        GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
    };
    int n_to = 0;
    for (uint32_t id = 0; id < GGML_TYPE_COUNT; id++) {
        const struct qtype *t = qtype_get(id);
        if (t && t->to_float)
            n_to++;
    }
    CHECK_EQ(n_to, (int)(sizeof conv / sizeof conv[0]));
    for (size_t i = 0; i < sizeof conv / sizeof conv[0]; i++)
        CHECK(qtype_get(conv[i])->to_float != NULL);
    CHECK(qtype_get(GGML_TYPE_F32)->from_float != NULL);
    CHECK(qtype_get(GGML_TYPE_F16)->from_float != NULL);
    CHECK(qtype_get(GGML_TYPE_BF16)->from_float != NULL);
}

/* ---- scalar conversions, independent of the goldens ---- */

/* fp16 value computed the slow way, in double */
static double
fp16_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (h & 0x8000) ? -v : v;
}

static void
test_fp16_exhaustive(void)
{
    int bad_value = 0, bad_nan = 0, bad_round = 0;

    for (uint32_t h = 0; h < 65536; h++) {
        float f = fp16_to_fp32((uint16_t)h);
        uint32_t u = f32_bits(f);
        if (((h >> 10) & 31) == 31 && (h & 1023)) {
            /* NaN: sign and payload kept, quiet bit set */
            uint32_t want = (h & 0x8000u) << 16 | 0x7fc00000u | (h & 1023u) << 13;
            bad_nan += u != want;
            continue;
        }
        if (((h >> 10) & 31) == 31)
            bad_value += !(isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0));
        else
            bad_value += (double)f != fp16_value((uint16_t)h) || (signbit(f) != 0) != ((h & 0x8000) != 0);
        /* exact values round-trip */
        bad_round += fp32_to_fp16(f) != h;
    }
    CHECK_EQ(bad_value, 0);
    CHECK_EQ(bad_nan, 0);
    CHECK_EQ(bad_round, 0);

    /* spot checks of ggml_compute_fp32_to_fp16's rules (ggml/src/ggml-impl.h):
     * IEEE round-to-nearest-even, >= 65520 -> Inf, NaN payload dropped */
    CHECK_EQ(fp32_to_fp16(65504.0f), 0x7bff);
    CHECK_EQ(fp32_to_fp16(65519.996f), 0x7bff);
    CHECK_EQ(fp32_to_fp16(65520.0f), 0x7c00);
    CHECK_EQ(fp32_to_fp16(-65520.0f), 0xfc00);
    CHECK_EQ(fp32_to_fp16(-0.0f), 0x8000);
    CHECK_EQ(fp32_to_fp16(0x1p-25f), 0x0000);              /* tie -> even (0) */
    CHECK_EQ(fp32_to_fp16(0x1.000002p-25f), 0x0001);
    CHECK_EQ(fp32_to_fp16(0x1.8p-24f), 0x0002);            /* tie -> even (2) */
    CHECK_EQ(fp32_to_fp16(0x1.002p+0f), 0x3c00);           /* 1 + 2^-11: tie -> even */
    CHECK_EQ(fp32_to_fp16(0x1.006p+0f), 0x3c02);           /* 1 + 3*2^-11: tie -> even */
    CHECK_EQ(fp32_to_fp16(bits_f32(0x7fa00001u)), 0x7e00); /* NaN payload dropped */
    CHECK_EQ(fp32_to_fp16(bits_f32(0xffc00000u)), 0xfe00);
    CHECK_EQ(fp32_to_fp16(bits_f32(0x7f800000u)), 0x7c00);

    /* RNE against a double-precision model on a sweep of floats */
    int bad = 0;
    uint32_t s = 12345;
    for (int i = 0; i < 200000; i++) {
        s = s * 1664525u + 1013904223u;
        uint32_t u = 0x30000000u + s % (0x47900000u - 0x30000000u);
        float f = bits_f32(u);
        uint16_t h = fp32_to_fp16(f);
        /* the nearest representable half, ties to even */
        double best = HUGE_VAL;
        uint16_t bh = 0;
        uint16_t c = (uint16_t)(h > 0 ? h - 1 : 0);
        for (int k = 0; k < 3 && c + k <= 0x7c00; k++) {
            uint16_t cand = (uint16_t)(c + k);
            double v = cand == 0x7c00 ? 65536.0 : fp16_value(cand);
            double err = fabs(v - (double)f);
            if (err < best || (err == best && !(cand & 1))) {
                best = err;
                bh = cand;
            }
        }
        bad += bh != h;
    }
    CHECK_EQ(bad, 0);
}

static void
test_bf16(void)
{
    int bad = 0;

    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_to_fp32((uint16_t)h);
        bad += f32_bits(f) != h << 16;
        uint16_t back = fp32_to_bf16(f);
        if ((h & 0x7fff) > 0x7f80)
            bad += back != (h | 0x40);   /* NaN comes back quiet */
        else
            bad += back != h;
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(fp32_to_bf16(bits_f32(0x3f808000u)), 0x3f80);  /* tie -> even */
    CHECK_EQ(fp32_to_bf16(bits_f32(0x3f818000u)), 0x3f82);  /* tie -> even */
    CHECK_EQ(fp32_to_bf16(bits_f32(0x3f808001u)), 0x3f81);
    CHECK_EQ(fp32_to_bf16(bits_f32(0x7f7fffffu)), 0x7f80);  /* rounds to Inf */
    CHECK_EQ(fp32_to_bf16(bits_f32(0x00000001u)), 0x0000);  /* subnormal, not flushed: rounds */
    CHECK_EQ(fp32_to_bf16(bits_f32(0x00018000u)), 0x0002);
    CHECK_EQ(fp32_to_bf16(bits_f32(0x7f800001u)), 0x7fc0);
    CHECK_EQ(fp32_to_bf16(bits_f32(0xff812345u)), 0xffc1);
}

/* ---- goldens ---- */

static void
test_conv_golden(void)
{
    size_t nin, n16, nbf;
    uint8_t *in = read_golden("conv.f32", &nin);
    uint8_t *g16 = read_golden("conv.fp16", &n16);
    uint8_t *gbf = read_golden("conv.bf16", &nbf);

    CHECK(in && g16 && gbf);
    if (in && g16 && gbf) {
        size_t n = nin / 4;
        CHECK(n >= 1024);
        CHECK_EQ(n16, 2 * n);
        CHECK_EQ(nbf, 2 * n);
        if (n16 == 2 * n && nbf == 2 * n) {
            float *x = malloc(n * sizeof *x);
            uint8_t *y = malloc(2 * n);
            CHECK(x && y);
            if (x && y) {
                memcpy(x, in, 4 * n);
                int bad16 = 0, badbf = 0;
                for (size_t i = 0; i < n; i++) {
                    uint16_t w16 = (uint16_t)(g16[2 * i] | g16[2 * i + 1] << 8);
                    uint16_t wbf = (uint16_t)(gbf[2 * i] | gbf[2 * i + 1] << 8);
                    if (fp32_to_fp16(x[i]) != w16 && bad16++ < 5)
                        fprintf(stderr, "fp16(0x%08x) = 0x%04x, gguf-py/numpy 0x%04x\n",
                                f32_bits(x[i]), fp32_to_fp16(x[i]), w16);
                    if (fp32_to_bf16(x[i]) != wbf && badbf++ < 5)
                        fprintf(stderr, "bf16(0x%08x) = 0x%04x, gguf-py 0x%04x\n",
                                f32_bits(x[i]), fp32_to_bf16(x[i]), wbf);
                }
                CHECK_EQ(bad16, 0);
                CHECK_EQ(badbf, 0);
                /* the row routines (from_float) agree */
                quantize_row_f16_ref(x, y, (int64_t)n);
                CHECK(memcmp(y, g16, 2 * n) == 0);
                qtype_get(GGML_TYPE_BF16)->from_float(x, y, (int64_t)n);
                CHECK(memcmp(y, gbf, 2 * n) == 0);
            }
            free(x);
            free(y);
        }
    }
    free(in);
    free(g16);
    free(gbf);
}

/* golden_one() : dequantizes <name>.blocks with the table's to_float and
 * compares bit for bit with <name>.f32; also at an odd source address and
 * row by row, to catch alignment and stride assumptions. */
static void
golden_one(uint32_t id)
{
    const struct qtype *t = qtype_get(id);
    char name[32], bname[48], fname[48];
    size_t k, nb, nf;

    for (k = 0; t->name[k] && k < sizeof name - 1; k++)
        name[k] = (char)tolower((unsigned char)t->name[k]);
    name[k] = 0;
    snprintf(bname, sizeof bname, "%s.blocks", name);
    snprintf(fname, sizeof fname, "%s.f32", name);
    uint8_t *blocks = read_golden(bname, &nb);
    uint8_t *want = read_golden(fname, &nf);
    CHECK(blocks && want);
    if (!blocks || !want)
        goto out;
    CHECK(nb > 0 && nb % t->bytes == 0);
    size_t nblk = nb / t->bytes;
    int64_t n = (int64_t)(nblk * (size_t)t->blck);
    CHECK_EQ(nf, (size_t)n * 4);
    if (nb % t->bytes || nf != (size_t)n * 4)
        goto out;

    float *y = malloc(nf);
    uint8_t *shifted = malloc(nb + 1);
    CHECK(y && shifted);
    if (y && shifted) {
        t->to_float(blocks, y, n);
        int diff = 0;
        for (int64_t i = 0; i < n; i++) {
            uint32_t a = f32_bits(y[i]), b;
            memcpy(&b, want + 4 * i, 4);
            if (a != b && diff++ < 5)
                fprintf(stderr, "%s: element %lld (block %lld): 0x%08x, gguf-py 0x%08x\n",
                        t->name, (long long)i, (long long)(i / t->blck), a, b);
        }
        if (diff)
            fprintf(stderr, "%s: %d of %lld elements differ\n", t->name, diff, (long long)n);
        CHECK_EQ(diff, 0);

        /* unaligned source, one block at a time */
        memcpy(shifted + 1, blocks, nb);
        memset(y, 0xa5, nf);
        for (size_t b = 0; b < nblk; b++)
            t->to_float(shifted + 1 + b * t->bytes, y + b * (size_t)t->blck, t->blck);
        CHECK(memcmp(y, want, nf) == 0);
    }
    free(y);
    free(shifted);
out:
    free(blocks);
    free(want);
}

static void
test_dequant_goldens(void)
{
    int n = 0;

    for (uint32_t id = 0; id < GGML_TYPE_COUNT; id++) {
        const struct qtype *t = qtype_get(id);
        if (!t || !t->to_float)
            continue;
        if (id == GGML_TYPE_F32)
            continue;   /* a copy; checked below */
        golden_one(id);
        n++;
    }
    CHECK_EQ(n, 16);

    /* F32 to_float/from_float copy every bit, NaN payloads included */
    uint32_t pat[5] = {0x7fa00001u, 0x80000000u, 0x00000001u, 0x3f800000u, 0xff800000u};
    float x[5], y[5];
    memcpy(x, pat, sizeof x);
    qtype_get(GGML_TYPE_F32)->to_float(x, y, 5);
    CHECK(memcmp(x, y, sizeof x) == 0);
    memset(y, 0, sizeof y);
    qtype_get(GGML_TYPE_F32)->from_float(x, y, 5);
    CHECK(memcmp(x, y, sizeof x) == 0);
}

/* Known-answer blocks, as libggml-base's quantize_row_*_ref
 * (ggml/src/ggml-quants.c) writes them (independent of gguf-py). */
static void
test_known_blocks(void)
{
    /* Q4_0 of x_j = (j - 16)/16: d = 0.125 */
    static const uint8_t q4_0[18] = {0x00, 0x30, 0x80, 0x91, 0x91, 0xa2, 0xa2, 0xb3, 0xb3,
                                     0xc4, 0xc4, 0xd5, 0xd5, 0xe6, 0xe6, 0xf7, 0xf7, 0xf8};
    float y[256];
    dequantize_row_q4_0_ref(q4_0, y, 32);
    /* the grid values the quantizer chose: multiples of 0.125 in [-1, 0.875] */
    int bad = 0;
    for (int j = 0; j < 32; j++) {
        float want = (float)(j < 16 ? ((q4_0[2 + j] & 15) - 8) : ((q4_0[2 + j - 16] >> 4) - 8)) * 0.125f;
        bad += y[j] != want;
        bad += fabsf(y[j] - (float)(j - 16) / 16.0f) > 0.0625f;
    }
    CHECK_EQ(bad, 0);
    CHECK(y[0] == -1.0f);

    /* all-zero Q4_0 block as ggml writes it: d = -0.0, codes 8 -> -0.0 * 0 */
    uint8_t z[18];
    z[0] = 0x00;
    z[1] = 0x80;
    memset(z + 2, 0x88, 16);
    dequantize_row_q4_0_ref(z, y, 32);
    for (int j = 0; j < 32; j++)
        CHECK(y[j] == 0.0f && signbit(y[j]));

    /* Q8_0 of the same input: d = fp16 0x2008, qs[0] = -127 */
    static const uint8_t q8_0[34] = {0x08, 0x20, 0x81, 0x89, 0x91, 0x99, 0xa1, 0xa9, 0xb1, 0xb9,
                                     0xc0, 0xc8, 0xd0, 0xd8, 0xe0, 0xe8, 0xf0, 0xf8, 0x00, 0x08,
                                     0x10, 0x18, 0x20, 0x28, 0x30, 0x38, 0x40, 0x47, 0x4f, 0x57,
                                     0x5f, 0x67, 0x6f, 0x77};
    dequantize_row_q8_0_ref(q8_0, y, 32);
    bad = 0;
    for (int j = 0; j < 32; j++)
        bad += fabsf(y[j] - (float)(j - 16) / 16.0f) > 0.5f / 127.0f + 1e-4f;
    CHECK_EQ(bad, 0);
    CHECK(y[0] == -127.0f * fp16_to_fp32(0x2008));

    /* Q6_K: the operation order is (d * scale) * q, not d * (scale * q) */
    struct block_q6_K b6;
    memset(&b6, 0, sizeof b6);
    memset(b6.ql, 0xff, sizeof b6.ql);       /* lo = 15 */
    memset(b6.qh, 0xff, sizeof b6.qh);       /* hi = 3 -> q = 63 - 32 = 31 */
    for (int k = 0; k < 16; k++)
        b6.scales[k] = (int8_t)(k * 8 - 64);
    b6.d = 0x3555;                            /* ~0.333 */
    dequantize_row_q6_k_ref(&b6, y, 256);
    float d6 = fp16_to_fp32(0x3555);
    bad = 0;
    for (int e = 0; e < 256; e++) {
        volatile float ds = d6 * (float)b6.scales[e >> 4];
        bad += f32_bits(y[e]) != f32_bits(ds * 31.0f);
    }
    CHECK_EQ(bad, 0);
}

int
main(void)
{
    const char *top = getenv("LLMKIT_TOP");
    snprintf(golden_dir, sizeof golden_dir, "%s%stests/golden/dequant",
             top ? top : "", top ? "/" : "");

    test_table();
    test_fp16_exhaustive();
    test_bf16();
    test_conv_golden();
    test_dequant_goldens();
    test_known_blocks();
    T_DONE();
}
