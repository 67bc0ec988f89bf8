/*
 * tok_spm.c - SentencePiece-style BPE over one raw fragment (llama.cpp's
 * llm_tokenizer_spm_session): spaces become U+2581, the text is split into
 * UTF-8 characters, and the adjacent pair whose concatenation is the
 * highest-scoring vocabulary token is merged until no pair is a token (ties:
 * the leftmost pair).  A final symbol that is not a token is emitted byte by
 * byte as <0xXX> tokens.
 *
 * Every merged symbol is a token by construction, so llama.cpp's resegment()
 * never needs its reverse-merge table; only single characters fall back to
 * bytes.  Two exact shortcuts keep long texts fast:
 *  - merges never cross a symbol that is a "barrier" byte (one that no
 *    multi-byte token contains, such as the newline in most vocabularies),
 *    so the runs between them are merged one at a time (smaller queues);
 *  - a U+2581 starts a word that no merge crosses when no token has the
 *    character before it followed by U+2581 (SentencePiece vocabularies
 *    keep U+2581 at the start of pieces; Gemma's ">\u2581</" is the kind of
 *    exception the per-character table handles), and a word seen before in
 *    this call reuses its ids (tok_cache.c);
 *  - each symbol carries its token id, and "which token is the
 *    concatenation of tokens a and b" is remembered in a small direct-mapped
 *    cache, which stays in the CPU cache where the vocabulary's hash table
 *    does not.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_priv.h"
#include "tokenizer.h"

struct sym {
    int32_t prev, next;
    uint32_t off, n;          /* bytes of buf; n == 0: merged away */
    int32_t id;               /* token of the symbol's text, or -1 */
};

struct bigram {
    float score;
    int32_t left, right;
    uint32_t size;            /* bytes of left + right when queued */
    int32_t id;               /* the merged token */
};

#define PAIR_SLOTS 65536
#define CHAR_SLOTS 4096

struct tok_spm_state {
    char *buf;
    size_t buf_cap;
    struct sym *sym;
    size_t sym_cap;
    struct bigram *heap;
    size_t n_heap, heap_cap;
    struct pair_slot {
        int32_t l, r, id;     /* l = -1: empty */
    } *pair;
    struct char_slot {
        uint64_t key;         /* bytes << 8 | length; 0 = empty */
        int32_t id;
    } *chr;
    struct tok_wcache words;
};

void
tok_spm_state_free(struct tok_spm_state *st)
{
    if (!st)
        return;
    free(st->buf);
    free(st->sym);
    free(st->heap);
    free(st->pair);
    free(st->chr);
    tok_wcache_release(&st->words);
    free(st);
}

static struct tok_spm_state *
state_new(void)
{
    struct tok_spm_state *st = calloc(1, sizeof(*st));

    if (!st)
        return NULL;
    st->pair = malloc(PAIR_SLOTS * sizeof(*st->pair));
    st->chr = calloc(CHAR_SLOTS, sizeof(*st->chr));
    if (!st->pair || !st->chr) {
        tok_spm_state_free(st);
        return NULL;
    }
    memset(st->pair, 0xFF, PAIR_SLOTS * sizeof(*st->pair));
    return st;
}

