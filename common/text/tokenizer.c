/*
 * tokenizer.c - loading a GGUF vocabulary, the special-token partition, the
 * encode driver and decoding (see tokenizer.h).  The SPM and BPE algorithms
 * are in tok_spm.c and tok_bpe.c, the string -> id map in tok_vocab.c
 * (tok_priv.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_priv.h"
#include "tokenizer.h"

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_PRE "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES "tokenizer.ggml.token_type"

static void
set_warning(struct tokenizer *t, const char *fmt, ...)
{
    va_list ap;

    if (t->warning[0])
        return;                               /* keep the first */
    va_start(ap, fmt);
    vsnprintf(t->warning, sizeof(t->warning), fmt, ap);
    va_end(ap);
}

int32_t
tok_find(const struct tokenizer *t, const char *text, size_t len)
{
    if (!t->p)
        return TOK_NULL;
    return tok_lookup(t->p, text, len);
}

/* ---- loading ---- */

static int
load_texts(struct tokenizer *t, const struct gguf_kv *kv, struct diag *d)
{
    struct tok_priv *p = t->p;
    size_t total = 0, off = 0;
    uint64_t i, cap;
    char empty[32];

    for (i = 0; i < kv->n; i++) {
        uint64_t n = kv->v.strs[i].n;

        if (n == 0)
            n = (uint64_t)snprintf(empty, sizeof(empty), "[EMPTY_%llu]", (unsigned long long)i);
        if (n > UINT32_MAX - 1 || total > SIZE_MAX - n - 1)
            return diag_set(d, ST_FORMAT, "%s: token %llu is too long", KEY_TOKENS,
                            (unsigned long long)i);
        total += n + 1;
    }
    if (total > UINT32_MAX)
        return diag_set(d, ST_FORMAT, "%s: %zu bytes of token text (at most 4 GiB)", KEY_TOKENS,
                        total);
    p->text = malloc(total ? total : 1);
    p->tok = calloc((size_t)kv->n, sizeof(*p->tok));
    for (cap = 16; cap < 2 * kv->n; cap *= 2)
        ;
    p->map = calloc((size_t)cap, sizeof(*p->map));
    if (!p->text || !p->tok || !p->map)
        return diag_set(d, ST_NOMEM, "out of memory for %llu tokens", (unsigned long long)kv->n);
    p->map_mask = (uint32_t)(cap - 1);
    p->text_len = total;
    for (i = 0; i < kv->n; i++) {
        const struct gguf_str *s = &kv->v.strs[i];
        size_t n = (size_t)s->n;
        int32_t dup;

        if (n) {
            memcpy(p->text + off, s->p, n);
        } else {
            n = (size_t)snprintf(empty, sizeof(empty), "[EMPTY_%llu]", (unsigned long long)i);
            memcpy(p->text + off, empty, n);
        }
        p->text[off + n] = '\0';
        p->tok[i].off = (uint32_t)off;
        p->tok[i].len = (uint32_t)n;
        p->tok[i].attr = TOK_ATTR_NORMAL;
        if (n > p->max_len)
            p->max_len = (uint32_t)n;
        off += n + 1;
        dup = tok_map_insert(p, (int32_t)i);
        if (dup >= 0)
            return diag_set(d, ST_FORMAT, "%s: duplicate token '%.64s' has ids %d and %llu",
                            KEY_TOKENS, p->text + p->tok[i].off, dup, (unsigned long long)i);
    }
    return 0;
}

static int
load_scores_types(struct tokenizer *t, const struct gguf *g, struct diag *d)
{
    struct tok_priv *p = t->p;
    const struct gguf_kv *kv = gguf_get(g, KEY_SCORES);
    int32_t i, n = t->n_vocab;

    if (kv) {
        if (kv->type != GGUF_TYPE_ARRAY ||
            (kv->arr_type != GGUF_TYPE_FLOAT32 && kv->arr_type != GGUF_TYPE_INT32))
            return diag_set(d, ST_FORMAT, "%s: expected an array of float32 or int32", KEY_SCORES);
        if (kv->n < (uint64_t)n)
            return diag_set(d, ST_FORMAT, "%s: %llu scores for %d tokens", KEY_SCORES,
                            (unsigned long long)kv->n, n);
        for (i = 0; i < n; i++) {
            const uint8_t *b = (const uint8_t *)kv->v.arr + (size_t)i * 4;
            uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                         (uint32_t)b[3] << 24;
            if (kv->arr_type == GGUF_TYPE_FLOAT32) {
                float f;
                memcpy(&f, &u, 4);
                p->tok[i].score = f;
            } else {
                p->tok[i].score = (float)(int32_t)u;
            }
        }
    }
    kv = gguf_get(g, KEY_TYPES);
    if (kv) {
        if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_INT32)
            return diag_set(d, ST_FORMAT, "%s: expected an array of int32", KEY_TYPES);
        if (kv->n < (uint64_t)n)
            return diag_set(d, ST_FORMAT, "%s: %llu types for %d tokens", KEY_TYPES,
                            (unsigned long long)kv->n, n);
        for (i = 0; i < n; i++) {
            int64_t v = 0;
            unsigned a;

            gguf_arr_int(kv, (uint64_t)i, &v);
            switch (v) {                      /* llama.h llama_token_type */
            case 1: a = TOK_ATTR_NORMAL; break;
            case 2: a = TOK_ATTR_UNKNOWN; break;
            case 3: a = TOK_ATTR_CONTROL; break;
            case 4: a = TOK_ATTR_USER_DEFINED; break;
            case 5: a = TOK_ATTR_UNUSED; break;
            case 6: a = TOK_ATTR_BYTE; break;
            default: a = TOK_ATTR_UNDEFINED; break;
            }
            p->tok[i].attr = a;
        }
    }
    return 0;
}

