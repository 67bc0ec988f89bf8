/*
 * generate.c - run_generate(): one prompt through the model with streamed
 * output, or a perplexity evaluation (perplexity.c).  See generate.h.
 */
#include "generate.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <jansson.h>

#include "chat.h"
#include "cli.h"
#include "escape.h"
#include "json.h"
#include "kvcache.h"
#include "model.h"
#include "perplexity.h"
#include "qtypes.h"
#include "spec.h"
#include "eagle_draft.h"
#include "tokenizer.h"
#include "xio.h"

#define PROMPT_MAX ((size_t)64 << 20)      /* a prompt file of up to 64 MiB */
#define PPL_TEXT_MAX ((size_t)1 << 30)     /* a perplexity text of up to 1 GiB */
#define DEFAULT_CTX 4096                    /* when the model states none */

void
generate_opts_init(struct generate_opts *o)
{
    memset(o, 0, sizeof(*o));
    sample_params_init(&o->sp);
    o->repeat_last_n = o->sp.repeat_last_n;
    o->n_predict = -1;
    o->chunks = -1;
    o->lookup_ngram = 3;
    o->spec_tokens = 0;
    o->spec_depth = 8;
    o->spec_width = 1;
    o->draft_p_min = 0.5f;
}

/* ---- UTF-8 streaming ---- */

size_t
utf8_complete_len(const unsigned char *s, size_t n)
{
    size_t j, need, stop = n > 4 ? n - 4 : 0;

    /* the last byte that is not a continuation byte (10xxxxxx) */
    for (j = n; j > stop; j--)
        if ((s[j - 1] & 0xC0) != 0x80)
            break;
    if (j == stop)
        return n;               /* only continuation bytes: invalid, let them go */
    j--;
    if (s[j] >= 0xF0 && s[j] <= 0xF4)
        need = 4;
    else if (s[j] >= 0xE0 && s[j] <= 0xEF)
        need = 3;
    else if (s[j] >= 0xC2 && s[j] <= 0xDF)
        need = 2;
    else
        need = 1;               /* ASCII, or a byte that never starts a sequence */
    return n - j < need ? j : n;
}

/* Writes n bytes that end on a character boundary: as they are, or escaped
 * for a terminal. */
static int
stream_write(const struct utf8_stream *u, FILE *fp, const void *s, size_t n, struct diag *d)
{
    if (!u->escape)
        return write_all(fp, s, n, d);
    esc_fwrite(fp, s, n, SIZE_MAX, ESC_TEXT);
    return ferror(fp) ? diag_set(d, ST_IO, "write failed: %s", strerror(errno ? errno : EIO)) : 0;
}

int
utf8_stream_push(struct utf8_stream *u, const char *s, size_t len, FILE *fp, struct diag *d)
{
    const unsigned char *us = (const unsigned char *)s;
    bool wrote = false;
    size_t k;
    int rc;

    /* a pending character is completed from the front of s first, so that
     * it is written (and escaped) whole */
    while (u->n > 0 && len > 0) {
        u->pend[u->n++] = *us++;
        len--;
        k = utf8_complete_len(u->pend, (size_t)u->n);
        if (k == 0)
            continue;
        if ((rc = stream_write(u, fp, u->pend, k, d)) < 0)
            return rc;
        memmove(u->pend, u->pend + k, (size_t)u->n - k);
        u->n -= (int)k;
        wrote = true;
    }
    if (len > 0) {
        /* nothing pending: the end of s alone may be incomplete */
        k = utf8_complete_len(us, len);
        if (k && (rc = stream_write(u, fp, us, k, d)) < 0)
            return rc;
        memcpy(u->pend, us + k, len - k);
        u->n = (int)(len - k);
        wrote |= k > 0;
    }
    if (wrote && fflush(fp) != 0)
        return diag_set(d, ST_IO, "write failed: %s", strerror(errno));
    return 0;
}

int
utf8_stream_flush(struct utf8_stream *u, FILE *fp, struct diag *d)
{
    int rc;

    if (u->n && (rc = stream_write(u, fp, u->pend, (size_t)u->n, d)) < 0)
        return rc;
    u->n = 0;
    if (fflush(fp) != 0)
        return diag_set(d, ST_IO, "write failed: %s", strerror(errno));
    return 0;
}