/* a pops before b: higher score, then the leftmost */
static int
before(const struct bigram *a, const struct bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int
heap_push(struct tok_spm_state *s, struct bigram b)
{
    size_t i;

    if (s->n_heap == s->heap_cap) {
        size_t nc = s->heap_cap ? s->heap_cap * 2 : 256;
        struct bigram *nh = realloc(s->heap, nc * sizeof(*nh));

        if (!nh)
            return -ST_NOMEM;
        s->heap = nh;
        s->heap_cap = nc;
    }
    for (i = s->n_heap++; i > 0; i = (i - 1) / 2) {
        size_t up = (i - 1) / 2;

        if (!before(&b, &s->heap[up]))
            break;
        s->heap[i] = s->heap[up];
    }
    s->heap[i] = b;
    return 0;
}

static struct bigram
heap_pop(struct tok_spm_state *s)
{
    struct bigram top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;

    for (;;) {
        size_t c = 2 * i + 1;

        if (c >= n)
            break;
        if (c + 1 < n && before(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!before(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

/* The token of text a + b, where a and b are the texts of tokens ia, ib. */
static int32_t
pair_token(const struct tok_priv *p, struct tok_spm_state *s, int32_t ia, int32_t ib,
           const char *text, size_t n)
{
    uint32_t h = ((uint32_t)ia * 0x9E3779B1u ^ (uint32_t)ib * 0x85EBCA77u) >> 16;
    struct pair_slot *c = &s->pair[h & (PAIR_SLOTS - 1)];

    if (c->l != ia || c->r != ib) {
        c->l = ia;
        c->r = ib;
        c->id = tok_lookup(p, text, n);
    }
    return c->id;
}

static int32_t
char_token(const struct tok_priv *p, struct tok_spm_state *s, const char *text, size_t n)
{
    uint64_t key = n;
    struct char_slot *c;
    size_t i;

    for (i = 0; i < n; i++)
        key |= (uint64_t)(uint8_t)text[i] << (8 * (i + 1));
    c = &s->chr[(key * 0x9E3779B97F4A7C15ull) >> 52];
    if (c->key != key) {
        c->key = key;
        c->id = tok_lookup(p, text, n);
    }
    return c->id;
}

static int
try_bigram(const struct tok_priv *p, struct tok_spm_state *s, int32_t l, int32_t r)
{
    const struct sym *a, *b;
    uint32_t size;
    int32_t id;

    if (l < 0 || r < 0)
        return 0;
    a = &s->sym[l];
    b = &s->sym[r];
    size = a->n + b->n;
    if (a->id >= 0 && b->id >= 0 && !p->reference)
        id = pair_token(p, s, a->id, b->id, s->buf + a->off, size);
    else
        id = tok_lookup(p, s->buf + a->off, size);
    if (id < 0)
        return 0;
    return heap_push(s, (struct bigram){p->tok[id].score, l, r, size, id});
}

/* A symbol that is one barrier byte (see tok_priv.h) can never merge. */
static bool
is_barrier(const struct tok_priv *p, const struct tok_spm_state *s, size_t k)
{
    uint8_t c = (uint8_t)s->buf[s->sym[k].off];

    return !p->reference && s->sym[k].n == 1 && c < 0x80 && p->spm_barrier[c];
}

/* Whether symbol k (not yet merged) is a U+2581 that starts a word: the
 * character before it is one no token has just before a U+2581, so no merge
 * can cross (an initial symbol is one character). */
static bool
word_start(const struct tok_priv *p, const struct tok_spm_state *s, size_t k)
{
    const uint8_t *c = (const uint8_t *)s->buf + s->sym[k].off;
    const uint8_t *b = (const uint8_t *)s->buf + s->sym[k - 1].off;

    if (p->reference || s->sym[k].n != 3 || c[0] != 0xE2 || c[1] != 0x96 || c[2] != 0x81)
        return false;
    if (s->sym[k - 1].n == 3 && b[0] == 0xE2 && b[1] == 0x96 && b[2] == 0x81)
        return false;
    /* the last byte before the U+2581 */
    b += s->sym[k - 1].n - 1;
    if (s->sym[k - 1].n == 1 && b[0] < 0x80)
        return !p->spm_glue[b[0]];
    return !p->spm_glue_nonascii;
}

/* The token of a final symbol, or its bytes as byte tokens. */
static int
emit(const struct tokenizer *t, const struct tok_spm_state *s, int32_t k, struct tok_ids *out)
{
    const struct tok_priv *p = t->p;
    const struct sym *y = &s->sym[k];
    uint32_t i;

    if (y->id >= 0)
        return tok_ids_push(out, y->id);
    /* byte fallback; llama.cpp throws when the vocabulary has neither <0xXX>
     * nor the byte itself - we use <unk>, or drop the byte */
    for (i = 0; i < y->n; i++) {
        int32_t bid = p->byte_tok[(uint8_t)s->buf[y->off + i]];

        if (bid < 0)
            bid = t->unk;
        if (bid >= 0 && tok_ids_push(out, bid) < 0)
            return -ST_NOMEM;
    }
    return 0;
}

int
tok_spm_encode(const struct tokenizer *t, struct tok_spm_state **state, const char *text,
               size_t len, bool space_prefix, struct tok_ids *out)
{
    const struct tok_priv *p = t->p;
    struct tok_spm_state *s = *state;
    size_t n = 0, i, nsym = 0, a, b, need;
    int32_t k;

    if (len + 1 > INT32_MAX / 3)             /* symbol indices are int32 */
        return -ST_NOMEM;
    if (!s && !(s = *state = state_new()))
        return -ST_NOMEM;
    need = 3 * (len + 1);
    if (need > s->buf_cap) {
        char *nb = realloc(s->buf, need);
        struct sym *ns = realloc(s->sym, need * sizeof(*ns));

        if (nb)
            s->buf = nb;
        if (ns)
            s->sym = ns;
        if (!nb || !ns)
            return -ST_NOMEM;
        s->buf_cap = need;
    }
    /* llama_escape_whitespace: every space becomes U+2581 */
    if (space_prefix) {
        memcpy(s->buf, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s->buf + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            s->buf[n++] = text[i];
        }
    }
    for (i = 0; i < n;) {
        size_t cl = tok_utf8_len((uint8_t)s->buf[i]);

        if (cl > n - i)
            cl = n - i;
        s->sym[nsym++] = (struct sym){-1, -1, (uint32_t)i, (uint32_t)cl,
                                      p->reference ? tok_lookup(p, s->buf + i, cl)
                                                   : char_token(p, s, s->buf + i, cl)};
        i += cl;
    }
    /* the merge loop per word: runs between barrier symbols and word starts */
    for (a = 0; a < nsym; a = b) {
        size_t from = out->n, wlen;
        uint32_t h;
        bool hit;

        if (is_barrier(p, s, a)) {
            if (emit(t, s, (int32_t)a, out) < 0)
                return -ST_NOMEM;
            b = a + 1;
            continue;
        }
        for (b = a + 1; b < nsym && !is_barrier(p, s, b) && !word_start(p, s, b); b++)
            ;
        wlen = s->sym[b - 1].off + s->sym[b - 1].n - s->sym[a].off;
        h = tok_hash(TOK_HASH_INIT, s->buf + s->sym[a].off, wlen);
        hit = false;
        if (!p->reference &&
            tok_wcache_get(&s->words, s->buf + s->sym[a].off, wlen, h, out, &hit) < 0)
            return -ST_NOMEM;
        if (hit)
            continue;
        for (i = a; i < b; i++) {
            s->sym[i].prev = i == a ? -1 : (int32_t)i - 1;
            s->sym[i].next = i + 1 == b ? -1 : (int32_t)i + 1;
        }
        s->n_heap = 0;
        for (i = a + 1; i < b; i++)
            if (try_bigram(p, s, (int32_t)i - 1, (int32_t)i) < 0)
                return -ST_NOMEM;
        while (s->n_heap) {
            struct bigram bg = heap_pop(s);
            struct sym *l = &s->sym[bg.left], *r = &s->sym[bg.right];

            /* stale: one side was merged away or has grown since */
            if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size)
                continue;
            l->n += r->n;
            l->id = bg.id;
            r->n = 0;
            l->next = r->next;
            if (r->next >= 0)
                s->sym[r->next].prev = bg.left;
            if (try_bigram(p, s, l->prev, bg.left) < 0 || try_bigram(p, s, bg.left, l->next) < 0)
                return -ST_NOMEM;
        }
        for (k = (int32_t)a; k != -1; k = s->sym[k].next)
            if (emit(t, s, k, out) < 0)
                return -ST_NOMEM;
        if (!p->reference)
            tok_wcache_put(&s->words, s->buf + s->sym[a].off, wlen, h, out->v + from,
                           out->n - from);
    }
    return 0;
}
