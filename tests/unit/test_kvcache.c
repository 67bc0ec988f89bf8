/*
 * test_kvcache.c - the paged KV pool: sizing, block allocation, block
 * tables, reference counts and copy-on-write, budget exhaustion, truncation,
 * stats, and the data layout the forward pass relies on.
 */
#include <stdint.h>
#include <string.h>

#include "kvcache.h"
#include "qtypes.h"
#include "t.h"

static struct kv_config
cfg(int64_t block_size, uint32_t dtype, int64_t n_blocks)
{
    struct kv_config c = KV_CONFIG_INIT;
    c.n_layer = 3;
    c.n_head_kv = 2;
    c.head_dim_k = 8;
    c.head_dim_v = 4;
    c.block_size = block_size;
    c.dtype = dtype;
    c.mem = kv_block_bytes(&c) * (size_t)n_blocks;
    return c;
}

static void
test_sizing(void)
{
    struct kv_config c = cfg(0, GGML_TYPE_F16, 1);
    struct kvcache *kv = NULL;
    struct diag d;

    CHECK_EQ(kv_block_bytes(&c), 3 * 2 * 16 * (8 + 4) * 2);
    c.dtype = GGML_TYPE_F32;
    CHECK_EQ(kv_block_bytes(&c), 3 * 2 * 16 * (8 + 4) * 4);
    c.dtype = GGML_TYPE_Q4_0;
    CHECK_EQ(kv_block_bytes(&c), 0);
    CHECK_EQ(kv_new(&kv, &c, &d), -ST_RANGE);
    CHECK(kv == NULL);

    c = cfg(16, GGML_TYPE_F16, 10);
    c.mem += kv_block_bytes(&c) - 1;    /* a partial block does not count */
    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    struct kv_stats s;
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_total, 10);
    CHECK_EQ(s.blocks_free, 10);
    CHECK_EQ(s.blocks_used, 0);
    CHECK_EQ(s.block_size, 16);
    CHECK_EQ(s.seqs, 0);
    CHECK_NEAR(s.waste, 0.0, 0);
    CHECK_EQ(kv_config_get(kv)->block_size, 16);
    kv_free(kv);

    c = cfg(16, GGML_TYPE_F16, 1);
    c.mem -= 1;
    CHECK_EQ(kv_new(&kv, &c, &d), -ST_NOMEM);
    CHECK(strstr(d.msg, "holds no block") != NULL);
    c = cfg(5000, GGML_TYPE_F16, 1);
    CHECK_EQ(kv_new(&kv, &c, &d), -ST_RANGE);
    c = cfg(16, GGML_TYPE_F16, 1);
    c.n_layer = 0;
    CHECK_EQ(kv_new(&kv, &c, &d), -ST_RANGE);
    c = cfg(16, GGML_TYPE_F16, 1);
    c.head_dim_k = INT64_MAX / 2;
    CHECK_EQ(kv_block_bytes(&c), 0);
    kv_free(NULL);
}

