/*
 * spec.c - drafters for speculative decoding (spec.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "spec.h"
#include "cli.h"
#include "qtypes.h"

int64_t
spec_lookup_draft(const int32_t *hist, int64_t n_hist, int ngram_max, int32_t *draft,
                  int64_t max_draft)
{
    if (max_draft <= 0 || n_hist < 2)
        return 0;
    for (int64_t n = ngram_max < n_hist - 1 ? ngram_max : n_hist - 1; n >= 1; n--) {
        const int32_t *suf = hist + n_hist - n;
        /* occurrences ending at e (exclusive) < n_hist, most recent first */
        for (int64_t e = n_hist - 1; e >= n; e--) {
            if (hist[e - 1] != suf[n - 1] || memcmp(hist + e - n, suf, (size_t)n * sizeof(*suf)))
                continue;
            int64_t k = n_hist - e < max_draft ? n_hist - e : max_draft;
            memcpy(draft, hist + e, (size_t)k * sizeof(*draft));
            return k;
        }
    }
    return 0;
}

/* ---- token trees ---- */

int
spec_tree_init(struct spec_tree *t, int64_t cap, struct diag *d)
{
    memset(t, 0, sizeof(*t));
    t->tok = malloc((size_t)cap * sizeof(int32_t));
    t->parent = malloc((size_t)cap * sizeof(int32_t));
    t->depth = malloc((size_t)cap * sizeof(int32_t));
    if (!t->tok || !t->parent || !t->depth) {
        spec_tree_release(t);
        return diag_set(d, ST_NOMEM, "out of memory");
    }
    t->cap = cap;
    return 0;
}

void
spec_tree_release(struct spec_tree *t)
{
    free(t->tok);
    free(t->parent);
    free(t->depth);
    memset(t, 0, sizeof(*t));
}

void
spec_tree_reset(struct spec_tree *t, int32_t root)
{
    t->n = 1;
    t->tok[0] = root;
    t->parent[0] = -1;
    t->depth[0] = 0;
    t->chain = 1;
}

int64_t
spec_tree_add(struct spec_tree *t, int32_t tok, int64_t parent)
{
    if (t->n >= t->cap || parent < 0 || parent >= t->n)
        return -1;
    int64_t i = t->n++;
    t->tok[i] = tok;
    t->parent[i] = (int32_t)parent;
    t->depth[i] = t->depth[parent] + 1;
    t->chain &= parent == i - 1;
    return i;
}

int64_t
spec_tree_child(const struct spec_tree *t, int64_t p, int32_t tok)
{
    for (int64_t i = p + 1; i < t->n; i++)
        if (t->parent[i] == p && t->tok[i] == tok)
            return i;
    return -1;
}

double
spec_tree_attn_slots(const struct spec_tree *t, const struct model *m, int64_t root_pos)
{
    double slots = 0;
    for (int64_t j = 0; j < t->n; j++)
        slots += model_attn_slots(m, root_pos + t->depth[j]);
    return slots;
}

void
spec_tree_mask(const struct spec_tree *t, uint8_t *mask)
{
    memset(mask, 0, (size_t)(t->n * t->n));
    for (int64_t i = 0; i < t->n; i++)
        for (int64_t j = i; j >= 0; j = t->parent[j])
            mask[i * t->n + j] = 1;
}

/* ---- the draft model ---- */

/* one stream: a draft KV sequence and the tokens in it */
struct dm_stream {
    bool used;
    int32_t seq;                /* draft KV sequence, -1 = none yet */
    int32_t *fed;               /* [ctx] the tokens in it */
    int64_t n_fed;
};

struct spec_dm {
    struct model *m;
    struct kvcache *kv;
    struct dm_stream *st;       /* [n_st] */
    int64_t n_st, ctx;
    struct batch_tok *bt;       /* [bt_cap] */
    int64_t bt_cap;
    float *logits;              /* [n_st][n_vocab] */
    int32_t *top;               /* [SPEC_WIDTH_MAX] */
    struct spec_cost cost;      /* its forward pass of 1, 2, 4 ... tokens */
    /* spec_dm_chains' scratch, [n_st] each */
    int32_t *c_idx;
    const int32_t **c_feed;
    int64_t *c_nf, *c_slot;
};

