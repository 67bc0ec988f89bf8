/*
 * perplexity.c - llama-perplexity's method (see perplexity.h for the steps
 * and where they were read).  Each chunk is one sequence of the paged KV
 * cache: its first half is prefilled without logits, the second half in
 * calls of PPL_GROUP tokens that return logits, so the logits buffer stays
 * at PPL_GROUP rows whatever the context.  Attention rounds as in
 * llama-perplexity run with its default ubatch of 512 tokens and one
 * sequence per batch (-b 512 or -b ctx): no call straddles a ubatch
 * boundary, and each states the size of its ubatch (model.h,
 * batch.llamacpp_ubatch).
 */
#include "perplexity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "model.h"
#include "runcb.h"

#define PPL_GROUP 64
#define LLAMACPP_UBATCH 512     /* llama-perplexity's default n_ubatch */

int
ppl_forward(struct model *m, struct kvcache *kv, const struct batch *b, struct model_out *mo,
            int64_t ctx, int64_t p0, struct diag *d)
{
    int64_t u0 = p0 / LLAMACPP_UBATCH * LLAMACPP_UBATCH;
    struct batch ub = *b;

    ub.llamacpp_ubatch = ctx - u0 < LLAMACPP_UBATCH ? ctx - u0 : LLAMACPP_UBATCH;
    return model_forward(m, kv, &ub, NULL, mo, d);
}

int64_t
ppl_cut(int64_t p0, int64_t n)
{
    int64_t to = (p0 / LLAMACPP_UBATCH + 1) * LLAMACPP_UBATCH - p0;
    return n < to ? n : to;
}

double
ppl_token_nll(const float *logits, int64_t n_vocab, int32_t tok)
{
    float max = logits[0];
    double sum = 0.0;
    int64_t i;

    for (i = 1; i < n_vocab; i++)
        if (logits[i] > max)
            max = logits[i];
    for (i = 0; i < n_vocab; i++)
        sum += expf(logits[i] - max);
    return (double)max + log(sum) - (double)logits[tok];
}

void
ppl_acc_add(struct ppl_acc *a, double nll)
{
    a->nll += nll;
    a->nll2 += nll * nll;
    a->count++;
}

void
ppl_acc_result(const struct ppl_acc *a, double *ppl, double *err)
{
    double mean, var;

    *ppl = 0.0;
    *err = 0.0;
    if (a->count == 0)
        return;
    mean = a->nll / (double)a->count;
    *ppl = exp(mean);
    if (a->count < 2)
        return;
    var = a->nll2 / (double)a->count - mean * mean;
    if (var > 0.0)
        *err = *ppl * sqrt(var / (double)(a->count - 1));
}

int
perplexity_check(int64_t n_tokens, int64_t ctx, struct diag *d)
{
    if (ctx < 4)
        return diag_set(d, ST_RANGE, "perplexity needs a context of at least 4 tokens, not %lld",
                        (long long)ctx);
    if (n_tokens < 2 * ctx)
        return diag_set(d, ST_RANGE, "perplexity with a context of %lld needs at least %lld tokens; "
                        "the text has %lld", (long long)ctx, (long long)(2 * ctx),
                        (long long)n_tokens);
    return 0;
}

int
perplexity_run(struct model *m, struct kvcache *kv, const int32_t *tokens, int64_t n_tokens,
               int64_t ctx, int64_t max_chunks, int32_t bos, const struct run_callbacks *cb,
               struct ppl_result *r, struct diag *d)
{
    const int64_t n_vocab = m->hp.n_vocab, first = ctx / 2;
    struct batch_tok *bt = NULL;
    float *logits = NULL;
    struct ppl_acc acc = { 0, 0, 0 };
    int64_t n_chunk, c, i;
    int32_t seq = -1;
    int rc = 0;

    memset(r, 0, sizeof(*r));
    if ((rc = perplexity_check(n_tokens, ctx, d)) < 0)
        return rc;
    n_chunk = n_tokens / ctx;
    if (max_chunks >= 0 && max_chunks < n_chunk)
        n_chunk = max_chunks;
    bt = calloc((size_t)(first > PPL_GROUP ? first : PPL_GROUP), sizeof(*bt));
    logits = malloc((size_t)PPL_GROUP * (size_t)n_vocab * sizeof(*logits));
    r->chunk_ppl = malloc((size_t)n_chunk * sizeof(*r->chunk_ppl));
    if (!bt || !logits || !r->chunk_ppl) {
        rc = diag_set(d, ST_NOMEM, "perplexity: out of memory");
        goto out;
    }
    runcb_progress(cb, "perplexity", 0, n_chunk);
    for (c = 0; c < n_chunk; c++) {
        const int32_t *ct = tokens + c * ctx;
        struct batch b;
        struct model_out mo = { NULL, NULL };
        int64_t p0, n;

        if ((rc = kv_seq_new(kv, &seq)) < 0) {
            diag_set(d, -rc, "perplexity: no KV sequence available");
            goto out;
        }
        /* first half: fills the cache, no logits */
        for (i = 0; i < first; i++) {
            bt[i].seq = seq;
            bt[i].pos = (int32_t)i;
            bt[i].token = i == 0 && bos >= 0 ? bos : ct[i];
            bt[i].logits = 0;
        }
        b.mask = NULL;
        b.llamacpp_ubatch = 0;      /* (ppl_forward states it) */
        for (p0 = 0; p0 < first; p0 += n) {
            n = ppl_cut(p0, first - p0);
            b.n = n;
            b.tok = bt + p0;
            if ((rc = ppl_forward(m, kv, &b, &mo, ctx, p0, d)) < 0)
                goto out;
        }
        /* second half: logits at first .. ctx-2 score tokens first+1 .. ctx-1 */
        mo.logits = logits;
        b.tok = bt;
        for (p0 = first; p0 < ctx; p0 += n) {
            n = ppl_cut(p0, ctx - p0 < PPL_GROUP ? ctx - p0 : PPL_GROUP);
            for (i = 0; i < n; i++) {
                bt[i].seq = seq;
                bt[i].pos = (int32_t)(p0 + i);
                bt[i].token = p0 + i == 0 && bos >= 0 ? bos : ct[p0 + i];
                bt[i].logits = p0 + i < ctx - 1;
            }
            b.n = n;
            if ((rc = ppl_forward(m, kv, &b, &mo, ctx, p0, d)) < 0)
                goto out;
            for (i = 0; i < n && p0 + i < ctx - 1; i++)
                ppl_acc_add(&acc, ppl_token_nll(logits + i * n_vocab, n_vocab, ct[p0 + i + 1]));
        }
        kv_seq_free(kv, seq);
        seq = -1;
        ppl_acc_result(&acc, &r->chunk_ppl[c], &r->err);
        r->n_chunks = c + 1;
        runcb_progress(cb, "perplexity", c + 1, n_chunk);
    }
    ppl_acc_result(&acc, &r->ppl, &r->err);
    r->nll_mean = acc.count ? acc.nll / (double)acc.count : 0.0;
    r->n_scored = acc.count;
out:
    if (seq >= 0)
        kv_seq_free(kv, seq);
    free(bt);
    free(logits);
    if (rc < 0) {
        free(r->chunk_ppl);
        r->chunk_ppl = NULL;
    }
    return rc;
}
