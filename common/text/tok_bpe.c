/*
 * tok_bpe.c - GPT-2 byte-level BPE (llama.cpp's llm_tokenizer_bpe_session)
 * and its pre-tokenizers (llama.cpp's unicode_regex_split).
 *
 * Pre-tokenizer.  The patterns (tok_pre.c) are llama.cpp's, in its notation.
 * llama.cpp runs them with std::regex (ECMAScript) on a copy of the text in
 * which every non-ASCII code point is either replaced by a byte standing for
 * its category (patterns with \p{..}) or kept, with non-ASCII whitespace as
 * U+000B (the others); its hand-written matchers for the GPT-2, Llama-3,
 * Qwen2 and Qwen3.5 patterns split the same way.  We run them with PCRE2
 * (UTF, without UCP, so that \d \w \b are ASCII as in ECMAScript) on the
 * text with non-ASCII whitespace as U+000B, each pattern translated:
 *   \s, \S          -> the 25 White_Space code points (llama.cpp's table;
 *                      PCRE2's \s with UCP would add U+180E);
 *   \p{Lu} etc.     -> \p{L}: llama.cpp folds all letter classes together;
 *   \d, \D          -> [0-9], [^0-9];
 *   $               -> end of the piece only (PCRE2_DOLLAR_ENDONLY).
 * \p{L}, \p{N}, \p{P}, \p{M}, \p{S} keep their meaning: llama.cpp's
 * categories and its ASCII lists for them agree with Unicode's.  The regexes
 * run one after the other; each splits every current piece into its matches
 * and the gaps between them (both kept), stepping over an empty match as
 * std::regex_iterator does (a non-empty match at the same place first, else
 * one character on).  TOK_PRE_RE_DIGITS3 is llama.cpp's digit-grouping
 * matcher, done here with a \p{N}+ search.
 *
 * PCRE2 needs valid UTF-8, so the fragment is decoded first the way
 * llama.cpp decodes it (invalid bytes -> U+FFFD) and re-encoded; surrogates,
 * which llama.cpp accepts, stand in the subject as U+E000 (both are "other"
 * to every pattern here) and are restored when the pieces are byte-encoded.
 *
 * Merging.  Each piece's UTF-8 bytes are mapped through GPT-2's byte table
 * (not for the raw vocabularies, gemma4: there spaces were made U+2581
 * first) and split into characters; the adjacent pair with the lowest merge
 * rank is merged (ties: leftmost) until no pair has a rank.  A final symbol
 * that is not a token is emitted byte by byte when those bytes are tokens
 * (the one-byte strings; <0xXX> for raw vocabularies), else dropped, as
 * llama.cpp does.
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_pre.h"
#include "tok_priv.h"
#include "tokenizer.h"

#define KEY_MERGES "tokenizer.ggml.merges"

/* ---- pre-tokenizers (the table is tok_pre.c) ---- */

_Static_assert(TOK_PRE_MAX_RE <= TOK_MAX_RE, "a pre-tokenizer's regexes fit tok_priv.re");

/* llama.cpp's whitespace, as the inside of a character class */
#define WS_CLASS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}" \
    "\\x{202F}\\x{205F}\\x{3000}"

static int
put(char *dst, size_t cap, size_t *n, const char *s)
{
    size_t k = strlen(s);

    if (*n + k + 1 > cap)
        return -1;
    memcpy(dst + *n, s, k);
    *n += k;
    dst[*n] = '\0';
    return 0;
}

