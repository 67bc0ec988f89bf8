/*
 * distill.c - self-distillation data for draft-train (distill.h): the JSON
 * Lines data parser, and the base model's responses through the batch
 * scheduler.
 */
#include "distill.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "kvcache.h"
#include "model.h"
#include "qtypes.h"
#include "sample.h"
#include "scheduler.h"

#define DISTILL_CTX_DEFAULT 4096

void
distill_line_release(struct distill_line *l)
{
    json_decref(l->obj);
    free(l->msgs);
    memset(l, 0, sizeof(*l));
}

static int
parse_messages(const json_t *a, struct distill_line *l, struct diag *d)
{
    size_t n = json_array_size(a);

    if (!json_is_array(a) || n == 0)
        return diag_set(d, ST_FORMAT, "\"messages\" is not a non-empty array");
    if (n > DISTILL_MSGS_MAX)
        return diag_set(d, ST_FORMAT, "more than %d messages", DISTILL_MSGS_MAX);
    if (!(l->msgs = calloc(n, sizeof(*l->msgs))))
        return diag_set(d, ST_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(a, i);
        const char *role, *content;
        if (!json_is_object(m))
            return diag_set(d, ST_FORMAT, "message %zu is not an object", i + 1);
        int r1 = json_obj_str(m, "role", &role, d), r2;
        if (r1 < 0 || (r2 = json_obj_str(m, "content", &content, d)) < 0) {
            diag_prefix(d, "message %zu", i + 1);
            return -ST_FORMAT;
        }
        if (r1 || r2)
            return diag_set(d, ST_FORMAT, "message %zu has no \"%s\"", i + 1,
                            r1 ? "role" : "content");
        l->msgs[i] = (struct chat_msg){ role, content };
    }
    l->n_msgs = n;
    return 0;
}

int
distill_line_parse(const char *line, size_t len, struct distill_line *l, struct diag *d)
{
    static const char *const keys[] = { "text", "prompt", "messages" };
    int kind = -1, rc;

    memset(l, 0, sizeof(*l));
    if (len > 0 && line[len - 1] == '\r')
        len--;
    size_t i = 0;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (i == len)
        return 1;
    if ((rc = json_load_mem(line, len, &l->obj, d)) < 0)
        return rc;
    if (!json_is_object(l->obj))
        return diag_set(d, ST_FORMAT, "not a JSON object");
    for (int k = 0; k < 3; k++) {
        const json_t *v = json_object_get(l->obj, keys[k]);
        if (!v || json_is_null(v))
            continue;
        if (kind >= 0)
            return diag_set(d, ST_FORMAT, "both \"%s\" and \"%s\"", keys[kind], keys[k]);
        kind = k;
    }
    if (kind < 0)
        return diag_set(d, ST_FORMAT, "no \"text\", \"prompt\" or \"messages\" member");
    l->kind = kind;
    if (kind == DISTILL_MESSAGES)
        return parse_messages(json_object_get(l->obj, "messages"), l, d);
    const json_t *v = json_object_get(l->obj, keys[kind]);
    if (!json_is_string(v))
        return diag_set(d, ST_FORMAT, "\"%s\" is not a string", keys[kind]);
    l->text = json_string_value(v);
    l->text_len = json_string_length(v);
    if (kind == DISTILL_PROMPT && l->text_len == 0)
        return diag_set(d, ST_FORMAT, "empty \"prompt\"");
    return 0;
}

/* ---- generation ---- */

struct gen_ctx {
    struct tok_ids *resp;
    bool *answered;
    int64_t n_gen;
    int64_t keep;               /* response tokens kept at most */
};

static int
on_result(void *ctx, const struct sched_result *r)
{
    struct gen_ctx *g = ctx;

    int64_t n = r->n_tokens < g->keep ? r->n_tokens : g->keep;
    for (int64_t i = 0; i < n; i++)
        if (tok_ids_push(&g->resp[r->tag], r->tokens[i]) < 0)
            return -ST_NOMEM;
    g->n_gen += n;
    g->answered[r->tag] = true;
    return 0;
}

