/*
 * tok_wpm.c - WordPiece (tokenizer.ggml.model "bert"), as llama.cpp's
 * llm_tokenizer_wpm_session: the text is normalized and split into words
 * (BERT's BasicTokenizer: NFD's first code point and no marks when
 * strip_accents, lowercase when lowercase, controls, NUL and U+FFFD dropped,
 * white space separates, punctuation, ASCII symbols and CJK ideographs are
 * words of their own); each word, with U+2581 in front, is covered from the
 * left by the longest tokens; a word that cannot be covered is UNK.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_priv.h"
#include "tok_unicode.h"
#include "tokenizer.h"

/* llama.cpp's is_chinese_char (note 0x2B920: as the HF Rust code has it) */
static bool
cjk(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Covers "\u2581" + w[0..n) with the longest tokens; UNK when it cannot. */
static int
wpm_word(const struct tokenizer *t, const char *w, size_t n, char *buf, struct tok_ids *out)
{
    const struct tok_priv *p = t->p;
    size_t from = out->n, i, m = n + 3;

    memcpy(buf, "\xe2\x96\x81", 3);
    memcpy(buf + 3, w, n);
    for (i = 0; i < m;) {
        size_t j = m - i > p->max_len ? i + p->max_len : m;
        int32_t id = -1;

        for (; j > i; j--)
            if ((id = tok_lookup(p, buf + i, j - i)) >= 0)
                break;
        if (id < 0) {
            out->n = from;          /* discard the word's tokens */
            break;
        }
        if (tok_ids_push(out, id) < 0)
            return -ST_NOMEM;
        i = j;
    }
    if (out->n == from && t->unk != TOK_NULL)
        return tok_ids_push(out, t->unk);
    return 0;
}

int
tok_wpm_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out)
{
    const struct tok_priv *p = t->p;
    char *w = malloc(4 * len + 8), *buf = malloc(4 * len + 8);
    size_t i = 0, n = 0;
    int rc = 0;

    if (!w || !buf) {
        rc = -ST_NOMEM;
        goto out;
    }
    while (i < len && rc == 0) {
        uint32_t c = tok_utf8_next(text, len, &i), lc;
        int cat;

        if (p->wpm_strip)
            c = tok_unfd(c);
        cat = tok_ucat(c);
        if (tok_uspace(c)) {
            if (n)
                rc = wpm_word(t, w, n, buf, out);
            n = 0;
            continue;
        }
        if (c == 0 || c == 0xFFFD || cat == TOK_UC_C || (p->wpm_strip && cat == TOK_UC_M))
            continue;
        lc = p->wpm_lower ? tok_ulower(c) : c;
        if (cat == TOK_UC_P || (c < 0x7F && cat == TOK_UC_S) || cjk(c)) {
            if (n && (rc = wpm_word(t, w, n, buf, out)) < 0)
                break;
            n = tok_utf8_put(lc, w);
            rc = wpm_word(t, w, n, buf, out);
            n = 0;
            continue;
        }
        n += tok_utf8_put(lc, w + n);
    }
    if (rc == 0 && n)
        rc = wpm_word(t, w, n, buf, out);
out:
    free(w);
    free(buf);
    return rc;
}
