/*
 * test_batch.c - the continuous-batching engine (scheduler.h) on the tiny
 * fixture models: every one of 64 requests of varied prompt and output
 * lengths (some sharing prefixes, some sampled with seeds) gives the same
 * tokens in a batch as alone, under several engine settings: default,
 * a KV pool so small that sequences are preempted by recompute and by swap,
 * static batches, no prefix cache, tiny token budgets (chunked prefill), and
 * block sizes 1..32 (on the default kernels).  Also: a token's logits are
 * bit-identical whatever else shares its batch (for every kernel
 * implementation, on the fixtures and on SmolLM2 when fetched), the pool is
 * empty after a run, stop strings and max_tokens 0, the request parser, the
 * q8_0 reference attention, and the engine's error paths.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "genbatch.h"
#include "model.h"
#include "ops.h"
#include "qtypes.h"
#include "scheduler.h"
#include "t.h"
#include "tokenizer.h"

#define F16_PATH "tests/fixtures/tiny-llama-f16.gguf"
#define F32_PATH "tests/fixtures/tiny-llama-f32.gguf"
#define N_REQ 64
#define MAX_PROMPT 80
#define MAX_GEN 40

struct req {
    int32_t prompt[MAX_PROMPT];
    int64_t n_prompt;
    int64_t max_tokens;
    struct sample_params sp;
    /* alone */
    int32_t ref[MAX_GEN];
    int64_t n_ref;
    const char *ref_reason;
    /* batch */
    int32_t got[MAX_GEN];
    int64_t n_got;
    const char *got_reason;
    int seen;
};

static struct req reqs[N_REQ];
static uint64_t rs = 0x1234567;

static uint32_t
rnd(uint32_t n)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs % n);
}

static void
make_requests(int32_t n_vocab)
{
    int32_t shared[48];

    for (int i = 0; i < 48; i++)
        shared[i] = 3 + (int32_t)rnd((uint32_t)n_vocab - 3);
    for (int i = 0; i < N_REQ; i++) {
        struct req *r = &reqs[i];
        r->n_prompt = 1 + rnd(MAX_PROMPT);
        for (int64_t j = 0; j < r->n_prompt; j++)
            r->prompt[j] = 3 + (int32_t)rnd((uint32_t)n_vocab - 3);
        if (i % 4 == 1) {       /* a shared prefix of 20..48 tokens */
            int64_t k = 20 + rnd(29);
            if (r->n_prompt < k + 1)
                r->n_prompt = k + 1 + rnd(10);
            memcpy(r->prompt, shared, (size_t)k * sizeof(int32_t));
        }
        if (i == 5)             /* the same prompt as request 1 */
            memcpy(r, &reqs[1], sizeof(*r));
        r->max_tokens = 1 + rnd(MAX_GEN);
        sample_params_init(&r->sp);
        r->sp.temp = 0.0f;
        if (i % 8 == 3) {       /* sampled, seeded */
            r->sp.temp = 0.9f;
            r->sp.seed = 1000 + (uint64_t)i;
            r->sp.repeat_penalty = 1.1f;
        }
    }
}

/* The request alone: the whole prompt in one batch, then one token per call
 * (what `generate -p` does). */
static int
run_alone(struct model *m, const struct tokenizer *tok, struct req *r, bool ignore_eos)
{
    struct kv_config c;
    struct kvcache *kv = NULL;
    struct sampler *smp = NULL;
    struct batch_tok bt[MAX_PROMPT];
    struct diag d;
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof(float));
    int32_t seq;
    int rc = -1;

    model_kv_config(m, (size_t)8 << 20, GGML_TYPE_F16, &c);
    if (!logits || kv_new(&kv, &c, &d) || kv_seq_new(kv, &seq) ||
        sampler_new(&smp, &r->sp, (int32_t)m->hp.n_vocab, &d))
        goto out;
    for (int64_t i = 0; i < r->n_prompt; i++) {
        bt[i] = (struct batch_tok){ seq, (int32_t)i, r->prompt[i], i == r->n_prompt - 1,
                                     model_prompt_tiled(r->n_prompt, i),
                                     model_prompt_gemm(r->n_prompt, i) };
        sampler_accept(smp, r->prompt[i]);
    }
    struct batch b = { r->n_prompt, bt, NULL, 0 };
    struct model_out mo = { logits, NULL };
    if (model_forward(m, kv, &b, NULL, &mo, &d))
        goto out;
    r->n_ref = 0;
    r->ref_reason = "length";
    while (r->n_ref < r->max_tokens) {
        if (r->n_ref > 0) {
            bt[0] = (struct batch_tok){ seq, (int32_t)(r->n_prompt + r->n_ref - 1),
                                        r->ref[r->n_ref - 1], 1, 0, 0 };
            b.n = 1;
            if (model_forward(m, kv, &b, NULL, &mo, &d))
                goto out;
        }
        int32_t t = sampler_sample(smp, logits);
        if (!ignore_eos && tok_is_eog(tok, t)) {
            r->ref_reason = "stop";
            break;
        }
        r->ref[r->n_ref++] = t;
        sampler_accept(smp, t);
    }
    rc = 0;
