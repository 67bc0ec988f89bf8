/*
 * kvcache.c - paged KV pool: free list, reference counts, block tables,
 * copy-on-write on append.
 *
 * Invariants: a block is on the free stack iff refcnt == 0; a live sequence
 * of length len has exactly ceil(len / block_size) blocks in its table, each
 * holding one of that block's references.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kvcache.h"
#include "qtypes.h"

#define MAX_BLOCK_SIZE 4096

struct kv_seq {
    int live;
    int64_t len;
    int32_t *table;
    int64_t n_blocks, cap;
};

struct kvcache {
    struct kv_config c;
    size_t block_bytes;
    size_t elem;
    int64_t n_blocks;
    uint8_t *pool;
    size_t pool_bytes;
    int32_t *refcnt;            /* [n_blocks] */
    int32_t *free_stack;        /* [n_blocks]; top is free_stack[n_free - 1] */
    int64_t n_free;
    struct kv_seq *seqs;
    int32_t n_seqs, cap_seqs;   /* ids 0 .. n_seqs-1 ever handed out */
    int32_t *fill;              /* [n_blocks] scratch for kv_stats */
};

static int
mul_ok(size_t a, size_t b, size_t *r)
{
    return !__builtin_mul_overflow(a, b, r);
}

size_t
kv_block_bytes(const struct kv_config *c)
{
    size_t elem, r = 1;
    int64_t bs = c->block_size ? c->block_size : KV_BLOCK_SIZE_DEFAULT;

    if (c->dtype == GGML_TYPE_F16)
        elem = 2;
    else if (c->dtype == GGML_TYPE_F32)
        elem = 4;
    else
        return 0;
    if (c->n_layer <= 0 || c->n_head_kv <= 0 || c->head_dim_k <= 0 || c->head_dim_v <= 0 ||
        bs <= 0 || bs > MAX_BLOCK_SIZE)
        return 0;
    if (__builtin_add_overflow((size_t)c->head_dim_k, (size_t)c->head_dim_v, &r))
        return 0;
    if (!mul_ok(r, (size_t)c->n_layer, &r) || !mul_ok(r, (size_t)c->n_head_kv, &r) ||
        !mul_ok(r, (size_t)bs, &r) || !mul_ok(r, elem, &r))
        return 0;
    return r;
}

int
kv_new(struct kvcache **out, const struct kv_config *c, struct diag *d)
{
    struct kvcache *kv;
    size_t bb;
    int64_t nb;

    *out = NULL;
    bb = kv_block_bytes(c);
    if (bb == 0) {
        if (c->dtype != GGML_TYPE_F16 && c->dtype != GGML_TYPE_F32)
            return diag_set(d, ST_RANGE, "kv cache: dtype %u not supported (f16 or f32)",
                            (unsigned)c->dtype);
        if (c->block_size < 0 || c->block_size > MAX_BLOCK_SIZE)
            return diag_set(d, ST_RANGE, "kv cache: block size %lld out of range 1..%d",
                            (long long)c->block_size, MAX_BLOCK_SIZE);
        return diag_set(d, ST_RANGE, "kv cache: bad dimensions");
    }
    nb = (int64_t)(c->mem / bb);
    if (nb < 1)
        return diag_set(d, ST_NOMEM, "kv cache: budget of %zu bytes holds no block of %zu bytes",
                        c->mem, bb);
    if (nb > INT32_MAX)
        nb = INT32_MAX;
    kv = calloc(1, sizeof(*kv));
    if (!kv)
        return diag_set(d, ST_NOMEM, "kv cache: out of memory");
    kv->c = *c;
    if (!kv->c.block_size)
        kv->c.block_size = KV_BLOCK_SIZE_DEFAULT;
    kv->block_bytes = bb;
    kv->elem = c->dtype == GGML_TYPE_F16 ? 2 : 4;
    kv->n_blocks = nb;
    kv->pool_bytes = (size_t)nb * bb;
    kv->refcnt = calloc((size_t)nb, sizeof(int32_t));
    kv->free_stack = malloc((size_t)nb * sizeof(int32_t));
    kv->fill = malloc((size_t)nb * sizeof(int32_t));
    if (!kv->refcnt || !kv->free_stack || !kv->fill) {
        kv_free(kv);
        return diag_set(d, ST_NOMEM, "kv cache: out of memory for %lld blocks", (long long)nb);
    }
    /* Pages are committed on first touch, so RSS follows the blocks used. */
    void *p = mmap(NULL, kv->pool_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        kv->pool = NULL;
        kv_free(kv);
        return diag_set(d, ST_NOMEM, "kv cache: cannot map %zu bytes", (size_t)nb * bb);
    }
    kv->pool = p;
    /* block 0 on top: low blocks are handed out first */
    for (int64_t i = 0; i < nb; i++)
        kv->free_stack[i] = (int32_t)(nb - 1 - i);
    kv->n_free = nb;
    *out = kv;
    return 0;
}

