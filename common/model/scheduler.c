/*
 * scheduler.c - continuous batching over the paged KV cache; see scheduler.h.
 *
 * A sequence's tokens (prompt, then generated) are one array toks[0 ..
 * n_total); n_done of them have their K/V in the pool (n_done ==
 * kv_seq_len).  The tokens still to compute are toks[n_done .. n_total):
 * one for a decoding sequence (the last sampled token), more for a prompt
 * being prefilled or a preempted sequence being recomputed.  A chunk that
 * reaches n_total asks for logits, and the sequence samples its next token.
 */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "eagle_draft.h"
#include "model.h"
#include "spec.h"
#include "tokenizer.h"

int
sched_policy_parse(const char *s)
{
    return !strcmp(s, "continuous") ? SCHED_CONTINUOUS : !strcmp(s, "static") ? SCHED_STATIC : -1;
}

int
sched_preempt_parse(const char *s)
{
    return !strcmp(s, "recompute") ? SCHED_PREEMPT_RECOMPUTE
           : !strcmp(s, "swap") ? SCHED_PREEMPT_SWAP : -1;
}

#define STOP_MAX 16             /* stop strings per request */
#define STOP_LEN_MAX 1024       /* bytes per stop string */

enum seq_state {
    SEQ_WAITING = 0,            /* queued (new, or preempted: kvs < 0, maybe a swap image) */
    SEQ_RUNNING = 1,
};

struct seq {
    int64_t tag;
    uint64_t arrival;           /* sched_add order */
    uint64_t admitted;          /* admission order of the current run (preemption victim: max) */
    int state;
    int32_t kvs;                /* KV sequence, -1 when not in the pool */
    struct kv_swap *sw;         /* swap image while swapped out */
    int32_t *toks;
    int64_t n_prompt, n_gen, cap;
    int64_t n_done;
    int64_t max_gen;
    struct sampler *smp;
    char **stop;
    size_t n_stop;
    char *text;
    size_t text_len, text_cap;
    struct kv_prefix_key key;   /* key of the last published block */
    int64_t n_pub;              /* leading full blocks published (or attached) */
    int64_t cached_tokens, preemptions;
    double t_add, t_admit, t_first;
    /* this step */
    int64_t chunk;
    int64_t need;               /* blocks reserved for the chunk */
    int64_t logit_row;
    int32_t *draft;             /* [spec_tokens] this step's draft */
    int64_t n_draft;
    int32_t dst;                /* draft model stream while running (spec.h), or -1 */
    struct eagle_stream *est;   /* the EAGLE head's stream (from first admission), or NULL */
    int64_t row0;               /* this step: the batch index of the chunk's first token */
};

struct sched {
    struct model *m;
    struct kvcache *kv;
    const struct tokenizer *tok;
    struct sched_opts o;
    struct sched_callbacks cb;
    int64_t n_vocab, ctx, bs;
    struct seq **run;           /* running, in admission order */
    int64_t n_run;
    struct seq **wait;          /* waiting, by arrival */
    int64_t n_wait, cap_wait;
    uint64_t n_arrival, n_admit;
    struct batch_tok *bt;       /* [max_batch_tokens] */
    float *logits;              /* [n_rows][n_vocab] */
    int64_t n_rows;
    double t0;
    int64_t step;
    int64_t budget;             /* tokens left in this step's batch */
    bool hold;                  /* admit only preempted sequences */
    size_t swap_bytes;
    struct sched_totals tot;
    struct spec_probe probe;    /* --spec-tokens auto: spec_auto_levels()'s probing */
    struct spec_dm_req *dreq;   /* [max_seqs] with a draft model: this step's chains */
    struct seq **dseq;          /* [max_seqs] their sequences (draft model or head) */
    float *hidden;              /* with a head: the step's final hidden states (the head's
                                 * buffer, eagle_draft_hidden; EAGLE-3 captures its
                                 * features through hooks beside it) */
    bool own_hidden;            /* hidden is ours (feat_rows) */
    int64_t *rowidx;            /* [max_batch_tokens] with a head: 0, 1, 2 ... */
    struct eagle_chain_req *hreq;       /* [max_seqs] with a head: this step's chains */
    int64_t spec_lim;           /* this step's draft size per sequence, at most spec_tokens */
};

static double
ms_since(double t)
{
    return (now_seconds() - t) * 1000.0;
}

/* ---- sequences ---- */

/* q's draft model stream back (q leaves the pool) */
static void
draft_forget(struct sched *s, struct seq *q)
{
    if (s->o.draft && q->dst >= 0)
        spec_dm_stream_free(s->o.draft, q->dst);
    q->dst = -1;
}

static void
seq_free(struct sched *s, struct seq *q)
{
    if (!q)
        return;
    if (q->kvs >= 0)
        kv_seq_free(s->kv, q->kvs);
    draft_forget(s, q);
    eagle_stream_free(q->est);
    if (q->sw) {
        s->swap_bytes -= kv_swap_bytes(q->sw);
        kv_swap_free(q->sw);
    }
    sampler_free(q->smp);
    for (size_t i = 0; i < q->n_stop; i++)
        free(q->stop[i]);
    free(q->stop);
    free(q->toks);
    free(q->draft);
    free(q->text);
    free(q);
}

