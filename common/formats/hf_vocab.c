/*
 * hf_vocab.c - HF tokenizer files <-> GGUF tokenizer.* metadata
 * (convert_hf_to_gguf.py set_vocab, get_vocab_base, get_vocab_base_pre and
 * gguf-py SpecialVocab; llama_vocab::impl::load for what llama.cpp reads
 * back).  See hf.h for the rules and for
 * where we differ from convert_hf_to_gguf.py.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf.h"
#include "json.h"
#include "tok_pre.h"
#include "xio.h"

#define TJ "tokenizer.json"
#define TC "tokenizer_config.json"
#define SP "tokenizer.model"
#define MARKER "llmkit_gguf"

/* ---- small helpers ---- */

static char *
dupn(const char *s, size_t n)
{
    char *p = malloc(n + 1);

    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static const json_t *
member(const json_t *o, const char *key)
{
    const json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;

    return (v && !json_is_null(v)) ? v : NULL;
}

static bool
has_prefix(const char *s, size_t n, const char *pre)
{
    size_t m = strlen(pre);

    return n >= m && !memcmp(s, pre, m);
}

static bool
has_suffix(const char *s, size_t n, const char *suf)
{
    size_t m = strlen(suf);

    return n >= m && !memcmp(s + n - m, suf, m);
}

/* "<0xXX>" with two hex digits (LlamaHfVocab BYTE tokens). */
static bool
is_byte_token(const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdefABCDEF";

    return n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' && s[3] && s[4] &&
           strchr(hex, s[3]) && strchr(hex, s[4]);
}

/* gguf-py's does_token_look_special(). */
static bool
looks_special(const char *s, size_t n)
{
    static const char *const exact[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    size_t i;

    for (i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
        if (n == strlen(exact[i]) && !memcmp(s, exact[i], n))
            return true;
    return (has_prefix(s, n, "<|") && has_suffix(s, n, "|>")) ||
           (has_prefix(s, n, "<\xef\xbd\x9c") && has_suffix(s, n, "\xef\xbd\x9c>")) ||
           (has_prefix(s, n, "<unused") && has_suffix(s, n, ">"));
}

/* Replaces every U+2581 by a space (in place; the string only shrinks). */
static uint32_t
unescape_spaces(char *s, uint32_t n)
{
    uint32_t i, o = 0;

    for (i = 0; i < n; i++) {
        if (i + 2 < n && (uint8_t)s[i] == 0xe2 && (uint8_t)s[i + 1] == 0x96 &&
            (uint8_t)s[i + 2] == 0x81) {
            s[o++] = ' ';
            i += 2;
        } else {
            s[o++] = s[i];
        }
    }
    s[o] = '\0';
    return o;
}

/* ---- a string -> index hash over an array of strings ---- */

struct smap {
    int64_t *slot;                 /* index + 1, 0 = empty */
    uint64_t mask;
    char *const *key;
    const uint32_t *len;
};

static uint64_t
hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    size_t i;

    for (i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int
smap_init(struct smap *m, int64_t n, char *const *key, const uint32_t *len)
{
    uint64_t cap = 16;

    while (cap < (uint64_t)n * 2)
        cap <<= 1;
    m->slot = calloc(cap, sizeof(*m->slot));
    m->mask = cap - 1;
    m->key = key;
    m->len = len;
    return m->slot ? 0 : -ST_NOMEM;
}

static void
smap_free(struct smap *m)
{
    free(m->slot);
    m->slot = NULL;
}

static int64_t
smap_find(const struct smap *m, const char *s, size_t n)
{
    uint64_t h = hash_bytes(s, n) & m->mask;

    for (; m->slot[h]; h = (h + 1) & m->mask) {
        int64_t i = m->slot[h] - 1;
        if (m->len[i] == n && !memcmp(m->key[i], s, n))
            return i;
    }
    return -1;
}

/* Inserts index i; returns -1, or the index already holding the same text. */
static int64_t
smap_insert(struct smap *m, int64_t i)
{
    uint64_t h = hash_bytes(m->key[i], m->len[i]) & m->mask;

    for (; m->slot[h]; h = (h + 1) & m->mask) {
        int64_t j = m->slot[h] - 1;
        if (m->len[j] == m->len[i] && !memcmp(m->key[j], m->key[i], m->len[i]))
            return j;
    }
    m->slot[h] = i + 1;
    return -1;
}

/* ---- struct hf_vocab ---- */

void
hf_vocab_init(struct hf_vocab *v)
{
    int i;

    memset(v, 0, sizeof(*v));
    for (i = 0; i < HF_SPECIAL_COUNT; i++)
        v->special[i] = -1;
    v->add_bos = v->add_eos = v->add_space_prefix = -1;
}

static void
free_strs(char **s, int64_t n)
{
    int64_t i;

    if (!s)
        return;
    for (i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

void
hf_vocab_release(struct hf_vocab *v)
{
    int64_t i;

    free_strs(v->tokens, v->n_tokens);
    free(v->token_len);
    free(v->scores);
    free(v->types);
    free_strs(v->merges, v->n_merges);
    free(v->chat_template);
    for (i = 0; i < v->n_extra; i++) {
        free(v->extra[i].key);
        if (v->extra[i].type == GGUF_TYPE_STRING)
            free(v->extra[i].v.s);
    }
    free(v->extra);
    hf_vocab_init(v);
}

/* Allocates n tokens (all NULL), scores and types when asked. */
static int
vocab_alloc(struct hf_vocab *v, int64_t n, bool scores, bool types)
{
    if (n <= 0 || n > HF_MAX_VOCAB)
        return -ST_FORMAT;
    v->tokens = calloc((size_t)n, sizeof(*v->tokens));
    v->token_len = calloc((size_t)n, sizeof(*v->token_len));
    if (scores)
        v->scores = calloc((size_t)n, sizeof(*v->scores));
    if (types)
        v->types = calloc((size_t)n, sizeof(*v->types));
    v->n_tokens = n;
    if (!v->tokens || !v->token_len || (scores && !v->scores) || (types && !v->types))
        return -ST_NOMEM;
    return 0;
}

static int
vocab_set(struct hf_vocab *v, int64_t i, const char *s, size_t n)
{
    char *p = dupn(s, n);

    if (!p)
        return -ST_NOMEM;
    free(v->tokens[i]);
    v->tokens[i] = p;
    v->token_len[i] = (uint32_t)n;
    return 0;
}

/* Fills empty ids with "[PAD<id>]". */
static int
vocab_pad(struct hf_vocab *v, float score)
{
    char buf[32];
    int64_t i;

    for (i = 0; i < v->n_tokens; i++) {
        if (v->tokens[i])
            continue;
        int n = snprintf(buf, sizeof(buf), "[PAD%lld]", (long long)i);
        if (vocab_set(v, i, buf, (size_t)n))
            return -ST_NOMEM;
        if (v->types)
            v->types[i] = HF_TOK_UNUSED;
        if (v->scores)
            v->scores[i] = score;
    }
    return 0;
}

static int
extra_add(struct hf_vocab *v, const char *key, enum gguf_type type)
{
    struct hf_kv *e = realloc(v->extra, (size_t)(v->n_extra + 1) * sizeof(*e));

    if (!e)
        return -ST_NOMEM;
    v->extra = e;
    e = &v->extra[v->n_extra];
    memset(e, 0, sizeof(*e));
    e->type = type;
    e->key = dupn(key, strlen(key));
    if (!e->key)
        return -ST_NOMEM;
    v->n_extra++;
    return 0;
}

/* ---- pre-tokenizers: the HF side of the table (tok_pre.h) ---- */

/* The HF pre_tokenizer of a tokenizer.ggml.pre name, or NULL. */
static const struct tok_pre_hf *
family_of(const char *name)
{
    const struct tok_pre *p = tok_pre_find(name);

    return p ? p->hf : NULL;
}

/* Canonical spelling of a regex for comparison: the case-insensitive
 * contraction group in llama.cpp's spelling, CR/LF as escapes. */
static char *
regex_canon(const char *re)
{
    size_t n = strlen(re), i, o = 0;
    size_t li = strlen(TOK_PRE_HF_CONTRACTIONS), lx = strlen(TOK_PRE_CONTRACTIONS);
    char *s = malloc(n * (lx > 2 ? lx : 2) + 1);

    if (!s)
        return NULL;
    for (i = 0; i < n;) {
        if (!strncmp(re + i, TOK_PRE_HF_CONTRACTIONS, li)) {
            memcpy(s + o, TOK_PRE_CONTRACTIONS, lx);
            o += lx;
            i += li;
        } else if (re[i] == '\r' || re[i] == '\n') {
            s[o++] = '\\';
            s[o++] = re[i] == '\r' ? 'r' : 'n';
            i++;
        } else {
            s[o++] = re[i++];
        }
    }
    s[o] = '\0';
    return s;
}

/* Flattens a pre_tokenizer into steps.  Returns the count, or -1 when a step
 * is of a kind or setting the table cannot hold. */
static int
pt_flatten(const json_t *pt, struct tok_pre_hf_step *out, char **regex_store, int n, int max)
{
    const char *type;
    const json_t *x;

    if (!json_is_object(pt) || json_obj_str(pt, "type", &type, NULL) != 0)
        return -1;
    if (!strcmp(type, "Sequence")) {
        const json_t *seq = member(pt, "pretokenizers");
        size_t i;
        if (!json_is_array(seq))
            return -1;
        for (i = 0; i < json_array_size(seq); i++) {
            n = pt_flatten(json_array_get(seq, i), out, regex_store, n, max);
            if (n < 0)
                return -1;
        }
        return n;
    }
    if (n >= max)
        return -1;
    memset(&out[n], 0, sizeof(out[n]));
    if (!strcmp(type, "ByteLevel")) {
        bool aps = true, ur = true;   /* HF defaults */
        if (json_obj_bool(pt, "add_prefix_space", &aps, NULL) < 0 ||
            json_obj_bool(pt, "use_regex", &ur, NULL) < 0 || aps)
            return -1;
        out[n].kind = TOK_PRE_HF_BYTELEVEL;
        out[n].flag = ur;
    } else if (!strcmp(type, "Digits")) {
        bool ind = false;
        if (json_obj_bool(pt, "individual_digits", &ind, NULL) < 0)
            return -1;
        out[n].kind = TOK_PRE_HF_DIGITS;
        out[n].flag = ind;
    } else if (!strcmp(type, "Punctuation")) {
        const char *b = "Isolated";
        if (json_obj_str(pt, "behavior", &b, NULL) < 0 || strcasecmp(b, "contiguous"))
            return -1;
        out[n].kind = TOK_PRE_HF_PUNCT;
    } else if (!strcmp(type, "Split")) {
        const char *b = NULL, *re = NULL;
        bool inv = false;
        x = member(pt, "pattern");
        if (json_obj_str(x, "Regex", &re, NULL) != 0 ||
            json_obj_str(pt, "behavior", &b, NULL) != 0 || strcasecmp(b, "isolated") ||
            json_obj_bool(pt, "invert", &inv, NULL) < 0 || inv)
            return -1;
        if (strlen(re) > 4096)
            return -1;
        out[n].kind = TOK_PRE_HF_SPLIT;
        regex_store[n] = regex_canon(re);
        if (!regex_store[n])
            return -1;
        out[n].regex = regex_store[n];
    } else {
        return -1;
    }
    return n + 1;
}

static bool
family_matches(const struct tok_pre_hf *f, const struct tok_pre_hf_step *s, int n)
{
    int i;

    if (n != f->n_steps)
        return false;
    for (i = 0; i < n; i++) {
        if (s[i].kind != f->steps[i].kind)
            return false;
        if (s[i].kind == TOK_PRE_HF_SPLIT) {
            char *c = regex_canon(f->steps[i].regex);
            bool eq = c && !strcmp(c, s[i].regex);
            free(c);
            if (!eq)
                return false;
        } else if (s[i].kind != TOK_PRE_HF_PUNCT && s[i].flag != f->steps[i].flag) {
            return false;
        }
    }
    return true;
}

const char *
hf_pre_match(const json_t *pre_tokenizer, const char *hint)
{
    struct tok_pre_hf_step steps[TOK_PRE_HF_MAX_STEPS];
    char *store[TOK_PRE_HF_MAX_STEPS] = {0};
    const struct tok_pre_hf *hit = NULL;
    int n, i;
    size_t f;

    n = pre_tokenizer ? pt_flatten(pre_tokenizer, steps, store, 0, TOK_PRE_HF_MAX_STEPS) : -1;
    for (f = 0; n > 0 && tok_pre_hf_get(f) && !hit; f++)
        if (family_matches(tok_pre_hf_get(f), steps, n))
            hit = tok_pre_hf_get(f);
    for (i = 0; i < TOK_PRE_HF_MAX_STEPS; i++)
        free(store[i]);
    if (!hit)
        return NULL;
    if (hint && strlen(hint) >= sizeof(((struct hf_vocab *)0)->pre))
        hint = NULL;
    if (hint && family_of(hint) == hit)
        return hint;
    /* A name this table does not know was exported with the GPT-2 fallback. */
    if (hint && *hint && !family_of(hint) && hit == tok_pre_hf_get(0))
        return hint;
    return hit->name;
}

static json_t *
pt_step_json(const struct tok_pre_hf_step *s)
{
    switch (s->kind) {
    case TOK_PRE_HF_SPLIT:
        return json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex",
                         s->regex, "behavior", "Isolated", "invert", 0);
    case TOK_PRE_HF_BYTELEVEL:
        return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                         "trim_offsets", 1, "use_regex", s->flag);
    case TOK_PRE_HF_DIGITS:
        return json_pack("{s:s, s:b}", "type", "Digits", "individual_digits", s->flag);
    case TOK_PRE_HF_PUNCT:
        return json_pack("{s:s, s:s}", "type", "Punctuation", "behavior", "Contiguous");
    }
    return NULL;
}

static json_t *
pt_family_json(const struct tok_pre_hf *f)
{
    json_t *arr;
    int i;

    if (f->n_steps == 1)
        return pt_step_json(&f->steps[0]);
    arr = json_array();
    for (i = 0; arr && i < f->n_steps; i++)
        if (json_array_append_new(arr, pt_step_json(&f->steps[i]))) {
            json_decref(arr);
            return NULL;
        }
    return arr ? json_pack("{s:s, s:o}", "type", "Sequence", "pretokenizers", arr) : NULL;
}

/* ---- SentencePiece ModelProto (tokenizer.model) ---- */

struct pb {
    const uint8_t *p, *end;
};

static int
pb_varint(struct pb *b, uint64_t *v)
{
    uint64_t x = 0;
    int i;

    for (i = 0; i < 10; i++) {
        if (b->p >= b->end)
            return -1;
        uint8_t c = *b->p++;
        if (i == 9 && c > 1)
            return -1;
        x |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* Reads a tag; for LEN fields also the payload bounds. */
static int
pb_next(struct pb *b, uint32_t *field, int *wt, struct pb *sub)
{
    uint64_t tag, len;

    if (pb_varint(b, &tag) || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX)
        return -1;
    *field = (uint32_t)(tag >> 3);
    *wt = (int)(tag & 7);
    switch (*wt) {
    case 0:
        return 0;
    case 1:
        if (b->end - b->p < 8)
            return -1;
        sub->p = b->p;
        sub->end = b->p + 8;
        return 0;
    case 2:
        if (pb_varint(b, &len) || len > (uint64_t)(b->end - b->p))
            return -1;
        sub->p = b->p;
        sub->end = b->p + len;
        return 0;
    case 5:
        if (b->end - b->p < 4)
            return -1;
        sub->p = b->p;
        sub->end = b->p + 4;
        return 0;
    default:
        return -1;    /* groups (3, 4) and reserved types */
    }
}

/* Consumes the payload of the field pb_next() just returned (wt != 0 payloads
 * are skipped; a varint is read into *v when v is not NULL). */
static int
pb_consume(struct pb *b, int wt, const struct pb *sub, uint64_t *v)
{
    uint64_t tmp;

    if (wt == 0)
        return pb_varint(b, v ? v : &tmp);
    b->p = sub->end;
    return 0;
}

struct spm_piece {
    const uint8_t *text;
    uint32_t len;
    float score;
    int32_t type;
};

static int
spm_piece_parse(struct pb m, struct spm_piece *pc, struct diag *d, int64_t idx)
{
    uint32_t f;
    int wt;
    struct pb sub;
    uint64_t v;

    pc->text = (const uint8_t *)"";
    pc->len = 0;
    pc->score = 0;
    pc->type = HF_TOK_NORMAL;
    while (m.p < m.end) {
        if (pb_next(&m, &f, &wt, &sub))
            return diag_set(d, ST_FORMAT, SP ": piece %lld: malformed field", (long long)idx);
        if (f == 1 && wt == 2) {
            if (sub.end - sub.p > (ptrdiff_t)HF_MAX_TOKEN_BYTES)
                return diag_set(d, ST_FORMAT, SP ": piece %lld is too long", (long long)idx);
            pc->text = sub.p;
            pc->len = (uint32_t)(sub.end - sub.p);
        } else if (f == 2 && wt == 5) {
            uint32_t u = (uint32_t)sub.p[0] | (uint32_t)sub.p[1] << 8 |
                         (uint32_t)sub.p[2] << 16 | (uint32_t)sub.p[3] << 24;
            memcpy(&pc->score, &u, 4);
        } else if (f == 3 && wt == 0) {
            if (pb_varint(&m, &v))
                return diag_set(d, ST_FORMAT, SP ": piece %lld: bad type", (long long)idx);
            if (v < 1 || v > 6)
                return diag_set(d, ST_FORMAT, SP ": piece %lld: unknown type %llu",
                                (long long)idx, (unsigned long long)v);
            pc->type = (int32_t)v;
            continue;
        } else if (f <= 3) {
            return diag_set(d, ST_FORMAT, SP ": piece %lld: field %u has wire type %d",
                            (long long)idx, f, wt);
        }
        if (pb_consume(&m, wt, &sub, NULL))
            return diag_set(d, ST_FORMAT, SP ": piece %lld: truncated", (long long)idx);
    }
    return 0;
}

/* Parses the pieces of a ModelProto.  *out is malloc'd and points into buf. */
static int
spm_parse(const void *buf, size_t len, struct spm_piece **out, int64_t *n_out, struct diag *d)
{
    struct pb b = {buf, (const uint8_t *)buf + len}, sub;
    struct spm_piece *pcs;
    int64_t n = 0, i = 0;
    uint32_t f;
    int wt, rc;

    *out = NULL;
    *n_out = 0;
    while (b.p < b.end) {   /* pass 1: count and check the framing */
        if (pb_next(&b, &f, &wt, &sub) || pb_consume(&b, wt, &sub, NULL))
            return diag_set(d, ST_FORMAT, SP ": malformed protobuf at byte %lld",
                            (long long)(b.p - (const uint8_t *)buf));
        if (f == 1) {
            if (wt != 2)
                return diag_set(d, ST_FORMAT, SP ": 'pieces' has wire type %d", wt);
            if (++n > HF_MAX_VOCAB)
                return diag_set(d, ST_FORMAT, SP ": more than %lld pieces",
                                (long long)HF_MAX_VOCAB);
        }
    }
    if (n == 0)
        return diag_set(d, ST_FORMAT, SP ": no pieces");
    pcs = calloc((size_t)n, sizeof(*pcs));
    if (!pcs)
        return diag_set(d, ST_NOMEM, "out of memory");
    b.p = buf;
    while (b.p < b.end) {
        pb_next(&b, &f, &wt, &sub);
        if (f == 1) {
            if ((rc = spm_piece_parse(sub, &pcs[i], d, i)) < 0) {
                free(pcs);
                return rc;
            }
            i++;
        }
        pb_consume(&b, wt, &sub, NULL);
    }
    *out = pcs;
    *n_out = n;
    return 0;
}

/* A growable byte buffer for the protobuf writer. */
struct obuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
};

static void
ob_put(struct obuf *o, const void *s, size_t n)
{
    if (o->oom)
        return;
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->n + n)
            cap *= 2;
        uint8_t *p = realloc(o->p, cap);
        if (!p) {
            o->oom = true;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
    memcpy(o->p + o->n, s, n);
    o->n += n;
}

static size_t
varint_len(uint64_t v)
{
    size_t n = 1;

    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static void
ob_varint(struct obuf *o, uint64_t v)
{
    uint8_t b[10];
    size_t n = 0;

    while (v >= 0x80) {
        b[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b[n++] = (uint8_t)v;
    ob_put(o, b, n);
}

static void
ob_tag(struct obuf *o, uint32_t field, int wt)
{
    ob_varint(o, (uint64_t)field << 3 | (uint64_t)wt);
}

static void
ob_int32(struct obuf *o, uint32_t field, int64_t v)
{
    ob_tag(o, field, 0);
    ob_varint(o, (uint64_t)v);    /* negative int32: ten bytes, as protobuf does */
}

/* The SentencePiece type a token is written with: its GGUF type when SP has
 * it, NORMAL otherwise, UNKNOWN for the unk piece (spm_unk) and UNUSED for
 * every other UNKNOWN token (SentencePiece refuses a model with none or two).
 * Tokens whose type changes are recorded in the llmkit marker. */
static int32_t
spm_type(const struct hf_vocab *v, int64_t i, int64_t unk)
{
    int32_t t = v->types ? v->types[i] : HF_TOK_NORMAL;

    if (i == unk)
        return HF_TOK_UNKNOWN;
    if (t < 1 || t > 6)
        return HF_TOK_NORMAL;
    if (t == HF_TOK_UNKNOWN && i != unk)
        return HF_TOK_UNUSED;
    return t;
}

/* The one UNKNOWN token SentencePiece gets: the unk id when it is UNKNOWN,
 * else the first UNKNOWN token, else the unk id whatever its type (llama.cpp's
 * converter types Gemma's <unk> CONTROL; SentencePiece will not load a model
 * without an unk piece), else -1. */
static int64_t
spm_unk(const struct hf_vocab *v)
{
    int64_t u = v->special[HF_SPECIAL_UNK], i;

    if (!v->types)
        return -1;
    if (u >= 0 && u < v->n_tokens && v->types[u] == HF_TOK_UNKNOWN)
        return u;
    for (i = 0; i < v->n_tokens; i++)
        if (v->types[i] == HF_TOK_UNKNOWN)
            return i;
    return u >= 0 && u < v->n_tokens ? u : -1;
}

int
hf_spm_write(const struct hf_vocab *v, uint8_t **out, size_t *len, struct diag *d)
{
    struct obuf o = {0}, ts = {0}, ns = {0};
    bool has_byte = false;
    int64_t i, unk = spm_unk(v);

    *out = NULL;
    *len = 0;
    if (strcmp(v->model, "llama"))
        return diag_set(d, ST_RANGE, "only a SentencePiece (llama) vocabulary has a tokenizer.model");
    for (i = 0; i < v->n_tokens; i++) {
        int32_t t = spm_type(v, i, unk);
        uint32_t n = v->token_len[i];
        float s = v->scores ? v->scores[i] : 0.0f;
        uint32_t u;
        uint8_t le[4];
        size_t sz;

        has_byte |= t == HF_TOK_BYTE;
        sz = 1 + varint_len(n) + n + 5 + (t != HF_TOK_NORMAL ? 2 : 0);
        ob_tag(&o, 1, 2);
        ob_varint(&o, sz);
        ob_tag(&o, 1, 2);
        ob_varint(&o, n);
        ob_put(&o, v->tokens[i], n);
        memcpy(&u, &s, 4);
        le[0] = (uint8_t)u;
        le[1] = (uint8_t)(u >> 8);
        le[2] = (uint8_t)(u >> 16);
        le[3] = (uint8_t)(u >> 24);
        ob_tag(&o, 2, 5);
        ob_put(&o, le, 4);
        if (t != HF_TOK_NORMAL) {
            ob_tag(&o, 3, 0);
            ob_varint(&o, (uint64_t)t);
        }
    }
    /* TrainerSpec: model_type BPE, vocab_size, byte_fallback, unk/bos/eos/pad ids */
    ob_int32(&ts, 3, 2);
    ob_int32(&ts, 4, v->n_tokens);
    if (has_byte)
        ob_int32(&ts, 35, 1);
    ob_int32(&ts, 40, unk >= 0 ? unk : 0);
    ob_int32(&ts, 41, v->special[HF_SPECIAL_BOS]);
    ob_int32(&ts, 42, v->special[HF_SPECIAL_EOS]);
    ob_int32(&ts, 43, v->special[HF_SPECIAL_PAD]);
    ob_tag(&o, 2, 2);
    ob_varint(&o, ts.n);
    ob_put(&o, ts.p, ts.n);
    /* NormalizerSpec: identity, add_dummy_prefix, no whitespace squeezing */
    ob_tag(&ns, 1, 2);
    ob_varint(&ns, 8);
    ob_put(&ns, "identity", 8);
    ob_int32(&ns, 3, v->add_space_prefix != 0);
    ob_int32(&ns, 4, 0);
    ob_int32(&ns, 5, 1);
    ob_tag(&o, 3, 2);
    ob_varint(&o, ns.n);
    ob_put(&o, ns.p, ns.n);
    free(ts.p);
    free(ns.p);
    if (o.oom || ts.oom || ns.oom) {
        free(o.p);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    *out = o.p;
    *len = o.n;
    return 0;
}

/* ---- HF files -> struct hf_vocab ---- */

/* One added token (tokenizer.json added_tokens / tokenizer_config.json
 * added_tokens_decoder). */
struct added {
    int64_t id;
    const char *content;
    size_t len;
    bool special;
};

struct ctx {
    struct hf_vocab *v;
    const struct hf_vocab_src *s;
    json_t *tj;              /* tokenizer.json, or NULL */
    json_t *tc;              /* tokenizer_config.json, or NULL */
    const json_t *marker;    /* tc.llmkit_gguf, or NULL */
    struct added *add;       /* tokenizer.json added_tokens then tc-only entries */
    int64_t n_add;
    struct diag *d;
};

static int
load_json(const char *buf, size_t len, const char *file, json_t **out, struct diag *d)
{
    int rc;

    *out = NULL;
    if (!buf)
        return 0;
    if ((rc = json_load_mem(buf, len, out, d)) < 0) {
        diag_prefix(d, "%s", file);
        return rc;
    }
    if (!json_is_object(*out)) {
        json_decref(*out);
        *out = NULL;
        return diag_set(d, ST_FORMAT, "%s: not a JSON object", file);
    }
    return 0;
}

/* A JSON string as bytes, bounded. */
static int
jstr(const json_t *x, const char **s, size_t *n)
{
    if (!json_is_string(x))
        return -1;
    *s = json_string_value(x);
    *n = json_string_length(x);
    return *n <= HF_MAX_TOKEN_BYTES ? 0 : -1;
}

/* Collects added tokens: tokenizer.json added_tokens, then entries of
 * tokenizer_config.json added_tokens_decoder whose id is not listed yet. */
static int
collect_added(struct ctx *c)
{
    const json_t *a = member(c->tj, "added_tokens");
    const json_t *dec = member(c->tc, "added_tokens_decoder");
    size_t na = 0, nd = 0, i;
    const char *key;
    const json_t *val;
    struct diag *d = c->d;
    uint8_t *seen;     /* bitmap of the ids already collected */
    int rc = 0;

    if (a && !json_is_array(a))
        return diag_set(d, ST_FORMAT, TJ ": 'added_tokens' is not an array");
    if (dec && !json_is_object(dec))
        return diag_set(d, ST_FORMAT, TC ": 'added_tokens_decoder' is not an object");
    na = a ? json_array_size(a) : 0;
    nd = dec ? json_object_size(dec) : 0;
    if (na + nd > (size_t)HF_MAX_VOCAB)
        return diag_set(d, ST_FORMAT, TJ ": too many added tokens");
    c->add = calloc(na + nd + 1, sizeof(*c->add));
    seen = calloc((size_t)HF_MAX_VOCAB / 8, 1);
    if (!c->add || !seen) {
        free(seen);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    for (i = 0; i < na; i++) {
        const json_t *t = json_array_get(a, i);
        struct added *e = &c->add[c->n_add];
        json_int_t id;
        bool sp = false;
        if (!json_is_object(t) || !json_is_integer(member(t, "id"))) {
            rc = diag_set(d, ST_FORMAT, TJ ": added_tokens[%zu]: 'id' is not an integer", i);
            goto out;
        }
        id = json_integer_value(member(t, "id"));
        if (id < 0 || id >= HF_MAX_VOCAB) {
            rc = diag_set(d, ST_FORMAT, TJ ": added_tokens[%zu]: id %lld is out of range", i,
                          (long long)id);
            goto out;
        }
        if (jstr(member(t, "content"), &e->content, &e->len)) {
            rc = diag_set(d, ST_FORMAT, TJ ": added_tokens[%zu]: bad 'content'", i);
            goto out;
        }
        if (json_obj_bool(t, "special", &sp, NULL) < 0) {
            rc = diag_set(d, ST_FORMAT, TJ ": added_tokens[%zu]: 'special' is not a boolean", i);
            goto out;
        }
        e->id = id;
        e->special = sp;
        seen[id >> 3] |= (uint8_t)(1u << (id & 7));
        c->n_add++;
    }
    json_object_foreach((json_t *)dec, key, val) {
        struct added *e = &c->add[c->n_add];
        char *end;
        long long id = strtoll(key, &end, 10);
        bool sp = false;
        if (!*key || *end || id < 0 || id >= HF_MAX_VOCAB) {
            rc = diag_set(d, ST_FORMAT, TC ": added_tokens_decoder: bad id '%.32s'", key);
            goto out;
        }
        if (!json_is_object(val) || jstr(member(val, "content"), &e->content, &e->len)) {
            rc = diag_set(d, ST_FORMAT, TC ": added_tokens_decoder '%s': bad 'content'", key);
            goto out;
        }
        if (json_obj_bool(val, "special", &sp, NULL) < 0) {
            rc = diag_set(d, ST_FORMAT,
                          TC ": added_tokens_decoder '%s': 'special' is not a boolean", key);
            goto out;
        }
        if (seen[id >> 3] & (1u << (id & 7)))
            continue;
        seen[id >> 3] |= (uint8_t)(1u << (id & 7));
        e->id = id;
        e->special = sp;
        c->n_add++;
    }
out:
    free(seen);
    return rc;
}

/* Merges from tokenizer.json (strings or pairs) or merges.txt. */
static int
load_merges(struct ctx *c, const json_t *model)
{
    struct hf_vocab *v = c->v;
    const json_t *m = member(model, "merges");
    struct diag *d = c->d;
    size_t i, n;

    if (m && !json_is_array(m))
        return diag_set(d, ST_FORMAT, TJ ": 'model.merges' is not an array");
    n = m ? json_array_size(m) : 0;
    if (n > (size_t)HF_MAX_VOCAB)
        return diag_set(d, ST_FORMAT, TJ ": too many merges");
    if (n > 0) {
        v->merges = calloc(n, sizeof(*v->merges));
        if (!v->merges)
            return diag_set(d, ST_NOMEM, "out of memory");
        for (i = 0; i < n; i++) {
            const json_t *x = json_array_get(m, i);
            const char *a, *b;
            size_t la, lb, k, o = 0;
            char *s;
            if (json_is_string(x)) {
                if (jstr(x, &a, &la))
                    return diag_set(d, ST_FORMAT, TJ ": merge %zu is too long", i);
                s = dupn(a, la);
            } else if (json_is_array(x) && json_array_size(x) == 2) {
                if (jstr(json_array_get(x, 0), &a, &la) || jstr(json_array_get(x, 1), &b, &lb))
                    return diag_set(d, ST_FORMAT, TJ ": merge %zu is not two strings", i);
                /* a literal space inside a part becomes U+0120, as gguf-py does */
                s = malloc(3 * (la + lb) + 2);
                if (s) {
                    for (k = 0; k < la + lb + 1; k++) {
                        char ch = k < la ? a[k] : k == la ? 0 : b[k - la - 1];
                        if (k == la) {
                            s[o++] = ' ';
                        } else if (ch == ' ') {
                            s[o++] = (char)0xc4;
                            s[o++] = (char)0xa0;
                        } else {
                            s[o++] = ch;
                        }
                    }
                    s[o] = '\0';
                }
            } else {
                return diag_set(d, ST_FORMAT, TJ ": merge %zu is neither a string nor a pair", i);
            }
            if (!s)
                return diag_set(d, ST_NOMEM, "out of memory");
            v->merges[i] = s;
            v->n_merges = (int64_t)i + 1;
        }
    } else if (c->s->merges_txt) {
        const char *p = c->s->merges_txt, *end = p + c->s->merges_txt_len;
        int64_t cap = 0;
        bool first = true;
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            const char *le = nl ? nl : end;
            const char *f[3];
            size_t fl[3];
            int nf = 0;
            const char *q = p;
            if (!(first && le > p && *p == '#')) {
                while (q < le && nf < 3) {
                    while (q < le && (*q == ' ' || *q == '\t' || *q == '\r'))
                        q++;
                    if (q == le)
                        break;
                    f[nf] = q;
                    while (q < le && *q != ' ' && *q != '\t' && *q != '\r')
                        q++;
                    fl[nf] = (size_t)(q - f[nf]);
                    nf++;
                }
                if (nf == 3 || nf == 1)
                    return diag_set(d, ST_FORMAT, "merges.txt: line %lld is not two tokens",
                                    (long long)v->n_merges + 1);
                if (nf == 2) {
                    if (fl[0] + fl[1] > HF_MAX_TOKEN_BYTES || v->n_merges >= HF_MAX_VOCAB)
                        return diag_set(d, ST_FORMAT, "merges.txt: too large");
                    if (v->n_merges == cap) {
                        cap = cap ? cap * 2 : 1024;
                        char **nm = realloc(v->merges, (size_t)cap * sizeof(*nm));
                        if (!nm)
                            return diag_set(d, ST_NOMEM, "out of memory");
                        v->merges = nm;
                    }
                    char *s = malloc(fl[0] + fl[1] + 2);
                    if (!s)
                        return diag_set(d, ST_NOMEM, "out of memory");
                    memcpy(s, f[0], fl[0]);
                    s[fl[0]] = ' ';
                    memcpy(s + fl[0] + 1, f[1], fl[1]);
                    s[fl[0] + fl[1] + 1] = '\0';
                    v->merges[v->n_merges++] = s;
                }
            }
            first = false;
            p = nl ? nl + 1 : end;
        }
    }
    v->has_merges = v->n_merges > 0;
    return 0;
}

/* model.vocab of a BPE tokenizer.json plus the added tokens -> tokens[].
 * Types: added special -> CONTROL, added other -> USER_DEFINED, vocab ->
 * NORMAL, missing ids -> [PAD<id>] UNUSED.  Heuristics per hf.h unless the
 * llmkit marker is present. */
static int
load_bpe_tokens(struct ctx *c, const json_t *model, bool spm_like)
{
    struct hf_vocab *v = c->v;
    const json_t *vocab = member(model, "vocab");
    struct diag *d = c->d;
    const bool verbatim = c->marker != NULL;
    const char *key;
    const json_t *val;
    int64_t n, limit, max_id = -1, i;
    int rc;

    if (!json_is_object(vocab))
        return diag_set(d, ST_FORMAT, TJ ": 'model.vocab' is not an object");
    if (json_object_size(vocab) > (size_t)HF_MAX_VOCAB)
        return diag_set(d, ST_FORMAT, TJ ": more than %lld tokens", (long long)HF_MAX_VOCAB);
    limit = c->s->n_vocab > 0 ? c->s->n_vocab
                              : (int64_t)json_object_size(vocab) + c->n_add;
    json_object_foreach((json_t *)vocab, key, val) {
        json_int_t id;
        if (!json_is_integer(val))
            return diag_set(d, ST_FORMAT, TJ ": vocab entry '%.64s' is not an integer", key);
        id = json_integer_value(val);
        if (id < 0 || id >= limit)
            return diag_set(d, ST_FORMAT, TJ ": token id %lld is out of range (vocab size %lld)",
                            (long long)id, (long long)limit);
        if (id > max_id)
            max_id = id;
    }
    for (i = 0; i < c->n_add; i++) {
        /* convert_hf_to_gguf asserts max(tokenizer.vocab ids) < vocab_size */
        if (c->add[i].id >= limit)
            return diag_set(d, ST_FORMAT, TJ ": added token id %lld is out of range "
                            "(vocab size %lld)", (long long)c->add[i].id, (long long)limit);
        if (c->add[i].id > max_id && c->add[i].id < limit)
            max_id = c->add[i].id;
    }
    n = c->s->n_vocab > 0 ? c->s->n_vocab : max_id + 1;
    if (n <= 0)
        return diag_set(d, ST_FORMAT, TJ ": empty vocabulary");
    if ((rc = vocab_alloc(v, n, spm_like, true)) < 0)
        return diag_set(d, -rc, rc == -ST_NOMEM ? "out of memory" : TJ ": bad vocabulary size");
    json_object_foreach((json_t *)vocab, key, val) {
        json_int_t id = json_integer_value(val);
        size_t len = strlen(key);
        if (v->tokens[id])
            return diag_set(d, ST_FORMAT, TJ ": token id %lld appears twice in model.vocab",
                            (long long)id);
        if (len > HF_MAX_TOKEN_BYTES)
            return diag_set(d, ST_FORMAT, TJ ": token %lld is too long", (long long)id);
        if (vocab_set(v, id, key, len))
            return diag_set(d, ST_NOMEM, "out of memory");
        v->types[id] = spm_like && is_byte_token(key, len) ? HF_TOK_BYTE : HF_TOK_NORMAL;
        if (spm_like)
            v->scores[id] = -1000.0f;
    }
    for (i = 0; i < c->n_add; i++) {
        const struct added *e = &c->add[i];
        if (vocab_set(v, e->id, e->content, e->len))
            return diag_set(d, ST_NOMEM, "out of memory");
        if (e->special || (!verbatim && !spm_like && looks_special(e->content, e->len))) {
            v->types[e->id] = HF_TOK_CONTROL;
        } else {
            v->types[e->id] = HF_TOK_USER_DEFINED;
            if (!verbatim && !spm_like)
                v->token_len[e->id] = unescape_spaces(v->tokens[e->id], v->token_len[e->id]);
        }
        if (spm_like)
            v->scores[e->id] = -1000.0f;
    }
    if (vocab_pad(v, -1000.0f))
        return diag_set(d, ST_NOMEM, "out of memory");
    return 0;
}

static int
load_spm(struct ctx *c)
{
    struct hf_vocab *v = c->v;
    struct diag *d = c->d;
    const bool verbatim = c->marker != NULL;
    struct spm_piece *pcs;
    json_t *at = NULL;
    int64_t np, n, i;
    int rc;

    if ((rc = spm_parse(c->s->spm_model, c->s->spm_model_len, &pcs, &np, d)) < 0)
        return rc;
    n = c->s->n_vocab > 0 ? c->s->n_vocab : np;
    if ((rc = vocab_alloc(v, n, true, true)) < 0) {
        free(pcs);
        return diag_set(d, -rc, "out of memory");
    }
    for (i = 0; i < n && i < np; i++) {
        if (vocab_set(v, i, (const char *)pcs[i].text, pcs[i].len)) {
            free(pcs);
            return diag_set(d, ST_NOMEM, "out of memory");
        }
        v->scores[i] = pcs[i].score;
        /* _create_vocab_sentencepiece asks IsUnknown, IsControl, IsUnused,
         * IsByte; any other piece (USER_DEFINED included) is NORMAL: user
         * tokens come from added_tokens.json / added_tokens_decoder.  Our
         * own export (the marker) keeps the GGUF's types verbatim. */
        v->types[i] = verbatim || pcs[i].type == HF_TOK_UNKNOWN || pcs[i].type == HF_TOK_CONTROL ||
                              pcs[i].type == HF_TOK_UNUSED || pcs[i].type == HF_TOK_BYTE
                          ? pcs[i].type : HF_TOK_NORMAL;
    }
    free(pcs);
    if (vocab_pad(v, -10000.0f))
        return diag_set(d, ST_NOMEM, "out of memory");

    /* added_tokens.json: {"text": id} -> USER_DEFINED, score -1000 */
    if ((rc = load_json(c->s->added_tokens_json, c->s->added_tokens_json_len,
                        "added_tokens.json", &at, d)) < 0)
        return rc;
    if (at) {
        const char *key;
        const json_t *val;
        json_object_foreach(at, key, val) {
            json_int_t id;
            size_t len = strlen(key);
            if (!json_is_integer(val)) {
                json_decref(at);
                return diag_set(d, ST_FORMAT, "added_tokens.json: '%.64s' is not an integer", key);
            }
            id = json_integer_value(val);
            if (id < 0 || id >= n || len > HF_MAX_TOKEN_BYTES)
                continue;
            if (vocab_set(v, id, key, len)) {
                json_decref(at);
                return diag_set(d, ST_NOMEM, "out of memory");
            }
            v->scores[id] = -1000.0f;
            v->types[id] = HF_TOK_USER_DEFINED;
        }
        json_decref(at);
    }

    /* tokenizer_config.json added_tokens_decoder (convert_hf_to_gguf.py
     * _create_vocab_sentencepiece) */
    const json_t *dec = member(c->tc, "added_tokens_decoder");
    const char *key;
    const json_t *val;
    if (dec && !json_is_object(dec))
        return diag_set(d, ST_FORMAT, TC ": 'added_tokens_decoder' is not an object");
    json_object_foreach((json_t *)dec, key, val) {
        char *end;
        long long id = strtoll(key, &end, 10);
        const char *s;
        size_t len;
        bool sp = false;
        int32_t want;
        if (!*key || *end || id < 0)
            return diag_set(d, ST_FORMAT, TC ": added_tokens_decoder: bad id '%.32s'", key);
        if (!json_is_object(val) || jstr(member(val, "content"), &s, &len))
            return diag_set(d, ST_FORMAT, TC ": added_tokens_decoder '%s': bad 'content'", key);
        if (json_obj_bool(val, "special", &sp, NULL) < 0)
            return diag_set(d, ST_FORMAT,
                            TC ": added_tokens_decoder '%s': 'special' is not a boolean", key);
        if (id >= n)
            continue;
        want = sp || (!verbatim && looks_special(s, len)) ? HF_TOK_CONTROL : HF_TOK_USER_DEFINED;
        if (verbatim && v->types[id] == want && v->token_len[id] == len &&
            !memcmp(v->tokens[id], s, len))
            continue;   /* already exact in tokenizer.model: keep its score */
        if (vocab_set(v, id, s, len))
            return diag_set(d, ST_NOMEM, "out of memory");
        if (want == HF_TOK_USER_DEFINED && !verbatim)
            v->token_len[id] = unescape_spaces(v->tokens[id], v->token_len[id]);
        v->types[id] = want;
        v->scores[id] = -1000.0f;
    }
    snprintf(v->model, sizeof(v->model), "llama");
    snprintf(v->pre, sizeof(v->pre), "default");
    return 0;
}

/* The content of a tokenizer_config.json <typ>_token entry, or NULL. */
static const char *
tc_token(const json_t *tc, const char *typ, size_t *len)
{
    char key[32];
    const json_t *x;
    const char *s;

    snprintf(key, sizeof(key), "%s_token", typ);
    x = member(tc, key);
    if (json_is_object(x))
        x = member(x, "content");
    if (!x || jstr(x, &s, len))
        return NULL;
    return s;
}

static bool
str_eq(const char *a, size_t la, const char *b, size_t lb)
{
    return a && b && la == lb && !memcmp(a, b, la);
}

/* Special ids, add_bos/add_eos and the other SpecialVocab settings. */
static int
load_specials(struct ctx *c)
{
    struct hf_vocab *v = c->v;
    struct diag *d = c->d;
    const json_t *pp = member(c->tj, "post_processor");
    const json_t *added = member(c->tj, "added_tokens");
    bool b;
    int i, rc;

    for (i = 0; i < HF_SPECIAL_COUNT; i++) {
        const char *s;
        size_t len;
        int64_t id = -1;
        size_t k;
        if ((s = tc_token(c->tc, hf_special_name(i), &len)) && json_is_array(added))
            for (k = 0; k < json_array_size(added); k++) {
                const json_t *t = json_array_get(added, k);
                const char *cs;
                size_t cl;
                if (!jstr(member(t, "content"), &cs, &cl) && str_eq(s, len, cs, cl) &&
                    json_is_integer(member(t, "id"))) {
                    id = json_integer_value(member(t, "id"));
                    break;
                }
            }
        if (id < 0 && c->s->cfg_special)
            id = c->s->cfg_special[i];
        if (id >= 0 && id < v->n_tokens)
            v->special[i] = id;
    }

    /* post_processor: TemplateProcessing / RobertaProcessing (gguf-py) */
    if (pp) {
        const json_t *procs = member(pp, "processors");
        size_t k, np = json_is_array(procs) ? json_array_size(procs) : 1;
        size_t lb = 0, le = 0, lc = 0;
        const char *bos = tc_token(c->tc, "bos", &lb), *eos = tc_token(c->tc, "eos", &le);
        const char *cls = tc_token(c->tc, "cls", &lc);
        for (k = 0; k < np; k++) {
            const json_t *p = json_is_array(procs) ? json_array_get(procs, k) : pp;
            const char *type = NULL;
            if (json_obj_str(p, "type", &type, NULL) != 0)
                continue;
            if (!strcmp(type, "RobertaProcessing")) {
                v->add_bos = v->add_eos = 1;
                break;
            }
            if (!strcmp(type, "TemplateProcessing")) {
                const json_t *single = member(p, "single");
                const char *f, *l;
                size_t fl, ll;
                if (json_is_array(single) && json_array_size(single) > 1) {
                    const json_t *first = member(member(json_array_get(single, 0), "SpecialToken"), "id");
                    const json_t *last = member(member(json_array_get(single,
                                                json_array_size(single) - 1), "SpecialToken"), "id");
                    if (!jstr(first, &f, &fl) && fl > 0) {
                        if (!c->tc) {
                            bos = f;
                            lb = fl;
                        }
                        v->add_bos = str_eq(f, fl, bos, lb) || str_eq(f, fl, cls, lc);
                    }
                    if (!jstr(last, &l, &ll) && ll > 0) {
                        if (!c->tc) {
                            eos = l;
                            le = ll;
                        }
                        v->add_eos = str_eq(l, ll, eos, le);
                    }
                }
                break;
            }
        }
    }
    /* only booleans count (gguf-py isinstance(add_entry, bool)) */
    if (json_obj_bool(c->tc, "add_bos_token", &b, NULL) == 0)
        v->add_bos = b;
    if (json_obj_bool(c->tc, "add_eos_token", &b, NULL) == 0)
        v->add_eos = b;
    if ((rc = json_obj_bool(c->tc, "add_prefix_space", &b, NULL)) == 0)
        v->add_space_prefix = b;
    else if (rc < 0)
        return diag_set(d, ST_FORMAT, TC ": 'add_prefix_space' is not a boolean");
    /* granite small models (LlamaModel.set_vocab); our own export writes the
     * flag whenever the GGUF had it */
    if (c->s->n_vocab == 49152 && c->s->arch == HF_ARCH_LLAMA && !c->marker)
        v->add_bos = 0;

    /* chat template: a string, or a list of {name, template} */
    const json_t *ct = member(c->tc, "chat_template");
    if (json_is_string(ct)) {
        v->chat_template = dupn(json_string_value(ct), json_string_length(ct));
        if (!v->chat_template)
            return diag_set(d, ST_NOMEM, "out of memory");
    } else if (json_is_array(ct)) {
        size_t k;
        for (k = 0; k < json_array_size(ct); k++) {
            const json_t *e = json_array_get(ct, k);
            const char *name, *tmpl;
            char key[160];
            if (json_obj_str(e, "name", &name, NULL) != 0 ||
                json_obj_str(e, "template", &tmpl, NULL) != 0)
                return diag_set(d, ST_FORMAT, TC ": chat_template[%zu] is not {name, template}", k);
            if (!strcmp(name, "default")) {
                free(v->chat_template);
                v->chat_template = dupn(tmpl, strlen(tmpl));
                if (!v->chat_template)
                    return diag_set(d, ST_NOMEM, "out of memory");
                continue;
            }
            if (strlen(name) > 100)
                continue;
            snprintf(key, sizeof(key), "tokenizer.chat_template.%s", name);
            if (extra_add(v, key, GGUF_TYPE_STRING) ||
                !(v->extra[v->n_extra - 1].v.s = dupn(tmpl, strlen(tmpl))))
                return diag_set(d, ST_NOMEM, "out of memory");
        }
    } else if (ct) {
        return diag_set(d, ST_FORMAT, TC ": 'chat_template' is neither a string nor a list");
    } else if (c->s->chat_template_jinja) {
        v->chat_template = dupn(c->s->chat_template_jinja, c->s->chat_template_jinja_len);
        if (!v->chat_template)
            return diag_set(d, ST_NOMEM, "out of memory");
    }
    return 0;
}

static bool known_key(const char *k);

static bool
extra_find(const struct hf_vocab *v, const char *key)
{
    int64_t i;

    for (i = 0; i < v->n_extra; i++)
        if (!strcmp(v->extra[i].key, key))
            return true;
    return false;
}

static enum gguf_type
kv_type_from_name(const char *s)
{
    static const struct {
        const char *name;
        enum gguf_type t;
    } m[] = {
        {"u32", GGUF_TYPE_UINT32}, {"i32", GGUF_TYPE_INT32}, {"u64", GGUF_TYPE_UINT64},
        {"f32", GGUF_TYPE_FLOAT32}, {"bool", GGUF_TYPE_BOOL}, {"str", GGUF_TYPE_STRING},
    };
    size_t i;

    for (i = 0; i < sizeof(m) / sizeof(m[0]); i++)
        if (!strcmp(s, m[i].name))
            return m[i].t;
    return GGUF_TYPE_COUNT;
}

static const char *
kv_type_name(enum gguf_type t)
{
    switch (t) {
    case GGUF_TYPE_UINT32: return "u32";
    case GGUF_TYPE_INT32: return "i32";
    case GGUF_TYPE_UINT64: return "u64";
    case GGUF_TYPE_FLOAT32: return "f32";
    case GGUF_TYPE_BOOL: return "bool";
    case GGUF_TYPE_STRING: return "str";
    default: return NULL;
    }
}

/* The llmkit marker: exact token types, gpt2 scores, SPM merges, keys that
 * were absent, and extra scalar keys. */
static int
apply_marker(struct ctx *c)
{
    struct hf_vocab *v = c->v;
    const json_t *m = c->marker, *x;
    struct diag *d = c->d;
    const char *key;
    const json_t *val;
    size_t i;

    x = member(m, "token_types");
    if (x && !json_is_object(x))
        return diag_set(d, ST_FORMAT, TC ": '" MARKER ".token_types' is not an object");
    json_object_foreach((json_t *)x, key, val) {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || id < 0 || id >= v->n_tokens || !json_is_integer(val) ||
            json_integer_value(val) < INT32_MIN || json_integer_value(val) > INT32_MAX)
            return diag_set(d, ST_FORMAT, TC ": '" MARKER ".token_types': bad entry '%.32s'", key);
        if (v->types)
            v->types[id] = (int32_t)json_integer_value(val);
    }
    x = member(m, "scores");
    if (x) {
        if (!json_is_array(x) || (int64_t)json_array_size(x) != v->n_tokens)
            return diag_set(d, ST_FORMAT, TC ": '" MARKER ".scores' is not an array of %lld",
                            (long long)v->n_tokens);
        free(v->scores);
        v->scores = malloc((size_t)v->n_tokens * sizeof(*v->scores));
        if (!v->scores)
            return diag_set(d, ST_NOMEM, "out of memory");
        for (i = 0; i < json_array_size(x); i++) {
            const json_t *e = json_array_get(x, i);
            if (!json_is_number(e))
                return diag_set(d, ST_FORMAT, TC ": '" MARKER ".scores[%zu]' is not a number", i);
            v->scores[i] = (float)json_number_value(e);
        }
    }
    x = member(m, "merges");
    if (x) {
        if (!json_is_array(x) || json_array_size(x) > (size_t)HF_MAX_VOCAB || v->merges)
            return diag_set(d, ST_FORMAT, TC ": '" MARKER ".merges' is not usable");
        v->merges = calloc(json_array_size(x) + 1, sizeof(*v->merges));
        if (!v->merges)
            return diag_set(d, ST_NOMEM, "out of memory");
        for (i = 0; i < json_array_size(x); i++) {
            const char *s;
            size_t len;
            if (jstr(json_array_get(x, i), &s, &len))
                return diag_set(d, ST_FORMAT, TC ": '" MARKER ".merges[%zu]' is not a string", i);
            if (!(v->merges[i] = dupn(s, len)))
                return diag_set(d, ST_NOMEM, "out of memory");
            v->n_merges = (int64_t)i + 1;
        }
        v->has_merges = true;
    }
    x = member(m, "omit");
    if (x && !json_is_array(x))
        return diag_set(d, ST_FORMAT, TC ": '" MARKER ".omit' is not an array");
    for (i = 0; x && i < json_array_size(x); i++) {
        const char *s = json_string_value(json_array_get(x, i));
        if (!s)
            return diag_set(d, ST_FORMAT, TC ": '" MARKER ".omit[%zu]' is not a string", i);
        if (!strcmp(s, "tokenizer.ggml.scores")) {
            free(v->scores);
            v->scores = NULL;
        } else if (!strcmp(s, "tokenizer.ggml.token_type")) {
            free(v->types);
            v->types = NULL;
        } else if (!strcmp(s, "tokenizer.ggml.pre")) {
            v->pre[0] = '\0';
        }
    }
    x = member(m, "kv");
    if (x && !json_is_object(x))
        return diag_set(d, ST_FORMAT, TC ": '" MARKER ".kv' is not an object");
    json_object_foreach((json_t *)x, key, val) {
        const char *tn = NULL;
        const json_t *xv = json_is_array(val) && json_array_size(val) == 2 ?
                           json_array_get(val, 1) : NULL;
        enum gguf_type t;
        struct hf_kv *e;
        if (!xv || !(tn = json_string_value(json_array_get(val, 0))) ||
            (t = kv_type_from_name(tn)) == GGUF_TYPE_COUNT || strncmp(key, "tokenizer.", 10) ||
            strlen(key) > 200 || known_key(key) || extra_find(v, key))
            return diag_set(d, ST_FORMAT, TC ": '" MARKER ".kv': bad entry '%.64s'", key);
        if (extra_add(v, key, t))
            return diag_set(d, ST_NOMEM, "out of memory");
        e = &v->extra[v->n_extra - 1];
        switch (t) {
        case GGUF_TYPE_UINT32:
        case GGUF_TYPE_UINT64:
        case GGUF_TYPE_INT32:
            if (!json_is_integer(xv) ||
                (t == GGUF_TYPE_UINT32 && (json_integer_value(xv) < 0 ||
                                           json_integer_value(xv) > UINT32_MAX)) ||
                (t == GGUF_TYPE_UINT64 && json_integer_value(xv) < 0) ||
                (t == GGUF_TYPE_INT32 && (json_integer_value(xv) < INT32_MIN ||
                                          json_integer_value(xv) > INT32_MAX)))
                return diag_set(d, ST_FORMAT, TC ": '" MARKER ".kv.%.64s': bad value", key);
            if (t == GGUF_TYPE_INT32)
                e->v.i = json_integer_value(xv);
            else
                e->v.u = (uint64_t)json_integer_value(xv);
            break;
        case GGUF_TYPE_FLOAT32:
            if (!json_is_number(xv))
                return diag_set(d, ST_FORMAT, TC ": '" MARKER ".kv.%.64s': bad value", key);
            e->v.f = (float)json_number_value(xv);
            break;
        case GGUF_TYPE_BOOL:
            if (!json_is_boolean(xv))
                return diag_set(d, ST_FORMAT, TC ": '" MARKER ".kv.%.64s': bad value", key);
            e->v.b = json_is_true(xv);
            break;
        default:
            if (!json_is_string(xv))
                return diag_set(d, ST_FORMAT, TC ": '" MARKER ".kv.%.64s': bad value", key);
            e->v.s = dupn(json_string_value(xv), json_string_length(xv));
            if (!e->v.s)
                return diag_set(d, ST_NOMEM, "out of memory");
            break;
        }
    }
    return 0;
}

static int
from_mem(struct ctx *c)
{
    struct hf_vocab *v = c->v;
    const struct hf_vocab_src *s = c->s;
    struct diag *d = c->d;
    const json_t *model;
    const char *mtype = NULL;
    bool byte_fallback = false;
    int rc, i;

    if (s->n_vocab < 0 || s->n_vocab > HF_MAX_VOCAB)
        return diag_set(d, ST_FORMAT, "vocabulary size %lld is out of range",
                        (long long)s->n_vocab);
    if ((rc = load_json(s->tokenizer_config, s->tokenizer_config_len, TC, &c->tc, d)) < 0 ||
        (rc = load_json(s->tokenizer_json, s->tokenizer_json_len, TJ, &c->tj, d)) < 0)
        return rc;
    c->marker = member(c->tc, MARKER);
    if (c->marker && !json_is_object(c->marker))
        return diag_set(d, ST_FORMAT, TC ": '" MARKER "' is not an object");

    if (s->spm_model) {
        if ((rc = load_spm(c)) < 0)
            return rc;
    } else if (s->arch == HF_ARCH_GEMMA3) {
        /* Gemma3Model.set_vocab would take tokenizer.json as a GPT-2 BPE */
        return diag_set(d, ST_FORMAT, "gemma3 needs its SentencePiece tokenizer.model");
    } else if (c->tj) {
        model = member(c->tj, "model");
        if (!json_is_object(model))
            return diag_set(d, ST_FORMAT, TJ ": 'model' is not an object");
        if (json_obj_str(model, "type", &mtype, NULL) < 0)
            return diag_set(d, ST_FORMAT, TJ ": 'model.type' is not a string");
        /* older files omit model.type for BPE */
        if (mtype && strcmp(mtype, "BPE"))
            return diag_set(d, ST_FORMAT, TJ ": model type '%.32s' is not supported", mtype);
        if (json_obj_bool(model, "byte_fallback", &byte_fallback, NULL) < 0)
            return diag_set(d, ST_FORMAT, TJ ": 'model.byte_fallback' is not a boolean");
        if ((rc = collect_added(c)) < 0)
            return rc;
        if ((rc = load_bpe_tokens(c, model, byte_fallback)) < 0)
            return rc;
        if (byte_fallback) {
            snprintf(v->model, sizeof(v->model), "llama");
            snprintf(v->pre, sizeof(v->pre), "default");
        } else {
            const json_t *hint = member(c->marker, "pre");
            const char *pre;
            snprintf(v->model, sizeof(v->model), "gpt2");
            if ((rc = load_merges(c, model)) < 0)
                return rc;
            pre = hf_pre_match(member(c->tj, "pre_tokenizer"), json_string_value(hint));
            if (!pre) {
                pre = "default";
                v->pre_guessed = true;
                snprintf(v->warning, sizeof(v->warning),
                         TJ ": pre_tokenizer matches no known llama.cpp pre-tokenizer; "
                         "using 'default'");
            }
            snprintf(v->pre, sizeof(v->pre), "%s", pre);
        }
    } else {
        return diag_set(d, ST_FORMAT, "no tokenizer.model or tokenizer.json");
    }
    if (strcmp(v->model, "gpt2") && json_is_string(member(c->marker, "pre")) &&
        json_string_length(member(c->marker, "pre")) < sizeof(v->pre))
        snprintf(v->pre, sizeof(v->pre), "%s", json_string_value(member(c->marker, "pre")));
    if ((rc = load_specials(c)) < 0)
        return rc;
    /* LlamaHfVocab: special ids are CONTROL */
    if (!s->spm_model && byte_fallback)
        for (i = 0; i < HF_SPECIAL_COUNT; i++)
            if (v->special[i] >= 0 && v->types[v->special[i]] == HF_TOK_NORMAL)
                v->types[v->special[i]] = HF_TOK_CONTROL;
    if (c->marker && (rc = apply_marker(c)) < 0)
        return rc;
    /* Gemma3Model.set_vocab: add_add_space_prefix(False) */
    if (s->arch == HF_ARCH_GEMMA3)
        v->add_space_prefix = 0;
    return 0;
}

int
hf_vocab_from_mem(struct hf_vocab *v, const struct hf_vocab_src *s, struct diag *d)
{
    struct ctx c = {v, s, NULL, NULL, NULL, NULL, 0, d};
    int rc;

    hf_vocab_release(v);
    rc = from_mem(&c);
    json_decref(c.tj);
    json_decref(c.tc);
    free(c.add);
    if (rc < 0)
        hf_vocab_release(v);
    return rc;
}

int
hf_vocab_load(struct hf_vocab *v, const char *dir, const struct hf_config *cfg, struct diag *d)
{
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json",
                                        "tokenizer.model", "added_tokens.json", "merges.txt",
                                        "chat_template.jinja"};
    char *buf[6] = {0};
    size_t len[6] = {0};
    struct hf_vocab_src s;
    int rc = 0, i;

    for (i = 0; i < 6; i++) {
        char *p = path_join(dir, names[i]);
        if (!p) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        if (path_exists(p) && (rc = read_file_all(p, JSON_MAX_FILE, &buf[i], &len[i], d)) < 0) {
            free(p);
            goto out;
        }
        free(p);
    }
    memset(&s, 0, sizeof(s));
    s.tokenizer_json = buf[0];
    s.tokenizer_json_len = len[0];
    s.tokenizer_config = buf[1];
    s.tokenizer_config_len = len[1];
    s.spm_model = buf[2];
    s.spm_model_len = len[2];
    s.added_tokens_json = buf[3];
    s.added_tokens_json_len = len[3];
    s.merges_txt = buf[4];
    s.merges_txt_len = len[4];
    s.chat_template_jinja = buf[5];
    s.chat_template_jinja_len = len[5];
    s.n_vocab = cfg ? cfg->n_vocab : 0;
    s.cfg_special = cfg ? cfg->special : NULL;
    s.arch = cfg ? cfg->arch : HF_ARCH_LLAMA;
    rc = hf_vocab_from_mem(v, &s, d);
out:
    for (i = 0; i < 6; i++)
        free(buf[i]);
    return rc;
}

/* ---- struct hf_vocab <-> GGUF ---- */

static bool
known_key(const char *k)
{
    static const char *const known[] = {
        "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
        "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
        "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token",
        "tokenizer.ggml.add_space_prefix", "tokenizer.chat_template",
    };
    size_t i;

    for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (!strcmp(k, known[i]))
            return true;
    for (i = 0; i < HF_SPECIAL_COUNT; i++)
        if (!strcmp(k, hf_special_key(i)))
            return true;
    return false;
}

static int
gg_bool(const struct gguf *g, const char *key, int8_t *out, struct diag *d)
{
    bool b;
    int rc = gguf_get_bool(g, key, &b, d);

    if (rc == 0)
        *out = b;
    return rc < 0 ? rc : 0;
}

int
hf_vocab_from_gguf(struct hf_vocab *v, const struct gguf *g, struct diag *d)
{
    const struct gguf_kv *kv;
    const char *s;
    uint64_t i, n;
    int rc;

    hf_vocab_release(v);
    if ((rc = gguf_get_str(g, "tokenizer.ggml.model", &s, d)) < 0)
        return rc;
    if (rc == 1)
        return diag_set(d, ST_FORMAT, "'tokenizer.ggml.model' is missing");
    if (strcmp(s, "gpt2") && strcmp(s, "llama"))
        return diag_set(d, ST_FORMAT, "tokenizer model '%.32s' is not supported", s);
    snprintf(v->model, sizeof(v->model), "%s", s);
    if ((rc = gguf_get_str(g, "tokenizer.ggml.pre", &s, d)) < 0)
        return rc;
    if (rc == 0) {
        const struct tok_pre *tp = tok_pre_find(s);

        if (strlen(s) >= sizeof(v->pre))
            return diag_set(d, ST_FORMAT, "'tokenizer.ggml.pre' is too long");
        /* gemma4-style BPE is not byte-level: no HF ByteLevel form of it here */
        if (tp && (tp->flags & TOK_PRE_RAW))
            return diag_set(d, ST_FORMAT, "tokenizer pre-tokenizer '%.32s' (raw BPE) is not "
                            "supported", s);
        snprintf(v->pre, sizeof(v->pre), "%s", s);
    }

    kv = gguf_get(g, "tokenizer.ggml.tokens");
    if (!kv || kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING)
        return diag_set(d, ST_FORMAT, "'tokenizer.ggml.tokens' is missing or not a string array");
    n = kv->n;
    if (n == 0 || n > (uint64_t)HF_MAX_VOCAB)
        return diag_set(d, ST_FORMAT, "'tokenizer.ggml.tokens' has %llu entries",
                        (unsigned long long)n);
    if ((rc = vocab_alloc(v, (int64_t)n, false, false)) < 0)
        goto fail_nomem;
    for (i = 0; i < n; i++) {
        if (kv->v.strs[i].n > HF_MAX_TOKEN_BYTES) {
            hf_vocab_release(v);
            return diag_set(d, ST_FORMAT, "token %llu is too long", (unsigned long long)i);
        }
        if (vocab_set(v, (int64_t)i, kv->v.strs[i].p, kv->v.strs[i].n))
            goto fail_nomem;
    }
    kv = gguf_get(g, "tokenizer.ggml.scores");
    if (kv) {
        if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_FLOAT32 || kv->n != n) {
            hf_vocab_release(v);
            return diag_set(d, ST_FORMAT, "'tokenizer.ggml.scores' is not FLOAT32[%llu]",
                            (unsigned long long)n);
        }
        if (!(v->scores = malloc(n * sizeof(float))))
            goto fail_nomem;
        memcpy(v->scores, kv->v.arr, n * sizeof(float));
    }
    kv = gguf_get(g, "tokenizer.ggml.token_type");
    if (kv) {
        if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_INT32 || kv->n != n) {
            hf_vocab_release(v);
            return diag_set(d, ST_FORMAT, "'tokenizer.ggml.token_type' is not INT32[%llu]",
                            (unsigned long long)n);
        }
        if (!(v->types = malloc(n * sizeof(int32_t))))
            goto fail_nomem;
        memcpy(v->types, kv->v.arr, n * sizeof(int32_t));
    }
    kv = gguf_get(g, "tokenizer.ggml.merges");
    if (kv) {
        if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING ||
            kv->n > (uint64_t)HF_MAX_VOCAB) {
            hf_vocab_release(v);
            return diag_set(d, ST_FORMAT, "'tokenizer.ggml.merges' is not a string array");
        }
        v->has_merges = true;
        if (kv->n && !(v->merges = calloc(kv->n, sizeof(*v->merges))))
            goto fail_nomem;
        for (i = 0; i < kv->n; i++) {
            if (kv->v.strs[i].n > HF_MAX_TOKEN_BYTES) {
                hf_vocab_release(v);
                return diag_set(d, ST_FORMAT, "merge %llu is too long", (unsigned long long)i);
            }
            if (!(v->merges[i] = dupn(kv->v.strs[i].p, kv->v.strs[i].n)))
                goto fail_nomem;
            v->n_merges = (int64_t)i + 1;
        }
    }
    for (i = 0; i < HF_SPECIAL_COUNT; i++) {
        uint64_t u;
        rc = gguf_get_uint(g, hf_special_key((enum hf_special)i), &u, d);
        if (rc < 0)
            goto fail;
        if (rc == 0 && u <= UINT32_MAX)
            v->special[i] = (int64_t)u;
    }
    if ((rc = gg_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, d)) < 0 ||
        (rc = gg_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos, d)) < 0 ||
        (rc = gg_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, d)) < 0)
        goto fail;
    if ((rc = gguf_get_str(g, "tokenizer.chat_template", &s, d)) < 0)
        goto fail;
    if (rc == 0) {
        kv = gguf_get(g, "tokenizer.chat_template");
        if (!(v->chat_template = dupn(kv->v.str.p, kv->v.str.n)))
            goto fail_nomem;
    }
    for (i = 0; i < g->n_kv; i++) {
        const struct gguf_kv *e = &g->kv[i];
        struct hf_kv *x;
        if (strncmp(e->key.p, "tokenizer.", 10) || known_key(e->key.p))
            continue;
        if (!kv_type_name(e->type) || e->key.n > 200) {
            if (!v->warning[0])
                snprintf(v->warning, sizeof(v->warning),
                         "metadata '%.120s' (%s) is not carried to the HF files", e->key.p,
                         gguf_type_name(e->type));
            continue;
        }
        if (extra_add(v, e->key.p, e->type))
            goto fail_nomem;
        x = &v->extra[v->n_extra - 1];
        switch (e->type) {
        case GGUF_TYPE_UINT32: { uint32_t u; memcpy(&u, e->v.raw, 4); x->v.u = u; break; }
        case GGUF_TYPE_INT32: { int32_t t; memcpy(&t, e->v.raw, 4); x->v.i = t; break; }
        case GGUF_TYPE_UINT64: memcpy(&x->v.u, e->v.raw, 8); break;
        case GGUF_TYPE_FLOAT32: memcpy(&x->v.f, e->v.raw, 4); break;
        case GGUF_TYPE_BOOL: x->v.b = e->v.raw[0] != 0; break;
        default:
            if (!(x->v.s = dupn(e->v.str.p, e->v.str.n)))
                goto fail_nomem;
            break;
        }
    }
    return 0;
fail_nomem:
    rc = diag_set(d, ST_NOMEM, "out of memory");
fail:
    hf_vocab_release(v);
    return rc;
}

int
hf_vocab_to_gguf(struct gguf *g, const struct hf_vocab *v, struct diag *d)
{
    int rc = 0;
    int64_t i;

    rc |= gguf_set_str(g, "tokenizer.ggml.model", v->model);
    if (v->pre[0])
        rc |= gguf_set_str(g, "tokenizer.ggml.pre", v->pre);
    {
        uint64_t *lens = malloc((size_t)v->n_tokens * sizeof(*lens));
        if (!lens)
            return diag_set(d, ST_NOMEM, "out of memory");
        for (i = 0; i < v->n_tokens; i++)
            lens[i] = v->token_len[i];
        rc |= gguf_set_arr_str(g, "tokenizer.ggml.tokens", (const char *const *)v->tokens, lens,
                               (uint64_t)v->n_tokens);
        free(lens);
    }
    if (v->scores)
        rc |= gguf_set_arr(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, v->scores,
                           (uint64_t)v->n_tokens);
    if (v->types)
        rc |= gguf_set_arr(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v->types,
                           (uint64_t)v->n_tokens);
    if (v->has_merges)
        rc |= gguf_set_arr_str(g, "tokenizer.ggml.merges", (const char *const *)v->merges, NULL,
                               (uint64_t)v->n_merges);
    for (i = 0; i < HF_SPECIAL_COUNT; i++)
        if (v->special[i] >= 0)
            rc |= gguf_set_u32(g, hf_special_key((enum hf_special)i), (uint32_t)v->special[i]);
    if (v->add_bos >= 0)
        rc |= gguf_set_bool(g, "tokenizer.ggml.add_bos_token", v->add_bos);
    if (v->add_eos >= 0)
        rc |= gguf_set_bool(g, "tokenizer.ggml.add_eos_token", v->add_eos);
    if (v->add_space_prefix >= 0)
        rc |= gguf_set_bool(g, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
    if (v->chat_template)
        rc |= gguf_set_str(g, "tokenizer.chat_template", v->chat_template);
    for (i = 0; i < v->n_extra; i++) {
        const struct hf_kv *e = &v->extra[i];
        switch (e->type) {
        case GGUF_TYPE_UINT32: rc |= gguf_set_u32(g, e->key, (uint32_t)e->v.u); break;
        case GGUF_TYPE_INT32: rc |= gguf_set_i32(g, e->key, (int32_t)e->v.i); break;
        case GGUF_TYPE_UINT64: rc |= gguf_set_u64(g, e->key, e->v.u); break;
        case GGUF_TYPE_FLOAT32: rc |= gguf_set_f32(g, e->key, e->v.f); break;
        case GGUF_TYPE_BOOL: rc |= gguf_set_bool(g, e->key, e->v.b); break;
        default: rc |= gguf_set_str(g, e->key, e->v.s); break;
        }
    }
    if (rc)
        return diag_set(d, ST_NOMEM, "out of memory writing tokenizer metadata");
    return 0;
}

/* ---- struct hf_vocab -> tokenizer.json / tokenizer_config.json ---- */

bool
hf_pre_known(const char *name)
{
    return family_of(name) != NULL;
}

static bool
is_pad_text(const struct hf_vocab *v, int64_t i)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "[PAD%lld]", (long long)i);

    return v->token_len[i] == (uint32_t)n && !memcmp(v->tokens[i], buf, (size_t)n);
}

