/*
 * test_kvcache.c - the paged KV pool: sizing, block allocation, block
 * tables, reference counts and copy-on-write, budget exhaustion, truncation,
 * stats, the data layout the forward pass relies on, the prefix cache
 * (publish, attach, eviction order, copy-on-write of shared blocks), swap
 * out / in (bit-exact), and q8_0 rows.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "ops.h"
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

/* fills every byte of a sequence's blocks with a pattern from seed */
static void
scribble(struct kvcache *kv, int32_t id, unsigned seed)
{
    int64_t nb;
    const int32_t *t = kv_seq_table(kv, id, &nb);
    struct kv_head_view v;
    kv_head_view(kv, 0, 0, &v);
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *p = v.k + (size_t)t[i] * v.block_stride;
        for (size_t j = 0; j < v.block_stride; j++)
            p[j] = (uint8_t)(seed * 31u + (unsigned)j * 7u + (unsigned)i);
    }
}

static void
test_prefix(void)
{
    struct kv_config c = cfg(4, GGML_TYPE_F16, 6);
    struct kvcache *kv = NULL;
    struct diag d;
    struct kv_prefix_key root, k0, k1, k1b, kx;
    const int32_t toks[8] = { 5, 6, 7, 8, 9, 10, 11, 12 };
    const int32_t other[4] = { 5, 6, 7, 9 };
    int32_t a, b, e;
    int64_t nb;
    struct kv_stats s;

    kv_prefix_key_root(&root);
    kv_prefix_key_next(&root, toks, 4, &k0);
    kv_prefix_key_next(&k0, toks + 4, 4, &k1);
    kv_prefix_key_next(&root, other, 4, &kx);
    kv_prefix_key_next(&root, toks + 4, 4, &k1b);   /* same tokens, other parent */
    CHECK(k0.h != kx.h && k0.c != kx.c);
    CHECK(k1.h != k1b.h && k1.c != k1b.c);
    kv_prefix_key_next(&root, toks, 4, &kx);
    CHECK(kx.h == k0.h && kx.c == k0.c);            /* deterministic */

    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    kv_seq_new(kv, &a);
    CHECK_EQ(kv_seq_grow(kv, a, 10, &d), 0);        /* 2 full blocks + 2 slots */
    CHECK_EQ(kv_prefix_publish(kv, a, 2, &k1), -ST_RANGE);   /* not full */
    CHECK_EQ(kv_prefix_publish(kv, a, 0, &k0), 1);
    CHECK_EQ(kv_prefix_publish(kv, a, 0, &k0), 0);  /* once */
    CHECK_EQ(kv_prefix_publish(kv, a, 1, &k1), 1);
    CHECK(kv_prefix_lookup(kv, &k1));
    const int32_t *ta = kv_seq_table(kv, a, &nb);
    int32_t a0 = ta[0], a1 = ta[1];

    /* b attaches both blocks: shared, counted once in the stats */
    kv_seq_new(kv, &b);
    CHECK_EQ(kv_prefix_attach(kv, b, &k0), 1);
    CHECK_EQ(kv_prefix_attach(kv, b, &kx), 1);      /* kx == k0: attaches a0 again */
    kv_seq_truncate(kv, b, 4);
    CHECK_EQ(kv_prefix_attach(kv, b, &k1), 1);
    CHECK_EQ(kv_seq_len(kv, b), 8);
    CHECK_EQ(kv_block_refcount(kv, a0), 2);
    CHECK_EQ(kv_block_refcount(kv, a1), 2);
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_used, 3);
    CHECK_EQ(s.slots_filled, 10);
    CHECK_EQ(s.prefix_hits, 3);
    kv_prefix_key_next(&root, other, 4, &kx);
    CHECK_EQ(kv_prefix_attach(kv, b, &kx), 0);      /* unknown key */
    kv_seq_grow(kv, b, 1, &d);
    CHECK_EQ(kv_prefix_attach(kv, b, &k0), -ST_RANGE);   /* not at a block boundary */
    /* b appends after the shared blocks: a new private block */
    ta = kv_seq_table(kv, b, &nb);
    CHECK_EQ(nb, 3);
    CHECK(ta[2] != a0 && ta[2] != a1);

    /* freeing keeps published blocks cached (free, evictable) */
    kv_seq_free(kv, a);
    kv_seq_free(kv, b);
    kv_stats(kv, &s);
    CHECK_EQ(s.blocks_free, 6);
    CHECK_EQ(s.blocks_cached, 2);
    CHECK(kv_prefix_lookup(kv, &k0));
    /* never-cached blocks go first: 4 blocks leave the cache intact */
    kv_seq_new(kv, &e);
    CHECK_EQ(kv_seq_grow(kv, e, 16, &d), 0);
    CHECK(kv_prefix_lookup(kv, &k0) && kv_prefix_lookup(kv, &k1));
    /* reviving a cached free block takes it off the free pool */
    kv_seq_new(kv, &a);
    CHECK_EQ(kv_prefix_attach(kv, a, &k0), 1);
    CHECK_EQ(kv_blocks_free(kv), 1);
    /* the last free block is the cached a1: allocating evicts it */
    CHECK_EQ(kv_seq_grow(kv, e, 1, &d), 0);
    CHECK(!kv_prefix_lookup(kv, &k1));
    kv_stats(kv, &s);
    CHECK_EQ(s.prefix_evictions, 1);
    CHECK_EQ(s.blocks_free, 0);
    kv_seq_free(kv, e);

    /* a shared published block written through a truncated sequence is
     * copied; an unshared one is unpublished before it changes */
    CHECK_EQ(kv_seq_blocks_needed(kv, a, 1), 1);
    kv_seq_new(kv, &b);
    CHECK_EQ(kv_prefix_attach(kv, b, &k0), 1);
    kv_seq_truncate(kv, b, 3);
    CHECK_EQ(kv_seq_blocks_needed(kv, b, 1), 1);    /* copy on write */
    CHECK_EQ(kv_seq_grow(kv, b, 1, &d), 0);
    CHECK(kv_seq_table(kv, b, &nb)[0] != a0);
    CHECK(kv_prefix_lookup(kv, &k0));
    kv_seq_free(kv, b);
    kv_seq_truncate(kv, a, 2);
    CHECK_EQ(kv_seq_blocks_needed(kv, a, 1), 0);
    CHECK_EQ(kv_seq_grow(kv, a, 1, &d), 0);
    CHECK(!kv_prefix_lookup(kv, &k0));
    CHECK_EQ(kv_seq_blocks_needed(kv, 99, 1), -ST_RANGE);
    kv_free(kv);
}