static int
text_append(struct seq *q, const char *p, size_t n)
{
    if (q->text_len + n + 1 > q->text_cap) {
        size_t c = q->text_cap ? q->text_cap : 256;
        while (c < q->text_len + n + 1)
            c *= 2;
        char *t = realloc(q->text, c);
        if (!t)
            return -ST_NOMEM;
        q->text = t;
        q->text_cap = c;
    }
    memcpy(q->text + q->text_len, p, n);
    q->text_len += n;
    q->text[q->text_len] = '\0';
    return 0;
}

static int64_t
n_total(const struct seq *q)
{
    return q->n_prompt + q->n_gen;
}

/* waiting queue: sorted by arrival, so a preempted sequence goes back
 * ahead of every request that arrived after it */
static int
wait_insert(struct sched *s, struct seq *q)
{
    int64_t i;

    if (s->n_wait == s->cap_wait) {
        int64_t c = s->cap_wait ? s->cap_wait * 2 : 64;
        struct seq **w = realloc(s->wait, (size_t)c * sizeof(*w));
        if (!w)
            return -ST_NOMEM;
        s->wait = w;
        s->cap_wait = c;
    }
    for (i = s->n_wait; i > 0 && s->wait[i - 1]->arrival > q->arrival; i--)
        s->wait[i] = s->wait[i - 1];
    s->wait[i] = q;
    s->n_wait++;
    q->state = SEQ_WAITING;
    return 0;
}

static void
wait_pop_front(struct sched *s)
{
    memmove(s->wait, s->wait + 1, (size_t)(s->n_wait - 1) * sizeof(*s->wait));
    s->n_wait--;
}

static void
run_remove(struct sched *s, struct seq *q)
{
    for (int64_t i = 0; i < s->n_run; i++) {
        if (s->run[i] == q) {
            memmove(s->run + i, s->run + i + 1, (size_t)(s->n_run - i - 1) * sizeof(*s->run));
            s->n_run--;
            return;
        }
    }
}

/* ---- engine ---- */

int
sched_new(struct sched **out, struct model *m, struct kvcache *kv, const struct tokenizer *tok,
          const struct sched_opts *o, const struct sched_callbacks *cb, struct diag *d)
{
    struct sched *s;
    struct kv_stats ks;

    *out = NULL;
    if (o->max_seqs < 1 || o->max_seqs > (1 << 20))
        return diag_set(d, ST_RANGE, "max sequences %lld out of range 1..%d",
                        (long long)o->max_seqs, 1 << 20);
    if (o->max_batch_tokens < 1 || o->max_batch_tokens > (1 << 24))
        return diag_set(d, ST_RANGE, "max batch tokens %lld out of range 1..%d",
                        (long long)o->max_batch_tokens, 1 << 24);
    if (o->ctx < 0)
        return diag_set(d, ST_RANGE, "negative context");
    if (!cb || !cb->result)
        return diag_set(d, ST_RANGE, "no result callback");
    if (o->head && (o->draft || o->prefix_cache))
        return diag_set(d, ST_RANGE, "an EAGLE head goes with neither a draft model nor the "
                        "prefix cache");
    if (o->spec_tokens < 0 || o->spec_tokens > 64 || o->lookup_ngram < 1 || o->lookup_ngram > 16)
        return diag_set(d, ST_RANGE, "speculative options out of range");
    if (o->feat_rows && (o->head || o->draft || o->spec_tokens > 0 || o->prefix_cache))
        return diag_set(d, ST_RANGE, "a feature sink goes with no drafter (draft model, EAGLE "
                        "head, prompt lookup) and not the prefix cache");
    if ((size_t)(o->max_seqs + (o->spec_tokens ? o->max_batch_tokens : 0)) >
        SIZE_MAX / sizeof(float) / (size_t)m->hp.n_vocab)
        return diag_set(d, ST_NOMEM, "too many sequences for the logits buffer");
    if (!(s = calloc(1, sizeof(*s))))
        return diag_set(d, ST_NOMEM, "out of memory");
    s->m = m;
    s->kv = kv;
    s->tok = tok;
    s->o = *o;
    s->cb = *cb;
    s->n_vocab = m->hp.n_vocab;
    kv_stats(kv, &ks);
    s->bs = ks.block_size;
    s->ctx = ks.blocks_total * ks.block_size;
    if (o->ctx > 0 && o->ctx < s->ctx)
        s->ctx = o->ctx;
    s->run = malloc((size_t)o->max_seqs * sizeof(*s->run));
    s->bt = calloc((size_t)o->max_batch_tokens, sizeof(*s->bt));
    /* a logits row per decoding sequence, and one per draft token */
    int64_t drafts = o->max_seqs * o->spec_tokens;
    if (drafts > o->max_batch_tokens - 1)
        drafts = o->max_batch_tokens - 1;
    s->n_rows = o->max_seqs + (o->spec_tokens ? drafts : 0);
    s->logits = malloc((size_t)s->n_rows * (size_t)s->n_vocab * sizeof(float));
    if (o->draft)
        s->dreq = malloc((size_t)o->max_seqs * sizeof(*s->dreq));
    if (o->head)
        s->hreq = malloc((size_t)o->max_seqs * sizeof(*s->hreq));
    if (o->draft || o->head)
        s->dseq = malloc((size_t)o->max_seqs * sizeof(*s->dseq));
    if (o->head && eagle_draft_hidden(o->head, o->max_batch_tokens, &s->hidden, NULL) < 0)
        s->hidden = NULL;
    if (o->feat_rows &&
        (size_t)o->max_batch_tokens > SIZE_MAX / sizeof(float) / (size_t)m->hp.n_embd) {
        sched_free(s);
        return diag_set(d, ST_NOMEM, "too many batch tokens for the features' buffer");
    }
    if (o->feat_rows)
        s->own_hidden = !!(s->hidden = malloc((size_t)(o->max_batch_tokens * m->hp.n_embd) *
                                              sizeof(float)));
    if (o->head && (s->rowidx = malloc((size_t)o->max_batch_tokens * sizeof(int64_t))))
        for (int64_t i = 0; i < o->max_batch_tokens; i++)
            s->rowidx[i] = i;
    if (!s->run || !s->bt || !s->logits || (o->draft && (!s->dreq || !s->dseq)) ||
        (o->head && (!s->hidden || !s->rowidx || !s->hreq || !s->dseq)) ||
        (o->feat_rows && !s->hidden)) {
        sched_free(s);
        return diag_set(d, ST_NOMEM, "out of memory for %lld sequences",
                        (long long)o->max_seqs);
    }
    s->t0 = now_seconds();
    *out = s;
    return 0;
}