static int
get_bool(const struct gguf *g, const char *key, bool *v, struct diag *d)
{
    int rc = gguf_get_bool(g, key, v, d);

    return rc < 0 ? rc : 0;
}

/* The special ids: the model's default unless the key gives one in range. */
static int
load_special_ids(struct tokenizer *t, const struct gguf *g, struct diag *d)
{
    static const struct {
        const char *key;
        size_t off;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(struct tokenizer, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(struct tokenizer, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(struct tokenizer, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(struct tokenizer, eom)},
        {"tokenizer.ggml.unknown_token_id", offsetof(struct tokenizer, unk)},
        {"tokenizer.ggml.seperator_token_id", offsetof(struct tokenizer, sep)},
        {"tokenizer.ggml.padding_token_id", offsetof(struct tokenizer, pad)},
        {"tokenizer.ggml.mask_token_id", offsetof(struct tokenizer, mask)},
        {"tokenizer.ggml.fim_pre_token_id", offsetof(struct tokenizer, fim_pre)},
        {"tokenizer.ggml.fim_suf_token_id", offsetof(struct tokenizer, fim_suf)},
        {"tokenizer.ggml.fim_mid_token_id", offsetof(struct tokenizer, fim_mid)},
        {"tokenizer.ggml.fim_pad_token_id", offsetof(struct tokenizer, fim_pad)},
        {"tokenizer.ggml.fim_rep_token_id", offsetof(struct tokenizer, fim_rep)},
        {"tokenizer.ggml.fim_sep_token_id", offsetof(struct tokenizer, fim_sep)},
        /* deprecated spellings */
        {"tokenizer.ggml.prefix_token_id", offsetof(struct tokenizer, fim_pre)},
        {"tokenizer.ggml.suffix_token_id", offsetof(struct tokenizer, fim_suf)},
        {"tokenizer.ggml.middle_token_id", offsetof(struct tokenizer, fim_mid)},
    };
    size_t i;
    bool add_sep = false;

    for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        int32_t *id = (int32_t *)((char *)t + ids[i].off);
        uint64_t v;
        int rc;

        if (*id >= t->n_vocab) {
            set_warning(t, "default %s %d is out of the vocabulary, disabled", ids[i].key, *id);
            *id = TOK_NULL;
        }
        rc = gguf_get_uint(g, ids[i].key, &v, d);
        if (rc < 0)
            return rc;
        if (rc > 0)
            continue;
        if (v >= (uint64_t)t->n_vocab)
            set_warning(t, "%s = %llu is out of the vocabulary, using %d", ids[i].key,
                        (unsigned long long)v, *id);
        else
            *id = (int32_t)v;
    }
    if (get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos, d) < 0 ||
        get_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos, d) < 0 ||
        get_bool(g, "tokenizer.ggml.add_sep_token", &add_sep, d) < 0)
        return -ST_FORMAT;
    if (t->add_bos && t->bos == TOK_NULL)
        return diag_set(d, ST_FORMAT, "tokenizer.ggml.add_bos_token is true, but "
                        "tokenizer.ggml.bos_token_id is not set");
    if (t->add_eos && t->eos == TOK_NULL)
        return diag_set(d, ST_FORMAT, "tokenizer.ggml.add_eos_token is true, but "
                        "tokenizer.ggml.eos_token_id is not set");
    if (add_sep && t->sep == TOK_NULL)
        return diag_set(d, ST_FORMAT, "tokenizer.ggml.add_sep_token is true, but "
                        "tokenizer.ggml.seperator_token_id is not set");
    return 0;
}

static void
eog_set(struct tok_priv *p, int32_t id)
{
    if (id >= 0)
        p->eog[id >> 3] |= (uint8_t)(1u << (id & 7));
}

static bool
eog_has(const struct tok_priv *p, int32_t id)
{
    return (p->eog[id >> 3] >> (id & 7)) & 1;
}

/* Finds the first of the names present; marks it CONTROL (llama.cpp
 * overrides the type of such "control-looking" tokens). */
static int32_t
find_control(struct tokenizer *t, const char *const *names)
{
    for (; *names; names++) {
        int32_t id = tok_lookup(t->p, *names, strlen(*names));

        if (id >= 0) {
            t->p->tok[id].attr |= TOK_ATTR_CONTROL;
            return id;
        }
    }
    return TOK_NULL;
}

/* End-of-turn, FIM and end-of-generation tokens by text, as llama.cpp's
 * llama_vocab::impl::load does when the GGUF does not name them. */
