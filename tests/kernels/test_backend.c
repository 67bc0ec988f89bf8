/*
 * test_backend.c - the CPU backend's whole-step ops (kernels/backend.h)
 * against the reference kernels called directly, on 1 and 3 threads: the
 * same bits whatever the split; and backend_open()'s refusals.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backward.h"
#include "qconv.h"
#include "threadpool.h"
#include "qtypes.h"
#include "../unit/t.h"

static uint32_t seed = 12345;

static float
rnd(void)
{
    seed = seed * 1664525u + 1013904223u;
    return (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void
fill(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd();
}

static int
same(const void *a, const void *b, size_t bytes)
{
    return memcmp(a, b, bytes) == 0;
}

#define T 20                    /* tokens: more than the backend's TOK_PAR_MIN */
#define E 64

static void
test_open(void)
{
    struct backend *be;
    char why[256];

    /* cuda: refused with the reason where no GPU is usable (or no CUDA in
     * the build); opened where one is (tests/kernels/test_cuda.c tests it) */
    int rc = backend_open(&be, "cuda", NULL, why, sizeof(why));
    if (rc == 0) {
        CHECK(be != NULL);
        backend_close(be);
    } else {
        CHECK_EQ(rc, -ENODEV);
        CHECK(be == NULL);
        CHECK(strstr(why, "--device cuda") != NULL);
    }
    CHECK_EQ(backend_open(&be, "tpu", NULL, why, sizeof(why)), -EINVAL);
    CHECK(strstr(why, "tpu") != NULL);
    struct backend_config bad = { 1, "nosuchkernel" };
    CHECK_EQ(backend_open(&be, "cpu", &bad, why, sizeof(why)), -EINVAL);
    struct backend_config many = { THREADPOOL_MAX + 1, "ref" };
    CHECK_EQ(backend_open(&be, NULL, &many, why, sizeof(why)), -ERANGE);
    CHECK_STR(backend_devices()[0], "cpu");
    backend_close(NULL);
}

/* a matmul group of two F32 weights and one F16 weight (two activation
 * conversions, one bias) against mm_rows_ref row by row */
static void
test_matmul(struct backend *be)
{
    enum { R0 = 48, R1 = 80, R2 = 32 };
    static float w0[R0 * E], w1[R1 * E], x[T * E], b1[R1], w2f[R2 * E];
    static uint16_t w2[R2 * E];
    static float y[3][T * R1], want[T * R1];
    fill(w0, R0 * E), fill(w1, R1 * E), fill(x, T * E), fill(b1, R1), fill(w2f, R2 * E);
    for (int i = 0; i < R2 * E; i++)
        w2[i] = qconv_fp32_to_fp16(w2f[i]);
    struct backend_weight bw[3] = {
        { w0, NULL, E * 4, GGML_TYPE_F32, R0, E },
        { w1, NULL, E * 4, GGML_TYPE_F32, R1, E },
        { w2, NULL, E * 2, GGML_TYPE_F16, R2, E },
    };
    for (int i = 0; i < 3; i++)
        CHECK_EQ(be->ops->mm_reserve(be, bw[i].type, T, E), 0);
    struct backend_matmul mm = { .nw = 3, .w = { &bw[0], &bw[1], &bw[2] },
                                 .bias = { NULL, b1, NULL }, .y = { y[0], y[1], y[2] },
                                 .ldy = { R0, R1, R2 }, .x = x, .ldx = E, .n_tok = T };
    be->ops->matmul(be, &mm);
    for (int i = 0; i < 3; i++) {
        const struct backend_weight *w = &bw[i];
        size_t ws = ops_mm_work_size_ref(w->type, T, E);
        void *work = malloc(ws ? ws : 1);
        float *tmp = malloc((size_t)ops_mm_tmp_floats_ref(E) * sizeof(float) + 4);
        ops_mm_prepare_ref(work, w->type, x, E, T, E);
        ops_mm_rows_ref(want, w->rows, w->data, w->row_bytes, w->type, work, x, E, T, E, 0,
                        w->rows, tmp);
        if (i == 1)
            for (int t = 0; t < T; t++)
                for (int r = 0; r < R1; r++)
                    want[t * R1 + r] += b1[r];
        CHECK(same(y[i], want, (size_t)(T * w->rows) * sizeof(float)));
        free(work);
        free(tmp);
    }
}