void
sched_free(struct sched *s)
{
    if (!s)
        return;
    for (int64_t i = 0; i < s->n_run; i++)
        seq_free(s, s->run[i]);
    for (int64_t i = 0; i < s->n_wait; i++)
        seq_free(s, s->wait[i]);
    free(s->run);
    free(s->wait);
    free(s->bt);
    free(s->logits);
    free(s->dreq);
    free(s->dseq);
    free(s->rowidx);
    free(s->hreq);
    if (s->own_hidden)
        free(s->hidden);
    free(s);
}

int64_t
sched_ctx(const struct sched *s)
{
    return s->ctx;
}

void
sched_hold(struct sched *s, bool hold)
{
    s->hold = hold;
}

int64_t
sched_running(const struct sched *s)
{
    return s->n_run;
}

int64_t
sched_waiting(const struct sched *s)
{
    return s->n_wait;
}

void
sched_get_totals(const struct sched *s, struct sched_totals *t)
{
    *t = s->tot;
}

static int
emit(struct sched *s, struct seq *q, const char *reason)
{
    struct sched_result r;

    r.tag = q->tag;
    r.tokens = q->toks + q->n_prompt;
    r.n_tokens = q->n_gen;
    r.text = q->text ? q->text : "";
    r.text_len = q->text_len;
    r.finish_reason = reason;
    r.n_prompt = q->n_prompt;
    r.cached_tokens = q->cached_tokens;
    r.preemptions = q->preemptions;
    r.queue_ms = q->t_admit > 0 ? (q->t_admit - q->t_add) * 1000.0 : 0.0;
    r.ttft_ms = q->t_first > 0 ? (q->t_first - q->t_add) * 1000.0 : 0.0;
    r.total_ms = ms_since(q->t_add);
    s->tot.finished++;
    return s->cb.result(s->cb.ctx, &r);
}