out:
    sampler_free(smp);
    kv_free(kv);
    free(logits);
    return rc;
}

static int
on_result(void *ctx, const struct sched_result *res)
{
    (void)ctx;
    struct req *r = &reqs[res->tag];
    r->seen++;
    r->n_got = res->n_tokens < MAX_GEN ? res->n_tokens : MAX_GEN;
    memcpy(r->got, res->tokens, (size_t)r->n_got * sizeof(int32_t));
    r->got_reason = res->finish_reason;
    CHECK_EQ(res->n_prompt, r->n_prompt);
    CHECK(res->total_ms >= res->ttft_ms && res->ttft_ms >= res->queue_ms);
    return 0;
}

struct step_log {
    int64_t steps, preempt, hits, max_running, max_tok;
    int bad;
};

static int
on_step(void *ctx, const struct sched_step_info *si)
{
    struct step_log *l = ctx;
    l->steps++;
    l->preempt += si->preemptions;
    l->hits += si->prefix_hits;
    if (si->running > l->max_running)
        l->max_running = si->running;
    if (si->prompt_tokens + si->decode_tokens > l->max_tok)
        l->max_tok = si->prompt_tokens + si->decode_tokens;
    if (si->kv.blocks_used + si->kv.blocks_free != si->kv.blocks_total ||
        si->kv.slots_filled > si->kv.blocks_used * si->kv.block_size || si->step != l->steps - 1)
        l->bad++;
    return 0;
}

struct setting {
    const char *name;
    int64_t max_seqs, max_batch_tokens, block_size, n_blocks;   /* n_blocks 0 = plenty */
    int policy, preempt;
    bool prefix;
    int expect_preempt;         /* 1: must preempt */
};

static void
run_setting(struct model *m, const struct tokenizer *tok, const struct setting *st)
{
    struct kv_config c;
    struct kvcache *kv = NULL;
    struct sched *s = NULL;
    struct sched_opts o = SCHED_OPTS_INIT;
    struct step_log log = { 0 };
    struct sched_callbacks cb = { on_result, on_step, &log };
    struct diag d;
    int rc, mismatch = 0;

    model_kv_config(m, 0, GGML_TYPE_F16, &c);
    c.block_size = st->block_size;
    c.mem = kv_block_bytes(&c) * (size_t)(st->n_blocks ? st->n_blocks : 4096);
    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    o.max_seqs = st->max_seqs;
    o.max_batch_tokens = st->max_batch_tokens;
    o.policy = st->policy;
    o.preempt = st->preempt;
    o.prefix_cache = st->prefix;
    CHECK_EQ(sched_new(&s, m, kv, tok, &o, &cb, &d), 0);
    if (!s) {
        kv_free(kv);
        return;
    }
    CHECK(sched_ctx(s) >= MAX_PROMPT + MAX_GEN);
    for (int i = 0; i < N_REQ; i++) {
        struct sched_req q = { i, reqs[i].prompt, reqs[i].n_prompt, reqs[i].max_tokens,
                               reqs[i].sp, NULL, 0 };
        reqs[i].seen = 0;
        CHECK_EQ(sched_add(s, &q, &d), 0);
    }
    while ((rc = sched_step(s, &d)) == 1)
        ;
    if (rc != 0)
        fprintf(stderr, "test_batch: %s: %s\n", st->name, d.msg);
    CHECK_EQ(rc, 0);
    for (int i = 0; i < N_REQ; i++) {
        struct req *r = &reqs[i];
        CHECK_EQ(r->seen, 1);
        if (r->n_got != r->n_ref || memcmp(r->got, r->ref, (size_t)r->n_ref * 4) ||
            !r->got_reason || strcmp(r->got_reason, r->ref_reason)) {
            if (mismatch++ < 3)
                fprintf(stderr, "test_batch: %s: request %d: %lld tokens (%s), alone %lld (%s)\n",
                        st->name, i, (long long)r->n_got, r->got_reason ? r->got_reason : "-",
                        (long long)r->n_ref, r->ref_reason);
        }
    }
    CHECK_EQ(mismatch, 0);
    CHECK_EQ(log.bad, 0);
    CHECK(log.max_running <= st->max_seqs);
    CHECK(log.max_tok <= st->max_batch_tokens);
    if (st->expect_preempt)
        CHECK(log.preempt > 0);
    if (st->prefix && st->n_blocks == 0)
        CHECK(log.hits > 0);
    if (!st->prefix)
        CHECK_EQ(log.hits, 0);
    struct kv_stats ks;
    kv_stats(kv, &ks);
    CHECK_EQ(ks.blocks_used, 0);
    CHECK_EQ(ks.seqs, 0);
    struct sched_totals t;
    sched_get_totals(s, &t);
    CHECK_EQ(t.finished, N_REQ);
    CHECK_EQ(t.preemptions, log.preempt);
    if (st->preempt == SCHED_PREEMPT_SWAP && log.preempt)
        CHECK(t.swaps_out > 0 && t.swap_bytes_peak > 0);
    if (getenv("T_VERBOSE"))
        fprintf(stderr, "%-22s steps %4lld preempt %3lld hits %3lld max_running %lld\n", st->name,
                (long long)log.steps, (long long)log.preempt, (long long)log.hits,
                (long long)log.max_running);
    sched_free(s);
    kv_free(kv);
}