static void
detect_by_text(struct tokenizer *t)
{
    static const char *const eot[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
        "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
        "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>",
        "<end_of_utterance>", NULL};
    static const char *const eom[] = {"<|eom_id|>", NULL};
    static const char *const fim_pre[] = {
        "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
        "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>", "\xe2\x96\x81<PRE>",
        "<|code_prefix|>", "<|prefix|>", NULL};
    static const char *const fim_suf[] = {
        "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
        "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>", "<SUF>", "\xe2\x96\x81<SUF>",
        "<|code_suffix|>", "<|suffix|>", NULL};
    static const char *const fim_mid[] = {
        "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
        "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>", "\xe2\x96\x81<MID>",
        "<|code_middle|>", "<|middle|>", NULL};
    static const char *const fim_pad[] = {
        "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
    static const char *const fim_rep[] = {
        "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
    static const char *const fim_sep[] = {"<|file_sep|>", NULL};
    static const char *const eog[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
        "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>",
        "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
        "<|tool_response>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", "[e~[",
        NULL};
    static const char *const render[] = {"<|channel|>", "<|message|>", "<|start|>",
                                         "<|constrain|>", NULL};
    struct tok_priv *p = t->p;
    const char *const *s;
    int32_t id, end_id = TOK_NULL;
    bool has_return = false, has_call = false, has_flush = false;
    bool has_tool_response = false;
    int32_t i;

    if (t->eot == TOK_NULL)
        t->eot = find_control(t, eot);
    if (t->eom == TOK_NULL)
        t->eom = find_control(t, eom);
    if (t->fim_pre == TOK_NULL)
        t->fim_pre = find_control(t, fim_pre);
    if (t->fim_suf == TOK_NULL)
        t->fim_suf = find_control(t, fim_suf);
    if (t->fim_mid == TOK_NULL)
        t->fim_mid = find_control(t, fim_mid);
    if (t->fim_pad == TOK_NULL)
        t->fim_pad = find_control(t, fim_pad);
    if (t->fim_rep == TOK_NULL)
        t->fim_rep = find_control(t, fim_rep);
    if (t->fim_sep == TOK_NULL)
        t->fim_sep = find_control(t, fim_sep);

    /* control tokens named "...unused..." are also UNUSED */
    for (i = 0; i < t->n_vocab; i++)
        if ((p->tok[i].attr & TOK_ATTR_CONTROL) && strstr(p->text + p->tok[i].off, "unused"))
            p->tok[i].attr |= TOK_ATTR_UNUSED;

    eog_set(p, t->fim_pad);
    eog_set(p, t->fim_rep);
    eog_set(p, t->fim_sep);
    for (s = eog; *s; s++) {
        id = tok_lookup(p, *s, strlen(*s));
        if (id >= 0) {
            eog_set(p, id);
            p->tok[id].attr |= TOK_ATTR_CONTROL;
        }
    }
    /* gpt-oss: these are always rendered */
    for (s = render; *s; s++) {
        id = tok_lookup(p, *s, strlen(*s));
        if (id >= 0)
            p->tok[id].attr = TOK_ATTR_USER_DEFINED;
    }
    eog_set(p, t->eos);
    eog_set(p, t->eot);
    eog_set(p, t->eom);

    /* o200k_harmony / solar-open: <|end|> is not the end of generation there */
    for (i = 0; i < t->n_vocab; i++) {
        const char *x = p->text + p->tok[i].off;

        if (!eog_has(p, i))
            continue;
        if (!strcmp(x, "<|return|>"))
            has_return = true;
        else if (!strcmp(x, "<|call|>") || !strcmp(x, "<|calls|>"))
            has_call = true;
        else if (!strcmp(x, "<|flush|>"))
            has_flush = true;
        else if (!strcmp(x, "<|end|>"))
            end_id = i;
        else if (!strcmp(x, "<|tool_response>"))
            has_tool_response = true;
    }
    if (end_id >= 0 && has_call && (has_return || has_flush)) {
        p->eog[end_id >> 3] &= (uint8_t)~(1u << (end_id & 7));
        p->tok[end_id].attr = TOK_ATTR_USER_DEFINED;
    }
    /* gemma4 / paddleocr: </s> is ordinary there */
    id = tok_lookup(p, "</s>", 4);
    if (has_tool_response && id >= 0 && eog_has(p, id)) {
        p->eog[id >> 3] &= (uint8_t)~(1u << (id & 7));
        p->tok[id].attr = TOK_ATTR_NORMAL;
    }
}

static int
cmp_special(const void *a, const void *b, void *arg)
{
    const struct tok_priv *p = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = p->tok[x].len, ly = p->tok[y].len;

    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static uint32_t
trie_node(struct tok_priv *p, uint8_t byte)
{
    if (p->n_trie == p->cap_trie) {
        uint32_t nc = p->cap_trie ? p->cap_trie * 2 : 1024;
        struct tok_trie *nt = nc > p->cap_trie ? realloc(p->trie, nc * sizeof(*nt)) : NULL;

        if (!nt)
            return 0;
        p->trie = nt;
        p->cap_trie = nc;
    }
    p->trie[p->n_trie] = (struct tok_trie){0, 0, -1, byte};
    return p->n_trie++;
}

static int
build_special(struct tokenizer *t, struct diag *d)
{
    struct tok_priv *p = t->p;
    uint32_t i;
    int32_t id;

    p->special = malloc(((size_t)t->n_vocab) * sizeof(*p->special));
    p->special_rank = malloc(((size_t)t->n_vocab) * sizeof(*p->special_rank));
    if (!p->special || !p->special_rank)
        return diag_set(d, ST_NOMEM, "out of memory");
    for (id = 0; id < t->n_vocab; id++) {
        p->special_rank[id] = UINT32_MAX;
        if (p->tok[id].attr & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))
            p->special[p->n_special++] = id;
    }
    /* llama.cpp sorts by length only (std::sort, not stable); ties by id here */
    qsort_r(p->special, p->n_special, sizeof(*p->special), cmp_special, p);
    p->trie = malloc(1024 * sizeof(*p->trie));
    if (!p->trie)
        return diag_set(d, ST_NOMEM, "out of memory");
    p->cap_trie = 1024;
    p->trie[0] = (struct tok_trie){0, 0, -1, 0};   /* the root */
    p->n_trie = 1;
    for (i = 0; i < p->n_special; i++) {
        const struct tok_entry *e = &p->tok[p->special[i]];
        const uint8_t *s = (const uint8_t *)p->text + e->off;
        uint32_t node = 0, k;

        p->special_rank[p->special[i]] = i;
        if (e->len > TOK_TRIE_MAX_LEN) {
            if (!p->long_special &&
                !(p->long_special = malloc(p->n_special * sizeof(*p->long_special))))
                return diag_set(d, ST_NOMEM, "out of memory");
            p->long_special[p->n_long++] = i;
            continue;
        }
        for (k = 0; k < e->len; k++) {
            uint32_t c = node == 0 ? p->trie_root[s[k]] : p->trie[node].child;

            if (node != 0)
                while (c && p->trie[c].byte != s[k])
                    c = p->trie[c].sibling;
            if (!c) {
                c = trie_node(p, s[k]);
                if (!c)
                    return diag_set(d, ST_NOMEM, "out of memory");
                if (node == 0) {
                    p->trie_root[s[k]] = c;
                } else {
                    p->trie[c].sibling = p->trie[node].child;
                    p->trie[node].child = c;
                }
            }
            node = c;
        }
        p->trie[node].id = p->special[i];
    }
    return 0;
}

/* The byte value of a BYTE token: llama.cpp reads strtol(text.substr(3, 2), 16). */
static int
byte_value(const char *s, uint32_t n)
{
    int v = 0, k;

    for (k = 3; k < 5 && (uint32_t)k < n; k++) {
        char c = s[k];
        int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (x < 0)
            break;
        v = v * 16 + x;
    }
    return v;
}

/* The pieces llama_token_to_piece(special = true) gives, cached. */
static int
build_pieces(struct tokenizer *t, struct diag *d)
{
    struct tok_priv *p = t->p;
    size_t len = 0, cap = p->text_len + 16;
    char *buf = malloc(cap);
    int32_t id;

    if (!buf)
        return diag_set(d, ST_NOMEM, "out of memory");
    for (id = 0; id < t->n_vocab; id++) {
        struct tok_entry *e = &p->tok[id];
        const char *s = p->text + e->off;
        unsigned a = e->attr;
        size_t start = len, need;
        uint32_t k;

        need = (size_t)e->len + 8;
        if (len + need > cap) {
            size_t nc = cap * 2 > len + need ? cap * 2 : len + need;
            char *nb = realloc(buf, nc);
            if (!nb)
                goto nomem;
            buf = nb;
            cap = nc;
        }
        if (t->model == TOK_MODEL_RWKV) {
            /* every token: its unescaped bytes (no more than its text) */
            size_t rl;
            const char *rb = tok_rwkv_bytes(p, id, &rl);

            memcpy(buf + len, rb, rl);
            len += rl;
        } else if (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED)) {
            memcpy(buf + len, s, e->len);
            len += e->len;
        } else if (a & TOK_ATTR_NORMAL) {
            if (t->model != TOK_MODEL_BPE || p->bpe_raw) {
                for (k = 0; k < e->len; k++) {
                    if (k + 2 < e->len && (uint8_t)s[k] == 0xE2 && (uint8_t)s[k + 1] == 0x96 &&
                        (uint8_t)s[k + 2] == 0x81) {
                        buf[len++] = ' ';
                        k += 2;
                    } else {
                        buf[len++] = s[k];
                    }
                }
            } else {
                /* each character outside GPT-2's byte table becomes
                 * "[UNK_BYTE_0x..<whole token>]" (llama.cpp): bound that */
                size_t bad = 0, i = 0;

                while (i < e->len)
                    bad += tok_unicode_byte(tok_utf8_next(s, e->len, &i)) < 0;
                if (bad && (size_t)e->len * bad > ((size_t)16 << 20)) {
                    free(buf);
                    return diag_set(d, ST_FORMAT, "%s: token %d is %u bytes of characters that "
                                    "are not byte-level BPE", KEY_TOKENS, id, e->len);
                }
                if (tok_bpe_decode_text(s, e->len, &buf, &len, &cap) < 0)
                    goto nomem;
            }
        } else if (a & TOK_ATTR_BYTE) {
            buf[len++] = (char)byte_value(s, e->len);
        }
        if (len + 1 > cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb)
                goto nomem;
            buf = nb;
            cap *= 2;
        }
        buf[len++] = '\0';
        if (len - 1 - start > UINT32_MAX || start > UINT32_MAX) {
            free(buf);
            return diag_set(d, ST_FORMAT, "%s: decoded vocabulary is too large", KEY_TOKENS);
        }
        e->piece_off = (uint32_t)start;
        e->piece_len = (uint32_t)(len - 1 - start);
    }
    p->piece = buf;
    return 0;
nomem:
    free(buf);
    return diag_set(d, ST_NOMEM, "out of memory");
}