static void
test_swap(void)
{
    struct kv_config c = cfg(4, GGML_TYPE_F32, 5);
    struct kvcache *kv = NULL;
    struct diag d;
    struct kv_swap *sw = NULL;
    struct kv_head_view v;
    int32_t a, f, back;
    int64_t nb;
    size_t bb = kv_block_bytes(&c);
    uint8_t *img;

    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    kv_head_view(kv, 0, 0, &v);
    kv_seq_new(kv, &a);
    CHECK_EQ(kv_seq_grow(kv, a, 10, &d), 0);
    scribble(kv, a, 3);
    const int32_t *t = kv_seq_table(kv, a, &nb);
    img = malloc(bb * 3);
    for (int i = 0; i < 3; i++)
        memcpy(img + (size_t)i * bb, v.k + (size_t)t[i] * bb, bb);
    /* a fork shares a's first blocks: swapping a out keeps them for f */
    CHECK_EQ(kv_seq_fork(kv, a, &f), 0);
    kv_seq_truncate(kv, f, 4);
    CHECK_EQ(kv_seq_swap_out(kv, a, &sw, &d), 0);
    CHECK(!kv_seq_valid(kv, a));
    CHECK_EQ(kv_swap_blocks(sw), 3);
    CHECK(kv_swap_bytes(sw) > 0);
    CHECK_EQ(kv_blocks_free(kv), 4);
    /* overwrite the freed blocks, fill the pool, then swap in: no room */
    int32_t g;
    kv_seq_new(kv, &g);
    CHECK_EQ(kv_seq_grow(kv, g, 12, &d), 0);
    scribble(kv, g, 9);
    CHECK_EQ(kv_seq_swap_in(kv, sw, &back, &d), -ST_NOMEM);
    kv_seq_free(kv, g);
    CHECK_EQ(kv_seq_swap_in(kv, sw, &back, &d), 0);
    CHECK_EQ(kv_seq_len(kv, back), 10);
    t = kv_seq_table(kv, back, &nb);
    CHECK_EQ(nb, 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(kv_block_refcount(kv, t[i]), 1);
        CHECK(memcmp(img + (size_t)i * bb, v.k + (size_t)t[i] * bb, bb) == 0);
    }
    CHECK_EQ(kv_seq_swap_out(kv, 77, &sw, &d), -ST_RANGE);
    /* an empty sequence swaps too */
    int32_t z, z2;
    kv_seq_new(kv, &z);
    CHECK_EQ(kv_seq_swap_out(kv, z, &sw, &d), 0);
    CHECK_EQ(kv_swap_blocks(sw), 0);
    CHECK_EQ(kv_seq_swap_in(kv, sw, &z2, &d), 0);
    CHECK_EQ(kv_seq_len(kv, z2), 0);
    kv_swap_free(NULL);
    free(img);
    kv_free(kv);
}

