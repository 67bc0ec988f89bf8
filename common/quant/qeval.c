/*
 * qeval.c - base vs quantized model on the same chunks (see qeval.h).  Both
 * models are prefilled with the first half of a chunk, then the second half
 * runs in groups of QEVAL_GROUP tokens that return logits from both, so the
 * logits buffers stay at QEVAL_GROUP rows whatever the context.
 */
#include "qeval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "model.h"
#include "perplexity.h"
#include "qtypes.h"
#include "tokenizer.h"
#include "xio.h"

#define QEVAL_GROUP 64
#define QEVAL_TEXT_MAX ((size_t)1 << 30)

static int
open_kv(const struct model *m, int64_t ctx, struct kvcache **kv, struct diag *d)
{
    struct kv_config c;
    size_t bb;
    int64_t blocks;

    model_kv_config(m, 0, GGML_TYPE_F16, &c);
    bb = kv_block_bytes(&c);
    if (!bb)
        return diag_set(d, ST_FORMAT, "model has invalid KV dimensions");
    blocks = (ctx + c.block_size - 1) / c.block_size;
    if ((uint64_t)blocks > SIZE_MAX / bb)
        return diag_set(d, ST_NOMEM, "a KV cache for %lld tokens is too large", (long long)ctx);
    c.mem = (size_t)blocks * bb;
    return kv_new(kv, &c, d);
}