static void
test_tables(void)
{
    struct kv_config c = cfg(4, GGML_TYPE_F16, 8);
    struct kvcache *kv = NULL;
    struct diag d;
    int32_t a, b;
    int64_t nb;

    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    CHECK_EQ(kv_seq_new(kv, &a), 0);
    CHECK_EQ(kv_seq_new(kv, &b), 0);
    CHECK(a != b);
    CHECK(kv_seq_valid(kv, a));
    CHECK(!kv_seq_valid(kv, 99));
    CHECK(!kv_seq_valid(kv, -1));
    CHECK_EQ(kv_seq_len(kv, a), 0);
    CHECK_EQ(kv_seq_len(kv, 99), -ST_RANGE);

    /* 7 slots -> 2 blocks; appending 1 stays in block 2; 1 more opens block 3 */
    CHECK_EQ(kv_seq_grow(kv, a, 7, &d), 0);
    const int32_t *t = kv_seq_table(kv, a, &nb);
    CHECK_EQ(nb, 2);
    CHECK_EQ(kv_seq_len(kv, a), 7);
    CHECK(t[0] != t[1]);
    CHECK_EQ(kv_block_refcount(kv, t[0]), 1);
    CHECK_EQ(kv_seq_grow(kv, a, 1, &d), 0);
    kv_seq_table(kv, a, &nb);
    CHECK_EQ(nb, 2);
    CHECK_EQ(kv_seq_grow(kv, a, 1, &d), 0);
    t = kv_seq_table(kv, a, &nb);
    CHECK_EQ(nb, 3);
    CHECK_EQ(kv_seq_grow(kv, a, 0, &d), 0);
    CHECK_EQ(kv_seq_grow(kv, a, -1, &d), -ST_RANGE);

    /* slot -> (block, index) */
    int32_t blk;
    int64_t idx;
    CHECK_EQ(kv_slot_block(kv, a, 5, &blk, &idx), 0);
    CHECK_EQ(blk, t[1]);
    CHECK_EQ(idx, 1);
    CHECK_EQ(kv_slot_block(kv, a, 9, &blk, &idx), -ST_RANGE);

    struct kv_stats s;
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_used, 3);
    CHECK_EQ(s.tokens, 9);
    CHECK_EQ(s.slots_filled, 9);
    CHECK_NEAR(s.waste, 1.0 - 9.0 / 12.0, 1e-12);

    /* budget exhaustion: 5 blocks left; 21 slots need 6 -> clean error, no change */
    CHECK_EQ(kv_seq_grow(kv, b, 21, &d), -ST_NOMEM);
    CHECK(strstr(d.msg, "kv cache full") != NULL);
    CHECK_EQ(kv_seq_len(kv, b), 0);
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_free, 5);
    CHECK_EQ(kv_seq_grow(kv, b, 20, &d), 0);
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_free, 0);
    CHECK_EQ(kv_seq_grow(kv, b, 1, &d), -ST_NOMEM);
    CHECK_EQ(kv_seq_grow(kv, a, 3, &d), 0);     /* fits in a's last block */
    CHECK_EQ(kv_seq_grow(kv, a, 1, &d), -ST_NOMEM);
    CHECK_EQ(kv_seq_len(kv, a), 12);

    /* truncate (rollback): whole blocks beyond the new length are freed */
    CHECK_EQ(kv_seq_truncate(kv, b, 9), 0);
    kv_seq_table(kv, b, &nb);
    CHECK_EQ(nb, 3);
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_free, 2);
    CHECK_EQ(kv_seq_truncate(kv, b, 10), -ST_RANGE);
    CHECK_EQ(kv_seq_truncate(kv, b, -1), -ST_RANGE);
    CHECK_EQ(kv_seq_truncate(kv, b, 8), 0);
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_free, 3);
    CHECK_EQ(kv_seq_truncate(kv, b, 0), 0);
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_free, 5);

    /* freeing a sequence frees its blocks; its id is reused */
    CHECK_EQ(kv_seq_free(kv, a), 0);
    CHECK_EQ(kv_seq_free(kv, a), -ST_RANGE);
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_free, 8);
    CHECK_EQ(s.seqs, 1);
    int32_t c2;
    CHECK_EQ(kv_seq_new(kv, &c2), 0);
    CHECK_EQ(c2, a);
    CHECK(kv_seq_table(kv, 77, &nb) == NULL);
    kv_free(kv);
}