/* the draft's vocabulary must be the target's, token for token */
static int
same_vocab(const struct tokenizer *a, const struct tokenizer *b, const char *path, struct diag *d)
{
    if (a->n_vocab != b->n_vocab)
        return diag_set(d, ST_FORMAT, "'%s': the draft's vocabulary has %d tokens, the target's %d",
                        path, (int)b->n_vocab, (int)a->n_vocab);
    for (int32_t i = 0; i < a->n_vocab; i++) {
        size_t la, lb;
        const char *ta = tok_text(a, i, &la), *tb = tok_text(b, i, &lb);
        if (la != lb || memcmp(ta, tb, la) != 0)
            return diag_set(d, ST_FORMAT, "'%s': the draft's vocabulary differs from the target's "
                            "at token %d", path, (int)i);
    }
    return 0;
}

int
spec_dm_open(struct spec_dm **out, const char *path, const struct model_opts *mo,
             const struct tokenizer *target_tok, int64_t ctx, int64_t n_streams,
             int64_t pool_tokens, struct diag *d)
{
    struct spec_dm *dm = calloc(1, sizeof(*dm));
    struct tokenizer tok;
    struct kv_config c;
    int rc;

    *out = NULL;
    if (!dm)
        return diag_set(d, ST_NOMEM, "out of memory");
    if (n_streams < 1)
        n_streams = 1;
    if (pool_tokens < ctx)
        pool_tokens = ctx;
    if ((rc = model_open(&dm->m, path, mo, d)) < 0) {
        diag_prefix(d, "'%s'", path);
        goto err;
    }
    if ((rc = tok_load(&tok, &dm->m->gguf, d)) < 0) {
        diag_prefix(d, "'%s'", path);
        goto err;
    }
    rc = same_vocab(target_tok, &tok, path, d);
    tok_release(&tok);
    if (rc < 0)
        goto err;
    if (dm->m->hp.n_vocab != target_tok->n_vocab) {
        rc = diag_set(d, ST_FORMAT, "'%s': the draft's output has %lld rows, not the vocabulary's %d",
                      path, (long long)dm->m->hp.n_vocab, (int)target_tok->n_vocab);
        goto err;
    }
    model_kv_config(dm->m, 0, GGML_TYPE_F16, &c);
    c.mem = kv_block_bytes(&c) *
            (size_t)((pool_tokens + (n_streams + 1) * KV_BLOCK_SIZE_DEFAULT) / KV_BLOCK_SIZE_DEFAULT);
    if ((rc = kv_new(&dm->kv, &c, d)) < 0) {
        diag_prefix(d, "'%s'", path);
        goto err;
    }
    dm->ctx = ctx;
    dm->n_st = n_streams;
    dm->bt_cap = ctx;
    dm->st = calloc((size_t)n_streams, sizeof(*dm->st));
    dm->bt = calloc((size_t)dm->bt_cap, sizeof(*dm->bt));
    dm->logits = malloc((size_t)(n_streams * dm->m->hp.n_vocab) * sizeof(float));
    dm->top = malloc(SPEC_WIDTH_MAX * sizeof(int32_t));
    dm->c_idx = malloc((size_t)n_streams * sizeof(*dm->c_idx));
    dm->c_feed = malloc((size_t)n_streams * sizeof(*dm->c_feed));
    dm->c_nf = malloc((size_t)n_streams * sizeof(*dm->c_nf));
    dm->c_slot = malloc((size_t)n_streams * sizeof(*dm->c_slot));
    if (!dm->st || !dm->bt || !dm->logits || !dm->top || !dm->c_idx || !dm->c_feed ||
        !dm->c_nf || !dm->c_slot) {
        rc = diag_set(d, ST_NOMEM, "out of memory");
        goto err;
    }
    for (int64_t i = 0; i < n_streams; i++) {
        dm->st[i].seq = -1;
        if (!(dm->st[i].fed = malloc((size_t)ctx * sizeof(int32_t)))) {
            rc = diag_set(d, ST_NOMEM, "out of memory");
            goto err;
        }
    }
    dm->st[0].used = true;      /* the single-stream calls' own */
    if ((rc = spec_cost_measure(dm->m, dm->kv, n_streams > 2 ? n_streams - 1 : 1, &dm->cost, d)) < 0)
        goto err;
    *out = dm;
    return 0;
err:
    spec_dm_free(dm);
    return rc;
}