static void
set_attr_by_text(struct tokenizer *t, const char *text, unsigned bit, bool on)
{
    int32_t id = tok_lookup(t->p, text, strlen(text));

    if (id < 0)
        return;
    if (on)
        t->p->tok[id].attr |= bit;
    else
        t->p->tok[id].attr &= ~bit;
}

/* Per-model attributes llama.cpp sets by name (after building its caches). */
static void
set_name_attrs(struct tokenizer *t, const struct gguf *g)
{
    const char *name = NULL, *arch = NULL;
    char low[256];
    size_t i;

    gguf_get_str(g, "general.name", &name, NULL);
    gguf_get_str(g, "general.architecture", &arch, NULL);
    for (i = 0; name && name[i] && i + 1 < sizeof(low); i++)
        low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
    low[i] = '\0';
    if (strstr(t->pre, "jina-v2-de") || strstr(t->pre, "jina-v2-es") ||
        strstr(t->pre, "jina-v2-code") ||
        (arch && (strstr(arch, "nomic-bert-moe") || strstr(arch, "jina-bert-v3")))) {
        set_attr_by_text(t, "<mask>", TOK_ATTR_LSTRIP, true);
    } else if (strstr(low, "phi-3") || strstr(low, "phi3")) {
        uint32_t k;

        for (k = 0; k < t->p->n_special; k++)
            t->p->tok[t->p->special[k]].attr |= TOK_ATTR_RSTRIP;
        set_attr_by_text(t, "</s>", TOK_ATTR_RSTRIP, true);
        set_attr_by_text(t, "<unk>", TOK_ATTR_RSTRIP, false);
        set_attr_by_text(t, "<s>", TOK_ATTR_RSTRIP, false);
        set_attr_by_text(t, "<|endoftext|>", TOK_ATTR_RSTRIP, false);
    } else if (strstr(low, "modern-bert")) {
        set_attr_by_text(t, "[MASK]", TOK_ATTR_LSTRIP, true);
    }
}