static void
test_refcounts_cow(void)
{
    struct kv_config c = cfg(4, GGML_TYPE_F32, 6);
    struct kvcache *kv = NULL;
    struct diag d;
    int32_t a, f;
    int64_t nb;
    struct kv_head_view v;

    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    kv_seq_new(kv, &a);
    CHECK_EQ(kv_seq_grow(kv, a, 6, &d), 0);
    const int32_t *ta = kv_seq_table(kv, a, &nb);
    int32_t a0 = ta[0], a1 = ta[1];
    /* mark slot 5 (block a1, index 1), layer 2, head 1 */
    kv_head_view(kv, 2, 1, &v);
    float mark = 42.5f;
    memcpy(v.k + (size_t)a1 * v.block_stride + 1 * v.k_row_bytes, &mark, 4);

    CHECK_EQ(kv_seq_fork(kv, a, &f), 0);
    CHECK_EQ(kv_seq_len(kv, f), 6);
    CHECK_EQ(kv_block_refcount(kv, a0), 2);
    CHECK_EQ(kv_block_refcount(kv, a1), 2);
    struct kv_stats s;
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_used, 2);
    CHECK_EQ(s.blocks_shared, 2);
    CHECK_EQ(s.tokens, 12);
    CHECK_EQ(s.slots_filled, 6);

    /* the fork appends into the shared, partly filled block: it gets a copy */
    CHECK_EQ(kv_seq_grow(kv, f, 1, &d), 0);
    const int32_t *tf = kv_seq_table(kv, f, &nb);
    CHECK_EQ(tf[0], a0);                        /* full block still shared */
    CHECK(tf[1] != a1);
    CHECK_EQ(kv_block_refcount(kv, a1), 1);
    CHECK_EQ(kv_block_refcount(kv, tf[1]), 1);
    float got;
    memcpy(&got, v.k + (size_t)tf[1] * v.block_stride + 1 * v.k_row_bytes, 4);
    CHECK(got == 42.5f);                        /* data copied */
    /* now the original appends in place: its block is no longer shared */
    CHECK_EQ(kv_seq_grow(kv, a, 1, &d), 0);
    ta = kv_seq_table(kv, a, &nb);
    CHECK_EQ(ta[1], a1);

    /* explicit references (prefix sharing) */
    CHECK_EQ(kv_block_ref(kv, a0), 0);
    CHECK_EQ(kv_block_refcount(kv, a0), 3);
    CHECK_EQ(kv_block_unref(kv, a0), 0);
    kv_stats(kv, &s);
    int64_t free_before = s.blocks_free;
    CHECK_EQ(kv_seq_free(kv, a), 0);
    CHECK_EQ(kv_block_refcount(kv, a0), 1);     /* still held by the fork */
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_free, free_before + 1);   /* only a1 came back */
    CHECK_EQ(kv_seq_free(kv, f), 0);
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_free, 6);
    CHECK_EQ(kv_block_refcount(kv, a0), 0);
    CHECK_EQ(kv_block_unref(kv, a0), -ST_RANGE);
    CHECK_EQ(kv_block_ref(kv, a0), -ST_RANGE);
    CHECK_EQ(kv_block_refcount(kv, 6), -ST_RANGE);

    /* COW needs a free block: when none is left the append fails cleanly */
    int32_t p, q;
    kv_seq_new(kv, &p);
    CHECK_EQ(kv_seq_grow(kv, p, 2, &d), 0);
    CHECK_EQ(kv_seq_fork(kv, p, &q), 0);
    int32_t filler;
    kv_seq_new(kv, &filler);
    CHECK_EQ(kv_seq_grow(kv, filler, 20, &d), 0);   /* the other 5 blocks */
    CHECK_EQ(kv_seq_grow(kv, q, 1, &d), -ST_NOMEM);
    CHECK_EQ(kv_seq_len(kv, q), 2);
    kv_seq_truncate(kv, filler, 16);
    CHECK_EQ(kv_seq_grow(kv, q, 1, &d), 0);
    kv_free(kv);
}

static void
test_layout(void)
{
    struct kv_config c = cfg(4, GGML_TYPE_F16, 3);
    struct kvcache *kv = NULL;
    struct diag d;
    struct kv_head_view v[3][2];

    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    size_t bb = kv_block_bytes(&c);
    for (int l = 0; l < 3; l++)
        for (int h = 0; h < 2; h++) {
            kv_head_view(kv, l, h, &v[l][h]);
            CHECK_EQ(v[l][h].block_stride, bb);
            CHECK_EQ(v[l][h].k_row_bytes, 8 * 2);
            CHECK_EQ(v[l][h].v_row_bytes, 4 * 2);
        }
    /* every (layer, head, K/V) region of a block is distinct and inside it */
    uint8_t *base = v[0][0].k;
    size_t kreg = 4 * 16, vreg = 4 * 8;
    for (int l = 0; l < 3; l++)
        for (int h = 0; h < 2; h++) {
            CHECK(v[l][h].k >= base && v[l][h].k + kreg <= base + bb);
            CHECK(v[l][h].v >= base && v[l][h].v + vreg <= base + bb);
            for (int l2 = 0; l2 < 3; l2++)
                for (int h2 = 0; h2 < 2; h2++) {
                    if (l == l2 && h == h2)
                        continue;
                    CHECK(v[l][h].k + kreg <= v[l2][h2].k || v[l2][h2].k + kreg <= v[l][h].k);
                    CHECK(v[l][h].v + vreg <= v[l2][h2].v || v[l2][h2].v + vreg <= v[l][h].v);
                    CHECK(v[l][h].k + kreg <= v[l2][h2].v || v[l2][h2].v + vreg <= v[l][h].k);
                }
        }
    /* the whole pool is writable */
    memset(base, 0xab, bb * 3);
    kv_free(kv);
}

int
main(void)
{
    test_sizing();
    test_tables();
    test_refcounts_cow();
    test_layout();
    T_DONE();
}