void
spec_dm_free(struct spec_dm *dm)
{
    if (!dm)
        return;
    kv_free(dm->kv);
    model_free(dm->m);
    for (int64_t i = 0; dm->st && i < dm->n_st; i++)
        free(dm->st[i].fed);
    free(dm->st);
    free(dm->bt);
    free(dm->logits);
    free(dm->top);
    free(dm->c_idx);
    free(dm->c_feed);
    free(dm->c_nf);
    free(dm->c_slot);
    free(dm);
}

int32_t
spec_dm_stream_new(struct spec_dm *dm)
{
    for (int64_t i = 1; i < dm->n_st; i++)
        if (!dm->st[i].used) {
            dm->st[i].used = true;
            dm->st[i].n_fed = 0;
            return (int32_t)i;
        }
    return -1;
}

void
spec_dm_stream_free(struct spec_dm *dm, int32_t i)
{
    if (i < 0 || i >= dm->n_st)
        return;
    struct dm_stream *st = &dm->st[i];
    if (st->seq >= 0)
        kv_seq_free(dm->kv, st->seq);
    st->seq = -1;
    st->n_fed = 0;
    st->used = i == 0;
}

/* brings stream st to hist[0 .. n_hist - 1): its cache rolled back to the
 * longest prefix it shares with that (never all of hist: the last token is
 * fed to get its logits); the number of tokens still to feed */
static int64_t
dm_rollback(struct spec_dm *dm, struct dm_stream *st, const int32_t *hist, int64_t n_hist)
{
    int64_t k = 0;
    while (k < st->n_fed && k < n_hist - 1 && st->fed[k] == hist[k])
        k++;
    if (k < st->n_fed) {
        kv_seq_truncate(dm->kv, st->seq, k);
        st->n_fed = k;
    }
    return n_hist - k;
}

/* one forward pass of the draft: toks[j][0 .. n[j]) after stream j's cache
 * for the n_st streams in idx[], the logits of each stream's last token in
 * row j of dm->logits; a level's pass (level: not a catch-up) within the
 * measured curve goes into the fit of its attention (spec_dm_level_ms) */
static int
dm_feed(struct spec_dm *dm, const int32_t *idx, const int32_t *const *toks, const int64_t *n,
        int64_t n_st, int level, struct diag *d)
{
    int64_t tot = 0;

    for (int64_t j = 0; j < n_st; j++) {
        if (dm->st[idx[j]].n_fed + n[j] > dm->ctx)
            return diag_set(d, ST_RANGE, "draft: context full");
        tot += n[j];
    }
    if (tot > dm->bt_cap) {
        struct batch_tok *nb = realloc(dm->bt, (size_t)tot * sizeof(*nb));
        if (!nb)
            return diag_set(d, ST_NOMEM, "out of memory");
        dm->bt = nb;
        dm->bt_cap = tot;
    }
    int64_t k = 0;
    for (int64_t j = 0; j < n_st; j++) {
        struct dm_stream *st = &dm->st[idx[j]];
        if (st->seq < 0) {
            int rc = kv_seq_new(dm->kv, &st->seq);
            if (rc < 0)
                return diag_set(d, -rc == ENOMEM ? ST_NOMEM : ST_RANGE, "draft: no KV sequence");
        }
        for (int64_t i = 0; i < n[j]; i++, k++)
            dm->bt[k] = (struct batch_tok){ .seq = st->seq, .pos = (int32_t)(st->n_fed + i),
                                            .token = toks[j][i], .logits = i == n[j] - 1 };
    }
    struct batch b = { tot, dm->bt, NULL, 0 };
    struct model_out mo = { dm->logits, NULL };
    double t0 = now_seconds();
    int rc = model_forward(dm->m, dm->kv, &b, NULL, &mo, d);
    if (rc < 0)
        return rc;
    if (level && dm->cost.n_meas > 0 && tot <= dm->cost.n[dm->cost.n_meas - 1]) {
        double slots = 0;
        for (int64_t i = 0; i < tot; i++)
            slots += model_attn_slots(dm->m, dm->bt[i].pos);
        spec_cost_observe(&dm->cost, tot, slots, (now_seconds() - t0) * 1000.0);
    }
    for (int64_t j = 0; j < n_st; j++) {
        struct dm_stream *st = &dm->st[idx[j]];
        memcpy(st->fed + st->n_fed, toks[j], (size_t)n[j] * sizeof(int32_t));
        st->n_fed += n[j];
    }
    return 0;
}