/* A sequence's logits are the same bytes alone and in a mixed batch: a
 * 9-token prefill and a decode of another sequence, each run alone, then
 * together with that decode before and after the prefill (so the tokens sit
 * at other offsets of the batch). */
static void
test_invariance(const char *path, const char *kernel)
{
    struct model_opts mo = MODEL_OPTS_INIT;
    struct model *m = NULL;
    struct kv_config c;
    struct kvcache *kv1 = NULL, *kv2 = NULL;
    struct diag d;
    int32_t a, b, a2, b2;
    struct batch_tok bt[64];

    mo.kernel = kernel;
    mo.n_threads = 2;
    if (model_open(&m, path, &mo, &d)) {
        CHECK(!"model_open");
        return;
    }
    int64_t V = m->hp.n_vocab;
    float *la = malloc((size_t)V * 4 * sizeof(float)), *lb = malloc((size_t)V * 4 * sizeof(float));
    float *ld = malloc((size_t)V * sizeof(float));
    model_kv_config(m, (size_t)16 << 20, GGML_TYPE_F16, &c);
    CHECK_EQ(kv_new(&kv1, &c, &d), 0);
    CHECK_EQ(kv_new(&kv2, &c, &d), 0);
    kv_seq_new(kv1, &a);
    kv_seq_new(kv1, &b);
    kv_seq_new(kv2, &a2);
    kv_seq_new(kv2, &b2);
    /* b, b2: the same 20 tokens of context */
    for (int i = 0; i < 20; i++)
        bt[i] = (struct batch_tok){ b, i, 7 + i, 0, 0, 0 };
    struct batch bb = { 20, bt, NULL, 0 };
    CHECK_EQ(model_forward(m, kv1, &bb, NULL, NULL, &d), 0);
    for (int i = 0; i < 20; i++)
        bt[i].seq = b2;
    CHECK_EQ(model_forward(m, kv2, &bb, NULL, NULL, &d), 0);
    /* alone: a's 9 prompt tokens (logits of the last two), then b's decode */
    for (int i = 0; i < 9; i++)
        bt[i] = (struct batch_tok){ a, i, 40 + 3 * i, i >= 7, 0, 0 };
    struct batch ba = { 9, bt, NULL, 0 };
    struct model_out oa = { la, NULL };
    CHECK_EQ(model_forward(m, kv1, &ba, NULL, &oa, &d), 0);
    bt[0] = (struct batch_tok){ b, 20, 99, 1, 0, 0 };
    struct batch bd = { 1, bt, NULL, 0 };
    struct model_out od = { ld, NULL };
    CHECK_EQ(model_forward(m, kv1, &bd, NULL, &od, &d), 0);
    /* together */
    int n = 0;
    bt[n++] = (struct batch_tok){ b2, 20, 99, 1, 0, 0 };
    for (int i = 0; i < 9; i++)
        bt[n++] = (struct batch_tok){ a2, i, 40 + 3 * i, i >= 7, 0, 0 };
    bt[n++] = (struct batch_tok){ b2, 21, 98, 1, 0, 0 };
    struct batch bm = { n, bt, NULL, 0 };
    struct model_out ob = { lb, NULL };
    CHECK_EQ(model_forward(m, kv2, &bm, NULL, &ob, &d), 0);
    /* every kernel computes each (weight row, token) pair the same way
     * whatever the batch holds: bit-identical */
    if (memcmp(la, lb + V, (size_t)(2 * V) * sizeof(float)) != 0 ||
        memcmp(ld, lb, (size_t)V * sizeof(float)) != 0) {
        CHECK(!"logits depend on the batch");
        fprintf(stderr, "test_batch: %s, kernel %s: logits differ alone and batched\n", path,
                kernel);
    }
    kv_free(kv1);
    kv_free(kv2);
    free(la);
    free(lb);
    free(ld);
    model_free(m);
}

