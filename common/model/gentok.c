/*
 * gentok.c - run_gentok(): generate --tokenize / --count / --detokenize
 * (gentok.h).
 */
#include "gentok.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "escape.h"
#include "generate.h"
#include "gguf.h"
#include "json.h"
#include "tokenizer.h"
#include "xio.h"

#define INPUT_MAX ((size_t)1 << 30)    /* a text or id file of up to 1 GiB */

/* The input: -p text, else the whole file or stdin (as it is). */
static int
read_input(const struct generate_opts *o, char **text, size_t *len, struct diag *d)
{
    const char *path = o->prompt_file ? o->prompt_file : "-";
    int rc;

    if (o->prompt) {
        *len = strlen(o->prompt);
        if (!(*text = malloc(*len + 1)))
            return diag_set(d, ST_NOMEM, "out of memory");
        memcpy(*text, o->prompt, *len + 1);
        return 0;
    }
    if ((rc = read_file_all(path, INPUT_MAX, text, len, d)) < 0)
        diag_prefix(d, "'%s'", strcmp(path, "-") ? path : "<stdin>");
    return rc;
}

/* Parses the ids of text: decimal numbers separated by white space, commas
 * and brackets. */
static int
parse_ids(const struct generate_opts *o, const struct tokenizer *t, const char *text, size_t len,
          struct tok_ids *ids, struct diag *d)
{
    const char *src = o->prompt ? "-p" : o->prompt_file && strcmp(o->prompt_file, "-")
                      ? o->prompt_file : "<stdin>";
    size_t i = 0;

    while (i < len) {
        unsigned char c = (unsigned char)text[i];
        uint64_t v = 0;
        size_t s = i;

        if (isspace(c) || c == ',' || c == '[' || c == ']') {
            i++;
            continue;
        }
        for (; i < len && text[i] >= '0' && text[i] <= '9'; i++)
            if (v <= INT32_MAX)
                v = v * 10 + (uint64_t)(text[i] - '0');
        if (i == s || (i < len && !isspace((unsigned char)text[i]) && text[i] != ',' &&
                       text[i] != '[' && text[i] != ']')) {
            c = (unsigned char)text[i];
            if (isprint(c))
                return diag_set(d, ST_FORMAT, "'%s': byte %zu: expected a token id, found '%c'",
                                src, i, c);
            return diag_set(d, ST_FORMAT, "'%s': byte %zu: expected a token id, found byte 0x%02x",
                            src, i, c);
        }
        if (v >= (uint64_t)t->n_vocab)
            return diag_set(d, ST_FORMAT, "'%s': byte %zu: token id %.*s%s is out of range (the "
                            "vocabulary has %d)", src, s, (int)(i - s > 12 ? 12 : i - s),
                            text + s, i - s > 12 ? "..." : "", t->n_vocab);
        if (tok_ids_push(ids, (int32_t)v) < 0)
            return diag_set(d, ST_NOMEM, "out of memory");
    }
    return 0;
}

/* ---- offsets ---- */

/* Byte offset and length in text of each token (gentok.h): the pieces are
 * walked along the text; a piece byte the text does not have (the SPM prefix
 * space, BOS/EOS pieces) takes no text, U+FFFD in a piece takes the bytes
 * that are not UTF-8 it stands for, a space takes a literal U+2581. */
static void
token_offsets(const struct tokenizer *t, const int32_t *ids, size_t n, const char *text,
              size_t len, bool added_bos, bool added_eos, size_t *off, size_t *tl)
{
    size_t c = 0, i;

    for (i = 0; i < n; i++) {
        size_t pl = 0, j = 0, start = c;
        const char *p = tok_piece(t, ids[i], true, &pl);

        if ((i == 0 && added_bos) || (i == n - 1 && added_eos))
            pl = 0;
        while (j < pl) {
            size_t k = c;

            if (c < len && text[c] == p[j]) {
                c++;
                j++;
            } else if (j + 3 <= pl && !memcmp(p + j, "\xEF\xBF\xBD", 3) && c < len &&
                       tok_utf8_decode(text, len, &k) == 0xFFFD) {
                c = k;
                j += 3;
            } else if (p[j] == ' ' && c + 3 <= len && !memcmp(text + c, "\xE2\x96\x81", 3)) {
                c += 3;
                j++;
            } else {
                j++;                    /* not in the text */
            }
        }
        /* a piece that gave nothing (a prefix space alone) starts where the
         * text goes on */
        off[i] = start;
        tl[i] = c - start;
    }
}