/* the k most likely tokens of logits (k <= SPEC_WIDTH_MAX), into top, in
 * order (ties: the lower id first), and the softmax probability of the
 * first */
static float
top_k(const float *logits, int64_t n_vocab, int k, int32_t *top)
{
    for (int j = 0; j < k; j++)
        top[j] = -1;
    for (int64_t v = 0; v < n_vocab; v++) {
        int j = k;
        while (j > 0 && (top[j - 1] < 0 || logits[v] > logits[top[j - 1]]))
            j--;
        if (j >= k)
            continue;
        memmove(top + j + 1, top + j, (size_t)(k - 1 - j) * sizeof(int32_t));
        top[j] = (int32_t)v;
    }
    double sum = 0, mx = logits[top[0]];
    for (int64_t v = 0; v < n_vocab; v++)
        sum += exp((double)logits[v] - mx);
    return (float)(1.0 / sum);
}

int
spec_dm_draft(struct spec_dm *dm, const int32_t *hist, int64_t n_hist, int depth, int width,
              int64_t budget, float p_min, struct spec_tree *t, struct diag *d)
{
    struct dm_stream *st = &dm->st[0];
    int64_t n_vocab = dm->m->hp.n_vocab;
    int32_t idx = 0;
    int rc;

    if (width > SPEC_WIDTH_MAX)
        width = SPEC_WIDTH_MAX;
    spec_tree_reset(t, hist[n_hist - 1]);
    int64_t n = dm_rollback(dm, st, hist, n_hist);
    const int32_t *feed = hist + n_hist - n;
    if ((rc = dm_feed(dm, &idx, &feed, &n, 1, 0, d)) < 0)
        return rc;
    int64_t cur = 0;
    for (int lv = 0; lv < depth && t->n - 1 < budget; lv++) {
        int w = width;
        if (w > budget - (t->n - 1))
            w = (int)(budget - (t->n - 1));
        float p = top_k(dm->logits, n_vocab, w, dm->top);
        if (p < p_min)
            break;
        int64_t main_child = -1;
        for (int j = 0; j < w; j++) {
            int64_t c = spec_tree_add(t, dm->top[j], cur);
            if (j == 0)
                main_child = c;
        }
        cur = main_child;
        feed = &t->tok[cur];
        n = 1;
        if (lv + 1 < depth && t->n - 1 < budget && (rc = dm_feed(dm, &idx, &feed, &n, 1, 1, d)) < 0)
            return rc;
    }
    return 0;
}

int
spec_dm_chains(struct spec_dm *dm, struct spec_dm_req *r, int64_t n_req, float p_min,
               struct diag *d)
{
    int64_t n_vocab = dm->m->hp.n_vocab, n_act = 0;
    int64_t free_blocks = kv_blocks_free(dm->kv);
    int32_t *idx = dm->c_idx;
    const int32_t **feed = dm->c_feed;
    int64_t *nf = dm->c_nf, *slot = dm->c_slot;
    int rc;