/* A gpt2 token the export leaves out of model.vocab: the importer recreates it. */
static bool
gpt2_omitted(const struct hf_vocab *v, int64_t i)
{
    return v->types && v->types[i] == HF_TOK_UNUSED && is_pad_text(v, i);
}

#define SPM_MERGE_MAX_BYTES 1024

struct mcand {
    float score;
    int64_t seq;
    int64_t l, r;
};

static int
mcand_cmp_local(const void *a, const void *b)
{
    const struct mcand *x = a, *y = b;

    if (x->l != y->l)
        return x->l < y->l ? -1 : 1;
    return (x->r > y->r) - (x->r < y->r);
}

static int
mcand_cmp_score(const void *a, const void *b)
{
    const struct mcand *x = a, *y = b;

    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* BPE merges for an SPM vocabulary, as transformers' SentencePieceExtractor:
 * every split of a piece into two pieces, pieces in id order, splits by
 * (left id, right id), then all stably by the piece's score, highest first
 * (by id when there are no scores). */
static int
spm_merges(const struct hf_vocab *v, const struct smap *m, json_t *arr, struct diag *d)
{
    struct mcand *c = NULL;
    int64_t n = 0, cap = 0, i, k;
    bool pairs = false;
    int rc = 0;

    for (i = 0; i < v->n_tokens; i++) {
        const char *s = v->tokens[i];
        uint32_t len = v->token_len[i];
        int64_t start = n;
        /* every split costs two hash lookups of the whole piece: leave the
         * rare giant pieces unmerged rather than go quadratic */
        if (len > SPM_MERGE_MAX_BYTES)
            continue;
        for (k = 1; k < len; k++) {
            int64_t l, r;
            if (((uint8_t)s[k] & 0xc0) == 0x80)
                continue;
            if ((l = smap_find(m, s, (size_t)k)) < 0 ||
                (r = smap_find(m, s + k, (size_t)(len - k))) < 0)
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 4096;
                struct mcand *nc = realloc(c, (size_t)cap * sizeof(*nc));
                if (!nc) {
                    free(c);
                    return diag_set(d, ST_NOMEM, "out of memory");
                }
                c = nc;
            }
            c[n].score = v->scores ? v->scores[i] : -(float)i;
            c[n].l = l;
            c[n].r = r;
            n++;
        }
        if (n - start > 1)
            qsort(c + start, (size_t)(n - start), sizeof(*c), mcand_cmp_local);
    }
    for (i = 0; i < n; i++) {
        c[i].seq = i;
        if (memchr(v->tokens[c[i].l], ' ', v->token_len[c[i].l]) ||
            memchr(v->tokens[c[i].r], ' ', v->token_len[c[i].r]))
            pairs = true;
    }
    if (n)
        qsort(c, (size_t)n, sizeof(*c), mcand_cmp_score);
    for (i = 0; i < n && !rc; i++) {
        const char *a = v->tokens[c[i].l], *b = v->tokens[c[i].r];
        size_t la = v->token_len[c[i].l], lb = v->token_len[c[i].r];
        json_t *e;
        if (pairs) {
            e = json_array();
            if (e && (json_array_append_new(e, json_stringn(a, la)) ||
                      json_array_append_new(e, json_stringn(b, lb)))) {
                json_decref(e);
                e = NULL;
            }
        } else {
            char *t = malloc(la + lb + 2);
            e = NULL;
            if (t) {
                memcpy(t, a, la);
                t[la] = ' ';
                memcpy(t + la + 1, b, lb);
                e = json_stringn(t, la + lb + 1);
                free(t);
            }
        }
        if (!e || json_array_append_new(arr, e))
            rc = diag_set(d, ST_NOMEM, "out of memory");
    }
    free(c);
    return rc;
}