/* the per-token steps against the reference kernels */
static void
test_token_steps(struct backend *be)
{
    static float x[T * E], y[T * E], g[T * E], u[T * E], w[E], want[T * E];
    const int64_t nh = 4, hd = E / nh;
    struct rope_params rp = { ROPE_NORM, hd, 10000.0f, 1.0f, NULL, 0, 0, { 0, 0 } };
    static float cs[T * E];

    fill(x, T * E), fill(w, E), fill(g, T * E), fill(u, T * E);
    be->ops->rmsnorm(be, y, x, w, T, E, 1e-5f);
    for (int t = 0; t < T; t++)
        ops_rmsnorm_ref(want + t * E, x + t * E, w, E, 1e-5f);
    CHECK(same(y, want, sizeof(y)));

    for (int t = 0; t < T; t++)
        ops_rope_angles(cs + t * hd, 3 * t + 1, &rp);
    memcpy(y, x, sizeof(y));
    memcpy(want, x, sizeof(want));
    be->ops->rope(be, y, T, nh, hd, cs, &rp);
    for (int t = 0; t < T; t++)
        ops_rope_ref(want + t * E, nh, hd, cs + t * hd, &rp);
    CHECK(same(y, want, sizeof(y)));

    memcpy(y, x, sizeof(y));
    be->ops->add(be, y, g, T, E);
    for (int i = 0; i < T * E; i++)
        want[i] = x[i] + g[i];
    CHECK(same(y, want, sizeof(y)));

    memcpy(y, g, sizeof(y));
    be->ops->silu_mul(be, y, u, T, E);
    for (int t = 0; t < T; t++)
        ops_silu_mul_ref(want + t * E, g + t * E, u + t * E, E);
    CHECK(same(y, want, sizeof(y)));

    static float emb[8 * E], rows[3 * E];
    int32_t ids[3] = { 5, 0, 7 };
    fill(emb, 8 * E);
    struct backend_weight bw = { emb, NULL, E * 4, GGML_TYPE_F32, 8, E };
    be->ops->get_rows(be, rows, &bw, ids, 3);
    for (int t = 0; t < 3; t++)
        CHECK(same(rows + t * E, emb + ids[t] * E, E * sizeof(float)));
}

/* A paged f16 cache of 2 KV heads, blocks of 4 slots: two sequences, row 0
 * of sequence A (slots 0..9), rows 1-2 of sequence B (slots 0..5 and 0..6),
 * stored through kv_store, then attention through the backend (one-row,
 * tiled, masked) against the reference kernels per (row, head). */