    if (n_req > dm->n_st)
        return diag_set(d, ST_RANGE, "draft: %lld requests for %lld streams", (long long)n_req,
                        (long long)dm->n_st);
    /* level 0: each stream brought to its history, as blocks allow (a
     * stream that would not fit drafts nothing this time) */
    for (int64_t j = 0; j < n_req; j++) {
        r[j].n_out = 0;
        if (r[j].max <= 0 || r[j].n_hist < 1 || r[j].stream < 1 || r[j].stream >= dm->n_st ||
            r[j].n_hist + r[j].max > dm->ctx)
            continue;
        struct dm_stream *st = &dm->st[r[j].stream];
        int64_t n = dm_rollback(dm, st, r[j].hist, r[j].n_hist);
        int64_t need = st->seq < 0 ? (n + r[j].max + KV_BLOCK_SIZE_DEFAULT - 1) /
                                         KV_BLOCK_SIZE_DEFAULT
                                   : kv_seq_blocks_needed(dm->kv, st->seq, n + r[j].max);
        if (need > free_blocks)
            continue;
        free_blocks -= need;
        idx[n_act] = r[j].stream;
        feed[n_act] = r[j].hist + r[j].n_hist - n;
        nf[n_act] = n;
        slot[n_act++] = j;
    }
    /* one level a pass: each stream's most likely token, while it is
     * likely enough, fed for the next level */
    for (int lv = 0; n_act > 0; lv++) {
        if ((rc = dm_feed(dm, idx, feed, nf, n_act, lv > 0, d)) < 0)
            return rc;
        int64_t k = 0;
        for (int64_t j = 0; j < n_act; j++) {
            struct spec_dm_req *q = &r[slot[j]];
            int32_t tok;
            float p = top_k(dm->logits + j * n_vocab, n_vocab, 1, &tok);
            if (p < p_min)
                continue;
            q->out[q->n_out++] = tok;
            if (q->n_out >= q->max)
                continue;
            idx[k] = idx[j];
            feed[k] = &q->out[q->n_out - 1];
            nf[k] = 1;
            slot[k++] = slot[j];
        }
        n_act = k;
    }
    return 0;
}

/* ---- the draft size ---- */

int
spec_cost_measure(struct model *m, struct kvcache *kv, int64_t max_n, struct spec_cost *c,
                  struct diag *d)
{
    struct batch_tok bt[32];
    float *logits = malloc((size_t)m->hp.n_vocab * 32 * sizeof(float));
    int32_t seq = -1;
    int rc = 0;

    memset(c, 0, sizeof(*c));
    if (!logits)
        return diag_set(d, ST_NOMEM, "out of memory");
    if (max_n > 32)
        max_n = 32;
    for (int64_t n = 1; n <= max_n && c->n_meas < SPEC_COST_N; n *= 2) {
        double best = -1;
        for (int rep = 0; rep < 3; rep++) {
            if (kv_seq_new(kv, &seq) < 0)
                goto out;
            for (int64_t i = 0; i < n; i++)
                bt[i] = (struct batch_tok){ .seq = seq, .pos = (int32_t)i, .token = (int32_t)i,
                                            .logits = 1, .tiled = 0 };
            struct batch b = { n, bt, NULL, 0 };
            struct model_out mo = { logits, NULL };
            double t0 = now_seconds();
            rc = model_forward(m, kv, &b, NULL, &mo, d);
            double ms = (now_seconds() - t0) * 1000.0;
            kv_seq_free(kv, seq);
            if (rc == -ST_NOMEM) {      /* the pool is full: what was measured serves */
                rc = 0;
                goto out;
            }
            if (rc < 0)
                goto out;
            if (best < 0 || ms < best)
                best = ms;
        }
        c->n[c->n_meas] = n;
        c->ms[c->n_meas++] = best;
    }
out:
    free(logits);
    return rc;
}

