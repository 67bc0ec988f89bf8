/*
 * tok_vocab.c - the vocabulary's string -> id map (open addressing over
 * FNV-1a hashes of the token texts) and growable id lists: what tokenizer.c,
 * tok_spm.c, tok_bpe.c and tok_cache.c all use (tok_priv.h).
 */
#include <stdlib.h>
#include <string.h>

#include "tok_priv.h"
#include "tokenizer.h"

/* ---- the string -> id map ---- */

int32_t
tok_lookup(const struct tok_priv *p, const char *s, size_t n)
{
    return tok_lookup_hashed(p, s, n, tok_hash(TOK_HASH_INIT, s, n));
}

int32_t
tok_lookup_hashed(const struct tok_priv *p, const char *s, size_t n, uint32_t h)
{
    uint32_t i;

    for (i = h & p->map_mask;; i = (i + 1) & p->map_mask) {
        uint64_t v = p->map[i];
        const struct tok_entry *e;

        if (!v)
            return -1;
        if ((uint32_t)(v >> 32) != h)
            continue;
        e = &p->tok[(uint32_t)v - 1];
        if (e->len == n && !memcmp(p->text + e->off, s, n))
            return (int32_t)((uint32_t)v - 1);
    }
}

int32_t
tok_map_insert(struct tok_priv *p, int32_t id)
{
    const struct tok_entry *e = &p->tok[id];
    const char *s = p->text + e->off;
    uint32_t h = tok_hash(TOK_HASH_INIT, s, e->len), i;

    for (i = h & p->map_mask;; i = (i + 1) & p->map_mask) {
        uint64_t v = p->map[i];
        const struct tok_entry *o;

        if (!v) {
            p->map[i] = (uint64_t)h << 32 | ((uint32_t)id + 1);
            return -1;
        }
        o = &p->tok[(uint32_t)v - 1];
        if ((uint32_t)(v >> 32) == h && o->len == e->len && !memcmp(p->text + o->off, s, e->len))
            return (int32_t)((uint32_t)v - 1);
    }
}

/* ---- id lists ---- */

int
tok_ids_push(struct tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t nc = ids->cap ? ids->cap * 2 : 64;
        int32_t *nv = realloc(ids->v, nc * sizeof(*nv));

        if (!nv)
            return -ST_NOMEM;
        ids->v = nv;
        ids->cap = nc;
    }
    ids->v[ids->n++] = id;
    return 0;
}

void
tok_ids_release(struct tok_ids *ids)
{
    free(ids->v);
    ids->v = NULL;
    ids->n = ids->cap = 0;
}