/* The reference attention over a q8_0 pool agrees with a plain f64
 * softmax over the dequantized rows (the query is quantized too, so the
 * tolerance is that of 8-bit codes). */
static void
test_attn_q8_0(void)
{
    struct kv_config c = KV_CONFIG_INIT;
    struct kvcache *kv = NULL;
    struct diag d;
    struct kv_head_view v;
    const int64_t nq = 2, dk = 64, dv = 32, n = 37;
    float q[2 * 64], row[64], out[2 * 32], k32[37][64], v32[37][32];
    int32_t seq;
    int64_t nb;

    c.n_layer = 1;
    c.n_head_kv = 1;
    c.head_dim_k = dk;
    c.head_dim_v = dv;
    c.block_size = 8;
    c.dtype = GGML_TYPE_Q8_0;
    c.mem = kv_block_bytes(&c) * 8;
    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    if (!kv)
        return;
    kv_seq_new(kv, &seq);
    kv_seq_grow(kv, seq, n, &d);
    kv_head_view(kv, 0, 0, &v);
    const int32_t *tab = kv_seq_table(kv, seq, &nb);
    for (int64_t s = 0; s < n; s++) {
        size_t off = (size_t)tab[s / 8] * v.block_stride + (size_t)(s % 8) * v.k_row_bytes;
        for (int i = 0; i < dk; i++)
            row[i] = (float)((int)rnd(2001) - 1000) / 700.0f;
        ops_kv_row_put(GGML_TYPE_Q8_0, v.k + off, row, dk);
        ops_kv_row_get(GGML_TYPE_Q8_0, k32[s], v.k + off, dk);
        off = (size_t)tab[s / 8] * v.block_stride + (size_t)(s % 8) * v.v_row_bytes;
        for (int i = 0; i < dv; i++)
            row[i] = (float)((int)rnd(2001) - 1000) / 900.0f;
        ops_kv_row_put(GGML_TYPE_Q8_0, v.v + off, row, dv);
        ops_kv_row_get(GGML_TYPE_Q8_0, v32[s], v.v + off, dv);
    }
    for (int i = 0; i < nq * dk; i++)
        q[i] = (float)((int)rnd(2001) - 1000) / 500.0f;
    struct attn_args a = { q, out, nq, dk, dv, 0.125f, v.k, v.v, v.block_stride, GGML_TYPE_Q8_0,
                           8, tab, n, NULL, 0, NULL, 0, 0 };
    int64_t nscr = ops_attn_scratch_floats_ref(nq, 8, dk, dv);
    float *scr = malloc((size_t)nscr * sizeof(float));
    ops_attn_ref(&a, scr);
    for (int h = 0; h < nq; h++) {
        double w[37], mx = -1e30, sum = 0;
        for (int s = 0; s < n; s++) {
            double dot = 0;
            for (int i = 0; i < dk; i++)
                dot += (double)q[h * dk + i] * k32[s][i];
            w[s] = dot * 0.125;
            if (w[s] > mx)
                mx = w[s];
        }
        for (int s = 0; s < n; s++)
            sum += (w[s] = exp(w[s] - mx));
        for (int i = 0; i < dv; i++) {
            double o = 0;
            for (int s = 0; s < n; s++)
                o += w[s] / sum * v32[s][i];
            CHECK_NEAR(out[h * dv + i], o, 0.02);
        }
    }
    free(scr);
    kv_free(kv);
}