double
spec_cost_at(const struct spec_cost *c, int64_t n)
{
    if (c->n_meas == 0)
        return 0;
    if (c->n_meas == 1 || n <= c->n[0])
        return c->ms[0] * (n <= c->n[0] ? 1.0 : (double)n / (double)c->n[0]);
    int i = 1;
    while (i < c->n_meas - 1 && n > c->n[i])
        i++;
    double f = (double)(n - c->n[i - 1]) / (double)(c->n[i] - c->n[i - 1]);
    return c->ms[i - 1] + f * (c->ms[i] - c->ms[i - 1]);
}

double
spec_cost_pass(const struct spec_cost *c, int64_t n, double slots)
{
    return spec_cost_at(c, n) + slots * c->slot_ms;
}

void
spec_cost_observe(struct spec_cost *c, int64_t n, double slots, double ms)
{
    if (c->n_meas == 0 || !(slots >= SPEC_OBS_SLOTS) || !(slots >= (double)n * SPEC_OBS_CTX))
        return;
    double est = (ms - spec_cost_at(c, n)) / slots;
    if (!(est > 0))
        est = 0;
    if (c->slot_ms > 0 && est > 4 * c->slot_ms)
        est = 4 * c->slot_ms;
    c->slot_ms = c->n_obs++ == 0 ? est : 0.8 * c->slot_ms + 0.2 * est;
}

int
spec_choose(const struct spec_cost *c, double a, int64_t n_seq, int width, double t_draft,
            int max_levels, double ctx)
{
    double best = 1.0 / spec_cost_pass(c, n_seq, (double)n_seq * ctx), e = 1, ak = 1;
    int k_best = 0;

    if (c->n_meas == 0)
        return max_levels;
    for (int k = 1; k <= max_levels; k++) {
        ak *= a;
        e += ak;
        int64_t n = n_seq * ((int64_t)k * width + 1);
        double v = e / (spec_cost_pass(c, n, (double)n * ctx) + k * t_draft);
        if (v > best) {
            best = v;
            k_best = k;
        }
    }
    return k_best;
}

double
spec_acceptance(int64_t kept, int64_t rejected)
{
    return (double)(kept + 1) / (double)(kept + rejected + 2);
}

int
spec_auto_levels(const struct spec_cost *c, int64_t kept, int64_t rejected, int64_t n_seq,
                 int width, double t_draft, int max_levels, double ctx, struct spec_probe *p)
{
    int k = spec_choose(c, spec_acceptance(kept, rejected), n_seq, width, t_draft, max_levels, ctx);

    if (p->period < SPEC_PROBE_MIN)
        p->period = SPEC_PROBE_MIN;
    if (k > 0) {
        p->wait = 0;
        return k;
    }
    /* the probe's best outcome: every draft kept before any rejection (or
     * with lookup), else this probe's level kept for every sequence */
    const int dear = t_draft > 0;
    double best = !dear || rejected == 0 ? 1.0 : spec_acceptance(kept + n_seq, rejected);
    if (spec_choose(c, best, n_seq, width, t_draft, max_levels, ctx) == 0 || ++p->wait < p->period)
        return 0;
    p->wait = 0;
    if (dear && p->period < SPEC_PROBE_MAX)
        p->period *= 2;
    return 1;
}

double
spec_dm_level_ms(const struct spec_dm *dm, int64_t n, int64_t pos, const struct spec_cost *tc,
                 const struct model *tm)
{
    double ctx = model_attn_slots(dm->m, pos);
    if (dm->cost.n_obs > 0 || !tc || !tm)
        return spec_cost_pass(&dm->cost, n, (double)n * ctx);
    /* none of its own passes yet: the target's slot_ms in proportion to the
     * multiply-adds a slot costs each (layers x query heads x (key + value
     * width)) */
    const struct model_hparams *a = &dm->m->hp, *b = &tm->hp;
    double w = (double)(a->n_layer * a->n_head * (a->head_dim + a->head_dim_v)) /
               (double)(b->n_layer * b->n_head * (b->head_dim + b->head_dim_v));
    return spec_cost_at(&dm->cost, n) + (double)n * ctx * tc->slot_ms * w;
}
