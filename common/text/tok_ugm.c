/*
 * tok_ugm.c - Unigram (tokenizer.ggml.model "t5": T5, XLM-RoBERTa and the
 * SentencePiece unigram models), as llama.cpp's llm_tokenizer_ugm_session.
 *
 * Normalization: at each position, a USER_DEFINED token's text (the longest)
 * is kept as it is; else the longest prefix the precompiled charsmap knows is
 * replaced by its replacement string; else one UTF-8 character is kept (a
 * byte that is not UTF-8 becomes U+FFFD).  Spaces of the result become
 * U+2581, runs of them one when remove_extra_whitespaces, and a U+2581 goes
 * before the first non-space when add_space_prefix (before every word when
 * remove_extra_whitespaces).
 *
 * The charsmap is SentencePiece's: a little-endian uint32 blob size, the
 * XOR-compressed compact double array (Kanda 2018) of the prefixes, one
 * packed uint32 per node (BASE in bits 10-30, shifted by bit 9; LCHECK in
 * bits 0-7 and 31; LEAF in bit 8; a leaf's value, the offset of its
 * replacement, in bits 0-30), then the NUL-terminated replacements.
 *
 * Segmentation: Viterbi over the normalized bytes: a token (NORMAL,
 * USER_DEFINED with score 0, UNUSED) may end at any byte, scores add up in
 * double precision, ties keep the first path found; a character that no
 * token of its own length covers may be UNK, scored as the lowest NORMAL
 * score minus 10; consecutive UNKs of the best path become one.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tok_priv.h"
#include "tokenizer.h"

#define KEY_CHARSMAP "tokenizer.ggml.precompiled_charsmap"
#define SPACE "\xe2\x96\x81"

int
tok_ugm_setup(struct tokenizer *t, const struct gguf *g, struct diag *d)
{
    struct tok_priv *p = t->p;
    const struct gguf_kv *kv = gguf_get(g, KEY_CHARSMAP);
    double lo = FLT_MAX;
    bool merge = false;
    int32_t id;

    if (kv) {
        uint32_t blob;

        if (kv->type != GGUF_TYPE_ARRAY ||
            (kv->arr_type != GGUF_TYPE_INT8 && kv->arr_type != GGUF_TYPE_UINT8))
            return diag_set(d, ST_FORMAT, "%s: expected an array of bytes", KEY_CHARSMAP);
        if (kv->n < 4)
            return diag_set(d, ST_FORMAT, "%s: %llu bytes, too short for its header",
                            KEY_CHARSMAP, (unsigned long long)kv->n);
        blob = (uint32_t)((const uint8_t *)kv->v.arr)[0] |
               (uint32_t)((const uint8_t *)kv->v.arr)[1] << 8 |
               (uint32_t)((const uint8_t *)kv->v.arr)[2] << 16 |
               (uint32_t)((const uint8_t *)kv->v.arr)[3] << 24;
        if ((uint64_t)blob + 4 >= kv->n)
            return diag_set(d, ST_FORMAT, "%s: its double array (%u bytes) does not fit in "
                            "%llu bytes", KEY_CHARSMAP, blob, (unsigned long long)kv->n);
        p->ugm_map = malloc((size_t)kv->n);
        if (!p->ugm_map)
            return diag_set(d, ST_NOMEM, "out of memory");
        memcpy(p->ugm_map, kv->v.arr, (size_t)kv->n);
        p->ugm_map_n = (size_t)kv->n;
    }
    if (gguf_get_bool(g, "tokenizer.ggml.remove_extra_whitespaces", &merge, d) < 0)
        return -ST_FORMAT;
    p->ugm_merge_spaces = merge;
    for (id = 0; id < t->n_vocab; id++) {
        if ((p->tok[id].attr & TOK_ATTR_NORMAL) && p->tok[id].score < lo)
            lo = p->tok[id].score;
        if (p->tok[id].attr & TOK_ATTR_USER_DEFINED)
            p->ugm_has_user = true;
    }
    p->ugm_unk_score = lo - 10.0;
    return 0;
}

/* ---- normalization ---- */