static int
collect_one(void *ctx, const struct sched_result *r)
{
    struct sched_result *o = ctx;
    char *t = malloc(r->text_len + 1);
    memcpy(t, r->text, r->text_len);
    t[r->text_len] = '\0';
    *o = *r;
    o->text = t;
    o->tokens = NULL;
    return 0;
}

static void
test_stop_and_errors(struct model *m, const struct tokenizer *tok)
{
    struct kv_config c;
    struct kvcache *kv = NULL;
    struct sched *s = NULL;
    struct sched_opts o = SCHED_OPTS_INIT;
    struct sched_result res;
    struct sched_callbacks cb = { collect_one, NULL, &res };
    struct diag d;
    struct req *r = &reqs[0];

    model_kv_config(m, 0, GGML_TYPE_F16, &c);
    c.mem = kv_block_bytes(&c) * 8;             /* 128 tokens */
    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    o.ignore_eos = true;
    CHECK_EQ(sched_new(&s, m, kv, tok, &o, &cb, &d), 0);
    CHECK_EQ(sched_ctx(s), 128);

    /* stop string: the text of the 3rd generated token (alone, ignoring EOS) */
    r->max_tokens = 12;
    r->sp.temp = 0;
    CHECK_EQ(run_alone(m, tok, r, true), 0);
    size_t l0 = 0, l1 = 0, l2 = 0;
    tok_piece(tok, r->ref[0], false, &l0);
    tok_piece(tok, r->ref[1], false, &l1);
    const char *p2 = tok_piece(tok, r->ref[2], false, &l2);
    char stop[64];
    snprintf(stop, sizeof(stop), "%.*s", (int)l2, p2);
    const char *stops[1] = { stop };
    struct sched_req q = { 7, r->prompt, r->n_prompt, 12, r->sp, stops, 1 };
    memset(&res, 0, sizeof(res));
    if (l2 > 0 && !memchr(p2, 0, l2)) {
        CHECK_EQ(sched_add(s, &q, &d), 0);
        while (sched_step(s, &d) == 1)
            ;
        CHECK_STR(res.finish_reason, "stop");
        CHECK(res.n_tokens >= 1 && res.n_tokens <= 3);
        CHECK(strstr(res.text, stop) == NULL);
        CHECK(res.text_len <= l0 + l1);
        free((char *)res.text);
    }

    /* max_tokens 0 finishes inside sched_add */
    memset(&res, 0, sizeof(res));
    q.max_tokens = 0;
    q.n_stop = 0;
    CHECK_EQ(sched_add(s, &q, &d), 0);
    CHECK_STR(res.finish_reason, "length");
    CHECK_EQ(res.n_tokens, 0);
    CHECK_EQ(res.tag, 7);
    free((char *)res.text);
    CHECK_EQ(sched_waiting(s), 0);

    /* output capped by the context: 120 + 8 = 128 */
    int32_t longp[120];
    for (int i = 0; i < 120; i++)
        longp[i] = 5 + i % 50;
    struct sched_req ql = { 8, longp, 120, 50, r->sp, NULL, 0 };
    memset(&res, 0, sizeof(res));
    CHECK_EQ(sched_add(s, &ql, &d), 0);
    while (sched_step(s, &d) == 1)
        ;
    CHECK_EQ(res.n_tokens, 8);
    CHECK_STR(res.finish_reason, "length");
    free((char *)res.text);

    /* refused requests */
    int32_t bad[2] = { 5, 1 << 30 };
    struct sched_req qb = { 9, bad, 2, 4, r->sp, NULL, 0 };
    CHECK_EQ(sched_add(s, &qb, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "out of range") != NULL);
    qb.n_prompt = 0;
    CHECK_EQ(sched_add(s, &qb, &d), -ST_RANGE);
    int32_t toolong[129] = { 0 };
    struct sched_req qt = { 9, toolong, 129, 4, r->sp, NULL, 0 };
    CHECK_EQ(sched_add(s, &qt, &d), -ST_RANGE);
    CHECK(strstr(d.msg, "context") != NULL);
    const char *empty[1] = { "" };
    struct sched_req qe = { 9, r->prompt, 1, 4, r->sp, empty, 1 };
    CHECK_EQ(sched_add(s, &qe, &d), -ST_RANGE);
    struct sched_req qs = { 9, r->prompt, 1, 4, r->sp, NULL, 0 };
    qs.sp.top_p = -1.0f;
    qs.sp.temp = 1.0f;
    int rcs = sched_add(s, &qs, &d);
    CHECK(rcs == 0 || rcs == -ST_RANGE);
    while (sched_step(s, &d) == 1)
        ;
    CHECK_EQ(sched_step(s, &d), 0);
    sched_free(s);

    o.max_seqs = 0;
    CHECK_EQ(sched_new(&s, m, kv, tok, &o, &cb, &d), -ST_RANGE);
    o.max_seqs = 4;
    o.max_batch_tokens = 0;
    CHECK_EQ(sched_new(&s, m, kv, tok, &o, &cb, &d), -ST_RANGE);
    kv_free(kv);
}