/* log-sum-exp of n logits, in double */
static double
lse(const float *l, int64_t n, int64_t *argmax)
{
    float max = l[0];
    int64_t am = 0;
    double s = 0.0;

    for (int64_t i = 1; i < n; i++)
        if (l[i] > max) {
            max = l[i];
            am = i;
        }
    for (int64_t i = 0; i < n; i++)
        s += exp((double)l[i] - (double)max);
    *argmax = am;
    return (double)max + log(s);
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int
qeval_run(const char *base_path, const char *quant_path, const char *text_path,
          const struct qeval_opts *o, struct qeval_result *r, struct diag *d)
{
    struct model_opts mo = MODEL_OPTS_INIT;
    struct model *mb = NULL, *mq = NULL;
    struct kvcache *kb = NULL, *kq = NULL;
    struct tokenizer tok;
    struct tok_ids ids = { NULL, 0, 0 };
    struct batch_tok *bt = NULL;
    float *lb = NULL, *lq = NULL;
    double *kls = NULL;
    char *text = NULL;
    size_t len;
    struct ppl_acc ab = { 0, 0, 0 }, aq = { 0, 0, 0 };
    double kl_sum = 0.0;
    int64_t agree = 0, n_kl = 0, n_vocab, ctx = o->ctx, first, n_chunk;
    int32_t bos;
    bool tok_ok = false;
    int rc;

    memset(r, 0, sizeof(*r));
    if (ctx < 4)
        return diag_set(d, ST_RANGE, "evaluation needs a context of at least 4 tokens");
    mo.n_threads = o->n_threads;
    mo.kernel = o->kernel;
    if ((rc = model_open(&mb, base_path, &mo, d)) < 0) {
        diag_prefix(d, "'%s'", base_path);
        goto out;
    }
    if ((rc = model_open(&mq, quant_path, &mo, d)) < 0) {
        diag_prefix(d, "'%s'", quant_path);
        goto out;
    }
    n_vocab = mb->hp.n_vocab;
    if (mq->hp.n_vocab != n_vocab) {
        rc = diag_set(d, ST_FORMAT, "the models have different vocabularies (%lld vs %lld tokens)",
                      (long long)n_vocab, (long long)mq->hp.n_vocab);
        goto out;
    }
    if ((rc = tok_load(&tok, &mb->gguf, d)) < 0) {
        diag_prefix(d, "'%s'", base_path);
        goto out;
    }
    tok_ok = true;
    if ((rc = read_file_all(text_path, QEVAL_TEXT_MAX, &text, &len, d)) < 0) {
        diag_prefix(d, "'%s'", text_path);
        goto out;
    }
    /* as llama-perplexity: add_special = true, parse_special = false */
    if ((rc = tok_encode(&tok, text, len, true, false, &ids, d)) < 0)
        goto out;
    r->n_tokens = (int64_t)ids.n;
    if ((int64_t)ids.n < 2 * ctx) {
        rc = diag_set(d, ST_RANGE, "evaluation with a context of %lld needs at least %lld tokens; "
                      "'%s' has %lld", (long long)ctx, (long long)(2 * ctx), text_path,
                      (long long)ids.n);
        goto out;
    }
    bos = tok.add_bos ? tok.bos : -1;
    n_chunk = (int64_t)ids.n / ctx;
    if (o->max_chunks >= 0 && o->max_chunks < n_chunk)
        n_chunk = o->max_chunks;
    first = ctx / 2;
    if ((rc = open_kv(mb, ctx, &kb, d)) < 0 || (rc = open_kv(mq, ctx, &kq, d)) < 0)
        goto out;
    bt = calloc((size_t)(first > QEVAL_GROUP ? first : QEVAL_GROUP), sizeof(*bt));
    lb = malloc((size_t)QEVAL_GROUP * (size_t)n_vocab * sizeof(float));
    lq = malloc((size_t)QEVAL_GROUP * (size_t)n_vocab * sizeof(float));
    kls = malloc((size_t)(n_chunk * (ctx - 1 - first) + 1) * sizeof(double));
    if (!bt || !lb || !lq || !kls) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto out;
    }
    runcb_progress(&o->cb, "evaluating", 0, n_chunk);
    for (int64_t c = 0; c < n_chunk; c++) {
        const int32_t *ct = ids.v + c * ctx;
        int32_t sb = -1, sq = -1;
        struct batch b = { first, bt, NULL, 0 };
        struct model_out ob = { NULL, NULL }, oq = { NULL, NULL };
        int64_t n;

        if ((rc = kv_seq_new(kb, &sb)) < 0 || (rc = kv_seq_new(kq, &sq)) < 0) {
            diag_set(d, ST_NOMEM, "evaluation: no KV sequence available");
            goto out;
        }
        for (int64_t i = 0; i < first; i++) {
            bt[i].seq = sb;
            bt[i].pos = (int32_t)i;
            bt[i].token = i == 0 && bos >= 0 ? bos : ct[i];
            bt[i].logits = 0;
        }
        /* both models in llama-perplexity's calls (perplexity.h) */
        for (int64_t p0 = 0; p0 < first; p0 += n) {
            n = ppl_cut(p0, first - p0);
            b.n = n;
            b.tok = bt + p0;
            for (int64_t i = 0; i < n; i++)
                bt[p0 + i].seq = sb;
            if ((rc = ppl_forward(mb, kb, &b, &ob, ctx, p0, d)) < 0)
                goto out;
            for (int64_t i = 0; i < n; i++)
                bt[p0 + i].seq = sq;
            if ((rc = ppl_forward(mq, kq, &b, &oq, ctx, p0, d)) < 0)
                goto out;
        }
        b.tok = bt;
        ob.logits = lb;
        oq.logits = lq;
        for (int64_t p0 = first; p0 < ctx; p0 += n) {
            n = ppl_cut(p0, ctx - p0 < QEVAL_GROUP ? ctx - p0 : QEVAL_GROUP);
            for (int64_t i = 0; i < n; i++) {
                bt[i].seq = sb;
                bt[i].pos = (int32_t)(p0 + i);
                bt[i].token = ct[p0 + i];
                bt[i].logits = p0 + i < ctx - 1;
            }
            b.n = n;
            if ((rc = ppl_forward(mb, kb, &b, &ob, ctx, p0, d)) < 0)
                goto out;
            for (int64_t i = 0; i < n; i++)
                bt[i].seq = sq;
            if ((rc = ppl_forward(mq, kq, &b, &oq, ctx, p0, d)) < 0)
                goto out;
            for (int64_t i = 0; i < n && p0 + i < ctx - 1; i++) {
                const float *xb = lb + i * n_vocab, *xq = lq + i * n_vocab;
                int32_t next = ct[p0 + i + 1];
                int64_t amb, amq;
                double zb = lse(xb, n_vocab, &amb), zq = lse(xq, n_vocab, &amq), kl = 0.0;

                ppl_acc_add(&ab, zb - (double)xb[next]);
                ppl_acc_add(&aq, zq - (double)xq[next]);
                for (int64_t v = 0; v < n_vocab; v++) {
                    double pb = (double)xb[v] - zb;
                    kl += exp(pb) * (pb - ((double)xq[v] - zq));
                }
                if (kl < 0.0)       /* rounding at identical distributions */
                    kl = 0.0;
                kls[n_kl++] = kl;
                kl_sum += kl;
                agree += amb == amq;
            }
        }
        kv_seq_free(kb, sb);
        kv_seq_free(kq, sq);
        r->n_chunks = c + 1;
        runcb_progress(&o->cb, "evaluating", c + 1, n_chunk);
    }
    ppl_acc_result(&ab, &r->ppl_base, &r->ppl_base_err);
    ppl_acc_result(&aq, &r->ppl_quant, &r->ppl_quant_err);
    r->n_scored = n_kl;
    if (n_kl > 0) {
        qsort(kls, (size_t)n_kl, sizeof(*kls), cmp_double);
        r->kld_mean = kl_sum / (double)n_kl;
        r->kld_median = n_kl % 2 ? kls[n_kl / 2] : 0.5 * (kls[n_kl / 2 - 1] + kls[n_kl / 2]);
        r->kld_p99 = kls[(int64_t)floor(0.99 * (double)(n_kl - 1))];
        r->kld_max = kls[n_kl - 1];
        r->top1 = (double)agree / (double)n_kl;
    }
out:
    free(kls);
    free(lb);
    free(lq);
    free(bt);
    free(text);
    tok_ids_release(&ids);
    if (tok_ok)
        tok_release(&tok);
    kv_free(kb);
    kv_free(kq);
    model_free(mb);
    model_free(mq);
    return rc;
}