struct ugm_buf {
    char *v;
    size_t n, cap;
};

static int
buf_put(struct ugm_buf *b, const char *s, size_t n)
{
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        char *nv;

        while (nc < b->n + n)
            nc *= 2;
        if (!(nv = realloc(b->v, nc)))
            return -ST_NOMEM;
        b->v = nv;
        b->cap = nc;
    }
    memcpy(b->v + b->n, s, n);
    b->n += n;
    return 0;
}

/* node i of the double array, or -1 past its end */
static int64_t
xcda(const struct tok_priv *p, uint32_t i)
{
    size_t n = (size_t)(p->ugm_map[0] | p->ugm_map[1] << 8 | p->ugm_map[2] << 16 |
                        (uint32_t)p->ugm_map[3] << 24) / 4;
    const uint8_t *q = p->ugm_map + 4 + 4 * (size_t)i;

    if (i >= n)
        return -1;
    return (int64_t)(q[0] | q[1] << 8 | q[2] << 16 | (uint32_t)q[3] << 24);
}

static uint32_t
xcda_base(uint32_t node)
{
    return (node >> 10) << ((node & (1u << 9)) >> 6);
}

/* The normalization of the prefix of s[off..n): *rep (rep_n bytes) replaces
 * *used input bytes.  0 or -ST_FORMAT. */
static int
norm_prefix(const struct tokenizer *t, const char *s, size_t n, size_t off, const char **rep,
            size_t *rep_n, size_t *used, struct diag *d)
{
    const struct tok_priv *p = t->p;
    size_t best = 0, best_off = 0, k, i;

    if (p->ugm_has_user) {
        uint32_t h = TOK_HASH_INIT;

        for (k = off; k < n && k - off < p->max_len; k++) {
            int32_t id;

            h = tok_hash(h, s + k, 1);
            id = tok_lookup_hashed(p, s + off, k - off + 1, h);
            if (id >= 0 && (p->tok[id].attr & TOK_ATTR_USER_DEFINED))
                best = k - off + 1;
        }
        if (best) {
            *rep = s + off;
            *rep_n = *used = best;
            return 0;
        }
    }
    if (p->ugm_map) {
        int64_t node = xcda(p, 0);
        uint32_t at;

        if (node < 0)
            goto corrupt;
        at = xcda_base((uint32_t)node);
        for (k = off; k < n; k++) {
            unsigned char c = (unsigned char)s[k];
            bool leaf;

            if (c == 0)
                break;
            at ^= c;
            if ((node = xcda(p, at)) < 0)
                goto corrupt;
            if (((uint32_t)node & ((1u << 31) | 0xff)) != c)
                break;
            leaf = ((uint32_t)node >> 8) & 1;
            at ^= xcda_base((uint32_t)node);
            if (leaf) {
                if ((node = xcda(p, at)) < 0)
                    goto corrupt;
                best = k - off + 1;
                best_off = (uint32_t)node & ((1u << 31) - 1);
            }
        }
    }
    if (best) {
        size_t blob = (size_t)(p->ugm_map[0] | p->ugm_map[1] << 8 | p->ugm_map[2] << 16 |
                               (uint32_t)p->ugm_map[3] << 24);
        const char *r = (const char *)p->ugm_map + 4 + blob;
        size_t rn = p->ugm_map_n - 4 - blob;

        if (best_off >= rn)
            goto corrupt;
        for (i = best_off; i < rn && r[i]; i++)
            ;
        if (i == rn)
            goto corrupt;
        *rep = r + best_off;
        *rep_n = i - best_off;
        *used = best;
        return 0;
    }
    i = off;
    if (tok_utf8_next(s, n, &i) == 0xFFFD && i - off == 1) {
        *rep = "\xEF\xBF\xBD";
        *rep_n = 3;
    } else {
        *rep = s + off;
        *rep_n = i - off;
    }
    *used = i - off;
    return 0;
corrupt:
    return diag_set(d, ST_FORMAT, "%s: the double array or a replacement leads out of it",
                    KEY_CHARSMAP);
}