static json_t *
added_json(const struct hf_vocab *v, int64_t i, bool special)
{
    json_t *s = json_stringn(v->tokens[i], v->token_len[i]);

    if (!s)
        return NULL;
    return json_pack("{s:I, s:o, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)i, "content", s,
                     "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special",
                     special);
}

static json_t *
special_tok(const struct hf_vocab *v, enum hf_special k, int type_id)
{
    int64_t id = v->special[k];
    json_t *s = json_stringn(v->tokens[id], v->token_len[id]);

    return s ? json_pack("{s:{s:o, s:i}}", "SpecialToken", "id", s, "type_id", type_id) : NULL;
}

static json_t *
template_processing(const struct hf_vocab *v, bool bos, bool eos)
{
    json_t *single = json_array(), *pair = json_array(), *st = json_object();
    int rc = 0, t;

    if (!single || !pair || !st)
        goto fail;
    for (t = 0; t < 2; t++) {
        if (bos) {
            rc |= json_array_append_new(pair, special_tok(v, HF_SPECIAL_BOS, t));
            if (t == 0)
                rc |= json_array_append_new(single, special_tok(v, HF_SPECIAL_BOS, 0));
        }
        rc |= json_array_append_new(pair, json_pack("{s:{s:s, s:i}}", "Sequence", "id",
                                                    t ? "B" : "A", "type_id", t));
        if (t == 0)
            rc |= json_array_append_new(single, json_pack("{s:{s:s, s:i}}", "Sequence", "id", "A",
                                                          "type_id", 0));
        if (eos) {
            rc |= json_array_append_new(pair, special_tok(v, HF_SPECIAL_EOS, t));
            if (t == 0)
                rc |= json_array_append_new(single, special_tok(v, HF_SPECIAL_EOS, 0));
        }
    }
    for (t = 0; t < 2; t++) {
        enum hf_special k = t ? HF_SPECIAL_EOS : HF_SPECIAL_BOS;
        int64_t id = v->special[k];
        if (!(t ? eos : bos))
            continue;
        json_t *s = json_stringn(v->tokens[id], v->token_len[id]);
        json_t *e = s ? json_pack("{s:O, s:[I], s:[O]}", "id", s, "ids", (json_int_t)id,
                                  "tokens", s) : NULL;
        rc |= !e || json_object_setn_new(st, v->tokens[id], v->token_len[id], e);
        json_decref(s);
    }
    if (rc)
        goto fail;
    return json_pack("{s:s, s:o, s:o, s:o}", "type", "TemplateProcessing", "single", single,
                     "pair", pair, "special_tokens", st);
fail:
    json_decref(single);
    json_decref(pair);
    json_decref(st);
    return NULL;
}

