/*
 * kvcache.c - paged KV pool: free list, reference counts, block tables,
 * copy-on-write on append, prefix cache, swap.
 *
 * Invariants: a block with refcnt == 0 is free and is either on the free
 * stack (never published, or evicted) or on the LRU list of cached blocks
 * (published, data intact); n_free counts both.  A live sequence of length
 * len has exactly ceil(len / block_size) blocks in its table, each holding
 * one of that block's references.  A published block is full and its data
 * never changes while it stays published: the only writes into a used block
 * are appends into a sequence's partly filled last block, and a published
 * block is never partly filled unless truncated, which unpublishes it.
 *
 * Sliding-window layers (kv_config.swa): a block is laid out with the other
 * layers first and the sliding-window layers' rows last (the "S part").
 * Once a block lies wholly before what its sequence's window can still see
 * (with slack for rollbacks), kv_seq_grow() releases its S part
 * (madvise(MADV_DONTNEED): the pages go back to the system, reading them
 * gives zeros) when the sequence holds its only reference; a published
 * block is unpublished first, since it no longer holds its prefix's K/V.
 * The budget (kv_config.mem) is charged per block in use: the full block,
 * or the G part alone once its S part is released; cost is that sum, and a
 * block with refcnt 0 costs nothing (a cached block keeps its data).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifdef LLMKIT_HAVE_ZSTD
#include <zstd.h>
#endif

#include "backend.h"
#include "kvcache.h"
#include "qblock.h"
#include "qtypes.h"

#define MAX_BLOCK_SIZE 4096
#define NONE (-1)

struct kv_seq {
    int live;
    int64_t len;
    int64_t swa_lo;             /* leading blocks whose S part may be released */
    int32_t *table;
    int64_t n_blocks, cap;
};