static int
normalize(const struct tokenizer *t, const char *s, size_t n, struct ugm_buf *out,
          struct diag *d)
{
    const struct tok_priv *p = t->p;
    bool prepended = false, in_word = false;
    size_t off = 0, i;
    int rc;

    while (off < n) {
        const char *rep = NULL;
        size_t rn = 0, used = 1;

        if ((rc = norm_prefix(t, s, n, off, &rep, &rn, &used, d)) < 0)
            return rc;
        for (i = 0; i < rn; i++) {
            if (rep[i] != ' ') {
                if (!in_word) {
                    in_word = true;
                    if ((t->add_space_prefix && !prepended) || p->ugm_merge_spaces) {
                        if (buf_put(out, SPACE, 3) < 0)
                            return -ST_NOMEM;
                        prepended = true;
                    }
                }
                if (buf_put(out, rep + i, 1) < 0)
                    return -ST_NOMEM;
            } else {
                in_word = false;
                if (!p->ugm_merge_spaces && buf_put(out, SPACE, 3) < 0)
                    return -ST_NOMEM;
            }
        }
        off += used;
    }
    return 0;
}

/* ---- segmentation ---- */

struct ugm_best {
    int32_t id;
    size_t from;
    double score;
};

int
tok_ugm_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out,
               struct diag *d)
{
    const struct tok_priv *p = t->p;
    struct ugm_buf nb = {0};
    struct ugm_best *best = NULL;
    size_t n, off, k, from = out->n, i;
    bool prev_unk = false;
    int rc;

    if ((rc = normalize(t, text, len, &nb, d)) < 0)
        goto out;
    n = nb.n;
    if (n == 0)
        goto out;
    if (!(best = malloc((n + 1) * sizeof(*best)))) {
        rc = -ST_NOMEM;
        goto out;
    }
    for (i = 0; i <= n; i++)
        best[i] = (struct ugm_best){t->unk, 0, -DBL_MAX};
    best[0].score = 0;
    for (off = 0; off < n;) {
        size_t cu = tok_utf8_len((uint8_t)nb.v[off]);
        uint32_t h = TOK_HASH_INIT;
        bool single = false;

        if (cu > n - off)
            cu = n - off;
        for (k = off; k < n && k - off < p->max_len; k++) {
            int32_t id;
            double sc;

            h = tok_hash(h, nb.v + k, 1);
            id = tok_lookup_hashed(p, nb.v + off, k - off + 1, h);
            if (id < 0 || !(p->tok[id].attr & (TOK_ATTR_NORMAL | TOK_ATTR_USER_DEFINED |
                                                TOK_ATTR_UNUSED)))
                continue;
            single |= k - off + 1 == cu;
            sc = best[off].score +
                 ((p->tok[id].attr & TOK_ATTR_USER_DEFINED) ? 0.0 : (double)p->tok[id].score);
            if (sc > best[k + 1].score)
                best[k + 1] = (struct ugm_best){id, off, sc};
        }
        if (!single) {
            double sc = best[off].score + p->ugm_unk_score;

            if (sc > best[off + cu].score)
                best[off + cu] = (struct ugm_best){t->unk, off, sc};
        }
        off += cu;
    }
    /* the best path, backwards; runs of UNK as one */
    for (i = n;; i = best[i].from) {
        bool unk = best[i].id == t->unk;

        /* no UNK token: what it would stand for is dropped */
        if (!(prev_unk && unk) && best[i].id != TOK_NULL && (rc = tok_ids_push(out, best[i].id)) < 0)
            goto out;
        if (best[i].from == 0)
            break;
        prev_unk = unk;
    }
    for (i = from, k = out->n; i + 1 < k; i++, k--) {
        int32_t x = out->v[i];

        out->v[i] = out->v[k - 1];
        out->v[k - 1] = x;
    }
    rc = 0;
out:
    if (rc < 0)
        out->n = from;
    free(best);
    free(nb.v);
    return rc;
}