static json_t *
f32_json(float f)
{
    char buf[48];
    int p;

    if (!isfinite(f))
        return NULL;
    for (p = 1; p <= 9; p++) {
        snprintf(buf, sizeof(buf), "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f)
            break;
    }
    return json_real(strtod(buf, NULL));
}

static json_t *
marker_json(const struct hf_vocab *v, bool spm)
{
    json_t *m = json_object(), *types = json_object(), *omit = json_array(), *kv = json_object();
    int64_t i, unk = spm ? spm_unk(v) : -1;
    int rc = 0;

    if (!m || !types || !omit || !kv)
        goto fail;
    if (v->pre[0])
        rc |= json_object_set_new(m, "pre", json_string(v->pre));
    else
        rc |= json_array_append_new(omit, json_string("tokenizer.ggml.pre"));
    if (!v->types)
        rc |= json_array_append_new(omit, json_string("tokenizer.ggml.token_type"));
    if (!v->scores && spm)
        rc |= json_array_append_new(omit, json_string("tokenizer.ggml.scores"));
    for (i = 0; v->types && i < v->n_tokens; i++) {
        int32_t t = v->types[i], want;
        char key[24];
        if (spm)
            want = spm_type(v, i, unk);
        else if (gpt2_omitted(v, i))
            want = HF_TOK_UNUSED;
        else
            want = t == HF_TOK_CONTROL || t == HF_TOK_USER_DEFINED ? t : HF_TOK_NORMAL;
        if (t == want)
            continue;
        snprintf(key, sizeof(key), "%lld", (long long)i);
        rc |= json_object_set_new(types, key, json_integer(t));
    }
    if (json_object_size(types))
        rc |= json_object_set(m, "token_types", types);
    if (!spm && v->scores) {
        json_t *sc = json_array();
        for (i = 0; sc && i < v->n_tokens && !rc; i++)
            rc |= json_array_append_new(sc, f32_json(v->scores[i]));
        rc |= json_object_set_new(m, "scores", sc);
    }
    if (spm && v->has_merges) {
        json_t *mg = json_array();
        for (i = 0; mg && i < v->n_merges && !rc; i++)
            rc |= json_array_append_new(mg, json_string(v->merges[i]));
        rc |= json_object_set_new(m, "merges", mg);
    }
    for (i = 0; i < v->n_extra && !rc; i++) {
        const struct hf_kv *e = &v->extra[i];
        json_t *x;
        switch (e->type) {
        case GGUF_TYPE_UINT32:
        case GGUF_TYPE_UINT64: x = json_integer((json_int_t)e->v.u); break;
        case GGUF_TYPE_INT32: x = json_integer(e->v.i); break;
        case GGUF_TYPE_FLOAT32: x = f32_json(e->v.f); break;
        case GGUF_TYPE_BOOL: x = json_boolean(e->v.b); break;
        default: x = json_string(e->v.s); break;
        }
        if (e->type == GGUF_TYPE_UINT64 && e->v.u > INT64_MAX) {
            json_decref(x);
            continue;
        }
        rc |= json_object_set_new(kv, e->key, json_pack("[s,o]", kv_type_name(e->type), x));
    }
    if (json_object_size(kv))
        rc |= json_object_set(m, "kv", kv);
    if (json_array_size(omit))
        rc |= json_object_set(m, "omit", omit);
    if (rc)
        goto fail;
    json_decref(types);
    json_decref(omit);
    json_decref(kv);
    return m;
fail:
    json_decref(m);
    json_decref(types);
    json_decref(omit);
    json_decref(kv);
    return NULL;
}

int
hf_vocab_to_json(const struct hf_vocab *v, int64_t model_max_length, json_t **tokenizer,
                 json_t **tokenizer_config, struct diag *d)
{
    const bool spm = !strcmp(v->model, "llama");
    json_t *tj = NULL, *tc = NULL, *vocab = NULL, *merges = NULL, *added = NULL, *dec = NULL;
    json_t *model = NULL, *x;
    struct smap m = {0};
    int64_t i, dup;
    int rc = 0, k;

    *tokenizer = *tokenizer_config = NULL;
    if (strcmp(v->model, "gpt2") && !spm)
        return diag_set(d, ST_FORMAT, "tokenizer model '%s' cannot be written as HF", v->model);
    if (v->n_tokens <= 0)
        return diag_set(d, ST_FORMAT, "empty vocabulary");
    if (smap_init(&m, v->n_tokens, v->tokens, v->token_len))
        return diag_set(d, ST_NOMEM, "out of memory");
    vocab = json_object();
    merges = json_array();
    added = json_array();
    dec = json_object();
    if (!vocab || !merges || !added || !dec)
        goto nomem;
    for (i = 0; i < v->n_tokens; i++) {
        int32_t t = v->types ? v->types[i] : HF_TOK_NORMAL;
        if ((dup = smap_insert(&m, i)) >= 0) {
            rc = diag_set(d, ST_FORMAT, "tokens %lld and %lld have the same text", (long long)dup,
                          (long long)i);
            goto out;
        }
        if (memchr(v->tokens[i], 0, v->token_len[i]) ||
            (rc = json_stringn_new(v->tokens[i], v->token_len[i], &x)) == -ST_RANGE) {
            rc = diag_set(d, ST_FORMAT, "token %lld is not valid UTF-8 text", (long long)i);
            goto out;
        }
        if (rc < 0)
            goto nomem;
        json_decref(x);
        if (!(spm ? false : gpt2_omitted(v, i)) &&
            json_object_setn_new(vocab, v->tokens[i], v->token_len[i], json_integer(i)))
            goto nomem;
        if (t == HF_TOK_CONTROL || t == HF_TOK_USER_DEFINED || (spm && t == HF_TOK_UNKNOWN)) {
            if (json_array_append_new(added, added_json(v, i, t != HF_TOK_USER_DEFINED)))
                goto nomem;
        }
        if (t == HF_TOK_CONTROL || t == HF_TOK_USER_DEFINED) {
            char key[24];
            json_t *e = json_stringn(v->tokens[i], v->token_len[i]);
            snprintf(key, sizeof(key), "%lld", (long long)i);
            if (!e || json_object_set_new(dec, key, json_pack("{s:o, s:b, s:b, s:b, s:b, s:b}",
                                          "content", e, "lstrip", 0, "normalized", 0, "rstrip", 0,
                                          "single_word", 0, "special", t == HF_TOK_CONTROL)))
                goto nomem;
        }
    }
    if (spm) {
        if ((rc = spm_merges(v, &m, merges, d)) < 0)
            goto out;
    } else {
        for (i = 0; i < v->n_merges; i++) {
            rc = v->merges[i] ? json_stringn_new(v->merges[i], strlen(v->merges[i]), &x) : -ST_RANGE;
            if (rc == -ST_RANGE) {
                rc = diag_set(d, ST_FORMAT, "merge %lld is not valid UTF-8 text", (long long)i);
                goto out;
            }
            if (rc < 0)
                goto nomem;
            if (json_array_append_new(merges, x))
                goto nomem;
        }
    }

    /* tokenizer.json */
    {
        int64_t unk = v->special[HF_SPECIAL_UNK];
        bool bos = v->add_bos == 1 && v->special[HF_SPECIAL_BOS] >= 0;
        bool eos = v->add_eos == 1 && v->special[HF_SPECIAL_EOS] >= 0;
        const struct tok_pre_hf *fam = family_of(v->pre);
        json_t *norm, *pre, *post, *decoder;

        if (spm) {
            norm = v->add_space_prefix != 0
                 ? json_pack("{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}", "type", "Sequence",
                             "normalizers", "type", "Prepend", "prepend", "\xe2\x96\x81",
                             "type", "Replace", "pattern", "String", " ", "content",
                             "\xe2\x96\x81")
                 : json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", " ",
                             "content", "\xe2\x96\x81");
            pre = json_null();
            decoder = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}]}", "type",
                                "Sequence", "decoders", "type", "Replace", "pattern", "String",
                                "\xe2\x96\x81", "content", " ", "type", "ByteFallback", "type",
                                "Fuse");
            if (decoder && v->add_space_prefix != 0)
                json_array_append_new(json_object_get(decoder, "decoders"),
                                      json_pack("{s:s, s:s, s:i, s:i}", "type", "Strip",
                                                "content", " ", "start", 1, "stop", 0));
            post = bos || eos ? template_processing(v, bos, eos) : json_null();
        } else {
            norm = json_null();
            pre = pt_family_json(fam ? fam : tok_pre_hf_get(0));
            decoder = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space",
                                1, "trim_offsets", 1, "use_regex", 1);
            post = bos || eos ? template_processing(v, bos, eos)
                 : json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 1,
                             "trim_offsets", 0, "use_regex", 1);
        }
        model = json_pack("{s:s, s:n, s:o, s:n, s:n, s:b, s:b, s:b, s:O, s:O}", "type", "BPE",
                          "dropout", "unk_token",
                          spm && unk >= 0 ? json_stringn(v->tokens[unk], v->token_len[unk])
                                          : json_null(),
                          "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", spm,
                          "byte_fallback", spm, "ignore_merges",
                          fam && fam->ignore_merges && !spm, "vocab", vocab, "merges", merges);
        tj = json_pack("{s:s, s:n, s:n, s:O, s:o, s:o, s:o, s:o, s:o}", "version", "1.0",
                       "truncation", "padding", "added_tokens", added, "normalizer", norm,
                       "pre_tokenizer", pre, "post_processor", post, "decoder", decoder,
                       "model", model);
        model = NULL;
        if (!tj)
            goto nomem;
    }

    /* tokenizer_config.json */
    tc = json_object();
    if (!tc)
        goto nomem;
    if (v->add_bos >= 0)
        rc |= json_object_set_new(tc, "add_bos_token", json_boolean(v->add_bos));
    if (v->add_eos >= 0)
        rc |= json_object_set_new(tc, "add_eos_token", json_boolean(v->add_eos));
    if (v->add_space_prefix >= 0)
        rc |= json_object_set_new(tc, "add_prefix_space", json_boolean(v->add_space_prefix));
    rc |= json_object_set(tc, "added_tokens_decoder", dec);
    for (k = 0; k < HF_SPECIAL_COUNT; k++) {
        int64_t id = v->special[k];
        char key[32];
        if (id < 0 || id >= v->n_tokens)
            continue;
        snprintf(key, sizeof(key), "%s_token", hf_special_name((enum hf_special)k));
        rc |= json_object_set_new(tc, key, json_stringn(v->tokens[id], v->token_len[id]));
    }
    if (v->chat_template) {
        int xr = json_stringn_new(v->chat_template, strlen(v->chat_template), &x);
        if (xr == -ST_RANGE) {
            rc = diag_set(d, ST_FORMAT, "chat template is not valid UTF-8");
            goto out;
        }
        if (xr < 0)
            goto nomem;
        rc |= json_object_set_new(tc, "chat_template", x);
    }
    rc |= json_object_set_new(tc, "clean_up_tokenization_spaces", json_false());
    if (spm)
        rc |= json_object_set_new(tc, "legacy", json_false());
    if (model_max_length > 0)
        rc |= json_object_set_new(tc, "model_max_length", json_integer(model_max_length));
    rc |= json_object_set_new(tc, "tokenizer_class",
                              json_string(spm ? "LlamaTokenizerFast" : "PreTrainedTokenizerFast"));
    rc |= json_object_set_new(tc, MARKER, marker_json(v, spm));
    if (rc)
        goto nomem;
    *tokenizer = tj;
    *tokenizer_config = tc;
    tj = tc = NULL;
    goto out;
