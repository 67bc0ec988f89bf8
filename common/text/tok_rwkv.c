/*
 * tok_rwkv.c - RWKV's "world" tokenizer (tokenizer.ggml.model "rwkv"), as
 * llama.cpp's llm_tokenizer_rwkv_session: token texts are escaped byte
 * strings (\t \n \r, \xHH, \ before any other character: that character),
 * and the text is covered from the left by the longest token whose bytes it
 * starts with (of tokens with the same bytes, the last id).  A byte no token
 * starts with is UNK (dropped when the vocabulary has none: llama.cpp would
 * emit -1; where tokens start with it but none of them matches, llama.cpp
 * loops back to the start of the text, we take it as UNK too).
 */
#include <stdlib.h>
#include <string.h>

#include "tok_priv.h"
#include "tokenizer.h"

/* llama_unescape_rwkv_token: s[0..n) into out (n bytes of room); the length */
static size_t
unescape(const char *s, size_t n, uint8_t *out)
{
    size_t i, o = 0;
    int hex = 0;
    uint8_t acc = 0;
    bool esc = false;

    for (i = 0; i < n; i++) {
        char c = s[i];

        if (hex) {
            acc = (uint8_t)((acc << 4) + (c >= 'a' ? c - 'a' + 10 : c - '0'));
            if (--hex == 0) {
                out[o++] = acc;
                acc = 0;
            }
        } else if (esc) {
            esc = false;
            if (c == 'x')
                hex = 2;
            else
                out[o++] = c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : (uint8_t)c;
        } else if (c == '\\') {
            esc = true;
        } else {
            out[o++] = (uint8_t)c;
        }
    }
    return o;
}

int
tok_rwkv_setup(struct tokenizer *t, struct diag *d)
{
    struct tok_priv *p = t->p;
    size_t off = 0, cap;
    int32_t id;

    p->rw_text = malloc(p->text_len ? p->text_len : 1);
    p->rw = calloc((size_t)t->n_vocab, sizeof(*p->rw));
    for (cap = 16; cap < 2 * (size_t)t->n_vocab; cap *= 2)
        ;
    p->rw_map = calloc(cap, sizeof(*p->rw_map));
    if (!p->rw_text || !p->rw || !p->rw_map)
        return diag_set(d, ST_NOMEM, "out of memory");
    p->rw_mask = (uint32_t)(cap - 1);
    for (id = 0; id < t->n_vocab; id++) {
        const struct tok_entry *e = &p->tok[id];
        size_t n = unescape(p->text + e->off, e->len, (uint8_t *)p->rw_text + off);
        uint32_t h = tok_hash(TOK_HASH_INIT, p->rw_text + off, n), i;

        p->rw[id].off = (uint32_t)off;
        p->rw[id].len = (uint32_t)n;
        off += n;
        if (n > p->rw_max)
            p->rw_max = (uint32_t)n;
        if (n == 0)
            continue;                   /* an empty string matches nothing */
        /* the last id of the same bytes wins (llama.cpp's trie) */
        for (i = h & p->rw_mask;; i = (i + 1) & p->rw_mask) {
            uint64_t v = p->rw_map[i];
            const struct tok_span *o;

            if (!v) {
                p->rw_map[i] = (uint64_t)h << 32 | ((uint32_t)id + 1);
                break;
            }
            o = &p->rw[(uint32_t)v - 1];
            if ((uint32_t)(v >> 32) == h && o->len == n &&
                !memcmp(p->rw_text + o->off, p->rw_text + off - n, n)) {
                p->rw_map[i] = (uint64_t)h << 32 | ((uint32_t)id + 1);
                break;
            }
        }
    }
    return 0;
}

static int32_t
rw_lookup(const struct tok_priv *p, const char *s, size_t n)
{
    uint32_t h = tok_hash(TOK_HASH_INIT, s, n), i;

    for (i = h & p->rw_mask;; i = (i + 1) & p->rw_mask) {
        uint64_t v = p->rw_map[i];
        const struct tok_span *e;

        if (!v)
            return -1;
        e = &p->rw[(uint32_t)v - 1];
        if ((uint32_t)(v >> 32) == h && e->len == n && !memcmp(p->rw_text + e->off, s, n))
            return (int32_t)((uint32_t)v - 1);
    }
}

const char *
tok_rwkv_bytes(const struct tok_priv *p, int32_t id, size_t *len)
{
    *len = p->rw[id].len;
    return p->rw_text + p->rw[id].off;
}

int
tok_rwkv_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out)
{
    const struct tok_priv *p = t->p;
    size_t pos = 0;

    while (pos < len) {
        size_t k = len - pos < p->rw_max ? len - pos : p->rw_max;
        int32_t id = -1;

        for (; k > 0; k--)
            if ((id = rw_lookup(p, text + pos, k)) >= 0)
                break;
        if (id < 0) {
            if (t->unk != TOK_NULL && tok_ids_push(out, t->unk) < 0)
                return -ST_NOMEM;
            pos++;
            continue;
        }
        if (tok_ids_push(out, id) < 0)
            return -ST_NOMEM;
        pos += k;
    }
    return 0;
}