#define BS 4
#define NKVH 2
#define HD 32
#define NH 4
#define NBLK 8
static void
test_attention(struct backend *be, int tiled_rows)
{
    const size_t row = HD * 2, stride = (size_t)NKVH * 2 * BS * row;
    static uint8_t pool[NBLK * NKVH * 2 * BS * HD * 2];
    uint8_t *kb[NKVH], *vb[NKVH];
    for (int g = 0; g < NKVH; g++) {
        kb[g] = pool + (size_t)g * 2 * BS * row;
        vb[g] = kb[g] + BS * row;
    }
    int32_t ta[3] = { 5, 2, 7 }, tb[2] = { 0, 6 };
    /* store: sequence A's 10 slots, B's 7 */
    static float k[17 * NKVH * HD], v[17 * NKVH * HD];
    int32_t blk[17];
    int64_t bidx[17];
    fill(k, 17 * NKVH * HD), fill(v, 17 * NKVH * HD);
    for (int s = 0; s < 17; s++) {
        int slot = s < 10 ? s : s - 10;
        blk[s] = s < 10 ? ta[slot / BS] : tb[slot / BS];
        bidx[s] = slot % BS;
    }
    struct backend_kv_store st = { k, v, 17, NKVH, HD, HD, kb, vb, stride, row, row,
                                   GGML_TYPE_F16, blk, bidx };
    be->ops->kv_store(be, &st);
    int ok = 1;
    for (int s = 0; s < 17; s++)
        for (int g = 0; g < NKVH; g++) {
            uint8_t want[HD * 2];
            ops_kv_row_put(GGML_TYPE_F16, want, k + (s * NKVH + g) * HD, HD);
            ok &= same(kb[g] + blk[s] * stride + bidx[s] * row, want, sizeof(want));
        }
    CHECK(ok);

    static float q[3 * NH * HD], out[3 * NH * HD], want[NH * HD];
    fill(q, 3 * NH * HD);
    const int32_t *tables[3] = { ta, tb, tb };
    int64_t nkv[3] = { 10, 6, 7 }, vis0[3] = { 0, 5, 5 };
    int32_t seq[3] = { 0, 1, 1 };
    uint8_t tiled[3] = { 0, (uint8_t)tiled_rows, (uint8_t)tiled_rows };
    /* mask: row 0 sees its slots 0..9 except 3; rows 1, 2 see slot 5 and 6 by it */
    uint8_t vis[3 * 10] = { 1, 1, 1, 0, 1, 1, 1, 1, 1, 1,  1, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                            0, 1, 0, 0, 0, 0, 0, 0, 0, 0 };
    vis0[0] = 0;
    for (int masked = 0; masked < 2; masked++) {
        struct backend_attn_limits lim = { 3, NH, NKVH, HD, HD, GGML_TYPE_F16, BS, 10, masked,
                                           !masked };
        CHECK_EQ(be->ops->attn_reserve(be, &lim), 0);
        struct backend_attn a = { q, out, 3, NH, NKVH, HD, HD, 0.17f,
                                  (const uint8_t *const *)kb, (const uint8_t *const *)vb,
                                  stride, GGML_TYPE_F16, BS, tables, nkv, seq,
                                  masked ? NULL : tiled, masked ? vis0 : NULL, vis, 10,
                                  NULL, 0 };
        be->ops->attention(be, &a);
        float *scr = malloc((size_t)(ops_attn_scratch_floats_ref(2, BS, HD, HD) +
                                     ops_attn_tiled_scratch_floats_ref(2, HD, HD)) *
                            sizeof(float));
        for (int r = 0; r < 3; r++) {
            if (!masked && tiled[r] && r == 2)
                continue;       /* rows 1-2: one tile, checked at r == 1 */
            for (int g = 0; g < NKVH; g++) {
                if (!masked && tiled[r]) {
                    int64_t nk[2] = { nkv[1], nkv[2] };
                    float tw[2 * NH * HD];
                    struct attn_tiled_args ta2 = { q + NH * HD + g * 2 * HD, tw + g * 2 * HD,
                                                   NH * HD, NH * HD, 2, 2, HD, HD, 0.17f,
                                                   kb[g], vb[g], stride, GGML_TYPE_F16, BS,
                                                   tb, nk, NULL, 0 };
                    ops_attn_tiled_ref(&ta2, scr);
                    for (int rr = 0; rr < 2; rr++)
                        CHECK(same(out + (1 + rr) * NH * HD + g * 2 * HD,
                                   tw + rr * NH * HD + g * 2 * HD, 2 * HD * sizeof(float)));
                    continue;
                }
                uint8_t v1[10];
                for (int s = 0; s < nkv[r]; s++)
                    v1[s] = s < vis0[r] || vis[r * 10 + s - vis0[r]];
                struct attn_args aa = { q + r * NH * HD + g * 2 * HD, want + g * 2 * HD, 2, HD,
                                        HD, 0.17f, kb[g], vb[g], stride, GGML_TYPE_F16, BS,
                                        tables[r], nkv[r], masked ? v1 : NULL, 0, NULL, 0, 0 };
                ops_attn_ref(&aa, scr);
                CHECK(same(out + r * NH * HD + g * 2 * HD, want + g * 2 * HD,
                           2 * HD * sizeof(float)));
            }
        }
        free(scr);
    }
}

/* A masked row over a long context (split KV) computes what the same
 * query computes unmasked over only its visible slots, laid out
 * contiguously: the chunks are counted in visible slots (ops_attn_chunk). */