/* Translates one llama.cpp pattern for PCRE2 (see the top of this file). */
static int
translate(const char *src, char *dst, size_t cap)
{
    size_t n = 0;
    bool inside = false;
    char one[3] = {0};

    dst[0] = '\0';
    while (*src) {
        if (src[0] == '\\' && src[1]) {
            char c = src[1];

            if (c == 's') {
                if (put(dst, cap, &n, inside ? WS_CLASS : "[" WS_CLASS "]") < 0)
                    return -1;
                src += 2;
            } else if (c == 'S') {
                if (inside || put(dst, cap, &n, "[^" WS_CLASS "]") < 0)
                    return -1;
                src += 2;
            } else if (c == 'd' || c == 'D') {
                if ((c == 'D' && inside) ||
                    put(dst, cap, &n, inside ? "0-9" : c == 'd' ? "[0-9]" : "[^0-9]") < 0)
                    return -1;
                src += 2;
            } else if (c == 'p' && src[2] == '{') {
                const char *e = strchr(src, '}');
                size_t k;

                if (!e)
                    return -1;
                k = (size_t)(e - src) - 3;
                if ((k == 1 && strchr("LNPMS", src[3])) || (k == 2 && !memcmp(src + 3, "Cn", 2))) {
                    char cls[8] = {'\\', 'p', '{', src[3], k == 2 ? src[4] : '}', k == 2 ? '}' : 0};
                    if (put(dst, cap, &n, cls) < 0)
                        return -1;
                } else if (k == 2 && src[3] == 'L' && strchr("ultmo", src[4])) {
                    if (put(dst, cap, &n, "\\p{L}") < 0)
                        return -1;
                } else {
                    return -1;                /* other properties: not supported */
                }
                src = e + 1;
            } else {
                one[0] = '\\';
                one[1] = c;
                if (put(dst, cap, &n, one) < 0)
                    return -1;
                src += 2;
            }
            continue;
        }
        if (src[0] == '[' && !inside)
            inside = true;
        else if (src[0] == ']' && inside)
            inside = false;
        one[0] = src[0];
        one[1] = '\0';
        if (put(dst, cap, &n, one) < 0)
            return -1;
        src++;
    }
    return 0;
}

static pcre2_code *
compile_one(const char *pat, uint32_t *err, PCRE2_SIZE *eoff)
{
    int e = 0;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &e, eoff, NULL);

    *err = (uint32_t)e;
    /* JIT is an optimisation; the interpreter gives the same matches */
    if (re)
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

static int
compile_pre(struct tokenizer *t, const struct tok_pre *def, struct diag *d)
{
    struct tok_priv *p = t->p;
    int i;

    for (i = 0; i < TOK_PRE_MAX_RE && def->re[i]; i++) {
        char pat[4096];
        uint32_t err;
        PCRE2_SIZE eoff;
        pcre2_code *re;
        bool digits3 = !strcmp(def->re[i], TOK_PRE_RE_DIGITS3);

        if (translate(digits3 ? "\\p{N}+" : def->re[i], pat, sizeof(pat)) < 0)
            return diag_set(d, ST_FORMAT, "tokenizer.ggml.pre: pattern %d of '%s' cannot be "
                            "translated", i, t->pre);
        re = compile_one(pat, &err, &eoff);
        if (!re) {
            PCRE2_UCHAR msg[128];

            pcre2_get_error_message((int)err, msg, sizeof(msg));
            return diag_set(d, ST_FAIL, "tokenizer.ggml.pre '%s': pcre2 pattern %d at %zu: %s",
                            t->pre, i, (size_t)eoff, (const char *)msg);
        }
        if (digits3) {
            if (p->re_num)
                pcre2_code_free(p->re_num);
            p->re_num = re;
            re = NULL;
        }
        p->re[p->n_re++] = re;
    }
    return 0;
}

/* ---- merges ---- */

static uint32_t
pair_hash(const char *l, size_t ll, const char *r, size_t rl)
{
    uint32_t h = tok_hash(TOK_HASH_INIT, l, ll);

    h = tok_hash(h ^ 0x9e3779b9u, "\xff", 1);
    return tok_hash(h, r, rl);
}

/* rank of (l, r), or -1 */
static int32_t
merge_rank(const struct tok_priv *p, const char *l, size_t ll, const char *r, size_t rl)
{
    uint32_t h, i;

    if (!p->mmap)
        return -1;
    h = pair_hash(l, ll, r, rl);
    for (i = h & p->mmap_mask;; i = (i + 1) & p->mmap_mask) {
        uint64_t v = p->mmap[i];
        uint32_t k;

        if (!v)
            return -1;
        if ((uint32_t)(v >> 32) != h)
            continue;
        k = (uint32_t)v - 1;
        if (p->merge[k].ll == ll && p->merge[k].rl == rl &&
            !memcmp(p->mtext + p->merge[k].l, l, ll) && !memcmp(p->mtext + p->merge[k].r, r, rl))
            return (int32_t)k;
    }
}