static void
test_parse(void)
{
    struct batch_req_defaults def;
    struct batch_req r;
    struct diag d;
    const char *l;

    def.max_tokens = 33;
    sample_params_init(&def.sp);
    def.sp.seed = 5;
    def.sp.temp = 0.5f;

    l = "  hello world\r";
    CHECK_EQ(batch_req_parse(l, strlen(l), 3, &def, &r, &d), 0);
    CHECK(json_is_integer(r.id) && json_integer_value(r.id) == 3);
    CHECK_STR(r.prompt, "  hello world");
    CHECK_EQ(r.max_tokens, 33);
    CHECK(r.sp.seed == 5 && r.sp.temp == 0.5f && r.n_stop == 0 && !r.tokens);
    batch_req_release(&r);

    l = " \t\r";
    CHECK_EQ(batch_req_parse(l, strlen(l), 4, &def, &r, &d), 1);
    CHECK(!r.id);
    batch_req_release(&r);

    l = "{\"id\":\"q\",\"tokens\":[1,2,3],\"max_tokens\":4.0,\"temperature\":0,\"top_k\":7,"
        "\"top_p\":0.5,\"min_p\":0,\"repeat_penalty\":1.2,\"seed\":99,\"stop\":\"x\"}";
    CHECK_EQ(batch_req_parse(l, strlen(l), 5, &def, &r, &d), 0);
    CHECK(json_is_string(r.id) && !strcmp(json_string_value(r.id), "q"));
    CHECK(!r.prompt && r.n_tokens == 3 && r.tokens[2] == 3);
    CHECK_EQ(r.max_tokens, 4);
    CHECK(r.sp.temp == 0.0f && r.sp.top_k == 7 && r.sp.top_p == 0.5f && r.sp.min_p == 0.0f);
    CHECK(r.sp.repeat_penalty == 1.2f && r.sp.seed == 99);
    CHECK(r.n_stop == 1 && !strcmp(r.stop[0], "x"));
    batch_req_release(&r);

    l = "{\"id\":12,\"prompt\":\"a\\u0000b\",\"stop\":[\"s1\",\"s2\"],\"unknown\":{}}";
    CHECK_EQ(batch_req_parse(l, strlen(l), 6, &def, &r, &d), 0);
    CHECK(json_integer_value(r.id) == 12 && r.prompt_len == 3 && r.prompt[1] == 0);
    CHECK(r.n_stop == 2 && r.max_tokens == 33 && r.sp.seed == 5);
    batch_req_release(&r);

    static const char *const bad[] = {
        "{\"id\":\"k\",\"prompt\":\"a\",\"max_tokens\":4.5}",
        "{\"id\":\"k\",\"prompt\":\"a\",\"temperature\":-1}",
        "{\"id\":\"k\",\"prompt\":\"a\",\"seed\":-3}",
        "{\"id\":\"k\",\"prompt\":\"a\",\"stop\":[\"\"]}",
        "{\"id\":\"k\",\"prompt\":\"a\",\"tokens\":[1]}",
        "{\"id\":\"k\"}",
        "{\"id\":\"k\",\"tokens\":[]}",
        "{\"id\":\"k\",\"tokens\":[-1]}",
        "{\"id\":\"k\",\"prompt\":7}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_EQ(batch_req_parse(bad[i], strlen(bad[i]), 9, &def, &r, &d), -ST_FORMAT);
        CHECK(json_is_string(r.id) && !strcmp(json_string_value(r.id), "k"));   /* echoed */
        CHECK(d.msg[0] != 0);
        batch_req_release(&r);
    }
    l = "{\"id\":[1],\"prompt\":\"a\"}";
    CHECK_EQ(batch_req_parse(l, strlen(l), 10, &def, &r, &d), -ST_FORMAT);
    CHECK(json_is_integer(r.id) && json_integer_value(r.id) == 10);    /* the line number */
    batch_req_release(&r);
    l = "{\"prompt\":";
    CHECK_EQ(batch_req_parse(l, strlen(l), 11, &def, &r, &d), -ST_FORMAT);
    CHECK(strstr(d.msg, "invalid JSON") != NULL);
    batch_req_release(&r);
    l = "{\"prompt\":\"a\"} {";
    CHECK_EQ(batch_req_parse(l, strlen(l), 12, &def, &r, &d), -ST_FORMAT);
    batch_req_release(&r);
}