struct kvcache {
    struct kv_config c;
    size_t block_bytes;
    size_t g_bytes, s_bytes;    /* a block's parts: other layers', sliding-window layers' */
    size_t *layer_off;          /* [n_layer] a layer's offset in a block */
    uint8_t *s_res;             /* [n_blocks] the S part holds data (s_bytes > 0) */
    size_t cost;                /* budget charged by the blocks in use */
    int64_t swa_keep;           /* slots before a sequence's end kept for its window */
    int64_t swa_released;       /* S parts released, running total */
    size_t k_row, v_row;        /* bytes of one K / V row */
    int64_t n_blocks;
    uint8_t *pool;
    size_t pool_bytes;
    int32_t *refcnt;            /* [n_blocks] */
    int32_t *free_stack;        /* [n_blocks]; top is free_stack[n_clean - 1] */
    int64_t n_clean;            /* free blocks on the stack */
    int64_t n_free;             /* n_clean + cached free blocks on the LRU list */
    /* prefix cache */
    uint8_t *published;         /* [n_blocks] */
    struct kv_prefix_key *key;  /* [n_blocks] valid when published */
    int32_t *hnext;             /* [n_blocks] hash chain */
    int32_t *bucket;            /* [n_buckets] first block of each chain, NONE */
    uint64_t n_buckets;         /* power of two */
    int32_t *lru_prev, *lru_next;   /* [n_blocks] cached free blocks, oldest at lru_head */
    int32_t lru_head, lru_tail;
    int64_t hits, evictions;
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
kv_dtype_row_bytes(uint32_t dtype, int64_t n)
{
    size_t r;

    if (n <= 0 || n > INT32_MAX)
        return 0;
    switch (dtype) {
    case GGML_TYPE_F16: r = (size_t)n * 2; break;
    case GGML_TYPE_F32: r = (size_t)n * 4; break;
    case GGML_TYPE_Q8_0:
        if (n % QK8_0)
            return 0;
        r = (size_t)(n / QK8_0) * sizeof(struct block_q8_0);
        break;
    default: return 0;
    }
    return r;
}

size_t
kv_block_bytes(const struct kv_config *c)
{
    size_t r = 1, kr, vr;
    int64_t bs = c->block_size ? c->block_size : KV_BLOCK_SIZE_DEFAULT;

    if (c->n_layer <= 0 || c->n_head_kv <= 0 || c->head_dim_k <= 0 || c->head_dim_v <= 0 ||
        bs <= 0 || bs > MAX_BLOCK_SIZE)
        return 0;
    kr = kv_dtype_row_bytes(c->dtype, c->head_dim_k);
    vr = kv_dtype_row_bytes(c->dtype, c->head_dim_v);
    if (c->v_in_k && c->head_dim_v > c->head_dim_k)
        return 0;
    if (!kr || !vr || __builtin_add_overflow(kr, c->v_in_k ? 0 : vr, &r))
        return 0;
    if (!mul_ok(r, (size_t)c->n_layer, &r) || !mul_ok(r, (size_t)c->n_head_kv, &r) ||
        !mul_ok(r, (size_t)bs, &r))
        return 0;
    return r;
}

/* one block's bytes between the pool and memory: a plain copy for a host
 * pool, the backend's copy for a device one (either side may be the pool) */
static void
block_copy(const struct kvcache *kv, void *dst, const void *src)
{
    if (kv->c.be)
        kv->c.be->ops->copy(kv->c.be, dst, src, kv->block_bytes);
    else
        memcpy(dst, src, kv->block_bytes);
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
        if (c->dtype != GGML_TYPE_F16 && c->dtype != GGML_TYPE_F32 &&
            c->dtype != GGML_TYPE_Q8_0)
            return diag_set(d, ST_RANGE, "kv cache: dtype %u not supported (f16, f32 or q8_0)",
                            (unsigned)c->dtype);
        if (c->dtype == GGML_TYPE_Q8_0 && (c->head_dim_k % QK8_0 || c->head_dim_v % QK8_0))
            return diag_set(d, ST_RANGE, "kv cache: q8_0 needs head dims that are multiples "
                            "of %d", QK8_0);
        if (c->v_in_k && c->head_dim_v > c->head_dim_k)
            return diag_set(d, ST_RANGE, "kv cache: a V view of K wider than K");
        if (c->block_size < 0 || c->block_size > MAX_BLOCK_SIZE)
            return diag_set(d, ST_RANGE, "kv cache: block size %lld out of range 1..%d",
                            (long long)c->block_size, MAX_BLOCK_SIZE);
        return diag_set(d, ST_RANGE, "kv cache: bad dimensions");
    }
    if (c->mem < bb)
        return diag_set(d, ST_NOMEM, "kv cache: budget of %zu bytes holds no block of %zu bytes",
                        c->mem, bb);
    if (c->swa && c->swa_window <= 0)
        return diag_set(d, ST_RANGE, "kv cache: sliding-window layers without a window");
    /* with sliding-window layers, more blocks than the budget holds whole:
     * the pool is virtual (committed on touch) and the budget is charged
     * per block in use (above); at most 8 times the whole blocks */
    const uint8_t *swa = c->be ? NULL : c->swa;   /* (device memory: nothing released) */
    size_t s_bytes = 0, layer_bytes = bb / (size_t)c->n_layer;
    for (int64_t l = 0; swa && l < c->n_layer; l++)
        s_bytes += swa[l] ? layer_bytes : 0;
    size_t g_bytes = bb - s_bytes;
    nb = (int64_t)(c->mem / (g_bytes > bb / 8 ? g_bytes : bb / 8));
    if (nb > INT32_MAX)
        nb = INT32_MAX;
    kv = calloc(1, sizeof(*kv));
    if (!kv)
        return diag_set(d, ST_NOMEM, "kv cache: out of memory");
    kv->c = *c;
    if (!kv->c.block_size)
        kv->c.block_size = KV_BLOCK_SIZE_DEFAULT;
    kv->c.swa = NULL;
    kv->block_bytes = bb;
    kv->g_bytes = g_bytes;
    kv->s_bytes = s_bytes;
    kv->swa_keep = c->swa_window + KV_SWA_SLACK;
    kv->k_row = kv_dtype_row_bytes(c->dtype, c->head_dim_k);
    kv->v_row = c->v_in_k ? 0 : kv_dtype_row_bytes(c->dtype, c->head_dim_v);
    kv->n_blocks = nb;
    kv->pool_bytes = (size_t)nb * bb;
    kv->n_buckets = 16;
    while (kv->n_buckets < (uint64_t)nb)
        kv->n_buckets *= 2;
    kv->refcnt = calloc((size_t)nb, sizeof(int32_t));
    kv->free_stack = malloc((size_t)nb * sizeof(int32_t));
    kv->fill = malloc((size_t)nb * sizeof(int32_t));
    kv->published = calloc((size_t)nb, 1);
    kv->key = malloc((size_t)nb * sizeof(*kv->key));
    kv->hnext = malloc((size_t)nb * sizeof(int32_t));
    kv->lru_prev = malloc((size_t)nb * sizeof(int32_t));
    kv->lru_next = malloc((size_t)nb * sizeof(int32_t));
    kv->bucket = malloc((size_t)kv->n_buckets * sizeof(int32_t));
    kv->layer_off = malloc((size_t)c->n_layer * sizeof(size_t));
    kv->s_res = calloc((size_t)nb, 1);
    kv->lru_head = kv->lru_tail = NONE;
    if (!kv->refcnt || !kv->free_stack || !kv->fill || !kv->published || !kv->key ||
        !kv->hnext || !kv->lru_prev || !kv->lru_next || !kv->bucket || !kv->layer_off ||
        !kv->s_res) {
        kv_free(kv);
        return diag_set(d, ST_NOMEM, "kv cache: out of memory for %lld blocks", (long long)nb);
    }
    if (c->be) {
        /* a backend buffer (device memory): committed whole */
        kv->pool = c->be->ops->alloc(c->be, kv->pool_bytes);
        if (!kv->pool) {
            kv_free(kv);
            return diag_set(d, ST_NOMEM, "kv cache: cannot allocate %zu bytes on the %s device "
                            "(lower --kv-mem)", (size_t)nb * bb, c->be->device);
        }
    } else {
        /* Pages are committed on first touch, so RSS follows the blocks used. */
        void *p = mmap(NULL, kv->pool_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            kv->pool = NULL;
            kv_free(kv);
            return diag_set(d, ST_NOMEM, "kv cache: cannot map %zu bytes", (size_t)nb * bb);
        }
        kv->pool = p;
    }
    /* the other layers first, in order, then the sliding-window layers */
    size_t off = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t l = 0; l < c->n_layer; l++)
            if ((swa && swa[l]) == (pass == 1)) {
                kv->layer_off[l] = off;
                off += layer_bytes;
            }
    /* block 0 on top: low blocks are handed out first */
    for (int64_t i = 0; i < nb; i++)
        kv->free_stack[i] = (int32_t)(nb - 1 - i);
    kv->n_clean = kv->n_free = nb;
    for (uint64_t i = 0; i < kv->n_buckets; i++)
        kv->bucket[i] = NONE;
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
    if (kv->pool && kv->c.be)
        kv->c.be->ops->free(kv->c.be, kv->pool);
    else if (kv->pool)
        munmap(kv->pool, kv->pool_bytes);
    free(kv->fill);
    free(kv->free_stack);
    free(kv->refcnt);
    free(kv->published);
    free(kv->key);
    free(kv->hnext);
    free(kv->lru_prev);
    free(kv->lru_next);
    free(kv->bucket);
    free(kv->layer_off);
    free(kv->s_res);
    free(kv);
}