static int
load_merges(struct tokenizer *t, const struct gguf *g, struct diag *d)
{
    struct tok_priv *p = t->p;
    const struct gguf_kv *kv = gguf_get(g, KEY_MERGES);
    size_t total = 0, off = 0;
    uint64_t i, cap;

    if (!kv)
        return diag_set(d, ST_FORMAT, "%s: missing (required for gpt2 vocabularies)", KEY_MERGES);
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING)
        return diag_set(d, ST_FORMAT, "%s: expected an array of strings", KEY_MERGES);
    if (kv->n > INT32_MAX)
        return diag_set(d, ST_FORMAT, "%s: %llu merges", KEY_MERGES, (unsigned long long)kv->n);
    for (i = 0; i < kv->n; i++) {
        if (kv->v.strs[i].n > UINT32_MAX || total > UINT32_MAX - kv->v.strs[i].n)
            return diag_set(d, ST_FORMAT, "%s: more than 4 GiB of merges", KEY_MERGES);
        total += (size_t)kv->v.strs[i].n;
    }
    p->n_merges = (uint32_t)kv->n;
    p->mtext = malloc(total ? total : 1);
    p->merge = calloc(kv->n ? (size_t)kv->n : 1, sizeof(*p->merge));
    for (cap = 16; cap < 2 * kv->n; cap *= 2)
        ;
    p->mmap = calloc((size_t)cap, sizeof(*p->mmap));
    if (!p->mtext || !p->merge || !p->mmap)
        return diag_set(d, ST_NOMEM, "out of memory for %llu merges", (unsigned long long)kv->n);
    p->mmap_mask = (uint32_t)(cap - 1);
    for (i = 0; i < kv->n; i++) {
        const struct gguf_str *s = &kv->v.strs[i];
        const char *sp = s->n > 1 ? memchr(s->p + 1, ' ', (size_t)s->n - 1) : NULL;
        uint32_t h, k;

        memcpy(p->mtext + off, s->p, (size_t)s->n);
        /* "left right", split at the first space after position 0; without
         * one, llama.cpp records the pair ("", "") */
        if (sp) {
            p->merge[i].l = (uint32_t)off;
            p->merge[i].ll = (uint32_t)(sp - s->p);
            p->merge[i].r = (uint32_t)(off + (size_t)(sp - s->p) + 1);
            p->merge[i].rl = (uint32_t)(s->n - (uint64_t)(sp - s->p) - 1);
        } else {
            p->merge[i].l = p->merge[i].r = (uint32_t)off;
        }
        off += (size_t)s->n;
        /* the first occurrence of a pair keeps its rank */
        if (merge_rank(p, p->mtext + p->merge[i].l, p->merge[i].ll, p->mtext + p->merge[i].r,
                       p->merge[i].rl) >= 0)
            continue;
        h = pair_hash(p->mtext + p->merge[i].l, p->merge[i].ll, p->mtext + p->merge[i].r,
                      p->merge[i].rl);
        for (k = h & p->mmap_mask; p->mmap[k]; k = (k + 1) & p->mmap_mask)
            ;
        p->mmap[k] = (uint64_t)h << 32 | ((uint32_t)i + 1);
    }
    return 0;
}

int
tok_bpe_setup(struct tokenizer *t, const struct gguf *g, const char *pre, struct diag *d)
{
    const struct tok_pre *def;
    int rc;

    if (!pre) {
        snprintf(t->warning, sizeof(t->warning),
                 "tokenizer.ggml.pre is missing: using the 'default' pre-tokenizer "
                 "(generation quality may suffer)");
        pre = "default";
    }
    def = tok_pre_find(pre);
    if (!def)
        return diag_set(d, ST_FORMAT, "tokenizer.ggml.pre: unsupported pre-tokenizer '%.64s'", pre);
    if (!((def->flags & TOK_PRE_MERGES_OPTIONAL) && !gguf_get(g, KEY_MERGES)) &&
        (rc = load_merges(t, g, d)) < 0)
        return rc;
    snprintf(t->pre, sizeof(t->pre), "%s", pre);
    if (def->flags & TOK_PRE_ADD_BOS)
        t->add_bos = true;
    if (def->flags & TOK_PRE_IGNORE_MERGES)
        t->ignore_merges = true;
    if (def->flags & TOK_PRE_NO_CLEAN)
        t->clean_spaces = false;
    if (def->flags & TOK_PRE_NO_BOS)
        t->bos = TOK_NULL;
    t->p->bpe_raw = def->flags & TOK_PRE_RAW;
    t->p->nl_whole = def->flags & TOK_PRE_NL_WHOLE;
    return compile_pre(t, def, d);
}