char *
utf8_valid_dup(const char *s, size_t n, size_t *out_len)
{
    const unsigned char *u = (const unsigned char *)s;
    char *out = malloc(n * 3 + 1);   /* each byte becomes at most 3 */
    size_t i = 0, o = 0;

    if (!out)
        return NULL;
    while (i < n) {
        unsigned char c = u[i];
        size_t need, k;
        unsigned char lo = 0x80, hi = 0xBF;

        if (c < 0x80) {
            out[o++] = (char)c;
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF)
            need = 2;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 3;
        else
            need = 0;
        /* the second byte's range is narrower after E0, ED, F0, F4 */
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
        else if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
        for (k = 0; k < need && i + 1 + k < n; k++) {
            unsigned char b = u[i + 1 + k];
            if (b < (k == 0 ? lo : 0x80) || b > (k == 0 ? hi : 0xBF))
                break;
        }
        if (need && k == need) {
            memcpy(out + o, u + i, need + 1);
            o += need + 1;
            i += need + 1;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += need ? k + 1 : 1;
        }
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

static double
ms_since(double t0)
{
    return (now_seconds() - t0) * 1000.0;
}

/* Reads a prompt or text file ("-" = stdin) and drops one trailing newline,
 * as llama.cpp's -f does. */
static int
read_text(const char *path, size_t max, char **text, size_t *len, struct diag *d)
{
    int rc = read_file_all(path, max, text, len, d);

    if (rc < 0) {
        diag_prefix(d, "'%s'", strcmp(path, "-") ? path : "<stdin>");
        return rc;
    }
    xio_note_input(path);       /* no output of this run may replace it */
    if (*len && (*text)[*len - 1] == '\n')
        (*text)[--*len] = '\0';
    return 0;
}

/* The prompt tokens: -p, -f or stdin, through the chat template with chat
 * (message text literal unless parse_special, chat_encode). */
static int
build_prompt(const struct generate_opts *o, const struct model *m, const struct tokenizer *tok,
             struct tok_ids *ids, struct diag *d)
{
    struct chat_template ct;
    struct chat_msg msgs[2];
    size_t n_msgs = 0;
    char *raw = NULL;
    size_t raw_len;
    int rc;

    if (o->prompt) {
        raw_len = strlen(o->prompt);
        if (!(raw = malloc(raw_len + 1)))
            return diag_set(d, ST_NOMEM, "out of memory");
        memcpy(raw, o->prompt, raw_len + 1);
    } else if ((rc = read_text(o->prompt_file ? o->prompt_file : "-", PROMPT_MAX, &raw, &raw_len,
                               d)) < 0) {
        return rc;
    }
    if (!o->chat) {
        rc = tok_encode(tok, raw, raw_len, true, true, ids, d);
        free(raw);
        return rc;
    }
    /* llama_chat_apply_template's rendering: no default system message */
    if ((rc = chat_template_from_gguf(&ct, &m->gguf, tok, d)) < 0) {
        if (rc == -ST_FORMAT)
            diag_prefix(d, "'%s'", o->model);
        free(raw);
        return rc;
    }
    if (ct.guessed)
        runcb_warn(&o->cb, "%s", ct.note);
    runcb_info(&o->cb, "chat template: %s", chat_family_name(ct.family));
    if (o->system) {
        msgs[n_msgs].role = "system";
        msgs[n_msgs++].content = o->system;
    }
    msgs[n_msgs].role = "user";
    msgs[n_msgs++].content = raw;
    rc = chat_encode(&ct, tok, msgs, n_msgs, o->parse_special, ids, d);
    chat_template_release(&ct);
    free(raw);
    return rc;
}

/* The KV pool for one sequence of ctx tokens, into *c (nothing allocated:
 * kv_new makes it); with a budget, ctx shrinks to what it holds. */
static int
plan_kv(const struct generate_opts *o, const struct model *m, int64_t *ctx, struct kv_config *c,
        struct diag *d)
{
    size_t bb, mem;
    int64_t cap;

    model_kv_config(m, 0, GGML_TYPE_F16, c);
    bb = kv_block_bytes(c);
    if (!bb)
        return diag_set(d, ST_FORMAT, "model has invalid KV dimensions");
    if (o->kv_mem > 0) {
        mem = (size_t)o->kv_mem;
        cap = kv_tokens_for(c, mem, m->max_batch);
        if (cap > 0 && cap < *ctx) {
            runcb_info(&o->cb, "--kv-mem %zu bytes holds %lld tokens: context cut from %lld", mem,
                       (long long)cap, (long long)*ctx);
            *ctx = cap;
        }
    } else if (!(mem = kv_mem_for(c, *ctx, m->max_batch))) {
        return diag_set(d, ST_NOMEM, "a KV cache for %lld tokens is too large", (long long)*ctx);
    }
    c->mem = mem;
    return 0;
}

static int
json_set(json_t *o, const char *key, json_t *v)
{
    return v ? json_object_set_new(o, key, v) : -1;
}

/* the process's peak resident set in bytes (0 if unknown) */
static int64_t
max_rss_bytes(void)
{
    struct rusage ru;

    return getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : 0;
}

/* tau: tokens emitted per verify pass (accepted drafts + the target's own) */
static double
spec_accept_len(const struct generate_report *r)
{
    return r->spec_passes ? (double)(r->spec_accepted + r->spec_passes) / (double)r->spec_passes : 0;
}

/* The k <= n largest of n logits, largest first (the lower id first among
 * equal values, as greedy sampling breaks ties): ids into id[k], values into
 * v[k]. */
static void
top_logits(const float *logits, int64_t n, int k, int32_t *id, float *v)
{
    int m = 0, j;

    for (int64_t t = 0; t < n; t++) {
        if (m == k && !(logits[t] > v[k - 1]))
            continue;
        j = m < k ? m++ : k - 1;
        for (; j > 0 && logits[t] > v[j - 1]; j--) {
            id[j] = id[j - 1];
            v[j] = v[j - 1];
        }
        id[j] = (int32_t)t;
        v[j] = logits[t];
    }
}

/* "top_logits": per generated token, [[id, logit], ...] (k each) */
static json_t *
top_logits_json(const int32_t *id, const float *v, int64_t n_toks, int k)
{
    json_t *all = json_array();
    int bad = !all;

    for (int64_t i = 0; !bad && i < n_toks; i++) {
        json_t *row = json_array();
        bad |= !row || json_array_append_new(all, row);
        for (int j = 0; !bad && j < k; j++)
            bad |= json_array_append_new(row, json_pack("[if]", (int)id[i * k + j],
                                                        (double)v[i * k + j]));
    }
    if (bad) {
        json_decref(all);
        return NULL;
    }
    return all;
}

static int
write_completion_json(FILE *fp, const struct generate_report *r, const char *text, size_t len,
                      const int32_t *prompt, int64_t n_prompt, const int32_t *toks,
                      int64_t n_toks, const int32_t *top_id, const float *top_v, int top_k,
                      struct diag *d)
{
    json_t *o = json_object(), *a = json_array(), *pa = json_array();
    size_t vlen;
    char *valid = utf8_valid_dup(text, len, &vlen);
    int64_t i;
    int bad = !o || !a || !pa || !valid, rc;

    for (i = 0; !bad && i < n_toks; i++)
        bad |= json_array_append_new(a, json_integer(toks[i]));
    for (i = 0; !bad && i < n_prompt; i++)
        bad |= json_array_append_new(pa, json_integer(prompt[i]));
    if (!bad) {
        bad |= json_set(o, "schema", json_string("generate/1"));
        bad |= json_set(o, "type", json_string("completion"));
        bad |= json_set(o, "text", json_stringn(valid, vlen));
        bad |= json_set(o, "tokens", a);
        a = NULL;
        bad |= json_set(o, "finish_reason", json_string(r->finish_reason));
        bad |= json_set(o, "prompt_tokens", json_integer(r->prompt_tokens));
        bad |= json_set(o, "completion_tokens", json_integer(r->completion_tokens));
        bad |= json_set(o, "prompt_token_ids", pa);
        if (top_k > 0)
            bad |= json_set(o, "top_logits", top_logits_json(top_id, top_v, n_toks, top_k));
        pa = NULL;
        bad |= json_set(o, "seed", json_integer((json_int_t)r->seed));
        bad |= json_set(o, "ctx", json_integer(r->ctx));
        bad |= json_set(o, "threads", json_integer(r->threads));
        bad |= json_set(o, "kernel", json_string(r->kernel));
        bad |= json_set(o, "load_ms", json_real(r->load_ms));
        bad |= json_set(o, "prompt_ms", json_real(r->prompt_ms));
        bad |= json_set(o, "prompt_tok_s", json_real(r->prompt_tok_s));
        bad |= json_set(o, "ttft_ms", json_real(r->ttft_ms));
        bad |= json_set(o, "generation_ms", json_real(r->gen_ms));
        bad |= json_set(o, "generation_tok_s", json_real(r->gen_tok_s));
        bad |= json_set(o, "total_ms", json_real(r->total_ms));
        bad |= json_set(o, "kv_bytes", json_integer(r->kv_bytes));
        bad |= json_set(o, "max_rss_bytes", json_integer(r->max_rss_bytes));
        if (r->drafter) {
            json_t *sp = json_object();
            bad |= !sp || json_set(o, "speculative", sp);
            if (sp) {
                bad |= json_set(sp, "drafter", json_string(r->drafter));
                bad |= json_set(sp, "verify_passes", json_integer(r->spec_passes));
                bad |= json_set(sp, "drafted", json_integer(r->spec_drafted));
                bad |= json_set(sp, "accepted", json_integer(r->spec_accepted));
                bad |= json_set(sp, "acceptance", json_real(r->spec_drafted ? (double)r->spec_accepted / (double)r->spec_drafted : 0.0));
                bad |= json_set(sp, "tokens_per_pass", json_real(r->spec_passes ? (double)(r->completion_tokens - 1) / (double)r->spec_passes : 0.0));
                bad |= json_set(sp, "accept_len", json_real(spec_accept_len(r)));
                bad |= json_set(sp, "draft_ms", json_real(r->spec_draft_ms));
                /* --spec-compare: the keys always, null when a run had no
                 * decoding step to time (-n 1, or an EOS at once) */
                if (r->spec_compared) {
                    bool timed = r->spec_plain_tok_s > 0 && r->gen_tok_s > 0;
                    bad |= json_set(sp, "plain_tok_s", r->spec_plain_tok_s > 0
                                    ? json_real(r->spec_plain_tok_s) : json_null());
                    bad |= json_set(sp, "speedup", timed ? json_real(r->gen_tok_s /
                                                                     r->spec_plain_tok_s)
                                                         : json_null());
                }
                bad |= json_set(sp, "verify_ms", json_real(r->spec_verify_ms));
                bad |= json_set(sp, "budget", r->spec_auto ? json_string("auto")
                                                           : json_integer(r->spec_budget));
                if (r->spec_auto) {
                    json_t *cc = json_object();
                    bad |= !cc || json_set(sp, "verify_cost_ms", cc);
                    for (int k = 0; cc && k < r->spec_cost.n_meas; k++) {
                        char key[24];
                        snprintf(key, sizeof(key), "%lld", (long long)r->spec_cost.n[k]);
                        bad |= json_set(cc, key, json_real(r->spec_cost.ms[k]));
                    }
                    bad |= json_set(sp, "verify_slot_ms", json_real(r->spec_cost.slot_ms));
                    bad |= json_set(sp, "mean_levels", json_real(r->spec_passes ? (double)r->spec_levels / (double)r->spec_passes : 0.0));
                }
            }
        }
    }
    rc = bad ? diag_set(d, ST_NOMEM, "out of memory") : json_print_line(o, fp, d);
    json_decref(o);
    json_decref(a);
    json_decref(pa);
    free(valid);
    return rc;
}

/* ---- generation ---- */

struct gen_run {
    const struct generate_opts *o;
    struct model *m;
    const struct tokenizer *tok;
    struct kvcache *kv;
    int64_t ctx;
    FILE *fp;
    const char *out_name;       /* for messages: -o FILE, NULL for stdout */
    struct spec_dm *dm;         /* --draft: the draft model, or NULL */
    struct eagle_draft *eh;     /* --draft-head: the EAGLE head, or NULL */
    bool plain;                 /* --spec-compare's plain run: no drafter, nothing written */
    int32_t *cmp;               /* its tokens, for the speculative run to compare */
    int64_t n_cmp;
};

/* A failed write to the output: the message names the file. */
static int
out_failed(const struct gen_run *g, int rc, struct diag *d)
{
    if (rc == -ST_IO && g->out_name)
        diag_prefix(d, "'%s'", g->out_name);
    else if (rc == -ST_IO)
        diag_prefix(d, "stdout");
    return rc;
}

/* Flushes the output, so that a write error is seen here, with the name. */
static int
out_flush(const struct gen_run *g, struct diag *d)
{
    if (fflush(g->fp) != 0)
        return out_failed(g, diag_set(d, ST_IO, "write failed: %s", strerror(errno)), d);
    return 0;
}

static int
append_bytes(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = *cap ? *cap : 256;
        char *nb;
        while (nc < *len + n + 1)
            nc *= 2;
        if (!(nb = realloc(*buf, nc)))
            return -ST_NOMEM;
        *buf = nb;
        *cap = nc;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

static int
run_text(struct gen_run *g, const int32_t *prompt, int64_t n_prompt, struct generate_report *r,
         struct diag *d)
{
    const struct generate_opts *o = g->o;
    const int64_t n_vocab = g->m->hp.n_vocab;
    struct sample_params sp = o->sp;
    struct sampler *smp = NULL;
    /* on a terminal the text is escaped (utf8_stream); a pipe or a file
     * gets its bytes as they are */
    struct utf8_stream us = { { 0 }, 0, !o->json && isatty(fileno(g->fp)) };
    struct batch_tok *bt = NULL;
    struct batch b;
    struct model_out mo = { NULL, NULL };
    float *logits = NULL;
    int32_t *hist = NULL, *gen, *draft = NULL, *top_id = NULL, seq = -1;
    float *top_v = NULL;
    const int top_k = !o->json ? 0 : o->top_logits < n_vocab ? o->top_logits : (int)n_vocab;
    const bool tree_drafter = g->dm || g->eh;   /* a draft model or an EAGLE head */
    const bool spec = !g->plain && (o->lookup || tree_drafter), spec_auto = spec && o->spec_tokens == 0;
    const int width = tree_drafter ? o->spec_width : 1;
    /* draft levels at most, and draft tokens at most */
    const int max_levels = !spec ? 0 : !tree_drafter ? SPEC_AUTO_LEVELS
                           : spec_auto && o->spec_depth * width > 64 ? 64 / width : o->spec_depth;
    const int64_t max_draft = !spec ? 0 : spec_auto ? (int64_t)max_levels * width : o->spec_tokens;
    struct spec_cost *cost = &r->spec_cost;
    int64_t acc_levels = 0, rejections = 0;
    struct spec_probe probe = { 0, 0 };
    struct spec_tree tree = { 0 };
    uint8_t *mask = NULL;
    int64_t *path = NULL;
    char *text = NULL;
    size_t text_len = 0, text_cap = 0;
    int64_t n_gen = 0, n_decode = 0, i, cap_gen;
    double t_start, t_first = 0, t_dec0;
    int rc;

    if (n_prompt == 0)
        return diag_set(d, ST_RANGE, "the prompt is empty");
    if (n_prompt > g->ctx)
        return diag_set(d, ST_RANGE, "the prompt has %lld tokens, more than the context of %lld "
                        "(--ctx, --kv-mem)", (long long)n_prompt, (long long)g->ctx);
    sp.repeat_last_n = o->repeat_last_n < 0 ? (int32_t)g->ctx : o->repeat_last_n;
    cap_gen = g->ctx - n_prompt;
    if (o->n_predict >= 0 && o->n_predict < cap_gen)
        cap_gen = o->n_predict;
    if ((rc = sampler_new(&smp, &sp, (int32_t)n_vocab, d)) < 0)
        return rc;
    /* hist: the prompt, then the generated tokens (gen) */
    bt = calloc((size_t)(n_prompt > max_draft + 1 ? n_prompt : max_draft + 1), sizeof(*bt));
    logits = malloc((size_t)(max_draft + 1) * (size_t)n_vocab * sizeof(*logits));
    hist = malloc((size_t)(n_prompt + (cap_gen > 0 ? cap_gen : 1)) * sizeof(*hist));
    draft = malloc((size_t)(max_draft > 0 ? max_draft : 1) * sizeof(*draft));
    path = malloc((size_t)(max_draft + 1) * sizeof(*path));
    mask = malloc((size_t)((max_draft + 1) * (max_draft + 1)));
    if (g->eh && !g->plain && (rc = eagle_draft_hidden(g->eh, n_prompt > max_draft + 1 ? n_prompt
                                                       : max_draft + 1, &mo.hidden, d)) < 0)
        goto out;
    /* an EAGLE-3 head's features: hidden states inside the target */
    const struct model_hooks *eh_hooks = g->eh && !g->plain ? eagle_draft_hooks(g->eh) : NULL;
    if ((rc = spec_tree_init(&tree, max_draft + 1, d)) < 0)
        goto out;
    if (top_k > 0) {
        top_id = malloc((size_t)(cap_gen > 0 ? cap_gen : 1) * (size_t)top_k * sizeof(*top_id));
        top_v = malloc((size_t)(cap_gen > 0 ? cap_gen : 1) * (size_t)top_k * sizeof(*top_v));
    }
    if (!bt || !logits || !hist || !draft || !path || !mask ||
        (top_k > 0 && (!top_id || !top_v))) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    memcpy(hist, prompt, (size_t)n_prompt * sizeof(*hist));
    gen = hist + n_prompt;
    if ((rc = kv_seq_new(g->kv, &seq)) < 0) {
        diag_set(d, -rc, "no KV sequence available");
        goto out;
    }

    /* prefill: the whole prompt in one batch, logits of the last token only */
    for (i = 0; i < n_prompt; i++) {
        bt[i].seq = seq;
        bt[i].pos = (int32_t)i;
        bt[i].token = prompt[i];
        bt[i].logits = i == n_prompt - 1;
        bt[i].tiled = model_prompt_tiled(n_prompt, i);
        bt[i].gemm = model_prompt_gemm(n_prompt, i);
        sampler_accept(smp, prompt[i]);
    }
    b.mask = NULL;
    b.llamacpp_ubatch = 0;
    mo.logits = logits;
    t_start = now_seconds();
    /* with sliding-window layers, in the model's chunks, one call each: the
     * cache releases the window's old rows as the sequence grows, so a long
     * prompt never holds more than the window (kvcache.h) */
    int64_t step = g->m->hp.n_swa > 0 ? g->m->max_batch : n_prompt;
    for (i = 0; i < n_prompt; i += step) {
        b.n = n_prompt - i < step ? n_prompt - i : step;
        b.tok = bt + i;
        if ((rc = model_forward(g->m, g->kv, &b, eh_hooks, &mo, d)) < 0)
            goto out;
    }
    b.tok = bt;
    r->prompt_ms = ms_since(t_start);
    if (g->eh && !g->plain)
        eagle_draft_feed_rows(g->eh, 0, mo.hidden, NULL, n_prompt);
    /* --spec-tokens auto: what a verify pass of 1, 2, 4 ... tokens costs */
    if (spec_auto && (rc = spec_cost_measure(g->m, g->kv, max_draft + 1, cost, d)) < 0)
        goto out;
    r->finish_reason = "length";

    /* decode: sample, emit, feed back.  With a drafter (spec.h), each pass
     * feeds the last token and a draft tree after it (a chain, or a tree
     * under a mask); from the root, each node's row is sampled exactly as
     * plain decoding would sample it, and the walk moves on to the child
     * holding the sampled token while there is one. */
    t_dec0 = now_seconds();
    int stop = 0;
    while (n_gen < cap_gen && !stop) {
        int64_t root_slot = n_prompt + n_gen - 1, cur = 0, a = 0;

        spec_tree_reset(&tree, n_gen > 0 ? gen[n_gen - 1] : 0);
        if (n_gen > 0 && spec) {
            /* the draft size: fixed, or the best for the acceptance so far
             * (with one level now and then when none pays, to keep
             * measuring); drafts beyond what may still be emitted are not
             * made */
            int levels = max_levels;
            int64_t bud = max_draft;
            if (spec_auto) {
                double t_draft = g->dm ? spec_dm_level_ms(g->dm, 1, root_slot, cost, g->m)
                                 : g->eh ? eagle_draft_level_ms(g->eh, width) : 0.0;
                levels = spec_auto_levels(cost, acc_levels, rejections, 1, width, t_draft,
                                          max_levels, model_attn_slots(g->m, root_slot), &probe);
                bud = (int64_t)levels * width;
                r->spec_levels += levels;
            }
            if (bud > cap_gen - n_gen - 1)
                bud = cap_gen - n_gen - 1;
            double t_d = now_seconds();
            if (bud > 0 && o->lookup) {
                int64_t nd = spec_lookup_draft(hist, n_prompt + n_gen, o->lookup_ngram, draft, bud);
                for (int64_t j = 0; j < nd; j++)
                    spec_tree_add(&tree, draft[j], j);
            } else if (bud > 0 && g->dm &&
                       (rc = spec_dm_draft(g->dm, hist, n_prompt + n_gen, levels, width, bud,
                                           o->draft_p_min, &tree, d)) < 0) {
                goto out;
            } else if (bud > 0 && g->eh &&
                       (rc = eagle_draft_tree(g->eh, hist, n_prompt + n_gen, levels, bud,
                                              o->draft_p_min, &tree, d)) < 0) {
                goto out;
            }
            r->spec_draft_ms += ms_since(t_d);
        }
        if (n_gen > 0) {
            for (int64_t j = 0; j < tree.n; j++) {
                bt[j].seq = seq;
                bt[j].pos = (int32_t)(root_slot + tree.depth[j]);
                bt[j].token = tree.tok[j];
                bt[j].logits = 1;
                bt[j].tiled = 0;
                bt[j].gemm = 0;
            }
            b.n = tree.n;
            b.mask = NULL;
            if (!tree.chain) {
                spec_tree_mask(&tree, mask);
                b.mask = mask;
            }
            double t_v = now_seconds();
            rc = model_forward(g->m, g->kv, &b, eh_hooks, &mo, d);
            double v_ms = ms_since(t_v);
            r->spec_verify_ms += v_ms;
            b.mask = NULL;
            if (rc < 0)
                goto out;
            /* auto: the context's share of the pass (spec.h slot_ms) */
            if (spec_auto)
                spec_cost_observe(cost, tree.n, spec_tree_attn_slots(&tree, g->m, root_slot), v_ms);
            r->spec_passes++;
            r->spec_drafted += tree.n - 1;
        }
        for (;;) {
            int32_t t = sampler_sample(smp, logits + cur * n_vocab);
            size_t plen;
            const char *piece;

            if (n_gen == 0) {
                t_first = now_seconds();
                r->ttft_ms = (t_first - t_start) * 1000.0;
                t_dec0 = t_first;
            } else {
                n_decode++;
            }
            if (!o->ignore_eos && tok_is_eog(g->tok, t)) {
                r->finish_reason = "stop";
                stop = 1;
                break;
            }
            if (top_k > 0)
                top_logits(logits + cur * n_vocab, n_vocab, top_k, top_id + n_gen * top_k,
                           top_v + n_gen * top_k);
            gen[n_gen++] = t;
            sampler_accept(smp, t);
            piece = tok_piece(g->tok, t, false, &plen);
            if (!piece)
                plen = 0;
            if (append_bytes(&text, &text_len, &text_cap, piece ? piece : "", plen) < 0) {
                rc = diag_set(d, ST_NOMEM, "out of memory");
                goto out;
            }
            if (!o->json && !g->plain && plen &&
                (rc = utf8_stream_push(&us, piece, plen, g->fp, d)) < 0) {
                out_failed(g, rc, d);
                goto out;
            }
            if ((cur = spec_tree_child(&tree, cur, t)) < 0)
                break;
            path[a++] = cur;
            r->spec_accepted++;
        }
        /* the EAGLE head reads the target's features of the root and the
         * accepted path (rows 0 and path[] of the verify pass) */
        if (g->eh && n_gen > 0 && !g->plain) {
            eagle_draft_feed_rows(g->eh, root_slot, mo.hidden, NULL, 1);
            eagle_draft_feed_rows(g->eh, root_slot + 1, mo.hidden, path, a);
        }
        if (tree.n > 1) {
            acc_levels += a;
            rejections += stop || a < tree.depth[tree.n - 1];
        }
        /* the cache keeps the root and the accepted path, moved to the slots
         * after the root (a chain's path is there already); the rejected
         * drafts' slots go */
        if (tree.n > 1 && !stop) {
            for (int64_t k = 0; k < a; k++)
                if (path[k] != k + 1 &&
                    (rc = kv_seq_move_slot(g->kv, seq, root_slot + path[k], root_slot + k + 1)) < 0) {
                    rc = diag_set(d, ST_RANGE, "speculative: cannot compact the KV slots");
                    goto out;
                }
            kv_seq_truncate(g->kv, seq, root_slot + 1 + a);
        }
    }
    r->gen_ms = n_gen > 0 ? ms_since(t_dec0) : 0.0;
    r->total_ms = ms_since(t_start);
    if (g->plain) {             /* --spec-compare's plain run: its tokens, nothing written */
        r->gen_tok_s = r->gen_ms > 0 && n_decode > 0 ? (double)n_decode / (r->gen_ms / 1000.0) : 0.0;
        if (!(g->cmp = malloc((size_t)(n_gen > 0 ? n_gen : 1) * sizeof(*g->cmp)))) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto out;
        }
        memcpy(g->cmp, gen, (size_t)n_gen * sizeof(*gen));
        g->n_cmp = n_gen;
        goto out;
    }
    if (g->cmp) {
        int64_t k = 0;
        while (k < n_gen && k < g->n_cmp && gen[k] == g->cmp[k])
            k++;
        if (k < n_gen || k < g->n_cmp) {
            rc = diag_set(d, ST_CHECK, "--spec-compare: the speculative output differs from plain "
                          "decoding at generated token %lld", (long long)k);
            goto out;
        }
    }
    if (!o->json && (rc = utf8_stream_flush(&us, g->fp, d)) < 0) {
        out_failed(g, rc, d);
        goto out;
    }
    r->prompt_tokens = n_prompt;
    r->completion_tokens = n_gen;
    r->prompt_tok_s = r->prompt_ms > 0 ? (double)n_prompt / (r->prompt_ms / 1000.0) : 0.0;
    r->gen_tok_s = r->gen_ms > 0 && n_decode > 0 ? (double)n_decode / (r->gen_ms / 1000.0) : 0.0;
    r->ends_in_newline = o->json || text_len == 0 || text[text_len - 1] == '\n';
    r->max_rss_bytes = max_rss_bytes();
    if (o->json && (rc = out_failed(g, write_completion_json(g->fp, r, text ? text : "",
                                                             text_len, prompt, n_prompt, gen,
                                                             n_gen, top_id, top_v, top_k, d),
                                                             d)) == 0)
        rc = out_flush(g, d);
out:
    if (seq >= 0)
        kv_seq_free(g->kv, seq);
    sampler_free(smp);
    free(bt);
    free(logits);
    free(hist);
    free(draft);
    free(path);
    free(mask);
    spec_tree_release(&tree);
    free(text);
    free(top_id);
    free(top_v);
    return rc;
}

/* ---- perplexity ---- */

/* the --perplexity text's tokens into *ids */
static int
ppl_tokens(const struct generate_opts *o, const struct tokenizer *tok, struct tok_ids *ids,
           struct diag *d)
{
    char *text = NULL;
    size_t len;
    int rc;

    if ((rc = read_text(o->perplexity, PPL_TEXT_MAX, &text, &len, d)) < 0)
        return rc;
    /* llama-perplexity: common_tokenize(text, add_special = true, parse_special = false) */
    if ((rc = tok_encode(tok, text, len, true, false, ids, d)) == 0)
        runcb_info(&o->cb, "'%s': %zu bytes, %zu tokens", o->perplexity, len, ids->n);
    free(text);
    return rc;
}

/* the perplexity of ids (ppl_tokens, checked against the context) */
static int
run_ppl(struct gen_run *g, const struct tok_ids *ids, struct generate_report *r, struct diag *d)
{
    const struct generate_opts *o = g->o;
    struct ppl_result pr = { 0 };
    double t0;
    int rc;

    t0 = now_seconds();
    rc = perplexity_run(g->m, g->kv, ids->v, (int64_t)ids->n, g->ctx, o->chunks,
                        g->tok->add_bos ? g->tok->bos : -1, &o->cb, &pr, d);
    if (rc < 0)
        goto out;
    r->ppl_ms = ms_since(t0);
    r->ppl = pr.ppl;
    r->ppl_err = pr.err;
    r->ppl_chunks = pr.n_chunks;
    r->ppl_file_tokens = (int64_t)ids->n;
    r->ppl_scored = pr.n_scored;
    r->ppl_tok_s = r->ppl_ms > 0 ? (double)(pr.n_chunks * g->ctx) / (r->ppl_ms / 1000.0) : 0.0;
    r->max_rss_bytes = max_rss_bytes();
    if (o->json) {
        json_t *j = json_object(), *a = json_array();
        int64_t c;
        int bad = !j || !a;

        for (c = 0; !bad && c < pr.n_chunks; c++)
            bad |= json_array_append_new(a, json_real(pr.chunk_ppl[c]));
        if (!bad) {
            bad |= json_set(j, "schema", json_string("generate/1"));
            bad |= json_set(j, "type", json_string("perplexity"));
            bad |= json_set(j, "ppl", json_real(pr.ppl));
            bad |= json_set(j, "ppl_stderr", json_real(pr.err));
            bad |= json_set(j, "nll_mean", json_real(pr.nll_mean));
            bad |= json_set(j, "ctx", json_integer(g->ctx));
            bad |= json_set(j, "chunks", json_integer(pr.n_chunks));
            bad |= json_set(j, "file_tokens", json_integer((json_int_t)ids->n));
            bad |= json_set(j, "scored_tokens", json_integer(pr.n_scored));
            bad |= json_set(j, "chunk_ppl", a);
            a = NULL;
            bad |= json_set(j, "threads", json_integer(r->threads));
            bad |= json_set(j, "kernel", json_string(r->kernel));
            bad |= json_set(j, "ms", json_real(r->ppl_ms));
            bad |= json_set(j, "tok_s", json_real(r->ppl_tok_s));
            bad |= json_set(j, "kv_bytes", json_integer(r->kv_bytes));
            bad |= json_set(j, "max_rss_bytes", json_integer(r->max_rss_bytes));
        }
        rc = bad ? diag_set(d, ST_NOMEM, "out of memory")
                 : out_failed(g, json_print_line(j, g->fp, d), d);
        if (rc == 0)
            rc = out_flush(g, d);
        json_decref(j);
        json_decref(a);
    } else if (fprintf(g->fp, "PPL = %.4f +/- %.5f\n", pr.ppl, pr.err) < 0) {
        rc = out_failed(g, diag_set(d, ST_IO, "write failed: %s", strerror(errno)), d);
    } else {
        rc = out_flush(g, d);
    }
out:
    free(pr.chunk_ppl);
    return rc;
}

/* ---- the run ---- */

int
run_generate(const struct generate_opts *o, struct generate_report *r, struct diag *d)
{
    struct model_opts mopt = MODEL_OPTS_INIT;
    struct model *m = NULL;
    struct tokenizer tok;
    struct kvcache *kv = NULL;
    struct kv_config kc;
    struct tok_ids ids = { NULL, 0, 0 };
    struct xout out;
    struct gen_run g = { .dm = NULL };
    bool tok_loaded = false, out_open = false, to_stdout = !o->output || !strcmp(o->output, "-");
    double t0 = now_seconds();
    int rc;

    memset(r, 0, sizeof(*r));
    memset(&out, 0, sizeof(out));
    r->perplexity = o->perplexity != NULL;
    r->seed = o->sp.seed;
    r->finish_reason = "length";
    /* no output of this run may replace one of its inputs */
    xio_note_input(o->model);
    xio_note_input(o->prompt_file);
    xio_note_input(o->perplexity);
    xio_note_input(o->draft);
    xio_note_input(o->draft_head);
    /* fail before the model loads: an existing file without --force, a
     * directory, a block device (a device or FIFO is written in place) */
    if (!to_stdout && (rc = xout_check(o->output, o->force, d)) < 0) {
        diag_prefix(d, "'%s'", o->output);
        return rc;
    }

    mopt.n_threads = o->threads;
    mopt.kernel = o->kernel;
    mopt.device = o->device;
    if ((rc = model_open(&m, o->model, &mopt, d)) < 0) {
        diag_prefix(d, "'%s'", o->model);
        return rc;
    }
    if ((rc = tok_load(&tok, &m->gguf, d)) < 0) {
        diag_prefix(d, "'%s'", o->model);
        goto out;
    }
    tok_loaded = true;
    if (tok.warning[0])
        runcb_warn(&o->cb, "%s", tok.warning);
    r->load_ms = ms_since(t0);
    r->threads = m->be->n_threads;
    r->kernel = m->be->kernel;
    r->drafter = o->perplexity ? NULL : o->lookup ? "lookup" : o->draft ? "draft"
               : o->draft_head ? "eagle" : NULL;
    r->spec_auto = o->spec_tokens == 0;
    r->spec_budget = o->spec_tokens;
    r->ctx = o->ctx > 0 ? o->ctx : o->perplexity ? 512
           : m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : DEFAULT_CTX;

    /* the prompt or the text, before anything is written; a text too short
     * for the context is refused before the pool for it is allocated */
    rc = o->perplexity ? ppl_tokens(o, &tok, &ids, d) : build_prompt(o, m, &tok, &ids, d);
    if (rc < 0 || (rc = plan_kv(o, m, &r->ctx, &kc, d)) < 0 ||
        (o->perplexity && (rc = perplexity_check((int64_t)ids.n, r->ctx, d)) < 0) ||
        (rc = kv_new(&kv, &kc, d)) < 0)
        goto out;
    r->kv_bytes = (int64_t)kv_config_get(kv)->mem;
    runcb_info(&o->cb, "'%s': %s, %lld layers, vocabulary %lld; context %lld, %d threads, kernel %s, "
               "seed %llu", o->model, m->hp.arch_name, (long long)m->hp.n_layer,
               (long long)m->hp.n_vocab, (long long)r->ctx, r->threads, r->kernel,
               (unsigned long long)o->sp.seed);

    if (to_stdout) {
        g.fp = stdout;
    } else {
        if ((rc = xout_open(&out, o->output, o->force, d)) < 0) {
            diag_prefix(d, "'%s'", o->output);
            goto out;
        }
        out_open = true;
        g.fp = out.fp;
    }
    g.out_name = to_stdout ? NULL : o->output;
    g.o = o;
    g.m = m;
    g.tok = &tok;
    g.kv = kv;
    g.ctx = r->ctx;
    if (o->draft && !o->perplexity &&
        (rc = spec_dm_open(&g.dm, o->draft, &mopt, &tok, r->ctx, 1, r->ctx, d)) < 0)
        goto out;
    if (o->draft_head && !o->perplexity &&
        (rc = eagle_draft_open(&g.eh, o->draft_head, m, r->ctx, o->spec_width, GGML_TYPE_Q8_0,
                               d)) < 0)
        goto out;
    if (g.eh)
        r->drafter = eagle_draft_arch(g.eh);    /* "eagle" or "eagle3" */
    if (!o->perplexity && o->spec_compare && r->drafter) {
        struct generate_report pr = *r;
        g.plain = true;
        if ((rc = run_text(&g, ids.v, (int64_t)ids.n, &pr, d)) < 0)
            goto out;
        g.plain = false;
        r->spec_compared = true;
        r->spec_plain_tok_s = pr.gen_tok_s;
    }
    rc = o->perplexity ? run_ppl(&g, &ids, r, d) : run_text(&g, ids.v, (int64_t)ids.n, r, d);
    if (out_open) {
        if (rc < 0) {
            xout_abort(&out);
        } else if ((rc = xout_commit(&out, d)) < 0) {
            diag_prefix(d, "'%s'", o->output);
        }
        out_open = false;
    }
out:
    if (out_open)
        xout_abort(&out);
    spec_dm_free(g.dm);
    eagle_draft_free(g.eh);
    free(g.cmp);
    tok_ids_release(&ids);
    kv_free(kv);
    if (tok_loaded)
        tok_release(&tok);
    model_free(m);
    return rc;
}

void
generate_report_print(const struct generate_report *r, const char *prefix, FILE *fp)
{
    if (r->perplexity)
        fprintf(fp, "%s: %lld chunks of %lld tokens, %lld tokens scored, %.1f tok/s, %.2f s\n",
                prefix, (long long)r->ppl_chunks, (long long)r->ctx, (long long)r->ppl_scored,
                r->ppl_tok_s, r->ppl_ms / 1000.0);
    else
        fprintf(fp, "%s: prompt %lld tokens, %.1f tok/s; generated %lld tokens, %.1f tok/s (%s)\n",
                prefix, (long long)r->prompt_tokens, r->prompt_tok_s,
                (long long)r->completion_tokens, r->gen_tok_s, r->finish_reason);
    if (!r->perplexity && r->drafter)
        fprintf(fp, "%s: speculative (%s): %.2f tokens per verify pass, %lld of %lld drafts kept; "
                "draft %.0f ms, verify %.0f ms; draft size %s%.1f\n", prefix, r->drafter,
                spec_accept_len(r), (long long)r->spec_accepted, (long long)r->spec_drafted,
                r->spec_draft_ms, r->spec_verify_ms, r->spec_auto ? "auto, mean " : "",
                r->spec_auto ? (r->spec_passes ? (double)r->spec_levels / (double)r->spec_passes : 0.0)
                             : (double)r->spec_budget);
    if (!r->perplexity && r->drafter && r->spec_compared) {
        if (r->spec_plain_tok_s > 0 && r->gen_tok_s > 0)
            fprintf(fp, "%s: plain decoding %.1f tok/s, the same tokens: speedup %.2fx\n", prefix,
                    r->spec_plain_tok_s, r->gen_tok_s / r->spec_plain_tok_s);
        else
            fprintf(fp, "%s: plain decoding: the same tokens; no decoding step to time\n", prefix);
    }
}
