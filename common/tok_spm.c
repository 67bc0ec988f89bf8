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
 * bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

struct sym {
    int32_t prev, next;
    uint32_t off, n;          /* bytes of buf; n == 0: merged away */
};

struct bigram {
    float score;
    int32_t left, right;
    uint32_t size;            /* bytes of left + right when queued */
};

struct spm {
    const struct tokenizer *t;
    const char *buf;
    struct sym *sym;
    struct bigram *heap;
    size_t n_heap, cap_heap;
};

/* a pops before b: higher score, then the leftmost */
static int
before(const struct bigram *a, const struct bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int
heap_push(struct spm *s, struct bigram b)
{
    size_t i;

    if (s->n_heap == s->cap_heap) {
        size_t nc = s->cap_heap * 2;
        struct bigram *nh = realloc(s->heap, nc * sizeof(*nh));

        if (!nh)
            return -ST_NOMEM;
        s->heap = nh;
        s->cap_heap = nc;
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
heap_pop(struct spm *s)
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

static int
try_bigram(struct spm *s, int32_t l, int32_t r)
{
    const struct tok_priv *p = s->t->p;
    uint32_t size;
    int32_t id;

    if (l < 0 || r < 0)
        return 0;
    size = s->sym[l].n + s->sym[r].n;
    id = tok_lookup(p, s->buf + s->sym[l].off, size);
    if (id < 0)
        return 0;
    return heap_push(s, (struct bigram){p->tok[id].score, l, r, size});
}

int
tok_spm_encode(const struct tokenizer *t, const char *text, size_t len, bool space_prefix,
               struct tok_ids *out)
{
    const struct tok_priv *p = t->p;
    struct spm s = {.t = t};
    char *buf;
    size_t n = 0, i, nsym = 0;
    int32_t k;
    int rc = -ST_NOMEM;

    if (len + 1 > INT32_MAX / 3)             /* symbol indices are int32 */
        return -ST_NOMEM;
    buf = malloc(3 * (len + 1));
    if (!buf)
        return -ST_NOMEM;
    /* llama_escape_whitespace: every space becomes U+2581 */
    if (space_prefix) {
        memcpy(buf, "\xe2\x96\x81", 3);
        n = 3;
    }
    for (i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            buf[n++] = text[i];
        }
    }
    if (n == 0) {
        free(buf);
        return 0;
    }
    s.buf = buf;
    s.sym = malloc(n * sizeof(*s.sym));
    s.cap_heap = n + 16;
    s.heap = malloc(s.cap_heap * sizeof(*s.heap));
    if (!s.sym || !s.heap)
        goto out;
    for (i = 0; i < n;) {
        size_t cl = tok_utf8_len((uint8_t)buf[i]);

        if (cl > n - i)
            cl = n - i;
        s.sym[nsym] = (struct sym){(int32_t)nsym - 1, (int32_t)nsym + 1, (uint32_t)i,
                                   (uint32_t)cl};
        i += cl;
        nsym++;
    }
    s.sym[nsym - 1].next = -1;
    for (i = 1; i < nsym; i++)
        if (try_bigram(&s, (int32_t)i - 1, (int32_t)i) < 0)
            goto out;
    while (s.n_heap) {
        struct bigram b = heap_pop(&s);
        struct sym *l = &s.sym[b.left], *r = &s.sym[b.right];

        /* stale: one side was merged away or has grown since */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s.sym[r->next].prev = b.left;
        if (try_bigram(&s, l->prev, b.left) < 0 || try_bigram(&s, b.left, l->next) < 0)
            goto out;
    }
    for (k = 0; k != -1; k = s.sym[k].next) {
        const struct sym *y = &s.sym[k];
        int32_t id = tok_lookup(p, buf + y->off, y->n);

        if (id >= 0) {
            if (tok_ids_push(out, id) < 0)
                goto out;
            continue;
        }
        /* byte fallback; llama.cpp throws when the vocabulary has neither
         * <0xXX> nor the byte itself - we use <unk>, or drop the byte */
        for (i = 0; i < y->n; i++) {
            int32_t bid = p->byte_tok[(uint8_t)buf[y->off + i]];

            if (bid < 0)
                bid = t->unk;
            if (bid >= 0 && tok_ids_push(out, bid) < 0)
                goto out;
        }
    }
    rc = 0;
out:
    free(buf);
    free(s.sym);
    free(s.heap);
    return rc;
}