#define LBS 16
#define LNKV 700
#define LNB ((LNKV + LBS - 1) / LBS)
static void
test_masked_split(struct backend *be)
{
    const size_t row = HD * 2, stride = (size_t)NKVH * 2 * LBS * row;
    uint8_t *pa = calloc(LNB, stride), *pb = calloc(LNB, stride);
    uint8_t *ka[NKVH], *va[NKVH], *kb2[NKVH], *vb2[NKVH];
    static float kv[2][NKVH * HD], q[NH * HD], out_a[NH * HD], out_b[NH * HD];
    static uint8_t vis[LNKV];
    int32_t table[LNB];
    int64_t n_vis = 0;

    for (int g = 0; g < NKVH; g++) {
        ka[g] = pa + (size_t)g * 2 * LBS * row, va[g] = ka[g] + LBS * row;
        kb2[g] = pb + (size_t)g * 2 * LBS * row, vb2[g] = kb2[g] + LBS * row;
    }
    for (int b = 0; b < LNB; b++)
        table[b] = b;
    fill(q, NH * HD);
    for (int s = 0; s < LNKV; s++) {
        vis[s] = s == LNKV - 1 || (rnd() > -0.7f);     /* about 85% visible */
        fill(kv[0], NKVH * HD), fill(kv[1], NKVH * HD);
        for (int g = 0; g < NKVH; g++) {
            size_t off = (size_t)(s / LBS) * stride + (size_t)(s % LBS) * row;
            ops_kv_row_put(GGML_TYPE_F16, ka[g] + off, kv[0] + g * HD, HD);
            ops_kv_row_put(GGML_TYPE_F16, va[g] + off, kv[1] + g * HD, HD);
            if (!vis[s])
                continue;
            size_t offb = (size_t)(n_vis / LBS) * stride + (size_t)(n_vis % LBS) * row;
            ops_kv_row_put(GGML_TYPE_F16, kb2[g] + offb, kv[0] + g * HD, HD);
            ops_kv_row_put(GGML_TYPE_F16, vb2[g] + offb, kv[1] + g * HD, HD);
        }
        n_vis += vis[s];
    }
    CHECK(n_vis >= ATTN_SPLIT_MIN);
    const int32_t *tables[1] = { table };
    int64_t nkv_a = LNKV, nkv_b = n_vis, vis0 = 0;
    int32_t seq = 0;
    struct backend_attn_limits lim = { 1, NH, NKVH, HD, HD, GGML_TYPE_F16, LBS, LNKV, 1, 0 };
    CHECK_EQ(be->ops->attn_reserve(be, &lim), 0);
    struct backend_attn a = { q, out_a, 1, NH, NKVH, HD, HD, 0.2f, (const uint8_t *const *)ka,
                              (const uint8_t *const *)va, stride, GGML_TYPE_F16, LBS, tables,
                              &nkv_a, &seq, NULL, &vis0, vis, LNKV, NULL, 0 };
    be->ops->attention(be, &a);
    struct backend_attn b = { q, out_b, 1, NH, NKVH, HD, HD, 0.2f, (const uint8_t *const *)kb2,
                              (const uint8_t *const *)vb2, stride, GGML_TYPE_F16, LBS, tables,
                              &nkv_b, &seq, NULL, NULL, NULL, 0, NULL, 0 };
    be->ops->attention(be, &b);
    CHECK(same(out_a, out_b, sizeof(out_a)));
    free(pa);
    free(pb);
}

/* MLA's cache through the backend: kv_store without V rows writes only the
 * K rows; attention with V a view of K (v_stride) gives the reference's
 * bits per row, one-row and tiled (a run of 64+ rows); copy_rows copies
 * strided rows. */