/* ---- output ---- */

static int
json_add(json_t *o, const char *key, json_t *v)
{
    return !v || json_object_set_new(o, key, v);
}

static int
write_json(FILE *fp, enum gentok_mode mode, const char *model, const struct tokenizer *t,
           const struct tok_ids *ids, const char *text, size_t len, bool added_bos,
           bool added_eos, const char *dec, size_t dec_len, struct diag *d)
{
    json_t *j = json_object(), *a = NULL;
    size_t *off = NULL, *tl = NULL, i;
    int bad = !j, rc;

    bad |= json_add(j, "schema", json_string("generate/1"));
    bad |= json_add(j, "type", json_string(mode == GENTOK_COUNT ? "count"
                                           : mode == GENTOK_TOKENIZE ? "tokens" : "text"));
    bad |= json_add(j, "model", json_string_nocheck(model));
    bad |= json_add(j, "n_tokens", json_integer((json_int_t)ids->n));
    if (!bad && mode == GENTOK_DETOKENIZE) {
        size_t vl;
        char *valid = utf8_valid_dup(dec, dec_len, &vl);

        bad |= !valid || json_add(j, "text", json_stringn(valid, vl));
        free(valid);
    }
    if (!bad && mode == GENTOK_TOKENIZE) {
        a = json_array();
        off = malloc((ids->n + 1) * sizeof(*off));
        tl = malloc((ids->n + 1) * sizeof(*tl));
        bad |= !a || !off || !tl;
        if (!bad)
            token_offsets(t, ids->v, ids->n, text, len, added_bos, added_eos, off, tl);
        for (i = 0; !bad && i < ids->n; i++) {
            json_t *e = json_object(), *ps;
            size_t pl;
            const char *p = tok_piece(t, ids->v[i], true, &pl);

            bad |= !e || json_array_append_new(a, e);
            if (bad)
                break;
            bad |= json_add(e, "id", json_integer(ids->v[i]));
            ps = json_stringn(p, pl);
            if (ps) {
                bad |= json_add(e, "piece", ps);
            } else {
                char *hex = malloc(2 * pl + 1);
                size_t k;

                bad |= !hex;
                for (k = 0; hex && k < pl; k++)
                    snprintf(hex + 2 * k, 3, "%02x", (unsigned)(unsigned char)p[k]);
                bad |= hex && json_add(e, "piece_hex", json_string(hex));
                free(hex);
            }
            bad |= json_add(e, "offset", json_integer((json_int_t)off[i]));
            bad |= json_add(e, "length", json_integer((json_int_t)tl[i]));
        }
        if (!bad) {
            bad |= json_object_set_new(j, "tokens", a);
            a = NULL;
        }
    }
    free(off);
    free(tl);
    json_decref(a);
    if (bad) {
        json_decref(j);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    rc = json_print_line(j, fp, d);
    json_decref(j);
    return rc;
}

/* The decoded text: as it is, or on a terminal escaped but for its line
 * breaks (as generated text is: utf8_stream). */
static int
write_text(FILE *fp, bool tty, const char *s, size_t n, struct diag *d)
{
    if (!tty)
        return write_all(fp, s, n, d);
    esc_fwrite(fp, s, n, SIZE_MAX, ESC_TEXT);
    if (n && s[n - 1] != '\n')
        fputc('\n', fp);            /* end the line on a terminal */
    return ferror(fp) ? diag_set(d, ST_IO, "write failed: %s", strerror(errno ? errno : EIO)) : 0;
}

static int
write_ids(FILE *fp, const struct tok_ids *ids, bool count, struct diag *d)
{
    size_t i;

    if (count)
        fprintf(fp, "%zu\n", ids->n);
    for (i = 0; !count && i < ids->n; i++)
        fprintf(fp, "%d\n", ids->v[i]);
    return ferror(fp) ? diag_set(d, ST_IO, "write failed: %s", strerror(errno ? errno : EIO)) : 0;
}

int
run_gentok(const struct gentok_opts *t0, const struct generate_opts *o, struct diag *d)
{
    struct gguf g;
    struct tokenizer t;
    struct tok_ids ids = {0};
    struct xout out;
    char *text = NULL, *dec = NULL;
    size_t len = 0, dec_len = 0;
    bool to_stdout = !o->output || !strcmp(o->output, "-"), g_open = false, t_loaded = false;
    bool add = !t0->no_special, parse = !t0->no_parse_special, added_bos = false, added_eos = false;
    int rc;

    memset(&out, 0, sizeof(out));
    xio_note_input(o->model);
    xio_note_input(o->prompt_file);
    if (!to_stdout && (rc = xout_check(o->output, o->force, d)) < 0) {
        diag_prefix(d, "'%s'", o->output);
        return rc;
    }
    /* the header only: the vocabulary is metadata */
    if ((rc = gguf_open(&g, o->model, d)) < 0) {
        diag_prefix(d, "'%s'", o->model);
        return rc;
    }
    g_open = true;
    if ((rc = tok_load(&t, &g, d)) < 0) {
        diag_prefix(d, "'%s'", o->model);
        goto out;
    }
    t_loaded = true;
    gguf_release(&g);
    g_open = false;
    if (t.warning[0])
        runcb_warn(&o->cb, "%s", t.warning);
    if ((rc = read_input(o, &text, &len, d)) < 0)
        goto out;
    if (t0->mode == GENTOK_DETOKENIZE) {
        size_t from = 0, n;

        if ((rc = parse_ids(o, &t, text, len, &ids, d)) < 0)
            goto out;
        /* the inverse of tokenize: drop the BOS/EOS it adds, then decode
         * without remove_special, so that SentencePiece's prefix space goes
         * too (llama_detokenize keeps it when it removes a BOS) */
        n = ids.n;
        if (add && t.add_bos && n > 0 && ids.v[0] == t.bos)
            from = 1;
        if (add && t.add_eos && n > from && ids.v[n - 1] == t.eos)
            n--;
        if ((rc = tok_decode(&t, ids.v + from, n - from, false, parse, &dec, &dec_len, d)) < 0)
            goto out;
    } else {
        if ((rc = tok_encode(&t, text, len, add, parse, &ids, d)) < 0)
            goto out;
        added_bos = add && t.add_bos && ids.n > 0 && ids.v[0] == t.bos;
        added_eos = add && t.add_eos && ids.n > (size_t)added_bos && ids.v[ids.n - 1] == t.eos;
    }
    if ((rc = xout_open(&out, to_stdout ? "-" : o->output, o->force, d)) < 0) {
        if (!to_stdout)
            diag_prefix(d, "'%s'", o->output);
        goto out;
    }
    if (o->json)
        rc = write_json(out.fp, t0->mode, o->model, &t, &ids, text, len, added_bos, added_eos, dec, dec_len, d);
    else if (t0->mode == GENTOK_DETOKENIZE)
        rc = write_text(out.fp, isatty(fileno(out.fp)), dec, dec_len, d);
    else
        rc = write_ids(out.fp, &ids, t0->mode == GENTOK_COUNT, d);
    if (rc < 0)
        xout_abort(&out);
    else
        rc = xout_commit(&out, d);
    /* a write error names the output, as in every other mode */
    if (rc == -ST_IO && to_stdout)
        diag_prefix(d, "stdout");
    else if (rc == -ST_IO)
        diag_prefix(d, "'%s'", o->output);
out:
    free(text);
    free(dec);
    tok_ids_release(&ids);
    if (t_loaded)
        tok_release(&t);
    if (g_open)
        gguf_release(&g);
    return rc;
}