void
tok_bpe_release(struct tok_priv *p)
{
    int i;

    for (i = 0; i < p->n_re; i++)
        pcre2_code_free(p->re[i]);      /* NULL is fine */
    p->n_re = 0;
    pcre2_code_free(p->re_num);
    p->re_num = NULL;
    free(p->mtext);
    free(p->merge);
    free(p->mmap);
    p->mtext = NULL;
    p->merge = NULL;
    p->mmap = NULL;
}

/* ---- encoding ---- */

struct piece {
    size_t s, e;              /* byte range of the subject */
};

struct pieces {
    struct piece *v;
    size_t n, cap;
};

static int
piece_push(struct pieces *ps, size_t s, size_t e)
{
    if (ps->n == ps->cap) {
        size_t nc = ps->cap ? ps->cap * 2 : 64;
        struct piece *nv = realloc(ps->v, nc * sizeof(*nv));

        if (!nv)
            return -ST_NOMEM;
        ps->v = nv;
        ps->cap = nc;
    }
    ps->v[ps->n++] = (struct piece){s, e};
    return 0;
}

struct bsym {
    int32_t prev, next;
    uint32_t off, n;
};

struct bbigram {
    int32_t rank, left, right;
    uint32_t size;
};

/* Buffers, regex state and the word cache of one tok_encode call, reused
 * across its fragments. */
struct tok_bpe_state {
    const struct tokenizer *t;
    /* regex state */
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    /* the fragment: code points and the UTF-8 subject */
    uint32_t *cpt;
    char *subj;
    size_t text_cap;
    struct pieces a, b;
    char *esc;                /* raw vocabularies: the text with spaces as U+2581 */
    size_t esc_cap;
    /* one word */
    char *word;
    size_t word_cap;
    struct bsym *sym;
    size_t sym_cap;
    struct bbigram *heap;
    size_t n_heap, heap_cap;
    struct tok_wcache cache;
};