const struct kv_config *
kv_config_get(const struct kvcache *kv)
{
    return &kv->c;
}

/* ---- blocks ---- */

static uint64_t
key_bucket(const struct kvcache *kv, const struct kv_prefix_key *k)
{
    return k->h & (kv->n_buckets - 1);
}

static void
lru_unlink(struct kvcache *kv, int32_t b)
{
    int32_t p = kv->lru_prev[b], n = kv->lru_next[b];

    if (p != NONE)
        kv->lru_next[p] = n;
    else
        kv->lru_head = n;
    if (n != NONE)
        kv->lru_prev[n] = p;
    else
        kv->lru_tail = p;
}

static void
lru_append(struct kvcache *kv, int32_t b)
{
    kv->lru_prev[b] = kv->lru_tail;
    kv->lru_next[b] = NONE;
    if (kv->lru_tail != NONE)
        kv->lru_next[kv->lru_tail] = b;
    else
        kv->lru_head = b;
    kv->lru_tail = b;
}

/* removes a published block from the hash table */
static void
unpublish(struct kvcache *kv, int32_t b)
{
    int32_t *pp = &kv->bucket[key_bucket(kv, &kv->key[b])];

    while (*pp != NONE && *pp != b)
        pp = &kv->hnext[*pp];
    if (*pp == b)
        *pp = kv->hnext[b];
    kv->published[b] = 0;
}