int
sched_add(struct sched *s, const struct sched_req *r, struct diag *d)
{
    struct seq *q;
    int rc;

    if (r->n_prompt < 1)
        return diag_set(d, ST_RANGE, "the prompt is empty");
    if (r->n_prompt > s->ctx)
        return diag_set(d, ST_RANGE, "the prompt has %lld tokens, more than the context of %lld "
                        "(--ctx, --kv-mem)", (long long)r->n_prompt, (long long)s->ctx);
    for (int64_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= s->n_vocab)
            return diag_set(d, ST_RANGE, "token %lld: id %d out of range 0..%lld",
                            (long long)i, r->prompt[i], (long long)s->n_vocab - 1);
    if (r->n_stop > STOP_MAX)
        return diag_set(d, ST_RANGE, "more than %d stop strings", STOP_MAX);
    for (size_t i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        if (n == 0 || n > STOP_LEN_MAX)
            return diag_set(d, ST_RANGE, "stop string %zu: length %zu out of range 1..%d", i, n,
                            STOP_LEN_MAX);
    }
    if (!(q = calloc(1, sizeof(*q))))
        return diag_set(d, ST_NOMEM, "out of memory");
    q->kvs = -1;
    q->dst = -1;
    q->tag = r->tag;
    q->arrival = s->n_arrival++;
    q->n_prompt = r->n_prompt;
    q->max_gen = s->ctx - r->n_prompt;
    if (r->max_tokens >= 0 && r->max_tokens < q->max_gen)
        q->max_gen = r->max_tokens;
    q->cap = r->n_prompt + q->max_gen;
    q->t_add = now_seconds();
    kv_prefix_key_root(&q->key);
    if (!(q->toks = malloc((size_t)q->cap * sizeof(int32_t))))
        goto nomem;
    if (s->o.spec_tokens && !(q->draft = malloc((size_t)s->o.spec_tokens * sizeof(int32_t))))
        goto nomem;
    memcpy(q->toks, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
    if (r->n_stop) {
        if (!(q->stop = calloc(r->n_stop, sizeof(char *))))
            goto nomem;
        for (size_t i = 0; i < r->n_stop; i++) {
            if (!(q->stop[i] = strdup(r->stop[i])))
                goto nomem;
            q->n_stop = i + 1;
        }
    }
    if ((rc = sampler_new(&q->smp, &r->sp, (int32_t)s->n_vocab, d)) < 0) {
        seq_free(s, q);
        return rc;
    }
    for (int64_t i = 0; i < r->n_prompt; i++)
        sampler_accept(q->smp, r->prompt[i]);
    if (q->max_gen == 0) {
        rc = emit(s, q, "length");
        seq_free(s, q);
        return rc;
    }
    if ((rc = wait_insert(s, q)) < 0)
        goto nomem;
    return 0;
nomem:
    seq_free(s, q);
    return diag_set(d, ST_NOMEM, "out of memory");
}

int
sched_cancel(struct sched *s)
{
    int rc = 0, r;

    /* running ones, oldest first, then the started ones waiting to resume */
    while (s->n_run > 0) {
        struct seq *q = s->run[0];

        run_remove(s, q);
        r = emit(s, q, "cancelled");
        seq_free(s, q);
        if (r < 0 && rc == 0)
            rc = r;
    }
    for (int64_t i = 0; i < s->n_wait;) {
        struct seq *q = s->wait[i];

        if (q->t_admit == 0) {
            i++;
            continue;
        }
        memmove(s->wait + i, s->wait + i + 1, (size_t)(s->n_wait - i - 1) * sizeof(*s->wait));
        s->n_wait--;
        r = emit(s, q, "cancelled");
        seq_free(s, q);
        if (r < 0 && rc == 0)
            rc = r;
    }
    return rc;
}

/* ---- preemption ---- */

/* Takes q out of the pool and back to the queue (q is running). */
static int
preempt(struct sched *s, struct seq *q, struct diag *d)
{
    int rc;

    run_remove(s, q);
    s->budget += q->chunk;      /* a victim scheduled earlier in the step */
    q->chunk = 0;
    q->need = 0;
    q->n_draft = 0;
    draft_forget(s, q);
    q->preemptions++;
    s->tot.preemptions++;
    if (s->o.preempt == SCHED_PREEMPT_SWAP) {
        struct diag dd;
        if (kv_seq_swap_out(s->kv, q->kvs, &q->sw, &dd) == 0) {
            q->kvs = -1;
            s->swap_bytes += kv_swap_bytes(q->sw);
            if (s->swap_bytes > s->tot.swap_bytes_peak)
                s->tot.swap_bytes_peak = s->swap_bytes;
            s->tot.swaps_out++;
            /* the restored blocks are private: publish them again */
            q->n_pub = 0;
            kv_prefix_key_root(&q->key);
            goto queue;
        }
        /* no host memory for the image: fall back to recompute */
    }
    kv_seq_free(s->kv, q->kvs);
    q->kvs = -1;
    q->n_done = 0;
    q->n_pub = 0;
    kv_prefix_key_root(&q->key);
queue:
    if ((rc = wait_insert(s, q)) < 0)
        return diag_set(d, ST_NOMEM, "out of memory");
    return 0;
}

/* Blocks free for this step's chunks not yet given out. */
static int64_t
avail_blocks(const struct sched *s)
{
    int64_t a = kv_blocks_free(s->kv);

    for (int64_t i = 0; i < s->n_run; i++)
        a -= s->run[i]->need;
    return a;
}

/* Gives running sequence q a chunk of up to `take` tokens, preempting the
 * newest running sequences while blocks are short.  *gone is set when q
 * itself was preempted.  Returns 0 or -ST_*. */
static int
schedule_chunk(struct sched *s, struct seq *q, int64_t take, int64_t *preempted, int *gone,
               struct diag *d)
{
    int64_t need;
    int rc;

    *gone = 0;
    if (take <= 0)
        return 0;
    need = kv_seq_blocks_needed(s->kv, q->kvs, take);
    if (need < 0)
        return diag_set(d, ST_RANGE, "scheduler: bad sequence state");
    while (need > avail_blocks(s)) {
        struct seq *v = s->run[0];
        for (int64_t i = 1; i < s->n_run; i++)
            if (s->run[i]->admitted > v->admitted)
                v = s->run[i];
        if ((rc = preempt(s, v, d)) < 0)
            return rc;
        (*preempted)++;
        if (v == q) {
            *gone = 1;
            return 0;
        }
        /* a victim that gave up shared blocks may change q's need (no more
         * copy-on-write) */
        need = kv_seq_blocks_needed(s->kv, q->kvs, take);
    }
    q->chunk = take;
    q->need = need;
    return 0;
}

/* ---- admission ---- */

/* The prefix-cache key of logical block lblock of q: its tokens chained to
 * the parent key, and, when some of them take the tiled attention
 * (model_prompt_tiled: a function of the prompt length), how many (they are
 * always the first ones of the block), and likewise how many carry each
 * batched-matmul bit (model_prompt_gemm), so that a block is shared only
 * between requests that compute its keys and values the same way. */
#define N_GEMM_BITS 3           /* BACKEND_GEMM_REPACK, _TILED, _FLOAT */
_Static_assert((BACKEND_GEMM_REPACK | BACKEND_GEMM_TILED | BACKEND_GEMM_FLOAT) ==
                   (1 << N_GEMM_BITS) - 1, "the gemm bits are the low N_GEMM_BITS");
static void
block_key(const struct seq *q, int64_t lblock, int64_t bs, const struct kv_prefix_key *parent,
          struct kv_prefix_key *out)
{
    struct kv_prefix_key k;
    int32_t n[1 + N_GEMM_BITS] = { 0 }, any = 0;

    kv_prefix_key_next(parent, q->toks + lblock * bs, bs, &k);
    for (int64_t p = lblock * bs; p < (lblock + 1) * bs; p++) {
        int32_t g = model_prompt_gemm(q->n_prompt, p);
        n[0] += model_prompt_tiled(q->n_prompt, p);
        for (int b = 0; b < N_GEMM_BITS; b++)
            n[1 + b] += g >> b & 1;
    }
    for (int b = 0; b <= N_GEMM_BITS; b++) {
        any |= n[b];
        n[b] = -1 - n[b];       /* no token id is negative */
    }
    if (any)
        kv_prefix_key_next(&k, n, 1 + N_GEMM_BITS, out);
    else
        *out = k;
}

/* Puts waiting request q (the queue's head) into the pool with a first
 * chunk of at most budget tokens.  Returns 1 when admitted, 0 when it does
 * not fit now (nothing changed), -ST_* on failure. */
static int
admit(struct sched *s, struct seq *q, int64_t budget, int64_t *hits, struct diag *d)
{
    int64_t avail = avail_blocks(s), bs = s->bs;
    int rc;

    if (q->sw) {
        /* resume from swap: the image's blocks plus the chunk's new ones */
        int64_t take = n_total(q) - q->n_done < budget ? n_total(q) - q->n_done : budget;
        int64_t have = (q->n_done + bs - 1) / bs;
        int64_t extra = (q->n_done + take + bs - 1) / bs - have;
        if (kv_swap_blocks(q->sw) + extra > avail)
            return 0;
        size_t bytes = kv_swap_bytes(q->sw);
        if ((rc = kv_seq_swap_in(s->kv, q->sw, &q->kvs, d)) < 0)
            return rc;
        q->sw = NULL;
        s->swap_bytes -= bytes;
        q->chunk = take;
        q->need = extra;
        return 1;
    }

    if ((rc = kv_seq_new(s->kv, &q->kvs)) < 0)
        return diag_set(d, ST_NOMEM, "out of memory");
    q->n_done = 0;
    q->n_pub = 0;
    kv_prefix_key_root(&q->key);
    if (s->o.prefix_cache) {
        /* full blocks only, and never the last token: its logits are needed */
        int64_t nh = 0;
        while ((q->n_pub + 1) * bs <= n_total(q) - 1) {
            struct kv_prefix_key k;
            block_key(q, q->n_pub, bs, &q->key, &k);
            if ((rc = kv_prefix_attach(s->kv, q->kvs, &k)) < 0) {
                kv_seq_free(s->kv, q->kvs);
                q->kvs = -1;
                return diag_set(d, -rc, "kv cache: cannot attach a cached block");
            }
            if (rc == 0)
                break;
            q->key = k;
            q->n_pub++;
            nh++;
        }
        q->n_done = q->n_pub * bs;
        avail = avail_blocks(s);    /* attached cached blocks left the free pool */
        *hits += nh;
    }
    int64_t take = n_total(q) - q->n_done < budget ? n_total(q) - q->n_done : budget;
    int64_t need = kv_seq_blocks_needed(s->kv, q->kvs, take);
    if (need > avail) {
        kv_seq_free(s->kv, q->kvs);     /* attached blocks stay cached */
        q->kvs = -1;
        q->n_done = 0;
        q->n_pub = 0;
        kv_prefix_key_root(&q->key);
        return 0;
    }
    if (q->preemptions == 0)
        q->cached_tokens = q->n_done;
    q->chunk = take;
    q->need = need;
    return 1;
}

/* ---- after the forward pass ---- */

static void
publish(struct sched *s, struct seq *q)
{
    while ((q->n_pub + 1) * s->bs <= q->n_done) {
        struct kv_prefix_key k;
        block_key(q, q->n_pub, s->bs, &q->key, &k);
        q->key = k;
        kv_prefix_publish(s->kv, q->kvs, q->n_pub, &q->key);
        q->n_pub++;
    }
}

/* Appends sampled token t; returns the finish reason or NULL to go on. */
static const char *
accept_token(struct sched *s, struct seq *q, int32_t t, int *err)
{
    *err = 0;
    if (s->tok && !s->o.ignore_eos && tok_is_eog(s->tok, t))
        return "stop";
    q->toks[q->n_prompt + q->n_gen++] = t;
    s->tot.generated++;
    sampler_accept(q->smp, t);
    if (s->tok) {
        size_t plen = 0, old = q->text_len;
        const char *piece = tok_piece(s->tok, t, false, &plen);
        if (piece && plen && text_append(q, piece, plen) < 0) {
            *err = -ST_NOMEM;
            return NULL;
        }
        for (size_t i = 0; i < q->n_stop; i++) {
            size_t sl = strlen(q->stop[i]);
            size_t from = old + 1 >= sl ? old + 1 - sl : 0;
            if (q->text_len < sl)
                continue;
            for (size_t p = from; p + sl <= q->text_len; p++) {
                if (memcmp(q->text + p, q->stop[i], sl) == 0) {
                    q->text_len = p;
                    q->text[p] = '\0';
                    return "stop";
                }
            }
        }
    }
    if (q->n_gen >= q->max_gen)
        return "length";
    return NULL;
}

/* ---- speculative decoding ---- */

/* the most draft tokens q may verify this step after its scheduled decode
 * (chunk 1): spec_tokens at most, what the step's token budget (already
 * charged for the decode) and q's output budget leave */
static int64_t
draft_limit(const struct sched *s, const struct seq *q)
{
    int64_t lim = s->spec_lim;

    if (lim > s->budget)
        lim = s->budget;
    if (lim > q->max_gen - q->n_gen - 1)
        lim = q->max_gen - q->n_gen - 1;
    return lim > 0 ? lim : 0;
}

/* this step's draft size per sequence: spec_tokens, or with spec_cost the
 * best for the sequences decoding now (see sched_opts) */
static int64_t
step_draft_size(struct sched *s)
{
    int64_t n_dec = 0;
    double t_draft = 0, ctx = 0, pos = 0;

    if (!s->o.spec_cost)
        return s->o.spec_tokens;
    for (int64_t i = 0; i < s->n_run; i++)
        if (s->run[i]->chunk == 1 && n_total(s->run[i]) - s->run[i]->n_done == 1) {
            n_dec++;
            ctx += model_attn_slots(s->m, n_total(s->run[i]) - 1);
            pos += (double)(n_total(s->run[i]) - 1);
        }
    if (n_dec == 0)
        return 0;
    if (s->o.draft)
        t_draft = spec_dm_level_ms(s->o.draft, n_dec, (int64_t)(pos / (double)n_dec), s->o.spec_cost, s->m);
    else if (s->o.head)
        t_draft = eagle_draft_level_ms(s->o.head, n_dec);
    /* the per-level acceptance, as generate's: tokens kept per token kept
     * or rejected, with a prior of one each (spec_acceptance) */
    int k = spec_auto_levels(s->o.spec_cost, s->tot.spec_accepted, s->tot.spec_rejections, n_dec,
                             1, t_draft, (int)s->o.spec_tokens, ctx / (double)n_dec, &s->probe);
    s->tot.spec_auto_steps++;
    s->tot.spec_auto_levels += k;
    return k;
}

/* extends q's decode by its draft of nd tokens (already in q->draft), at
 * most as many as the blocks free without preempting anyone allow */
static void
take_draft(struct sched *s, struct seq *q, int64_t nd)
{
    int64_t avail = avail_blocks(s), need = q->need;    /* (avail excludes q's own need) */
    while (nd > 0 && (need = kv_seq_blocks_needed(s->kv, q->kvs, 1 + nd)) - q->need > avail)
        nd--;
    if (nd == 0)
        return;
    q->n_draft = nd;
    q->chunk = 1 + nd;
    q->need = need;
    s->budget -= nd;
}

/* the draft model's chains for every decoding sequence (spec.h), drafted
 * together, one draft forward pass per level; each limited as above, and
 * by the blocks free once the drafts before it are counted */
static int
model_drafts(struct sched *s, struct diag *d)
{
    int64_t n = 0, budget = s->budget;

    for (int64_t i = 0; i < s->n_run && budget > 0; i++) {
        struct seq *q = s->run[i];
        if (q->chunk != 1 || n_total(q) - q->n_done != 1)
            continue;
        int64_t lim = draft_limit(s, q);
        if (lim > budget)
            lim = budget;
        if (lim == 0 || (q->dst < 0 && (q->dst = spec_dm_stream_new(s->o.draft)) < 0))
            continue;
        s->dreq[n] = (struct spec_dm_req){ .stream = q->dst, .hist = q->toks,
                                           .n_hist = n_total(q), .max = lim, .out = q->draft };
        s->dseq[n++] = q;
        budget -= lim;
    }
    if (n == 0)
        return 0;
    int rc = spec_dm_chains(s->o.draft, s->dreq, n, s->o.draft_p_min, d);
    if (rc < 0)
        return rc;
    for (int64_t j = 0; j < n; j++)
        take_draft(s, s->dseq[j], s->dreq[j].n_out);
    return 0;
}

/* the EAGLE head's greedy chain for every decoding sequence, drafted
 * together (eagle_streams_chains: one head pass per level for all of
 * them); each limited as above, and by the blocks free once the drafts
 * before it are counted */
static int
head_drafts(struct sched *s, struct diag *d)
{
    int64_t n = 0, budget = s->budget;

    (void)d;
    for (int64_t i = 0; i < s->n_run && budget > 0; i++) {
        struct seq *q = s->run[i];
        int64_t lim;
        if (q->chunk != 1 || n_total(q) - q->n_done != 1 || !q->est || !(lim = draft_limit(s, q)))
            continue;
        if (lim > budget)
            lim = budget;
        s->hreq[n] = (struct eagle_chain_req){ .st = q->est, .hist = q->toks,
                                               .n_hist = n_total(q), .max = lim, .out = q->draft };
        s->dseq[n++] = q;
        budget -= lim;
    }
    if (n == 0)
        return 0;
    eagle_streams_chains(s->o.head, s->hreq, n, s->o.draft_p_min);
    for (int64_t j = 0; j < n; j++)
        take_draft(s, s->dseq[j], s->hreq[j].n_out);
    return 0;
}

/* hands the head the step's features of q's tokens that stay: n rows of
 * the batch from q->row0, for the positions from q->n_done (its stream is
 * made at its first step) */
static int
head_feed(struct sched *s, struct seq *q, int64_t n, struct diag *d)
{
    int rc;

    if (!q->est && (rc = eagle_stream_new(s->o.head, &q->est, d)) < 0)
        return rc;
    if (eagle_stream_feed_rows(s->o.head, q->est, q->n_done, s->hidden, s->rowidx + q->row0, n) < 0)
        return diag_set(d, ST_NOMEM, "out of memory for the EAGLE head's features");
    return 0;
}

/* ---- one step ---- */

int
sched_step(struct sched *s, struct diag *d)
{
    int64_t preempted = 0, hits = 0;
    int64_t n_tok = 0, n_rows = 0, n_prompt_tok = 0, n_dec_tok = 0;
    int64_t n_run0 = s->n_run;
    int rc, gone;

    if (s->n_run == 0 && (s->n_wait == 0 || (s->hold && s->wait[0]->t_admit == 0)))
        return 0;
    for (int64_t i = 0; i < s->n_run; i++) {
        s->run[i]->chunk = 0;
        s->run[i]->need = 0;
        s->run[i]->n_draft = 0;
    }
    s->budget = s->o.max_batch_tokens;

    /* 1. decodes, oldest first */
    for (int64_t i = 0; i < s->n_run && s->budget > 0;) {
        struct seq *q = s->run[i];
        if (n_total(q) - q->n_done != 1 || q->chunk) {
            i++;
            continue;
        }
        q->n_draft = 0;
        if ((rc = schedule_chunk(s, q, 1, &preempted, &gone, d)) < 0)
            return rc;
        if (gone)
            continue;           /* q left run[]; i now names the next one */
        s->budget -= q->chunk;
        /* a victim removed before i shifts the array: find q again */
        for (i = 0; s->run[i] != q; i++)
            ;
        i++;
    }
    /* 1b. drafts after the decodes: every decode has its token first, and
     * a draft takes only budget and blocks left (never a preemption) */
    s->spec_lim = s->o.spec_tokens ? step_draft_size(s) : 0;
    if (s->spec_lim && s->o.draft) {
        if ((rc = model_drafts(s, d)) < 0)
            return rc;
    } else if (s->spec_lim && s->o.head) {
        if ((rc = head_drafts(s, d)) < 0)
            return rc;
    } else {
        for (int64_t i = 0; s->spec_lim && i < s->n_run && s->budget > 0; i++) {
            struct seq *q = s->run[i];
            if (q->chunk == 1 && n_total(q) - q->n_done == 1)
                take_draft(s, q, spec_lookup_draft(q->toks, n_total(q), s->o.lookup_ngram,
                                                   q->draft, draft_limit(s, q)));
        }
    }
    /* 2. prefill chunks of running sequences */
    for (int64_t i = 0; i < s->n_run && s->budget > 0;) {
        struct seq *q = s->run[i];
        int64_t want = n_total(q) - q->n_done;
        if (q->chunk || want <= 1) {
            i++;
            continue;
        }
        int64_t take = want < s->budget ? want : s->budget;
        if ((rc = schedule_chunk(s, q, take, &preempted, &gone, d)) < 0)
            return rc;
        if (gone)
            continue;
        s->budget -= q->chunk;
        for (i = 0; s->run[i] != q; i++)
            ;
        i++;
    }
    /* 3. admission */
    bool may_admit = s->o.policy == SCHED_STATIC ? n_run0 == 0 : preempted == 0;
    while (may_admit && s->n_wait > 0 && s->n_run < s->o.max_seqs &&
           (s->budget > 0 || s->o.policy == SCHED_STATIC)) {
        struct seq *q = s->wait[0];
        if (s->hold && q->t_admit == 0)
            break;
        if ((rc = admit(s, q, s->budget, &hits, d)) < 0)
            return rc;
        if (rc == 0)
            break;              /* first come, first served: no overtaking */
        wait_pop_front(s);
        q->state = SEQ_RUNNING;
        q->admitted = s->n_admit++;
        if (q->t_admit == 0)
            q->t_admit = now_seconds();
        s->run[s->n_run++] = q;
        s->budget -= q->chunk;
    }
    if (s->n_run == 0)
        return diag_set(d, ST_NOMEM, "kv cache too small: request %lld cannot be scheduled "
                        "(--kv-mem)", (long long)s->wait[0]->tag);

    /* the batch: each sequence's chunk in order, logits for chunks that
     * reach the end of their tokens */
    for (int64_t i = 0; i < s->n_run; i++) {
        struct seq *q = s->run[i];
        q->logit_row = -1;
        if (!q->chunk)
            continue;
        bool dec = q->chunk == 1 + q->n_draft && q->n_done >= q->n_prompt;
        q->row0 = n_tok;
        for (int64_t j = 0; j < q->chunk; j++) {
            struct batch_tok *b = &s->bt[n_tok++];
            int64_t p = q->n_done + j;
            b->seq = q->kvs;
            b->pos = (int32_t)p;
            b->token = j == 0 || !q->n_draft ? q->toks[p] : q->draft[j - 1];
            b->logits = p >= n_total(q) - 1;
            /* as the request alone (generate.c) computes it; generated
             * tokens recomputed after a preemption stay one-row */
            b->tiled = model_prompt_tiled(q->n_prompt, p);
            b->gemm = model_prompt_gemm(q->n_prompt, p);
        }
        if (q->n_done + q->chunk == n_total(q) + q->n_draft) {
            q->logit_row = n_rows;
            n_rows += 1 + q->n_draft;
        }
        if (dec)
            n_dec_tok++;
        else
            n_prompt_tok += q->chunk;
    }
    if (n_tok > 0) {
        struct batch b = { n_tok, s->bt, NULL, 0 };
        struct model_out mo = { s->logits, s->hidden };
        const struct model_hooks *hk = s->o.head ? eagle_draft_hooks(s->o.head) : s->o.feat_hooks;
        double t_f = now_seconds();
        if ((rc = model_forward(s->m, s->kv, &b, hk, &mo, d)) < 0)
            return rc;
        /* a step of decodes and their drafts only: the context's share of
         * its cost (each token reads the slots before it and itself, a
         * window what it keeps: model_attn_slots) */
        if (s->o.spec_cost && n_prompt_tok == 0) {
            double slots = 0;
            for (int64_t j = 0; j < n_tok; j++)
                slots += model_attn_slots(s->m, s->bt[j].pos);
            spec_cost_observe(s->o.spec_cost, n_tok, slots, ms_since(t_f));
        }
    }

    /* sample, finish, publish */
    for (int64_t i = 0; i < s->n_run;) {
        struct seq *q = s->run[i];
        const char *fin = NULL;
        int err = 0;

        if (q->n_draft) {
            /* the draft's rows in turn while they agree; the cache keeps
             * the fed token and the drafts kept (before publishing) */
            int64_t a = 0;
            bool rejected = false;
            for (;;) {
                int32_t t = sampler_sample(q->smp, s->logits + (q->logit_row + a) * s->n_vocab);
                if (q->t_first == 0)
                    q->t_first = now_seconds();
                fin = accept_token(s, q, t, &err);
                if (err)
                    return diag_set(d, -err, "out of memory");
                if (fin || a == q->n_draft || t != q->draft[a]) {
                    rejected = a < q->n_draft && t != q->draft[a];
                    break;
                }
                a++;
            }
            if (s->o.head && (rc = head_feed(s, q, 1 + a, d)) < 0)
                return rc;
            s->tot.spec_passes++;
            s->tot.spec_drafted += q->n_draft;
            s->tot.spec_accepted += a;
            q->n_done += 1 + a;
            if (a < q->n_draft)
                kv_seq_truncate(s->kv, q->kvs, q->n_done);
            s->tot.spec_rejections += rejected;
            q->n_draft = 0;
            if (s->o.prefix_cache)
                publish(s, q);
        } else {
            if (s->o.head && q->chunk && (rc = head_feed(s, q, q->chunk, d)) < 0)
                return rc;
            if (s->o.feat_rows && q->chunk &&
                s->o.feat_rows(s->o.feat_ctx, q->tag, q->n_done, s->hidden, q->row0, q->chunk) < 0)
                return diag_set(d, ST_NOMEM, "out of memory for the features");
            q->n_done += q->chunk;
            if (s->o.prefix_cache && q->chunk)
                publish(s, q);
            if (q->logit_row >= 0) {
                int32_t t = sampler_sample(q->smp, s->logits + q->logit_row * s->n_vocab);
                if (q->t_first == 0)
                    q->t_first = now_seconds();
                fin = accept_token(s, q, t, &err);
                if (err)
                    return diag_set(d, -err, "out of memory");
            }
        }
        q->chunk = 0;
        q->need = 0;
        if (fin) {
            run_remove(s, q);
            kv_seq_free(s->kv, q->kvs);
            q->kvs = -1;
            draft_forget(s, q);
            rc = emit(s, q, fin);
            seq_free(s, q);
            if (rc < 0)
                return rc;
            continue;
        }
        i++;
    }

    /* accounting and trace */
    struct sched_step_info si;
    memset(&si, 0, sizeof(si));
    si.step = s->step++;
    si.running = s->n_run;
    si.waiting = s->n_wait;
    kv_stats(s->kv, &si.kv);
    si.preemptions = preempted;
    si.prefix_hits = hits;
    si.prompt_tokens = n_prompt_tok;
    si.decode_tokens = n_dec_tok;
    si.phase = n_dec_tok == 0 ? "prefill" : n_prompt_tok == 0 ? "decode" : "mixed";
    for (int64_t i = 0; i < s->n_run; i++)
        si.contig_slots += s->run[i]->cap;
    si.swap_bytes = s->swap_bytes;
    s->tot.steps++;
    s->tot.prompt_tokens += n_prompt_tok;
    s->tot.decode_tokens += n_dec_tok;
    s->tot.prefix_hits += hits;
    s->tot.sum_slots += (double)si.kv.blocks_used * (double)si.kv.block_size;
    s->tot.sum_stored += (double)si.kv.slots_filled;
    s->tot.sum_logical += (double)si.kv.tokens;
    s->tot.sum_contig += (double)si.contig_slots;
    si.time_ms = ms_since(s->t0);
    if (s->cb.step && (rc = s->cb.step(s->cb.ctx, &si)) < 0)
        return rc;
    return 1;
}