void
kv_free(struct kvcache *kv)
{
    if (!kv)
        return;
    for (int32_t i = 0; i < kv->n_seqs; i++)
        free(kv->seqs[i].table);
    free(kv->seqs);
    if (kv->pool)
        munmap(kv->pool, kv->pool_bytes);
    free(kv->fill);
    free(kv->free_stack);
    free(kv->refcnt);
    free(kv);
}

const struct kv_config *
kv_config_get(const struct kvcache *kv)
{
    return &kv->c;
}

/* ---- blocks ---- */

static int32_t
block_alloc(struct kvcache *kv)
{
    int32_t b = kv->free_stack[--kv->n_free];
    kv->refcnt[b] = 1;
    return b;
}

static void
block_put(struct kvcache *kv, int32_t b)
{
    if (--kv->refcnt[b] == 0)
        kv->free_stack[kv->n_free++] = b;
}

int
kv_block_ref(struct kvcache *kv, int32_t block)
{
    if (block < 0 || block >= kv->n_blocks || kv->refcnt[block] <= 0)
        return -ST_RANGE;
    if (kv->refcnt[block] == INT32_MAX)
        return -ST_RANGE;
    kv->refcnt[block]++;
    return 0;
}

int
kv_block_unref(struct kvcache *kv, int32_t block)
{
    if (block < 0 || block >= kv->n_blocks || kv->refcnt[block] <= 0)
        return -ST_RANGE;
    block_put(kv, block);
    return 0;
}

int
kv_block_refcount(const struct kvcache *kv, int32_t block)
{
    if (block < 0 || block >= kv->n_blocks)
        return -ST_RANGE;
    return kv->refcnt[block];
}

/* ---- sequences ---- */

static struct kv_seq *
seq_get(const struct kvcache *kv, int32_t id)
{
    if (id < 0 || id >= kv->n_seqs || !kv->seqs[id].live)
        return NULL;
    return &kv->seqs[id];
}

int
kv_seq_valid(const struct kvcache *kv, int32_t id)
{
    return seq_get(kv, id) != NULL;
}

static int
seq_slot(struct kvcache *kv, int32_t *id)
{
    for (int32_t i = 0; i < kv->n_seqs; i++) {
        if (!kv->seqs[i].live) {
            *id = i;
            return 0;
        }
    }
    if (kv->n_seqs == kv->cap_seqs) {
        int32_t cap = kv->cap_seqs ? kv->cap_seqs * 2 : 16;
        if (kv->cap_seqs > INT32_MAX / 2)
            return -ST_NOMEM;
        struct kv_seq *s = realloc(kv->seqs, (size_t)cap * sizeof(*s));
        if (!s)
            return -ST_NOMEM;
        kv->seqs = s;
        kv->cap_seqs = cap;
    }
    memset(&kv->seqs[kv->n_seqs], 0, sizeof(kv->seqs[0]));
    *id = kv->n_seqs++;
    return 0;
}

int
kv_seq_new(struct kvcache *kv, int32_t *id)
{
    int rc = seq_slot(kv, id);
    if (rc < 0)
        return rc;
    struct kv_seq *s = &kv->seqs[*id];
    s->live = 1;
    s->len = 0;
    s->n_blocks = 0;
    return 0;
}

int
kv_seq_free(struct kvcache *kv, int32_t id)
{
    struct kv_seq *s = seq_get(kv, id);

    if (!s)
        return -ST_RANGE;
    for (int64_t i = 0; i < s->n_blocks; i++)
        block_put(kv, s->table[i]);
    s->n_blocks = 0;
    s->len = 0;
    s->live = 0;
    return 0;
}

static int
table_reserve(struct kv_seq *s, int64_t n)
{
    if (n <= s->cap)
        return 0;
    int64_t cap = s->cap ? s->cap : 8;
    while (cap < n)
        cap *= 2;
    int32_t *t = realloc(s->table, (size_t)cap * sizeof(int32_t));
    if (!t)
        return -ST_NOMEM;
    s->table = t;
    s->cap = cap;
    return 0;
}

int
kv_seq_fork(struct kvcache *kv, int32_t src, int32_t *id)
{
    int32_t nid;
    int rc;

    if (!seq_get(kv, src))
        return -ST_RANGE;
    rc = seq_slot(kv, &nid);    /* may move kv->seqs */
    if (rc < 0)
        return rc;
    struct kv_seq *s = &kv->seqs[src], *t = &kv->seqs[nid];
    if (table_reserve(t, s->n_blocks) < 0)
        return -ST_NOMEM;
    for (int64_t i = 0; i < s->n_blocks; i++) {
        t->table[i] = s->table[i];
        kv->refcnt[s->table[i]]++;
    }
    t->n_blocks = s->n_blocks;
    t->len = s->len;
    t->live = 1;
    *id = nid;
    return 0;
}

int64_t
kv_seq_len(const struct kvcache *kv, int32_t id)
{
    struct kv_seq *s = seq_get(kv, id);
    return s ? s->len : -ST_RANGE;
}