int64_t
distill_ctx(const struct model *m)
{
    return m->hp.n_ctx_train > 0 ? m->hp.n_ctx_train : DISTILL_CTX_DEFAULT;
}

int
distill_generate(struct model *m, const struct tokenizer *tok, struct tok_ids *prompts,
                 int64_t n, const struct distill_gen *g, struct tok_ids *resp, bool *answered,
                 int64_t *n_gen, struct diag *d)
{
    struct sched_opts so = SCHED_OPTS_INIT;
    struct gen_ctx gc = { resp, answered, 0, g->max_tokens };
    struct sched_callbacks cb = { on_result, NULL, &gc };
    struct kvcache *kv = NULL;
    struct sched *s = NULL;
    struct kv_config c;
    int64_t ctx = distill_ctx(m), longest = 0;
    bool held = false;
    int rc;

    *n_gen = 0;
    if (g->max_tokens < 1 || g->max_seqs < 1 || !(g->temp >= 0))
        return diag_set(d, ST_RANGE, "self-distillation options out of range");
    for (int64_t i = 0; i < n; i++)
        if ((int64_t)prompts[i].n > longest && (int64_t)prompts[i].n < ctx)
            longest = (int64_t)prompts[i].n;
    /* with a feature sink, one token past max_tokens (cut back in on_result) */
    int64_t gen_max = g->max_tokens + (g->feat_rows != NULL);
    int64_t per_seq = longest + gen_max < ctx ? longest + gen_max : ctx;
    so.max_seqs = g->max_seqs < n ? g->max_seqs : (n > 0 ? n : 1);
    so.max_batch_tokens = DISTILL_BATCH_TOKENS;
    so.ctx = ctx;
    if (g->feat_rows) {
        so.prefix_cache = false;        /* (its blocks are not computed) */
        so.feat_hooks = g->feat_hooks;
        so.feat_rows = g->feat_rows;
        so.feat_ctx = g->feat_ctx;
    }
    model_kv_config(m, 0, GGML_TYPE_F16, &c);
    c.mem = (size_t)so.max_seqs * kv_mem_for(&c, per_seq + c.block_size, so.max_batch_tokens);
    if ((rc = kv_new(&kv, &c, d)) < 0)
        return rc;
    if ((rc = sched_new(&s, m, kv, tok, &so, &cb, d)) < 0)
        goto out;
    for (int64_t i = 0; i < n; i++)
        answered[i] = false;
    for (int64_t i = 0; i < n; i++) {
        if ((int64_t)prompts[i].n >= ctx)
            continue;           /* no room for a response: left unanswered */
        struct sched_req r = { i, prompts[i].v, (int64_t)prompts[i].n, gen_max,
                               { 0, 0, 0, 0, 0, 0, 0 }, NULL, 0 };
        sample_params_init(&r.sp);
        r.sp.temp = g->temp;
        r.sp.top_k = 0;
        r.sp.top_p = 1.0f;
        r.sp.min_p = 0.0f;
        r.sp.seed = g->seed + (uint64_t)i;
        if ((rc = sched_add(s, &r, d)) < 0) {
            diag_prefix(d, "prompt %lld", (long long)i + 1);
            goto out;
        }
    }
    while ((rc = sched_step(s, d)) > 0) {
        if (g->stop && *g->stop) {
            rc = diag_set(d, ST_FAIL, "interrupted during self-distillation (%lld response "
                          "tokens generated)", (long long)gc.n_gen);
            break;
        }
        if (!held && g->deadline > 0 && now_seconds() >= g->deadline) {
            /* the prompts admitted finish; the rest never start */
            sched_hold(s, true);
            held = true;
        }
    }
    for (int64_t i = 0; i < n && rc == 0; i++)
        if (!answered[i])
            rc = 1;
    *n_gen = gc.n_gen;
out:
    sched_free(s);
    kv_free(kv);
    return rc;
}