static void
build_byte_tokens(struct tokenizer *t)
{
    static const char hex[] = "0123456789ABCDEF";
    struct tok_priv *p = t->p;
    int32_t id;
    uint32_t k;
    int b;

    memset(p->spm_barrier, 1, sizeof(p->spm_barrier));
    memset(p->spm_glue, 0, sizeof(p->spm_glue));
    p->spm_glue_nonascii = false;
    for (id = 0; id < t->n_vocab; id++) {
        const uint8_t *s = (const uint8_t *)p->text + p->tok[id].off;
        uint32_t n = p->tok[id].len;

        if (n < 2)
            continue;
        for (k = 0; k < n; k++) {
            if (s[k] < 0x80)
                p->spm_barrier[s[k]] = 0;
            /* a U+2581 inside the token after something other than U+2581 */
            if (k > 0 && k + 2 < n && s[k] == 0xE2 && s[k + 1] == 0x96 && s[k + 2] == 0x81 &&
                !(k >= 3 && s[k - 3] == 0xE2 && s[k - 2] == 0x96 && s[k - 1] == 0x81)) {
                if (s[k - 1] < 0x80)
                    p->spm_glue[s[k - 1]] = 1;
                else
                    p->spm_glue_nonascii = true;
            }
        }
    }

    for (b = 0; b < 256; b++) {
        char x[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
        char one = (char)b;

        id = -1;
        if (t->model == TOK_MODEL_SPM || p->bpe_raw)
            id = tok_lookup(p, x, 6);
        if (id < 0 && !p->bpe_raw)
            id = tok_lookup(p, &one, 1);
        p->byte_tok[b] = id;
    }
}

int
tok_load(struct tokenizer *t, const struct gguf *g, struct diag *d)
{
    const struct gguf_kv *kv;
    const char *model = NULL, *pre = NULL;
    struct tok_ids nl = {0};
    int rc;

    memset(t, 0, sizeof(*t));
    t->bos = t->eos = t->eot = t->eom = t->unk = t->sep = t->pad = t->mask = t->nl = TOK_NULL;
    t->fim_pre = t->fim_suf = t->fim_mid = t->fim_pad = t->fim_rep = t->fim_sep = TOK_NULL;

    rc = gguf_get_str(g, KEY_MODEL, &model, d);
    if (rc < 0)
        return rc;
    if (rc > 0)
        return diag_set(d, ST_FORMAT, "%s: missing (no vocabulary in this file)", KEY_MODEL);
    if (!strcmp(model, "llama")) {
        t->model = TOK_MODEL_SPM;
    } else if (!strcmp(model, "gpt2") || !strcmp(model, "gemma4")) {
        t->model = TOK_MODEL_BPE;
    } else if (!strcmp(model, "bert")) {
        t->model = TOK_MODEL_WPM;
    } else if (!strcmp(model, "t5")) {
        t->model = TOK_MODEL_UGM;
    } else if (!strcmp(model, "rwkv")) {
        t->model = TOK_MODEL_RWKV;
    } else {
        return diag_set(d, ST_FORMAT, "%s: unsupported tokenizer '%.64s' (llama, gpt2, gemma4, "
                        "bert, t5 and rwkv are)", KEY_MODEL, model);
    }
    rc = gguf_get_str(g, KEY_PRE, &pre, d);
    if (rc < 0)
        return rc;
    if (!strcmp(model, "gemma4"))
        pre = "gemma4";       /* llama.cpp ignores the key for these */

    kv = gguf_get(g, KEY_TOKENS);
    if (!kv)
        return diag_set(d, ST_FORMAT, "%s: missing", KEY_TOKENS);
    if (kv->type != GGUF_TYPE_ARRAY || kv->arr_type != GGUF_TYPE_STRING)
        return diag_set(d, ST_FORMAT, "%s: expected an array of strings", KEY_TOKENS);
    if (kv->n == 0 || kv->n > INT32_MAX)
        return diag_set(d, ST_FORMAT, "%s: %llu tokens (expected 1 to 2^31-1)", KEY_TOKENS,
                        (unsigned long long)kv->n);
    t->n_vocab = (int32_t)kv->n;
    t->p = calloc(1, sizeof(*t->p));
    if (!t->p)
        return diag_set(d, ST_NOMEM, "out of memory");
    if ((rc = load_texts(t, kv, d)) < 0 || (rc = load_scores_types(t, g, d)) < 0)
        goto fail;

    if (t->model == TOK_MODEL_SPM) {
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
        t->add_space_prefix = true;
        t->add_bos = true;
        snprintf(t->pre, sizeof(t->pre), "%s", "default");
    } else if (t->model == TOK_MODEL_WPM) {
        bool lower = true, strip;

        t->bos = 101;
        t->unk = 100;
        t->sep = 102;
        t->pad = 0;
        t->mask = 103;
        t->add_bos = true;
        t->clean_spaces = true;
        snprintf(t->pre, sizeof(t->pre), "%s", "default");
        /* BertNormalizer: strip_accents follows lowercase unless given */
        if ((rc = get_bool(g, "tokenizer.ggml.normalizer.lowercase", &lower, d)) < 0)
            goto fail;
        strip = lower;
        if ((rc = get_bool(g, "tokenizer.ggml.normalizer.strip_accents", &strip, d)) < 0)
            goto fail;
        t->p->wpm_lower = lower;
        t->p->wpm_strip = strip;
    } else if (t->model == TOK_MODEL_UGM) {
        t->eos = 1;
        t->unk = 2;
        t->pad = 0;
        t->add_eos = true;
        snprintf(t->pre, sizeof(t->pre), "%s", "default");
        if ((rc = tok_ugm_setup(t, g, d)) < 0)
            goto fail;
    } else if (t->model == TOK_MODEL_RWKV) {
        /* no special ids by default */
        snprintf(t->pre, sizeof(t->pre), "%s", "default");
        if ((rc = tok_rwkv_setup(t, d)) < 0)
            goto fail;
    } else {
        /* llama.cpp's defaults: 11 for gpt2, none for gemma4 */
        t->bos = t->eos = strcmp(model, "gemma4") ? 11 : TOK_NULL;
        t->clean_spaces = true;
        if ((rc = tok_bpe_setup(t, g, pre, d)) < 0)
            goto fail;
    }
    if ((rc = get_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, d)) < 0 ||
        (rc = load_special_ids(t, g, d)) < 0)
        goto fail;
    if (t->p->nl_whole && !t->add_bos && t->bos != TOK_NULL)
        t->add_bos = true;      /* llama.cpp's override for gemma4 (its PR 21500) */
    t->p->eog = calloc(((size_t)t->n_vocab + 7) / 8, 1);
    if (!t->p->eog) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto fail;
    }
    detect_by_text(t);
    if ((rc = build_special(t, d)) < 0 || (rc = build_pieces(t, d)) < 0)
        goto fail;
    set_name_attrs(t, g);
    build_byte_tokens(t);

    /* the newline token: SPM <0x0A> (else "\n"), WPM the padding, BPE the
     * first token of "\n" */
    if (t->model == TOK_MODEL_WPM) {
        t->nl = t->pad;
    } else if (t->model == TOK_MODEL_SPM) {
        t->nl = t->p->byte_tok['\n'] >= 0 ? t->p->byte_tok['\n'] : t->pad;
    } else {
        /* before any special token is known, as llama.cpp does it */
        struct tok_bpe_state *st = NULL;

        if (t->model == TOK_MODEL_UGM) {
            rc = tok_ugm_encode(t, "\n", 1, &nl, d);
        } else if (t->model == TOK_MODEL_RWKV) {
            rc = tok_rwkv_encode(t, "\n", 1, &nl);
        } else {
            rc = tok_bpe_encode(t, &st, "\n", 1, &nl, d);
            tok_bpe_state_free(st);
        }
        if (rc < 0)
            goto fail;
        t->nl = nl.n ? nl.v[0] : t->pad;
        tok_ids_release(&nl);
    }
    return 0;
