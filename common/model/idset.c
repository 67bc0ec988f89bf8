/*
 * idset.c - the id set of idset.h: open addressing, linear probing, the
 * table doubled at half full.
 */
#include "idset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

#define FNV_OFFSET 0xcbf29ce484222325ull

static uint64_t
fnv1a_from(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t
fnv1a(const char *s, size_t n)
{
    return fnv1a_from(FNV_OFFSET, s, n);
}

static struct id_entry *
id_slot(struct id_entry *v, size_t cap, const char *key, size_t len, uint64_t h)
{
    size_t i = (size_t)h & (cap - 1);

    while (v[i].key && !(v[i].hash == h && v[i].len == len && !memcmp(v[i].key, key, len)))
        i = (i + 1) & (cap - 1);
    return &v[i];
}

/* id_key() : id's key (see idset.h) into buf (at least 32 bytes) when it
 * fits, else into a malloc'd copy in *heap; NULL when out of memory. */
static const char *
id_key(const json_t *id, char *buf, size_t cap, char **heap, size_t *len)
{
    *heap = NULL;
    if (json_is_string(id)) {
        size_t n = json_string_length(id);
        char *k = buf;

        if (n + 1 > cap && !(k = *heap = malloc(n + 1)))
            return NULL;
        k[0] = 's';
        memcpy(k + 1, json_string_value(id), n);
        *len = n + 1;
        return k;
    }
    *len = (size_t)snprintf(buf, cap, "i%lld", (long long)json_integer_value(id));
    return buf;
}

int64_t
id_set_add(struct id_set *set, const json_t *id, int64_t line)
{
    char buf[64], *heap, *key;
    const char *k;
    size_t len;
    uint64_t h;
    struct id_entry *e;

    if (!(k = id_key(id, buf, sizeof(buf), &heap, &len)))
        return -ST_NOMEM;
    h = fnv1a(k, len);
    if (set->cap) {
        e = id_slot(set->v, set->cap, k, len, h);
        if (e->key) {
            free(heap);
            return e->line;
        }
    }
    key = heap;
    if (!key && (key = malloc(len)))
        memcpy(key, k, len);
    if (!key)
        return -ST_NOMEM;
    if (2 * (set->n + 1) > set->cap) {
        size_t nc = set->cap ? set->cap * 2 : 256;
        struct id_entry *nv = calloc(nc, sizeof(*nv));

        if (!nv) {
            free(key);
            return -ST_NOMEM;
        }
        for (size_t i = 0; i < set->cap; i++)
            if (set->v[i].key)
                *id_slot(nv, nc, set->v[i].key, set->v[i].len, set->v[i].hash) = set->v[i];
        free(set->v);
        set->v = nv;
        set->cap = nc;
    }
    e = id_slot(set->v, set->cap, key, len, h);
    *e = (struct id_entry){ key, len, h, line };
    set->n++;
    return 0;
}

int64_t
id_set_find(const struct id_set *set, const json_t *id)
{
    char buf[64], *heap;
    const char *k;
    size_t len;
    int64_t line = 0;

    if (!set->cap || !(k = id_key(id, buf, sizeof(buf), &heap, &len)))
        return 0;
    line = id_slot(set->v, set->cap, k, len, fnv1a(k, len))->line;
    free(heap);
    return line;
}

uint64_t
id_hash(const json_t *id)
{
    char buf[32];
    size_t len;

    if (json_is_string(id))     /* the key without a copy of it */
        return fnv1a_from(fnv1a("s", 1), json_string_value(id), json_string_length(id));
    len = (size_t)snprintf(buf, sizeof(buf), "i%lld", (long long)json_integer_value(id));
    return fnv1a(buf, len);
}

void
id_set_release(struct id_set *set)
{
    for (size_t i = 0; i < set->cap; i++)
        free(set->v[i].key);
    free(set->v);
    memset(set, 0, sizeof(*set));
}