nomem:
    rc = diag_set(d, ST_NOMEM, "out of memory building tokenizer JSON");
out:
    smap_free(&m);
    json_decref(tj);
    json_decref(tc);
    json_decref(vocab);
    json_decref(merges);
    json_decref(added);
    json_decref(dec);
    json_decref(model);
    return rc;
}

char *
hf_json_dump(const json_t *o, size_t *len)
{
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
    size_t n;

    if (!s)
        return NULL;
    n = strlen(s);
    char *t = realloc(s, n + 2);
    if (!t) {
        free(s);
        return NULL;
    }
    t[n] = '\n';
    t[n + 1] = '\0';
    if (len)
        *len = n + 1;
    return t;
}

int
hf_json_write(const char *dir, const char *name, const json_t *o, struct diag *d)
{
    char *path = path_join(dir, name);
    size_t len;
    char *s = o ? hf_json_dump(o, &len) : NULL;
    int rc;

    if (!path || !s)
        rc = diag_set(d, ST_NOMEM, "out of memory");
    else if ((rc = write_file_atomic(path, s, len, true, d)) < 0)
        diag_prefix(d, "'%s'", name);
    free(path);
    free(s);
    return rc;
}

int
hf_write_dir(const char *dir, const struct hf_config *c, const struct hf_vocab *v,
             const char *torch_dtype, struct diag *d)
{
    json_t *cfg = NULL, *tj = NULL, *tc = NULL, *stm = NULL, *gen = NULL;
    uint8_t *spm = NULL;
    size_t spm_len = 0;
    int rc, k;

    if ((rc = hf_config_to_json(c, torch_dtype, &cfg, d)) < 0)
        goto out;
    if ((rc = hf_json_write(dir, "config.json", cfg, d)) < 0)
        goto out;
    gen = json_pack("{s:b}", "_from_model_config", 1);
    for (k = 0; gen && k < HF_SPECIAL_COUNT; k++) {
        char key[32];
        if (c->special[k] < 0 || (k != HF_SPECIAL_BOS && k != HF_SPECIAL_EOS &&
                                  k != HF_SPECIAL_PAD))
            continue;
        snprintf(key, sizeof(key), "%s_token_id", hf_special_name((enum hf_special)k));
        json_object_set_new(gen, key, json_integer(c->special[k]));
    }
    if ((rc = hf_json_write(dir, "generation_config.json", gen, d)) < 0)
        goto out;
    if (!v)
        goto out;
    if ((rc = hf_vocab_to_json(v, c->n_ctx, &tj, &tc, d)) < 0)
        goto out;
    if ((rc = hf_json_write(dir, "tokenizer.json", tj, d)) < 0 ||
        (rc = hf_json_write(dir, "tokenizer_config.json", tc, d)) < 0)
        goto out;
    stm = json_object();
    for (k = 0; stm && k < HF_SPECIAL_COUNT; k++) {
        int64_t id = v->special[k];
        char key[32];
        json_t *s;
        if (id < 0 || id >= v->n_tokens)
            continue;
        snprintf(key, sizeof(key), "%s_token", hf_special_name((enum hf_special)k));
        s = json_stringn(v->tokens[id], v->token_len[id]);
        json_object_set_new(stm, key, s ? json_pack("{s:o, s:b, s:b, s:b, s:b}", "content", s,
                                                    "lstrip", 0, "normalized", 0, "rstrip", 0,
                                                    "single_word", 0) : NULL);
    }
    if ((rc = hf_json_write(dir, "special_tokens_map.json", stm, d)) < 0)
        goto out;
    if (!strcmp(v->model, "llama")) {
        char *path;
        if ((rc = hf_spm_write(v, &spm, &spm_len, d)) < 0)
            goto out;
        if (!(path = path_join(dir, "tokenizer.model"))) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        if ((rc = write_file_atomic(path, spm, spm_len, true, d)) < 0)
            diag_prefix(d, "'tokenizer.model'");
        free(path);
    }
out:
    json_decref(cfg);
    json_decref(tj);
    json_decref(tc);
    json_decref(stm);
    json_decref(gen);
    free(spm);
    return rc;
}