fail:
    tok_release(t);
    return rc;
}

void
tok_release(struct tokenizer *t)
{
    struct tok_priv *p = t->p;

    if (p) {
        tok_bpe_release(p);
        free(p->text);
        free(p->tok);
        free(p->map);
        free(p->piece);
        free(p->ugm_map);
        free(p->rw_text);
        free(p->rw);
        free(p->rw_map);
        free(p->eog);
        free(p->special);
        free(p->special_rank);
        free(p->trie);
        free(p->long_special);
        free(p);
    }
    memset(t, 0, sizeof(*t));
    t->bos = t->eos = t->eot = t->eom = t->unk = t->sep = t->pad = t->mask = t->nl = TOK_NULL;
    t->fim_pre = t->fim_suf = t->fim_mid = t->fim_pad = t->fim_rep = t->fim_sep = TOK_NULL;
}

/* ---- the special-token partition (llama.cpp tokenizer_st_partition) ---- */

struct frag {
    int32_t id;               /* >= 0: a special token; -1: raw text */
    size_t off, len;
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static int
frag_push(struct frags *f, int32_t id, size_t off, size_t len)
{
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 16;
        struct frag *nv = realloc(f->v, nc * sizeof(*nv));

        if (!nv)
            return -ST_NOMEM;
        f->v = nv;
        f->cap = nc;
    }
    f->v[f->n++] = (struct frag){id, off, len};
    return 0;
}

static bool
is_cspace(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static bool
special_active(const struct tok_priv *p, int32_t id, bool parse_special)
{
    return parse_special || !(p->tok[id].attr & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN));
}

/* Whether [at, at + n) overlaps one of the spans. */
static bool
in_literal(const struct tok_span *lit, size_t n_lit, size_t at, size_t n)
{
    for (size_t k = 0; k < n_lit; k++)
        if (lit[k].len && lit[k].off < at + n && at < lit[k].off + lit[k].len)
            return true;
    return false;
}

/* Cuts one token's occurrences out of the raw fragments of *in into *out.
 * With lit, an occurrence of a CONTROL/UNKNOWN token that overlaps a
 * literal span stays raw text (the search goes on one byte later). */
