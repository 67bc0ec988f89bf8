/*
 * tok_cache.c - words already tokenized during one tok_encode call, with
 * their ids.  Both tokenizers split the text into pieces whose tokenization
 * does not depend on the surroundings (BPE: the pre-tokenizer's pieces; SPM:
 * the runs between word starts, see tok_spm.c), and natural text repeats
 * words a lot, so this turns most merges into one hash lookup.  It is an
 * optimisation only: a full cache or a failed allocation just stops caching.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_priv.h"
#include "tokenizer.h"

#define SLOTS 65536                   /* at most half are used */

struct slot {
    uint32_t hash, len;               /* len 0: empty */
    size_t word, ids, n_ids;          /* offsets into text / ids */
};

void
tok_wcache_release(struct tok_wcache *c)
{
    free(c->slot);
    free(c->text);
    free(c->ids);
    memset(c, 0, sizeof(*c));
}

int
tok_wcache_get(const struct tok_wcache *c, const char *word, size_t n, uint32_t h,
               struct tok_ids *out, bool *hit)
{
    const struct slot *s = c->slot;
    size_t i, k;

    *hit = false;
    if (!s)
        return 0;
    for (i = h & (SLOTS - 1);; i = (i + 1) & (SLOTS - 1)) {
        if (s[i].len == 0)
            return 0;
        if (s[i].hash == h && s[i].len == n && !memcmp(c->text + s[i].word, word, n)) {
            for (k = 0; k < s[i].n_ids; k++)
                if (tok_ids_push(out, c->ids[s[i].ids + k]) < 0)
                    return -ST_NOMEM;
            *hit = true;
            return 0;
        }
    }
}

void
tok_wcache_put(struct tok_wcache *c, const char *word, size_t n, uint32_t h, const int32_t *ids,
               size_t n_ids)
{
    struct slot *s;
    size_t i;

    if (n == 0 || n > TOK_WCACHE_MAX_WORD || c->n >= SLOTS / 2)
        return;
    if (!c->slot && !(c->slot = calloc(SLOTS, sizeof(struct slot))))
        return;
    s = c->slot;
    if (c->text_n + n > c->text_cap) {
        size_t nc = c->text_cap ? 2 * c->text_cap : 65536;
        char *nb = realloc(c->text, nc);

        if (!nb)
            return;
        c->text = nb;
        c->text_cap = nc;
    }
    if (c->ids_n + n_ids > c->ids_cap) {
        size_t nc = c->ids_cap ? 2 * c->ids_cap : 16384;
        int32_t *nv;

        while (nc < c->ids_n + n_ids)
            nc *= 2;
        nv = realloc(c->ids, nc * sizeof(*nv));
        if (!nv)
            return;
        c->ids = nv;
        c->ids_cap = nc;
    }
    for (i = h & (SLOTS - 1); s[i].len; i = (i + 1) & (SLOTS - 1))
        ;
    memcpy(c->text + c->text_n, word, n);
    if (n_ids)
        memcpy(c->ids + c->ids_n, ids, n_ids * sizeof(*ids));
    s[i] = (struct slot){h, (uint32_t)n, c->text_n, c->ids_n, n_ids};
    c->text_n += n;
    c->ids_n += n_ids;
    c->n++;
}