int
main(void)
{
    struct model_opts mo = MODEL_OPTS_INIT;
    struct model *m = NULL;
    struct tokenizer tok;
    struct diag d;
    const char *const *names = ops_names();

    if (access(F16_PATH, R_OK) != 0) {
        fprintf(stderr, "test_batch: %s missing: run `make fixtures`\n", F16_PATH);
        return 77;
    }
    test_parse();
    test_attn_q8_0();
    /* and on a real quantized model when it has been fetched */
    char real[4096];
    const char *cache = getenv("LLMKIT_CACHE"), *home = getenv("HOME");
    snprintf(real, sizeof(real), "%s%s/SmolLM2-135M-Instruct.Q4_1.gguf",
             cache ? cache : home ? home : ".", cache ? "" : "/.cache/llmkit");
    bool have_real = access(real, R_OK) == 0;
    for (int i = 0; names[i]; i++) {
        if (!ops_select(names[i]) || !strcmp(names[i], "auto"))
            continue;
        test_invariance(F16_PATH, names[i]);
        test_invariance(F32_PATH, names[i]);
        if (have_real && strcmp(names[i], "ref"))    /* ref: slow, and exact by design */
            test_invariance(real, names[i]);
    }

    mo.n_threads = 2;
    if (model_open(&m, F16_PATH, &mo, &d) || tok_load(&tok, &m->gguf, &d)) {
        fprintf(stderr, "test_batch: %s\n", d.msg);
        return 1;
    }
    make_requests((int32_t)m->hp.n_vocab);
    for (int i = 0; i < N_REQ; i++)
        CHECK_EQ(run_alone(m, &tok, &reqs[i], false), 0);

    static const struct setting settings[] = {
        { "default", 16, 256, 16, 0, SCHED_CONTINUOUS, SCHED_PREEMPT_RECOMPUTE, true, 0 },
        { "tiny-kv recompute", 16, 128, 16, 12, SCHED_CONTINUOUS, SCHED_PREEMPT_RECOMPUTE, true, 1 },
        { "tiny-kv swap", 16, 128, 16, 12, SCHED_CONTINUOUS, SCHED_PREEMPT_SWAP, true, 1 },
        { "tiny-kv swap no-prefix", 32, 64, 8, 20, SCHED_CONTINUOUS, SCHED_PREEMPT_SWAP, false, 1 },
        { "static", 8, 512, 16, 0, SCHED_STATIC, SCHED_PREEMPT_RECOMPUTE, true, 0 },
        { "static tiny-kv", 8, 512, 16, 12, SCHED_STATIC, SCHED_PREEMPT_RECOMPUTE, true, 1 },
        { "no prefix cache", 64, 1000, 16, 0, SCHED_CONTINUOUS, SCHED_PREEMPT_RECOMPUTE, false, 0 },
        { "budget 7, block 4", 4, 7, 4, 0, SCHED_CONTINUOUS, SCHED_PREEMPT_RECOMPUTE, true, 0 },
        { "block 1", 8, 33, 1, 0, SCHED_CONTINUOUS, SCHED_PREEMPT_RECOMPUTE, true, 0 },
        { "block 32 tiny", 6, 100, 32, 5, SCHED_CONTINUOUS, SCHED_PREEMPT_SWAP, true, 1 },
        { "one at a time", 1, 16, 16, 0, SCHED_CONTINUOUS, SCHED_PREEMPT_RECOMPUTE, true, 0 },
    };
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++)
        run_setting(m, &tok, &settings[i]);

    test_stop_and_errors(m, &tok);
    tok_release(&tok);
    model_free(m);
    T_DONE();
}