static int
cut_token(const struct tok_priv *p, const char *text, int32_t id, const struct frags *in,
          const struct tok_span *lit, size_t n_lit, struct frags *out)
{
    const struct tok_entry *e = &p->tok[id];
    const char *s = p->text + e->off;
    bool check = n_lit && !special_active(p, id, false);
    size_t i;

    out->n = 0;
    for (i = 0; i < in->n; i++) {
        const struct frag *f = &in->v[i];
        size_t pos = f->off, end = f->off + f->len;

        if (f->id >= 0) {
            if (frag_push(out, f->id, 0, 0) < 0)
                return -ST_NOMEM;
            continue;
        }
        while (pos < end) {
            const char *m = memmem(text + pos, end - pos, s, e->len);
            size_t at, left;

            while (m && check && in_literal(lit, n_lit, (size_t)(m - text), e->len)) {
                size_t from = (size_t)(m - text) + 1;
                m = from < end ? memmem(text + from, end - from, s, e->len) : NULL;
            }
            if (!m) {
                if (frag_push(out, -1, pos, end - pos) < 0)
                    return -ST_NOMEM;
                break;
            }
            at = (size_t)(m - text);
            left = at - pos;
            if (e->attr & TOK_ATTR_LSTRIP)
                while (left > 0 && is_cspace(text[pos + left - 1]))
                    left--;
            if (left > 0 && frag_push(out, -1, pos, left) < 0)
                return -ST_NOMEM;
            if (frag_push(out, id, 0, 0) < 0)
                return -ST_NOMEM;
            pos = at + e->len;
            if (e->attr & TOK_ATTR_RSTRIP)
                while (pos < end && is_cspace(text[pos]))
                    pos++;
        }
    }
    return 0;
}

static int
partition(const struct tokenizer *t, const char *text, size_t len, bool parse_special,
          const struct tok_span *lit, size_t n_lit, struct frags *res)
{
    const struct tok_priv *p = t->p;
    struct frags a = {0}, b = {0};
    uint8_t *occurs = NULL;
    size_t i;
    uint32_t k;
    int rc = -ST_NOMEM;

    res->n = 0;
    if (len == 0)
        return 0;
    if (frag_push(&a, -1, 0, len) < 0)
        goto out;
    if (p->n_special) {
        occurs = calloc((p->n_special + 7) / 8, 1);
        if (!occurs)
            goto out;
        /* which special tokens occur at all (each walk is at most
         * TOK_TRIE_MAX_LEN long; longer tokens are looked for with memmem) */
        for (i = 0; i < len; i++) {
            uint32_t node = p->trie_root[(uint8_t)text[i]];
            size_t j = i + 1;

            while (node) {
                int32_t id = p->trie[node].id;

                if (id >= 0 && special_active(p, id, parse_special)) {
                    uint32_t r = p->special_rank[id];
                    occurs[r >> 3] |= (uint8_t)(1u << (r & 7));
                }
                if (j >= len)
                    break;
                node = p->trie[node].child;
                while (node && p->trie[node].byte != (uint8_t)text[j])
                    node = p->trie[node].sibling;
                j++;
            }
        }
        for (k = 0; k < p->n_long; k++) {
            uint32_t r = p->long_special[k];
            const struct tok_entry *e = &p->tok[p->special[r]];

            if (special_active(p, p->special[r], parse_special) &&
                memmem(text, len, p->text + e->off, e->len))
                occurs[r >> 3] |= (uint8_t)(1u << (r & 7));
        }
        for (k = 0; k < p->n_special; k++) {
            struct frags tmp;

            if (!((occurs[k >> 3] >> (k & 7)) & 1))
                continue;
            if (cut_token(p, text, p->special[k], &a, lit, n_lit, &b) < 0)
                goto out;
            tmp = a;
            a = b;
            b = tmp;
        }
    }
    *res = a;
    a.v = NULL;
    rc = 0;
out:
    free(a.v);
    free(b.v);
    free(occurs);
    return rc;
}

static int
encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
       bool parse_special, const struct tok_span *lit, size_t n_lit, struct tok_ids *out,
       struct diag *d)
{
    struct frags f = {0};
    struct tok_spm_state *spm = NULL;
    struct tok_bpe_state *bpe = NULL;
    size_t n0 = out->n, i;
    bool prev_special = true;
    int rc;

    if (!t->p)
        return diag_set(d, ST_RANGE, "tokenizer not loaded");
    rc = partition(t, text, len, parse_special, lit, n_lit, &f);
    if (rc < 0) {
        diag_set(d, ST_NOMEM, "out of memory tokenizing %zu bytes", len);
        goto out;
    }
    if (add_special && t->add_bos && (rc = tok_ids_push(out, t->bos)) < 0)
        goto nomem;
    for (i = 0; i < f.n; i++) {
        if (f.v[i].id >= 0) {
            if ((rc = tok_ids_push(out, f.v[i].id)) < 0)
                goto nomem;
            prev_special = true;
            continue;
        }
        if (t->model == TOK_MODEL_SPM) {
            rc = tok_spm_encode(t, &spm, text + f.v[i].off, f.v[i].len,
                                t->add_space_prefix && prev_special, out);
            if (rc < 0)
                goto nomem;
        } else if (t->model == TOK_MODEL_WPM) {
            if ((rc = tok_wpm_encode(t, text + f.v[i].off, f.v[i].len, out)) < 0)
                goto nomem;
        } else if (t->model == TOK_MODEL_UGM) {
            if ((rc = tok_ugm_encode(t, text + f.v[i].off, f.v[i].len, out, d)) < 0)
                goto out;
        } else if (t->model == TOK_MODEL_RWKV) {
            if ((rc = tok_rwkv_encode(t, text + f.v[i].off, f.v[i].len, out)) < 0)
                goto nomem;
        } else {
            rc = tok_bpe_encode(t, &bpe, text + f.v[i].off, f.v[i].len, out, d);
            if (rc < 0)
                goto out;
        }
        prev_special = false;
    }
    if (add_special && t->add_eos && (rc = tok_ids_push(out, t->eos)) < 0)
        goto nomem;
    /* WPM: [SEP] ends the text (llama.cpp: whenever add_special) */
    if (add_special && t->model == TOK_MODEL_WPM && t->sep != TOK_NULL &&
        (rc = tok_ids_push(out, t->sep)) < 0)
        goto nomem;
    rc = 0;
    goto out;
nomem:
    rc = diag_set(d, ST_NOMEM, "out of memory tokenizing %zu bytes", len);
out:
    if (rc < 0)
        out->n = n0;
    free(f.v);
    tok_spm_state_free(spm);
    tok_bpe_state_free(bpe);
    return rc;
}