static int32_t
find_key(const struct kvcache *kv, const struct kv_prefix_key *k)
{
    for (int32_t b = kv->bucket[key_bucket(kv, k)]; b != NONE; b = kv->hnext[b])
        if (kv->key[b].h == k->h && kv->key[b].c == k->c)
            return b;
    return NONE;
}

/* a block taken into use: charged in full, its S part holding data */
static void
cost_take(struct kvcache *kv, int32_t b)
{
    kv->cost += kv->g_bytes + kv->s_bytes;
    kv->s_res[b] = kv->s_bytes > 0;
}

/* b's S part given back to the system (b in use) */
static void
release_s(struct kvcache *kv, int32_t b)
{
    uintptr_t lo = (uintptr_t)(kv->pool + (size_t)b * kv->block_bytes + kv->g_bytes);
    uintptr_t hi = lo + kv->s_bytes;
    uintptr_t pg = 4096;

    /* whole pages only: the rest stays committed (never read again) */
    lo = (lo + pg - 1) & ~(pg - 1);
    hi &= ~(pg - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
    kv->s_res[b] = 0;
    kv->cost -= kv->s_bytes;
    kv->swa_released++;
}

/* A free block: never-cached ones first, then the cached block freed
 * longest ago (evicted from the prefix cache).  The caller checked n_free. */
static int32_t
block_alloc(struct kvcache *kv)
{
    int32_t b;

    if (kv->n_clean > 0) {
        b = kv->free_stack[--kv->n_clean];
    } else {
        b = kv->lru_head;
        lru_unlink(kv, b);
        unpublish(kv, b);
        kv->evictions++;
    }
    kv->n_free--;
    kv->refcnt[b] = 1;
    cost_take(kv, b);
    return b;
}

static void
block_put(struct kvcache *kv, int32_t b)
{
    if (--kv->refcnt[b] == 0) {
        /* a block going back to the free stack gives its S part back now;
         * a cached one keeps its data */
        if (kv->s_res[b] && !kv->published[b])
            release_s(kv, b);
        kv->cost -= kv->g_bytes + (kv->s_res[b] ? kv->s_bytes : 0);
        if (kv->published[b])
            lru_append(kv, b);
        else
            kv->free_stack[kv->n_clean++] = b;
        kv->n_free++;
    }
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

int64_t
kv_tokens_for(const struct kv_config *c, size_t mem, int64_t chunk)
{
    int64_t lo = 0, hi = (int64_t)1 << 40;

    if (kv_mem_for(c, 1, chunk) == 0 || kv_mem_for(c, 1, chunk) > mem)
        return 0;
    while (lo < hi) {           /* the most tokens whose budget fits */
        int64_t mid = lo + (hi - lo + 1) / 2;
        size_t need = kv_mem_for(c, mid, chunk);
        if (need != 0 && need <= mem)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
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
    s->swa_lo = 0;
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
    t->swa_lo = s->swa_lo;
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

/* releases the S parts of s's blocks that its window can no longer see,
 * whatever it appends next or rolls back (swa_keep slots before its end) */
static void
swa_trim(struct kvcache *kv, struct kv_seq *s)
{
    int64_t bs = kv->c.block_size, i = s->swa_lo;

    if (kv->s_bytes == 0)
        return;
    for (; (i + 1) * bs <= s->len - kv->swa_keep; i++) {
        int32_t b = s->table[i];
        if (kv->refcnt[b] != 1 || !kv->s_res[b])
            continue;           /* shared: another sequence may still see it */
        if (kv->published[b])
            unpublish(kv, b);
        release_s(kv, b);
    }
    s->swa_lo = i;
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
    swa_trim(kv, s);
    /* the partially filled last block gets written: private copy if shared */
    int cow = s->len % bs != 0 && kv->refcnt[s->table[s->n_blocks - 1]] > 1;
    if (s->len % bs != 0 && !cow && kv->published[s->table[s->n_blocks - 1]])
        unpublish(kv, s->table[s->n_blocks - 1]);     /* about to change */
    if (fresh + cow > kv_blocks_free(kv))
        return diag_set(d, ST_NOMEM,
                        "kv cache full: %lld more blocks needed, %lld of %lld free",
                        (long long)(fresh + cow), (long long)kv_blocks_free(kv),
                        (long long)kv->n_blocks);
    if (table_reserve(s, need) < 0)
        return diag_set(d, ST_NOMEM, "kv cache: out of memory for a block table");
    if (cow) {
        int32_t old = s->table[s->n_blocks - 1];
        int32_t b = block_alloc(kv);
        block_copy(kv, kv->pool + (size_t)b * kv->block_bytes,
                   kv->pool + (size_t)old * kv->block_bytes);
        block_put(kv, old);
        s->table[s->n_blocks - 1] = b;
    }
    for (int64_t i = s->n_blocks; i < need; i++)
        s->table[i] = block_alloc(kv);
    s->n_blocks = need;
    s->len = new_len;
    return 0;
}

int64_t
kv_seq_blocks_needed(const struct kvcache *kv, int32_t id, int64_t n)
{
    struct kv_seq *s = seq_get(kv, id);
    int64_t bs = kv->c.block_size;

    if (!s || n < 0 || n > INT64_MAX / 2 - s->len)
        return -ST_RANGE;
    if (n == 0)
        return 0;
    int64_t need = (s->len + n + bs - 1) / bs - s->n_blocks;
    if (s->len % bs != 0 && kv->refcnt[s->table[s->n_blocks - 1]] > 1)
        need++;
    return need;
}

int64_t
kv_blocks_free(const struct kvcache *kv)
{
    size_t whole = kv->g_bytes + kv->s_bytes;
    if (kv->s_bytes == 0)
        return kv->n_free;
    int64_t by_budget = kv->cost >= kv->c.mem ? 0 : (int64_t)((kv->c.mem - kv->cost) / whole);
    return by_budget < kv->n_free ? by_budget : kv->n_free;
}

int64_t
kv_swa_slots(int64_t window, int64_t len, int64_t chunk, int64_t block_size)
{
    int64_t blocks = (len + block_size - 1) / block_size;
    int64_t held = (window + KV_SWA_SLACK + chunk + block_size - 1) / block_size + 2;

    return (held < blocks ? held : blocks) * block_size;
}

size_t
kv_mem_for(const struct kv_config *c, int64_t tokens, int64_t chunk)
{
    size_t bb = kv_block_bytes(c), s_bytes = 0;
    int64_t bs = c->block_size ? c->block_size : KV_BLOCK_SIZE_DEFAULT;

    if (bb == 0 || tokens < 0 || chunk < 0)
        return 0;
    for (int64_t l = 0; c->swa && l < c->n_layer; l++)
        s_bytes += c->swa[l] ? bb / (size_t)c->n_layer : 0;
    int64_t blocks = (tokens + bs - 1) / bs;
    int64_t s_blocks = c->swa && !c->be ? kv_swa_slots(c->swa_window, tokens, chunk, bs) / bs
                                        : blocks;
    double m = (double)blocks * (double)(bb - s_bytes) + (double)s_blocks * (double)s_bytes;
    return m >= (double)SIZE_MAX ? 0 : (size_t)m;
}

int
kv_seq_truncate(struct kvcache *kv, int32_t id, int64_t n)
{
    struct kv_seq *s = seq_get(kv, id);
    int64_t bs = kv->c.block_size;

    if (!s || n < 0 || n > s->len)
        return -ST_RANGE;
    /* the next token's window must not reach a block whose S part may be
     * released (swa_keep leaves room for the rollbacks of speculation) */
    if (kv->s_bytes && s->swa_lo > 0 && s->swa_lo * bs > n + 1 - kv->c.swa_window)
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

int
kv_seq_move_slot(struct kvcache *kv, int32_t id, int64_t from, int64_t to)
{
    struct kv_seq *s = seq_get(kv, id);
    int32_t fb, tb;
    int64_t fi, ti;

    if (!s || from < 0 || to < 0 || from >= s->len || to >= s->len)
        return -ST_RANGE;
    if (from == to)
        return 0;
    kv_slot_block(kv, id, from, &fb, &fi);
    kv_slot_block(kv, id, to, &tb, &ti);
    if (kv->refcnt[tb] != 1 || kv->published[tb])
        return -ST_RANGE;
    for (int64_t l = 0; l < kv->c.n_layer; l++)
        for (int64_t h = 0; h < kv->c.n_head_kv; h++) {
            struct kv_head_view v;
            kv_head_view(kv, l, h, &v);
            memcpy(v.k + (size_t)tb * v.block_stride + (size_t)ti * v.k_row_bytes,
                   v.k + (size_t)fb * v.block_stride + (size_t)fi * v.k_row_bytes, v.k_row_bytes);
            if (!kv->c.v_in_k)
                memcpy(v.v + (size_t)tb * v.block_stride + (size_t)ti * v.v_row_bytes,
                       v.v + (size_t)fb * v.block_stride + (size_t)fi * v.v_row_bytes,
                       v.v_row_bytes);
        }
    return 0;
}

void
kv_head_view(const struct kvcache *kv, int64_t layer, int64_t head, struct kv_head_view *v)
{
    const struct kv_config *c = &kv->c;
    size_t bs = (size_t)c->block_size;
    size_t krow = kv->k_row;
    size_t vrow = kv->v_row;
    uint8_t *base = kv->pool + kv->layer_off[layer];

    v->k = base + (size_t)head * bs * krow;
    v->v = base + (size_t)c->n_head_kv * bs * krow + (size_t)head * bs * vrow;
    v->block_stride = kv->block_bytes;
    v->k_row_bytes = krow;
    v->v_row_bytes = vrow;
    if (c->v_in_k) {
        v->v = v->k;
        v->v_row_bytes = krow;
    }
}

void
kv_stats(const struct kvcache *kv, struct kv_stats *st)
{
    int64_t bs = kv->c.block_size;

    memset(st, 0, sizeof(*st));
    st->block_size = bs;
    st->block_bytes = kv->block_bytes;
    st->blocks_total = kv->n_blocks;
    st->blocks_free = kv_blocks_free(kv);
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
    st->blocks_cached = kv->n_free - kv->n_clean;
    st->bytes_charged = kv->cost;
    st->swa_released = kv->swa_released;
    st->prefix_hits = kv->hits;
    st->prefix_evictions = kv->evictions;
    if (st->blocks_used > 0)
        st->waste = 1.0 - (double)st->slots_filled / ((double)st->blocks_used * (double)bs);
}

/* ---- prefix cache ---- */

/* splitmix64's finaliser: a bijective 64-bit mix */
static uint64_t
mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

void
kv_prefix_key_root(struct kv_prefix_key *k)
{
    k->h = 0x6a09e667f3bcc908ull;
    k->c = 0xbb67ae8584caa73bull;
}

void
kv_prefix_key_next(const struct kv_prefix_key *parent, const int32_t *tokens, int64_t n,
                   struct kv_prefix_key *out)
{
    /* Two lanes with different constants and token encodings, each a chain
     * of bijective mixes seeded by the parent's lane and the block length. */
    uint64_t h = mix64(parent->h ^ (uint64_t)n);
    uint64_t c = mix64(parent->c + 0x9e3779b97f4a7c15ull * (uint64_t)(n + 1));

    for (int64_t i = 0; i < n; i++) {
        uint64_t t = (uint32_t)tokens[i];
        h = mix64(h ^ (t + 0x3c6ef372fe94f82bull));
        c = mix64((c + t) * 0xa54ff53a5f1d36f1ull ^ (c >> 17));
    }
    out->h = h;
    out->c = c;
}

int
kv_prefix_publish(struct kvcache *kv, int32_t id, int64_t lblock, const struct kv_prefix_key *key)
{
    struct kv_seq *s = seq_get(kv, id);
    int32_t b;

    if (!s || lblock < 0 || lblock >= s->n_blocks || s->len < (lblock + 1) * kv->c.block_size)
        return -ST_RANGE;
    b = s->table[lblock];
    if (kv->published[b] || find_key(kv, key) != NONE)
        return 0;
    kv->key[b] = *key;
    uint64_t k = key_bucket(kv, key);
    kv->hnext[b] = kv->bucket[k];
    kv->bucket[k] = b;
    kv->published[b] = 1;
    return 1;
}

int
kv_prefix_lookup(const struct kvcache *kv, const struct kv_prefix_key *key)
{
    return find_key(kv, key) != NONE;
}

int
kv_prefix_attach(struct kvcache *kv, int32_t id, const struct kv_prefix_key *key)
{
    struct kv_seq *s = seq_get(kv, id);
    int32_t b;

    if (!s || s->len % kv->c.block_size != 0)
        return -ST_RANGE;
    if ((b = find_key(kv, key)) == NONE)
        return 0;
    if (table_reserve(s, s->n_blocks + 1) < 0)
        return -ST_NOMEM;
    if (kv->refcnt[b] == 0) {
        lru_unlink(kv, b);
        kv->n_free--;
        kv->cost += kv->g_bytes + (kv->s_res[b] ? kv->s_bytes : 0);
    } else if (kv->refcnt[b] == INT32_MAX) {
        return 0;
    }
    kv->refcnt[b]++;
    s->table[s->n_blocks++] = b;
    s->len += kv->c.block_size;
    kv->hits++;
    return 1;
}

/* ---- swap ---- */

/* A sequence's blocks in host memory: for each block, its compressed size
 * and data, one after the other. */
struct kv_swap {
    int64_t len;                /* sequence length */
    int64_t swa_lo;
    int64_t n_blocks;
    uint8_t *s_res;             /* [n_blocks] the block's S part held data */
    size_t block_bytes;
    size_t *csize;              /* [n_blocks] */
    uint8_t *data;
    size_t bytes;
};

void
kv_swap_free(struct kv_swap *sw)
{
    if (!sw)
        return;
    free(sw->csize);
    free(sw->data);
    free(sw->s_res);
    free(sw);
}

int64_t
kv_swap_blocks(const struct kv_swap *sw)
{
    return sw->n_blocks;
}

size_t
kv_swap_bytes(const struct kv_swap *sw)
{
    return sw->bytes;
}

int
kv_seq_swap_out(struct kvcache *kv, int32_t id, struct kv_swap **out, struct diag *d)
{
    struct kv_seq *s = seq_get(kv, id);
    struct kv_swap *sw;
    size_t bound, cap;

    *out = NULL;
    if (!s)
        return diag_set(d, ST_RANGE, "kv cache: bad sequence %d", (int)id);
#ifdef LLMKIT_HAVE_ZSTD
    bound = ZSTD_compressBound(kv->block_bytes);
#else
    bound = kv->block_bytes;
#endif
    if (s->n_blocks > 0 && (size_t)s->n_blocks > SIZE_MAX / bound)
        return diag_set(d, ST_NOMEM, "kv cache: swap image too large");
    cap = (size_t)s->n_blocks * bound;
    if (!(sw = calloc(1, sizeof(*sw))))
        goto nomem;
    sw->len = s->len;
    sw->swa_lo = s->swa_lo;
    sw->n_blocks = s->n_blocks;
    sw->block_bytes = kv->block_bytes;
    sw->csize = malloc((size_t)(s->n_blocks ? s->n_blocks : 1) * sizeof(size_t));
    sw->data = malloc(cap ? cap : 1);
    sw->s_res = calloc((size_t)s->n_blocks + 1, 1);
    if (!sw->csize || !sw->data || !sw->s_res)
        goto nomem;
    /* a device pool's blocks go through a host block */
    uint8_t *bounce = NULL;
    if (kv->c.be && !(bounce = malloc(kv->block_bytes)))
        goto nomem;
    for (int64_t i = 0; i < s->n_blocks; i++) {
        const uint8_t *src = kv->pool + (size_t)s->table[i] * kv->block_bytes;
        sw->s_res[i] = kv->s_res[s->table[i]];
        if (bounce) {
            block_copy(kv, bounce, src);
            src = bounce;
        }
#ifdef LLMKIT_HAVE_ZSTD
        size_t r = ZSTD_compress(sw->data + sw->bytes, cap - sw->bytes, src, kv->block_bytes, 1);
        if (ZSTD_isError(r)) {
            free(bounce);
            kv_swap_free(sw);
            return diag_set(d, ST_NOMEM, "kv cache: zstd: %s", ZSTD_getErrorName(r));
        }
#else
        size_t r = kv->block_bytes;
        memcpy(sw->data + sw->bytes, src, r);
#endif
        sw->csize[i] = r;
        sw->bytes += r;
    }
    free(bounce);
    /* give back what compression saved */
    uint8_t *shrunk = realloc(sw->data, sw->bytes ? sw->bytes : 1);
    if (shrunk)
        sw->data = shrunk;
    kv_seq_free(kv, id);
    *out = sw;
    return 0;
nomem:
    kv_swap_free(sw);
    return diag_set(d, ST_NOMEM, "kv cache: out of memory for a swap image");
}

int
kv_seq_swap_in(struct kvcache *kv, struct kv_swap *sw, int32_t *id, struct diag *d)
{
    struct kv_seq *s;
    size_t off = 0;
    int32_t nid;

    if (sw->block_bytes != kv->block_bytes)
        return diag_set(d, ST_FORMAT, "kv cache: swap image of another pool");
    /* the budget: whole blocks, but the released S parts stay released */
    size_t charge = 0;
    for (int64_t i = 0; i < sw->n_blocks; i++)
        charge += kv->g_bytes + (kv->s_bytes && !sw->s_res[i] ? 0 : kv->s_bytes);
    if (sw->n_blocks > kv->n_free || (kv->s_bytes && kv->cost + charge > kv->c.mem))
        return diag_set(d, ST_NOMEM, "kv cache full: %lld blocks needed to swap in, %lld free",
                        (long long)sw->n_blocks, (long long)kv_blocks_free(kv));
    if (seq_slot(kv, &nid) < 0)
        return diag_set(d, ST_NOMEM, "kv cache: out of memory");
    s = &kv->seqs[nid];
    s->live = 0;
    s->len = 0;
    s->n_blocks = 0;
    if (table_reserve(s, sw->n_blocks) < 0)
        return diag_set(d, ST_NOMEM, "kv cache: out of memory for a block table");
    /* a device pool's blocks come through a host block */
    uint8_t *bounce = NULL;
    if (kv->c.be && !(bounce = malloc(kv->block_bytes)))
        return diag_set(d, ST_NOMEM, "kv cache: out of memory");
    for (int64_t i = 0; i < sw->n_blocks; i++) {
        int32_t b = block_alloc(kv);
        uint8_t *blk = kv->pool + (size_t)b * kv->block_bytes;
        uint8_t *dst = bounce ? bounce : blk;
        s->table[i] = b;
        s->n_blocks = i + 1;
#ifdef LLMKIT_HAVE_ZSTD
        size_t r = ZSTD_decompress(dst, kv->block_bytes, sw->data + off, sw->csize[i]);
        if (ZSTD_isError(r) || r != kv->block_bytes)
            goto bad;
#else
        if (sw->csize[i] != kv->block_bytes)
            goto bad;
        memcpy(dst, sw->data + off, kv->block_bytes);
#endif
        if (bounce)
            block_copy(kv, blk, bounce);
        off += sw->csize[i];
        if (kv->s_bytes && !sw->s_res[i])
            release_s(kv, b);   /* (zeros written back: given back again) */
    }
    free(bounce);
    s->live = 1;
    s->len = sw->len;
    s->swa_lo = sw->swa_lo;
    *id = nid;
    kv_swap_free(sw);
    return 0;
bad:
    free(bounce);
    for (int64_t i = 0; i < s->n_blocks; i++)
        block_put(kv, s->table[i]);
    s->n_blocks = 0;
    return diag_set(d, ST_FORMAT, "kv cache: corrupt swap image");
}