static void
test_q8_0(void)
{
    struct kv_config c = cfg(4, GGML_TYPE_Q8_0, 2);
    struct kvcache *kv = NULL;
    struct diag d;
    float x[64], y[64];
    uint8_t row[68];

    CHECK_EQ(kv_block_bytes(&c), 0);                /* head dims 8 and 4 */
    CHECK_EQ(kv_new(&kv, &c, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "multiples of 32") != NULL);
    c.head_dim_k = 64;
    c.head_dim_v = 32;
    c.mem = (size_t)1 << 20;
    CHECK_EQ(kv_block_bytes(&c), 3 * 2 * 4 * (68 + 34));
    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    struct kv_head_view v;
    kv_head_view(kv, 1, 1, &v);
    CHECK_EQ(v.k_row_bytes, 68);
    CHECK_EQ(v.v_row_bytes, 34);
    kv_free(kv);
    CHECK_EQ(kv_dtype_row_bytes(GGML_TYPE_Q8_0, 33), 0);
    CHECK_EQ(kv_dtype_row_bytes(GGML_TYPE_F16, 3), 6);

    for (int i = 0; i < 64; i++)
        x[i] = (float)((i * 37) % 19) - 9.0f + (i >= 32 ? 0.25f : 0.0f);
    x[5] = 12.7f;                                   /* block 0 amax: d = 0.1 */
    ops_kv_row_put(GGML_TYPE_Q8_0, row, x, 64);
    ops_kv_row_get(GGML_TYPE_Q8_0, y, row, 64);
    for (int i = 0; i < 64; i++)
        CHECK_NEAR(y[i], x[i], (i < 32 ? 12.7 : 9.25) / 127.0 / 2 + 1e-3);
    CHECK_NEAR(y[5], 12.7, 1e-2);
    memset(x, 0, sizeof(x));
    ops_kv_row_put(GGML_TYPE_Q8_0, row, x, 32);         /* all zero: d = 0, no NaN */
    ops_kv_row_get(GGML_TYPE_Q8_0, y, row, 32);
    CHECK(y[0] == 0.0f && y[31] == 0.0f);
    x[0] = 1.5f;
    ops_kv_row_put(GGML_TYPE_F16, row, x, 2);
    ops_kv_row_get(GGML_TYPE_F16, y, row, 2);
    CHECK(y[0] == 1.5f && y[1] == 0.0f);
}

/* MLA's cache (v_in_k): K rows only, V the first head_dim_v elements of
 * each K row; layers and heads apart as without; a V wider than K is
 * refused; a slot move copies the K row (and so V). */
static void
test_v_in_k(void)
{
    struct kv_config c = cfg(16, GGML_TYPE_F16, 4);
    struct kvcache *kv = NULL;
    struct kv_head_view v0, v1, w0;
    struct diag d;

    c.v_in_k = 1;
    CHECK_EQ(kv_block_bytes(&c), 3 * 2 * 16 * 8 * 2);
    c.mem = kv_block_bytes(&c) * 4;
    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    kv_head_view(kv, 0, 0, &v0);
    kv_head_view(kv, 0, 1, &v1);
    kv_head_view(kv, 1, 0, &w0);
    CHECK(v0.v == v0.k && v1.v == v1.k && w0.v == w0.k);
    CHECK_EQ(v0.k_row_bytes, 16);
    CHECK_EQ(v0.v_row_bytes, 16);
    CHECK_EQ(v1.k - v0.k, 16 * 16);
    CHECK_EQ(w0.k - v0.k, 2 * 16 * 16);
    CHECK_EQ(v0.block_stride, kv_block_bytes(&c));
    int32_t id, b0, b1;
    int64_t i0, i1;
    CHECK_EQ(kv_seq_new(kv, &id), 0);
    CHECK_EQ(kv_seq_grow(kv, id, 3, &d), 0);
    kv_slot_block(kv, id, 0, &b0, &i0);
    kv_slot_block(kv, id, 2, &b1, &i1);
    memset(v0.k + (size_t)b0 * v0.block_stride + (size_t)i0 * 16, 0x5a, 16);
    CHECK_EQ(kv_seq_move_slot(kv, id, 0, 2), 0);
    CHECK(memcmp(v0.k + (size_t)b1 * v0.block_stride + (size_t)i1 * 16,
                 v0.k + (size_t)b0 * v0.block_stride + (size_t)i0 * 16, 16) == 0);
    kv_free(kv);
    c.head_dim_v = 16;
    CHECK_EQ(kv_block_bytes(&c), 0);
    CHECK_EQ(kv_new(&kv, &c, &d), -ST_RANGE);
}

int
main(void)
{
    test_sizing();
    test_tables();
    test_refcounts_cow();
    test_layout();
    test_prefix();
    test_swap();
    test_q8_0();
    test_v_in_k();
    T_DONE();
}