int
tok_encode(const struct tokenizer *t, const char *text, size_t len, bool add_special,
           bool parse_special, struct tok_ids *out, struct diag *d)
{
    return encode(t, text, len, add_special, parse_special, NULL, 0, out, d);
}

int
tok_encode_spans(const struct tokenizer *t, const char *text, size_t len, bool add_special,
                 const struct tok_span *literal, size_t n_literal, struct tok_ids *out,
                 struct diag *d)
{
    return encode(t, text, len, add_special, true, literal, n_literal, out, d);
}

/* ---- decoding ---- */

const char *
tok_piece(const struct tokenizer *t, int32_t id, bool special, size_t *len)
{
    const struct tok_entry *e;

    if (!t->p || id < 0 || id >= t->n_vocab)
        return NULL;
    e = &t->p->tok[id];
    if (!special && (e->attr & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL))) {
        *len = 0;
        return t->p->piece + e->piece_off + e->piece_len;   /* the NUL after it */
    }
    *len = e->piece_len;
    return t->p->piece + e->piece_off;
}

/* llama.cpp's clean_up_tokenization_spaces passes, in place. */
static size_t
clean_spaces(char *s, size_t total)
{
    size_t i, n1, n2, n3;

    n1 = total;
    total = total ? 1 : 0;
    for (i = 1; i < n1; i++) {
        char x = s[i];

        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            total--;                          /* " ?" " !" " ." " ," */
        s[total++] = x;
    }
    n2 = total;
    total = total ? 1 : 0;
    for (i = 1; i < n2; i++) {
        char x = s[i];

        if (x == '\'' && i + 1 < n2 && s[i - 1] == ' ' && s[i + 1] == ' ') {
            total--;                          /* " ' " -> "'" */
            s[++i] = '\0';
        }
        s[total++] = x;
    }
    n3 = total;
    total = total ? 1 : 0;
    for (i = 1; i < n3; i++) {
        char x = s[i];

        if (s[i - 1] == ' ' && x == '\'' && i + 1 < n3) {
            char x1 = s[i + 1];

            if (x1 == 's' || x1 == 'm') {
                total--;                      /* " 's" " 'm" */
            } else if (x1 != 't' && x1 != 'd' && i + 2 < n3) {
                char x2 = s[i + 2];

                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))
                    total--;                  /* " 're" " 've" */
            }
        }
        s[total++] = x;
    }
    return total;
}

int
tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, bool remove_special,
           bool unparse_special, char **text, size_t *len, struct diag *d)
{
    bool remove_space = t->add_space_prefix;
    size_t i, total = 0, cap = 0;
    char *buf;

    *text = NULL;
    *len = 0;
    if (!t->p)
        return diag_set(d, ST_RANGE, "tokenizer not loaded");
    for (i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return diag_set(d, ST_RANGE, "token id %d at position %zu is out of the vocabulary "
                            "(%d tokens)", ids[i], i, t->n_vocab);
        cap += t->p->tok[ids[i]].piece_len;
        if (cap > SIZE_MAX / 2)
            return diag_set(d, ST_NOMEM, "decoded text too large");
    }
    if (remove_special && t->add_bos && n > 0 && ids[0] == t->bos) {
        remove_space = false;
        ids++;
        n--;
    }
    if (remove_special && t->add_eos && n > 0 && ids[n - 1] == t->eos)
        n--;
    buf = malloc(cap + 1);
    if (!buf)
        return diag_set(d, ST_NOMEM, "out of memory");
    for (i = 0; i < n; i++) {
        size_t pl;
        const char *pc = tok_piece(t, ids[i], unparse_special, &pl);

        if (remove_space && pl > 0 && pc[0] == ' ') {
            pc++;
            pl--;
        }
        remove_space = false;
        memcpy(buf + total, pc, pl);
        total += pl;
    }
    if (t->clean_spaces)
        total = clean_spaces(buf, total);
    buf[total] = '\0';
    *text = buf;
    *len = total;
    return 0;
}

/* ---- lookups ---- */

const char *
tok_text(const struct tokenizer *t, int32_t id, size_t *len)
{
    if (!t->p || id < 0 || id >= t->n_vocab)
        return NULL;
    if (len)
        *len = t->p->tok[id].len;
    return t->p->text + t->p->tok[id].off;
}

unsigned
tok_attr(const struct tokenizer *t, int32_t id)
{
    if (!t->p || id < 0 || id >= t->n_vocab)
        return TOK_ATTR_UNDEFINED;
    return t->p->tok[id].attr;
}

float
tok_score(const struct tokenizer *t, int32_t id)
{
    if (!t->p || id < 0 || id >= t->n_vocab)
        return 0.0f;
    return t->p->tok[id].score;
}

bool
tok_is_eog(const struct tokenizer *t, int32_t id)
{
    if (!t->p || id < 0 || id >= t->n_vocab)
        return false;
    return eog_has(t->p, id);
}

bool
tok_is_control(const struct tokenizer *t, int32_t id)
{
    return (tok_attr(t, id) & TOK_ATTR_CONTROL) != 0;
}