int
kv_seq_grow(struct kvcache *kv, int32_t id, int64_t n, struct diag *d)
{
    struct kv_seq *s = seq_get(kv, id);
    int64_t bs = kv->c.block_size;

    if (!s || n < 0)
        return diag_set(d, ST_RANGE, "kv cache: bad sequence %d or count", (int)id);
    if (n == 0)
        return 0;
    if (n > INT64_MAX / 2 - s->len)
        return diag_set(d, ST_RANGE, "kv cache: sequence length overflow");
    int64_t new_len = s->len + n;
    int64_t need = (new_len + bs - 1) / bs;
    int64_t fresh = need - s->n_blocks;
    /* the partially filled last block gets written: private copy if shared */
    int cow = s->len % bs != 0 && kv->refcnt[s->table[s->n_blocks - 1]] > 1;
    if (fresh + cow > kv->n_free)
        return diag_set(d, ST_NOMEM,
                        "kv cache full: %lld more blocks needed, %lld of %lld free",
                        (long long)(fresh + cow), (long long)kv->n_free,
                        (long long)kv->n_blocks);
    if (table_reserve(s, need) < 0)
        return diag_set(d, ST_NOMEM, "kv cache: out of memory for a block table");
    if (cow) {
        int32_t old = s->table[s->n_blocks - 1];
        int32_t b = block_alloc(kv);
        memcpy(kv->pool + (size_t)b * kv->block_bytes, kv->pool + (size_t)old * kv->block_bytes,
               kv->block_bytes);
        block_put(kv, old);
        s->table[s->n_blocks - 1] = b;
    }
    for (int64_t i = s->n_blocks; i < need; i++)
        s->table[i] = block_alloc(kv);
    s->n_blocks = need;
    s->len = new_len;
    return 0;
}

int
kv_seq_truncate(struct kvcache *kv, int32_t id, int64_t n)
{
    struct kv_seq *s = seq_get(kv, id);
    int64_t bs = kv->c.block_size;

    if (!s || n < 0 || n > s->len)
        return -ST_RANGE;
    int64_t keep = (n + bs - 1) / bs;
    for (int64_t i = keep; i < s->n_blocks; i++)
        block_put(kv, s->table[i]);
    s->n_blocks = keep;
    s->len = n;
    return 0;
}

const int32_t *
kv_seq_table(const struct kvcache *kv, int32_t id, int64_t *n_blocks)
{
    struct kv_seq *s = seq_get(kv, id);

    if (!s)
        return NULL;
    if (n_blocks)
        *n_blocks = s->n_blocks;
    return s->table;
}

int
kv_slot_block(const struct kvcache *kv, int32_t id, int64_t slot, int32_t *block, int64_t *index)
{
    struct kv_seq *s = seq_get(kv, id);

    if (!s || slot < 0 || slot >= s->len)
        return -ST_RANGE;
    *block = s->table[slot / kv->c.block_size];
    *index = slot % kv->c.block_size;
    return 0;
}

void
kv_head_view(const struct kvcache *kv, int64_t layer, int64_t head, struct kv_head_view *v)
{
    const struct kv_config *c = &kv->c;
    size_t bs = (size_t)c->block_size;
    size_t krow = (size_t)c->head_dim_k * kv->elem;
    size_t vrow = (size_t)c->head_dim_v * kv->elem;
    size_t layer_bytes = (size_t)c->n_head_kv * bs * (krow + vrow);
    uint8_t *base = kv->pool + (size_t)layer * layer_bytes;

    v->k = base + (size_t)head * bs * krow;
    v->v = base + (size_t)c->n_head_kv * bs * krow + (size_t)head * bs * vrow;
    v->block_stride = kv->block_bytes;
    v->k_row_bytes = krow;
    v->v_row_bytes = vrow;
}

void
kv_stats(const struct kvcache *kv, struct kv_stats *st)
{
    int64_t bs = kv->c.block_size;

    memset(st, 0, sizeof(*st));
    st->block_size = bs;
    st->block_bytes = kv->block_bytes;
    st->blocks_total = kv->n_blocks;
    st->blocks_free = kv->n_free;
    st->blocks_used = kv->n_blocks - kv->n_free;
    memset(kv->fill, 0, (size_t)kv->n_blocks * sizeof(int32_t));
    for (int64_t b = 0; b < kv->n_blocks; b++)
        if (kv->refcnt[b] > 1)
            st->blocks_shared++;
    for (int32_t i = 0; i < kv->n_seqs; i++) {
        const struct kv_seq *s = &kv->seqs[i];
        if (!s->live)
            continue;
        st->seqs++;
        st->tokens += s->len;
        for (int64_t j = 0; j < s->n_blocks; j++) {
            int64_t f = s->len - j * bs;
            if (f > bs)
                f = bs;
            if (f > kv->fill[s->table[j]])
                kv->fill[s->table[j]] = (int32_t)f;
        }
    }
    for (int64_t b = 0; b < kv->n_blocks; b++)
        st->slots_filled += kv->fill[b];
    if (st->blocks_used > 0)
        st->waste = 1.0 - (double)st->slots_filled / ((double)st->blocks_used * (double)bs);
}