static int
bheap_before(const struct bbigram *a, const struct bbigram *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static int
bheap_push(struct tok_bpe_state *w, struct bbigram b)
{
    size_t i;

    if (w->n_heap == w->heap_cap) {
        size_t nc = w->heap_cap ? w->heap_cap * 2 : 64;
        struct bbigram *nh = realloc(w->heap, nc * sizeof(*nh));

        if (!nh)
            return -ST_NOMEM;
        w->heap = nh;
        w->heap_cap = nc;
    }
    for (i = w->n_heap++; i > 0; i = (i - 1) / 2) {
        size_t up = (i - 1) / 2;

        if (!bheap_before(&b, &w->heap[up]))
            break;
        w->heap[i] = w->heap[up];
    }
    w->heap[i] = b;
    return 0;
}

static struct bbigram
bheap_pop(struct tok_bpe_state *w)
{
    struct bbigram top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;

    for (;;) {
        size_t c = 2 * i + 1;

        if (c >= n)
            break;
        if (c + 1 < n && bheap_before(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!bheap_before(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n)
        w->heap[i] = last;
    return top;
}

static int
add_bigram(struct tok_bpe_state *w, int32_t l, int32_t r)
{
    int32_t rank;

    if (l < 0 || r < 0)
        return 0;
    rank = merge_rank(w->t->p, w->word + w->sym[l].off, w->sym[l].n, w->word + w->sym[r].off,
                      w->sym[r].n);
    if (rank < 0)
        return 0;
    return bheap_push(w, (struct bbigram){rank, l, r, w->sym[l].n + w->sym[r].n});
}

/* Merges one byte-encoded word of n bytes (in w->word) and emits its tokens. */
static int
bpe_word(struct tok_bpe_state *w, size_t n, struct tok_ids *out)
{
    const struct tok_priv *p = w->t->p;
    size_t i, nsym = 0;
    int32_t k, id;

    if (n == 0)
        return 0;
    if (w->t->ignore_merges && (id = tok_lookup(p, w->word, n)) >= 0)
        return tok_ids_push(out, id);
    if (p->nl_whole) {
        for (i = 0; i < n && w->word[i] == '\n'; i++)
            ;
        if (i == n && (id = tok_lookup(p, w->word, n)) >= 0)
            return tok_ids_push(out, id);
    }
    if (n > w->sym_cap) {
        struct bsym *ns = realloc(w->sym, n * sizeof(*ns));

        if (!ns)
            return -ST_NOMEM;
        w->sym = ns;
        w->sym_cap = n;
    }
    for (i = 0; i < n;) {
        size_t cl = tok_utf8_len((uint8_t)w->word[i]);

        if (cl > n - i)
            cl = n - i;
        w->sym[nsym] = (struct bsym){(int32_t)nsym - 1, (int32_t)nsym + 1, (uint32_t)i,
                                     (uint32_t)cl};
        i += cl;
        nsym++;
    }
    w->sym[nsym - 1].next = -1;
    w->n_heap = 0;
    for (i = 1; i < nsym; i++)
        if (add_bigram(w, (int32_t)i - 1, (int32_t)i) < 0)
            return -ST_NOMEM;
    while (w->n_heap) {
        struct bbigram b = bheap_pop(w);
        struct bsym *l = &w->sym[b.left], *r = &w->sym[b.right];

        /* stale: a side was merged away or grew (sizes only grow) */
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            w->sym[r->next].prev = b.left;
        if (add_bigram(w, l->prev, b.left) < 0 || add_bigram(w, b.left, l->next) < 0)
            return -ST_NOMEM;
    }
    for (k = 0; k != -1; k = w->sym[k].next) {
        const struct bsym *y = &w->sym[k];

        id = tok_lookup(p, w->word + y->off, y->n);
        if (id >= 0) {
            if (tok_ids_push(out, id) < 0)
                return -ST_NOMEM;
            continue;
        }
        for (i = 0; i < y->n; i++) {
            int32_t bid = p->byte_tok[(uint8_t)w->word[y->off + i]];

            if (bid >= 0 && tok_ids_push(out, bid) < 0)
                return -ST_NOMEM;
        }
    }
    return 0;
}

/* One regex over the pieces of *in -> *out (matches and gaps, in order),
 * iterated as std::regex_iterator does. */
static int
split(struct tok_bpe_state *w, const pcre2_code *re, const char *subj, const struct pieces *in,
      struct pieces *out, struct diag *d)
{
    size_t i;

    out->n = 0;
    for (i = 0; i < in->n; i++) {
        size_t s = in->v[i].s, e = in->v[i].e, pos = s, gap = s;
        bool after_empty = false;

        while (pos < e) {
            /* after an empty match: a non-empty one at the same place, or
             * the search goes on one character later */
            uint32_t opt = PCRE2_NO_UTF_CHECK |
                           (after_empty ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0);
            int rc = pcre2_match(re, (PCRE2_SPTR)(subj + s), e - s, pos - s, opt, w->md, w->mctx);
            PCRE2_SIZE *ov;
            size_t ms, me;

            if (rc == PCRE2_ERROR_NOMATCH && after_empty) {
                after_empty = false;
                pos += tok_utf8_len((uint8_t)subj[pos]);
                continue;
            }
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !w->jstack) {
                /* a long match needs more JIT stack than the default 32 KiB */
                w->jstack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
                w->mctx = pcre2_match_context_create(NULL);
                if (!w->jstack || !w->mctx)
                    return diag_set(d, ST_NOMEM, "out of memory for the regex stack");
                pcre2_jit_stack_assign(w->mctx, NULL, w->jstack);
                continue;
            }
            if (rc < 0) {
                PCRE2_UCHAR msg[128];

                pcre2_get_error_message(rc, msg, sizeof(msg));
                return diag_set(d, ST_FAIL, "pre-tokenizer regex failed on a %zu-byte piece: %s",
                                e - s, (const char *)msg);
            }
            ov = pcre2_get_ovector_pointer(w->md);
            ms = s + ov[0];
            me = s + ov[1];
            if (ms > gap && piece_push(out, gap, ms) < 0)
                return -ST_NOMEM;
            /* an empty match is an empty piece in llama.cpp, i.e. nothing */
            if (me > ms && piece_push(out, ms, me) < 0)
                return -ST_NOMEM;
            after_empty = me == ms;
            pos = gap = me;
        }
        if (gap < e && piece_push(out, gap, e) < 0)
            return -ST_NOMEM;
    }
    return 0;
}

/* s advanced by k code points (at most to e) */
static size_t
skip_cpts(const char *subj, size_t s, size_t e, size_t k)
{
    while (k-- && s < e)
        s += tok_utf8_len((uint8_t)subj[s]);
    return s < e ? s : e;
}

/* TOK_PRE_RE_DIGITS3 (llama.cpp's unicode_regex_split_custom_afmoe): each
 * run of \p{N} is cut into groups of three from the right; the first cut of
 * a run ends its leading group and takes along what came since the last cut. */
static int
split_digits3(struct tok_bpe_state *w, const char *subj, const struct pieces *in,
              struct pieces *out, struct diag *d)
{
    const pcre2_code *re = w->t->p->re_num;
    size_t i;

    out->n = 0;
    for (i = 0; i < in->n; i++) {
        size_t s = in->v[i].s, e = in->v[i].e, pos = s, prev = s;

        while (pos < e) {
            int rc = pcre2_match(re, (PCRE2_SPTR)(subj + s), e - s, pos - s, PCRE2_NO_UTF_CHECK,
                                 w->md, w->mctx);
            PCRE2_SIZE *ov;
            size_t rs, re_, n = 0, k, cut;

            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0)
                return diag_set(d, ST_FAIL, "pre-tokenizer digit search failed (%d)", rc);
            ov = pcre2_get_ovector_pointer(w->md);
            rs = s + ov[0];
            re_ = s + ov[1];
            for (k = rs; k < re_; k++)
                n += ((uint8_t)subj[k] & 0xC0) != 0x80;
            cut = skip_cpts(subj, rs, re_, n % 3 ? n % 3 : 3);
            for (;;) {
                if (piece_push(out, prev, cut) < 0)
                    return -ST_NOMEM;
                prev = cut;
                if (cut >= re_)
                    break;
                cut = skip_cpts(subj, cut, re_, 3);
            }
            pos = re_;
        }
        if (prev < e && piece_push(out, prev, e) < 0)
            return -ST_NOMEM;
    }
    return 0;
}

/* llama.cpp's White_Space code points outside ASCII */
static bool
is_wide_space(uint32_t cp)
{
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

void
tok_bpe_state_free(struct tok_bpe_state *w)
{
    if (!w)
        return;
    free(w->cpt);
    free(w->subj);
    free(w->esc);
    free(w->a.v);
    free(w->b.v);
    free(w->word);
    free(w->sym);
    free(w->heap);
    tok_wcache_release(&w->cache);
    if (w->md)
        pcre2_match_data_free(w->md);
    if (w->mctx)
        pcre2_match_context_free(w->mctx);
    if (w->jstack)
        pcre2_jit_stack_free(w->jstack);
    free(w);
}

/* llama_escape_whitespace: every ' ' of text as U+2581, into w->esc */
static int
escape_spaces(struct tok_bpe_state *w, const char **text, size_t *len)
{
    size_t i, n = 0;

    if (*len > (SIZE_MAX - 1) / 3)
        return -ST_NOMEM;
    if (3 * *len > w->esc_cap) {
        char *nb = realloc(w->esc, 3 * *len);

        if (!nb)
            return -ST_NOMEM;
        w->esc = nb;
        w->esc_cap = 3 * *len;
    }
    for (i = 0; i < *len; i++) {
        if ((*text)[i] == ' ') {
            memcpy(w->esc + n, "\xe2\x96\x81", 3);
            n += 3;
        } else {
            w->esc[n++] = (*text)[i];
        }
    }
    *text = w->esc;
    *len = n;
    return 0;
}

int
tok_bpe_encode(const struct tokenizer *t, struct tok_bpe_state **state, const char *text,
               size_t len, struct tok_ids *out, struct diag *d)
{
    const struct tok_priv *p = t->p;
    struct tok_bpe_state *w = *state;
    size_t n_cpt = 0, n_subj = 0, i, c;
    int rc = -ST_NOMEM, r;

    if (len == 0)
        return 0;
    if (len > SIZE_MAX / 8)
        return diag_set(d, ST_NOMEM, "text too large");
    if (!w) {
        w = *state = calloc(1, sizeof(*w));
        if (!w || !(w->md = pcre2_match_data_create(32, NULL)))
            goto nomem;
        w->t = t;
    }
    if (p->bpe_raw && escape_spaces(w, &text, &len) < 0)
        goto nomem;
    if (len > w->text_cap) {
        uint32_t *nc = realloc(w->cpt, len * sizeof(*nc));
        char *ns = realloc(w->subj, 3 * len + 1);

        if (nc)
            w->cpt = nc;
        if (ns)
            w->subj = ns;
        if (!nc || !ns)
            goto nomem;
        w->text_cap = len;
    }
    for (i = 0; i < len;) {
        uint32_t cp = tok_utf8_next(text, len, &i), sc = cp;

        if (cp >= 0xD800 && cp <= 0xDFFF)
            sc = 0xE000;
        else if (cp >= 0x80 && is_wide_space(cp))
            sc = 0x0B;
        w->cpt[n_cpt++] = cp;
        n_subj += tok_utf8_put(sc, w->subj + n_subj);
    }
    w->subj[n_subj] = '\0';
    w->a.n = 0;
    if (piece_push(&w->a, 0, n_subj) < 0)
        goto nomem;
    for (r = 0; r < p->n_re; r++) {
        struct pieces tmp;

        if (p->re[r])
            rc = split(w, p->re[r], w->subj, &w->a, &w->b, d);
        else
            rc = split_digits3(w, w->subj, &w->a, &w->b, d);
        if (rc < 0) {
            if (rc == -ST_NOMEM)
                goto nomem;
            return rc;
        }
        tmp = w->a;
        w->a = w->b;
        w->b = tmp;
    }
    /* byte-encode each piece (raw vocabularies: take its UTF-8) and merge it */
    c = 0;
    for (i = 0; i < w->a.n; i++) {
        const struct piece *pc = &w->a.v[i];
        size_t k, nw = 0, need, from = out->n;
        uint32_t h;
        bool hit;

        /* a subject byte stands for up to 3 text bytes (U+000B for a wide
         * space), each byte-encoded in at most 2 */
        need = (pc->e - pc->s) * 6 + 8;
        if (need > w->word_cap) {
            char *nb = realloc(w->word, need);
            if (!nb)
                goto nomem;
            w->word = nb;
            w->word_cap = need;
        }
        /* the code points of this piece: one per UTF-8 lead byte */
        for (k = pc->s; k < pc->e; k++) {
            char u[4];
            size_t m, j;

            if (((uint8_t)w->subj[k] & 0xC0) == 0x80)
                continue;
            m = tok_utf8_put(w->cpt[c++], u);
            if (p->bpe_raw) {
                memcpy(w->word + nw, u, m);
                nw += m;
                continue;
            }
            for (j = 0; j < m; j++) {
                const char *bu = tok_byte_utf8[(uint8_t)u[j]];

                w->word[nw++] = bu[0];
                if (bu[1])
                    w->word[nw++] = bu[1];
            }
        }
        h = tok_hash(TOK_HASH_INIT, w->word, nw);
        hit = false;
        if (!p->reference && tok_wcache_get(&w->cache, w->word, nw, h, out, &hit) < 0)
            goto nomem;
        if (!hit) {
            if (bpe_word(w, nw, out) < 0)
                goto nomem;
            if (!p->reference)
                tok_wcache_put(&w->cache, w->word, nw, h, out->v + from, out->n - from);
        }
    }
    return 0;
nomem:
    return diag_set(d, ST_NOMEM, "out of memory tokenizing %zu bytes", len);
}

/* ---- decoding ---- */

int
tok_bpe_decode_text(const char *s, size_t n, char **buf, size_t *len, size_t *cap)
{
    size_t i = 0;

    while (i < n) {
        uint32_t cp = tok_utf8_next(s, n, &i);
        int b = tok_unicode_byte(cp);
        size_t need = b >= 0 ? 1 : 12 + 8 + n + 1;

        if (*len + need + 1 > *cap) {
            size_t nc = *cap * 2 > *len + need + 1 ? *cap * 2 : *len + need + 1;
            char *nb = realloc(*buf, nc);

            if (!nb)
                return -ST_NOMEM;
            *buf = nb;
            *cap = nc;
        }
        if (b >= 0) {
            (*buf)[(*len)++] = (char)b;
        } else {
            char u[4];
            size_t m = tok_utf8_put(cp, u), j;

            memcpy(*buf + *len, "[UNK_BYTE_0x", 12);
            *len += 12;
            for (j = 0; j < m; j++) {
                snprintf(*buf + *len, 3, "%02x", (unsigned)(uint8_t)u[j]);
                *len += 2;
            }
            memcpy(*buf + *len, s, n);
            *len += n;
            (*buf)[(*len)++] = ']';
        }
    }
    return 0;
}