static void
test_mla(struct backend *be)
{
    enum { NQ = 4, DK = 40, DV = 32, MBS = 16, NB = 6, NR = 70 };
    const size_t row = DK * 2, stride = (size_t)MBS * row;
    uint8_t *pool = calloc(NB, stride);
    static float k[NR * DK], q[NR * NQ * DK], out[NR * NQ * DV], want[NQ * DV];
    int32_t table[NB] = { 3, 0, 5, 1, 4, 2 }, blk[NR], seq[NR];
    int64_t bidx[NR], nkv[NR];
    const int32_t *tables[NR];
    uint8_t tiled[NR];
    uint8_t *kb[1] = { pool };

    fill(k, NR * DK);
    fill(q, NR * NQ * DK);
    for (int s = 0; s < NR; s++) {
        blk[s] = table[s / MBS];
        bidx[s] = s % MBS;
        nkv[s] = s + 1;
        tables[s] = table;
        seq[s] = 0;
        tiled[s] = 1;
    }
    struct backend_kv_store st = { k, NULL, NR, 1, DK, DV, kb, kb, stride, row, row,
                                   GGML_TYPE_F16, blk, bidx };
    be->ops->kv_store(be, &st);
    int ok = 1;
    for (int s = 0; s < NR; s++) {
        uint8_t w[DK * 2];
        ops_kv_row_put(GGML_TYPE_F16, w, k + s * DK, DK);
        ok &= same(pool + blk[s] * stride + bidx[s] * row, w, sizeof(w));
    }
    CHECK(ok);
    float *scr = malloc((size_t)(ops_attn_scratch_floats_ref(NQ, MBS, DK, DV) +
                                 ops_attn_tiled_scratch_floats_ref(NQ, DK, DV)) * sizeof(float));
    for (int tl = 0; tl < 2; tl++) {
        struct backend_attn_limits lim = { NR, NQ, 1, DK, DV, GGML_TYPE_F16, MBS, NR, 0, tl };
        CHECK_EQ(be->ops->attn_reserve(be, &lim), 0);
        struct backend_attn a = { q, out, NR, NQ, 1, DK, DV, 0.2f, (const uint8_t *const *)kb,
                                  (const uint8_t *const *)kb, stride, GGML_TYPE_F16, MBS, tables,
                                  nkv, seq, tl ? tiled : NULL, NULL, NULL, 0, NULL, row };
        be->ops->attention(be, &a);
        for (int r = 0; r < NR; r += 23) {
            if (tl) {
                /* row r of the tile of the first 64 rows (then of the rest) */
                int64_t r0 = r < ATTN_TILE_Q ? 0 : ATTN_TILE_Q, n = r0 ? NR - r0 : ATTN_TILE_Q;
                static float tw[ATTN_TILE_Q * NQ * DV];
                struct attn_tiled_args t = { q + r0 * NQ * DK, tw, NQ * DK, NQ * DV, n, NQ, DK,
                                             DV, 0.2f, pool, pool, stride, GGML_TYPE_F16, MBS,
                                             table, nkv + r0, NULL, row };
                ops_attn_tiled_ref(&t, scr);
                memcpy(want, tw + (r - r0) * NQ * DV, sizeof(want));
            } else {
                struct attn_args aa = { q + r * NQ * DK, want, NQ, DK, DV, 0.2f, pool, pool,
                                        stride, GGML_TYPE_F16, MBS, table, nkv[r], NULL, 0,
                                        NULL, 0, row };
                ops_attn_ref(&aa, scr);
            }
            CHECK(same(out + r * NQ * DV, want, sizeof(want)));
        }
    }
    /* copy_rows: every other row's middle, into a wider stride */
    static float src[10 * 8], dst[10 * 12];
    fill(src, 10 * 8);
    memset(dst, 0, sizeof(dst));
    be->ops->copy_rows(be, dst + 1, 12, src + 2, 16, 5, 5);
    ok = 1;
    for (int r = 0; r < 10; r++)
        for (int i = 0; i < 12; i++)
            ok &= dst[r * 12 + i] == (r < 5 && i >= 1 && i < 6 ? src[r * 16 + 2 + i - 1] : 0.0f);
    CHECK(ok);
    free(scr);
    free(pool);
}

int
main(void)
{
    test_open();
    for (int nth = 1; nth <= 3; nth += 2) {
        struct backend *be;
        char why[256];
        struct backend_config c = { nth, "ref" };
        CHECK_EQ(backend_open(&be, "cpu", &c, why, sizeof(why)), 0);
        if (!be)
            continue;
        CHECK_STR(be->device, "cpu");
        CHECK_STR(be->kernel, "ref");
        CHECK_EQ(be->n_threads, nth);
        CHECK(be->ops->backward == &backward_ops_ref);     /* the trainer's table by kernel */
        void *p = be->ops->alloc(be, 100);
        CHECK(p != NULL && ((uintptr_t)p & 63) == 0);
        be->ops->upload(be, p, "abc", 4);
        char back[4];
        be->ops->download(be, back, p, 4);
        CHECK_STR(back, "abc");
        be->ops->free(be, p);
        test_matmul(be);
        test_token_steps(be);
        test_attention(be, 0);
        test_attention(be, 1);
        test_masked_split(be);
        test_mla(be);
        backend_close(be);
    }
    /* the fastest kernels too */
    struct backend *be;
    char why[256];
    struct backend_config c = { 2, NULL };
    CHECK_EQ(backend_open(&be, "cpu", &c, why, sizeof(why)), 0);
    if (be) {
        test_masked_split(be);
        backend_close(be);
    }
    T_DONE();
}
