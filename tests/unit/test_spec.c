/*
 * test_spec.c - prompt lookup drafting (spec.h).
 */
#include <stdint.h>
#include <string.h>

#include <stdlib.h>

#include "kvcache.h"
#include "model.h"
#include "qtypes.h"
#include "spec.h"
#include "t.h"
#include "tokenizer.h"

#define TREE_PREFIX 20

/* feeds toks[0 .. n) into sequence seq from position pos0, one batch; the
 * last token's logits into out */
static int
feed(struct model *m, struct kvcache *kv, int32_t seq, int64_t pos0, const int32_t *toks,
     int64_t n, float *out)
{
    struct batch_tok bt[TREE_PREFIX];
    struct diag d;
    for (int64_t i = 0; i < n; i++)
        bt[i] = (struct batch_tok){ seq, (int32_t)(pos0 + i), toks[i], i == n - 1, 0, 0 };
    struct batch b = { n, bt, NULL, 0 };
    struct model_out mo = { out, NULL };
    return model_forward(m, kv, &b, NULL, &mo, &d);
}

/* the tiny f32 fixture on one thread (mo: its options), or NULL */
static struct model *
open_tiny(struct model_opts *mo)
{
    struct model *m = NULL;
    struct diag d;

    mo->n_threads = 1;
    if (model_open(&m, "tests/fixtures/tiny-llama-f32.gguf", mo, &d)) {
        CHECK(!"tiny fixture (make fixtures)");
        return NULL;
    }
    return m;
}

/* the tiny model (mo: its options) with its tokenizer and the f16
 * fixture as a draft model of n_streams streams over a pool of pool
 * tokens (2048 a stream), or NULL */
static struct model *
open_with_dm(struct model_opts *mo, struct tokenizer *tok, struct spec_dm **dm,
             int64_t n_streams, int64_t pool)
{
    struct model *m = open_tiny(mo);
    struct diag d;

    *dm = NULL;
    if (!m)
        return NULL;
    if (tok_load(tok, &m->gguf, &d) != 0) {
        CHECK(!"the tiny fixture's tokenizer");
        model_free(m);
        return NULL;
    }
    CHECK_EQ(spec_dm_open(dm, "tests/fixtures/tiny-llama-f16.gguf", mo, tok, 2048, n_streams,
                          pool, &d), 0);
    return m;
}

/* a token tree verified in one masked pass after a prefix, on a model whose
 * every layer attends over a 6-token sliding window: each node's logits are
 * bit for bit those of plain decoding along its path (the window counted
 * from the node's position, not its slot past the other nodes') */
static void
tree_in_window(void)
{
    struct model_opts mo = MODEL_OPTS_INIT;
    struct model *m = open_tiny(&mo);
    struct kvcache *kv = NULL;
    struct kv_config c;
    struct diag d;
    struct spec_tree t;
    int32_t seq, prefix[TREE_PREFIX];

    if (!m)
        return;
    m->hp.n_swa = 6;
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        m->layers[l].swa = true;
    int64_t nv = m->hp.n_vocab;
    model_kv_config(m, (size_t)8 << 20, GGML_TYPE_F16, &c);
    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    CHECK_EQ(spec_tree_init(&t, 10, NULL), 0);
    float *ref = malloc((size_t)nv * sizeof(float)), *rows = malloc((size_t)(10 * nv) * sizeof(float));
    CHECK(ref && rows);
    for (int i = 0; i < TREE_PREFIX; i++)
        prefix[i] = (int32_t)(3 + 7 * i) % (int32_t)nv;
    /* a caterpillar: 3 children a level, the first continuing, 3 levels */
    spec_tree_reset(&t, 5);
    int64_t cur = 0;
    for (int lv = 0; lv < 3; lv++) {
        int64_t first = -1;
        for (int j = 0; j < 3; j++) {
            int64_t k = spec_tree_add(&t, (int32_t)(11 + 13 * lv + 5 * j) % (int32_t)nv, cur);
            if (j == 0)
                first = k;
        }
        cur = first;
    }
    CHECK_EQ(t.n, 10);
    CHECK_EQ(kv_seq_new(kv, &seq), 0);
    CHECK_EQ(feed(m, kv, seq, 0, prefix, TREE_PREFIX, ref), 0);
    struct batch_tok bt[10];
    uint8_t mask[100];
    spec_tree_mask(&t, mask);
    for (int64_t j = 0; j < t.n; j++)
        bt[j] = (struct batch_tok){ seq, (int32_t)(TREE_PREFIX + t.depth[j]), t.tok[j], 1, 0, 0 };
    struct batch b = { t.n, bt, mask, 0 };
    struct model_out out = { rows, NULL };
    CHECK_EQ(model_forward(m, kv, &b, NULL, &out, &d), 0);
    kv_seq_free(kv, seq);
    /* each node against plain decoding along its path */
    for (int64_t j = 0; j < t.n; j++) {
        int32_t path[4];
        int64_t n = 0;
        for (int64_t k = j; k >= 0; k = t.parent[k])
            n++;
        for (int64_t k = j, i = n - 1; k >= 0; k = t.parent[k], i--)
            path[i] = t.tok[k];
        CHECK_EQ(kv_seq_new(kv, &seq), 0);
        CHECK_EQ(feed(m, kv, seq, 0, prefix, TREE_PREFIX, ref), 0);
        for (int64_t i = 0; i < n; i++)
            CHECK_EQ(feed(m, kv, seq, TREE_PREFIX + i, &path[i], 1, ref), 0);
        CHECK(memcmp(ref, rows + j * nv, (size_t)nv * sizeof(float)) == 0);
        kv_seq_free(kv, seq);
    }
    free(ref);
    free(rows);
    spec_tree_release(&t);
    kv_free(kv);
    model_free(m);
}

/* The slots a token reads (model_attn_slots: a sliding window counts what
 * it keeps), and a draft model's level cost (spec_dm_level_ms): the
 * target's slot_ms scaled by the attention widths until a level pass of its
 * own was fitted, and catch-ups fitting nothing. */
static void
dm_cost(void)
{
    struct model_opts mo = MODEL_OPTS_INIT;
    struct spec_dm *dm;
    struct tokenizer tok;
    struct model *m = open_with_dm(&mo, &tok, &dm, 1, 2048);
    struct diag d;

    if (!m)
        return;
    CHECK_NEAR(model_attn_slots(m, 0), 1, 1e-12);
    CHECK_NEAR(model_attn_slots(m, 99), 100, 1e-12);
    m->hp.n_swa = 6;
    m->layers[0].swa = true;            /* one layer of n_layer windowed */
    double L = (double)m->hp.n_layer;
    CHECK_NEAR(model_attn_slots(m, 3), 4, 1e-12);
    CHECK_NEAR(model_attn_slots(m, 99), ((L - 1) * 100 + 6) / L, 1e-9);
    /* a tree's nodes at depths 0 1 1 2 after a root at position 99:
     * 100 + 101 + 101 + 102 slots, with the window (L - 1) x that + 4 x 6 */
    struct spec_tree tr;
    CHECK_EQ(spec_tree_init(&tr, 4, NULL), 0);
    spec_tree_reset(&tr, 1);
    spec_tree_add(&tr, 2, spec_tree_add(&tr, 3, 0));
    spec_tree_add(&tr, 4, 0);
    CHECK_NEAR(spec_tree_attn_slots(&tr, m, 99), ((L - 1) * 404 + 24) / L, 1e-9);
    m->layers[0].swa = false;
    m->hp.n_swa = 0;
    CHECK_NEAR(spec_tree_attn_slots(&tr, m, 99), 404, 1e-9);
    spec_tree_release(&tr);
    if (dm) {
        struct spec_cost tc = { 1, { 1 }, { 1.0 }, 0.01, 1 };
        double base = spec_dm_level_ms(dm, 1, 49, NULL, NULL);
        /* the same shape: the target's slot_ms as it is, over 50 slots */
        CHECK_NEAR(spec_dm_level_ms(dm, 1, 49, &tc, m) - base, 50 * 0.01, 1e-9);
        CHECK_NEAR(spec_dm_level_ms(dm, 2, 49, &tc, m) - spec_dm_level_ms(dm, 2, 49, NULL, NULL),
                   2 * 50 * 0.01, 1e-9);
        /* catch-ups on 1100 tokens and then on one (drafts of one level:
         * no level pass) fit nothing, so the prior stays; a draft of two levels feeds one
         * level pass at position 1100 (1101 slots), which is fitted: the
         * draft's own slot_ms from then on, whatever the target's */
        int32_t hist[1100];
        for (int i = 0; i < 1100; i++)
            hist[i] = (int32_t)(5 + 3 * i) % (int32_t)m->hp.n_vocab;
        struct spec_tree t;
        CHECK_EQ(spec_tree_init(&t, 8, NULL), 0);
        CHECK_EQ(spec_dm_draft(dm, hist, 1100, 1, 1, 4, 0.0f, &t, &d), 0);
        /* again: a catch-up of one token (the last, rolled back), 1100 slots */
        CHECK_EQ(spec_dm_draft(dm, hist, 1100, 1, 1, 4, 0.0f, &t, &d), 0);
        CHECK_NEAR(spec_dm_level_ms(dm, 1, 49, &tc, m) - spec_dm_level_ms(dm, 1, 49, NULL, NULL),
                   50 * 0.01, 1e-9);
        CHECK_EQ(spec_dm_draft(dm, hist, 1100, 2, 1, 4, 0.0f, &t, &d), 0);
        CHECK_EQ(t.n, 3);
        CHECK(spec_dm_level_ms(dm, 1, 49, &tc, m) == spec_dm_level_ms(dm, 1, 49, NULL, NULL));
        spec_tree_release(&t);
        spec_dm_free(dm);
    }
    tok_release(&tok);
    model_free(m);
}

/* A draft model fits only the level passes its measured curve covers: with
 * 4 streams (3 for chains) spec_dm_open measures t(1) and t(2), so a level
 * pass of 3 chains (t(3) extrapolated) fits nothing and one of 2 does. */
static void
dm_cost_chains(void)
{
    struct model_opts mo = MODEL_OPTS_INIT;
    struct spec_dm *dm;
    struct tokenizer tok;
    struct model *m = open_with_dm(&mo, &tok, &dm, 4, 4096);
    struct diag d;

    if (!m)
        return;
    if (dm) {
        struct spec_cost tc = { 1, { 1 }, { 1.0 }, 0.01, 1 };
        enum { H = 600 };
        static int32_t hist[3][H];
        int32_t out[3][2];
        struct spec_dm_req r[3];
        for (int j = 0; j < 3; j++) {
            for (int i = 0; i < H; i++)
                hist[j][i] = (int32_t)(5 + 3 * i + 7 * j) % (int32_t)m->hp.n_vocab;
            r[j] = (struct spec_dm_req){ .stream = spec_dm_stream_new(dm), .hist = hist[j],
                                         .n_hist = H, .max = 2, .out = out[j] };
            CHECK(r[j].stream >= 1);
        }
        /* the level pass: 3 tokens over 601 slots each, past t(2) */
        CHECK_EQ(spec_dm_chains(dm, r, 3, 0.0f, &d), 0);
        CHECK(r[0].n_out == 2 && r[1].n_out == 2 && r[2].n_out == 2);
        CHECK_NEAR(spec_dm_level_ms(dm, 1, 49, &tc, m) - spec_dm_level_ms(dm, 1, 49, NULL, NULL),
                   50 * 0.01, 1e-9);
        /* two of them again: 2 tokens over 601 slots, within the curve */
        CHECK_EQ(spec_dm_chains(dm, r, 2, 0.0f, &d), 0);
        CHECK(r[0].n_out == 2 && r[1].n_out == 2);
        CHECK(spec_dm_level_ms(dm, 1, 49, &tc, m) == spec_dm_level_ms(dm, 1, 49, NULL, NULL));
        spec_dm_free(dm);
    }
    tok_release(&tok);
    model_free(m);
}

static int
eq(const int32_t *a, const int32_t *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

int
main(void)
{
    int32_t d[8];

    tree_in_window();
    dm_cost();
    dm_cost_chains();

    /* the last 3 tokens (7 8 9) occurred at 1..3, followed by 4 5 6 7 8 9 */
    int32_t h1[] = { 1, 7, 8, 9, 4, 5, 6, 7, 8, 9 };
    CHECK_EQ(spec_lookup_draft(h1, 10, 3, d, 8), 6);
    CHECK(eq(d, (const int32_t[]){ 4, 5, 6, 7, 8, 9 }, 6));
    CHECK_EQ(spec_lookup_draft(h1, 10, 3, d, 2), 2);
    CHECK(eq(d, (const int32_t[]){ 4, 5 }, 2));
    /* the most recent occurrence wins: "2" after 5 2 3 ... 5 2 4 ... 5 */
    int32_t h2[] = { 5, 2, 3, 0, 5, 2, 4, 0, 5 };
    CHECK_EQ(spec_lookup_draft(h2, 9, 1, d, 3), 3);
    CHECK(eq(d, (const int32_t[]){ 2, 4, 0 }, 3));
    /* longer n-grams first: suffix 1 5 matches at 0..1 (followed by 9),
     * though 5 alone last occurred before 7 */
    int32_t h3[] = { 1, 5, 9, 5, 7, 1, 5 };
    CHECK_EQ(spec_lookup_draft(h3, 7, 2, d, 1), 1);
    CHECK_EQ(d[0], 9);
    CHECK_EQ(spec_lookup_draft(h3, 7, 1, d, 1), 1);
    CHECK_EQ(d[0], 7);
    /* no match, empty and tiny histories, no budget */
    int32_t h4[] = { 1, 2, 3, 4 };
    CHECK_EQ(spec_lookup_draft(h4, 4, 3, d, 8), 0);
    CHECK_EQ(spec_lookup_draft(h4, 1, 3, d, 8), 0);
    CHECK_EQ(spec_lookup_draft(h4, 0, 3, d, 8), 0);
    CHECK_EQ(spec_lookup_draft(h1, 10, 3, d, 0), 0);
    /* a run of one token drafts its continuation */
    int32_t h5[] = { 4, 4, 4, 4 };
    CHECK_EQ(spec_lookup_draft(h5, 4, 3, d, 8), 1);
    CHECK_EQ(d[0], 4);

    /* trees: a caterpillar of two levels of width 2 */
    struct spec_tree t;
    CHECK_EQ(spec_tree_init(&t, 5, NULL), 0);
    spec_tree_reset(&t, 7);
    CHECK_EQ(spec_tree_add(&t, 10, 0), 1);
    CHECK(t.chain);
    CHECK_EQ(spec_tree_add(&t, 11, 0), 2);
    CHECK(!t.chain);
    CHECK_EQ(spec_tree_add(&t, 20, 1), 3);
    CHECK_EQ(spec_tree_add(&t, 21, 1), 4);
    CHECK_EQ(spec_tree_add(&t, 22, 1), -1);             /* full */
    CHECK_EQ(spec_tree_add(&t, 22, 9), -1);
    CHECK_EQ(t.depth[4], 2);
    CHECK_EQ(spec_tree_child(&t, 0, 11), 2);
    CHECK_EQ(spec_tree_child(&t, 1, 21), 4);
    CHECK_EQ(spec_tree_child(&t, 2, 21), -1);
    uint8_t m[25];
    spec_tree_mask(&t, m);
    const uint8_t want[25] = { 1, 0, 0, 0, 0,  1, 1, 0, 0, 0,  1, 0, 1, 0, 0,
                               1, 1, 0, 1, 0,  1, 1, 0, 0, 1 };
    CHECK(memcmp(m, want, 25) == 0);
    spec_tree_release(&t);

    /* the draft size: a flat cost pays for every level a likely draft
     * brings; a cost linear in the tokens never pays */
    struct spec_cost flat = { 3, { 1, 2, 4 }, { 10, 10, 10 }, 0, 0 };
    CHECK_NEAR(spec_cost_at(&flat, 3), 10, 1e-9);
    CHECK_NEAR(spec_cost_at(&flat, 8), 10, 1e-9);
    CHECK_EQ(spec_choose(&flat, 0.9, 1, 1, 0, 16, 0), 16);
    struct spec_cost lin = { 3, { 1, 2, 4 }, { 10, 20, 40 }, 0, 0 };
    CHECK_NEAR(spec_cost_at(&lin, 3), 30, 1e-9);
    CHECK_NEAR(spec_cost_at(&lin, 8), 80, 1e-9);
    CHECK_EQ(spec_choose(&lin, 0.9, 1, 1, 0, 16, 0), 0);
    /* a cheap verify but an expensive draft level: fewer levels */
    struct spec_cost gentle = { 3, { 1, 2, 4 }, { 10, 11, 13 }, 0, 0 };
    int k_free = spec_choose(&gentle, 0.7, 1, 1, 0, 16, 0), k_dear = spec_choose(&gentle, 0.7, 1, 1, 4, 16, 0);
    CHECK(k_free > k_dear);
    CHECK(k_dear >= 1);
    /* a batch: the pass already holds a token per sequence.  The curve
     * measured on a 2-core CPU (SmolLM2 Q4_1: 1.00 1.36 2.28 5.02 8.72
     * decode steps for 1 2 4 8 16 tokens) pays for drafts of one sequence
     * at a = 0.9, never for four; a flat one (a GPU) pays for both */
    struct spec_cost cpu = { 5, { 1, 2, 4, 8, 16 }, { 1.00, 1.36, 2.28, 5.02, 8.72 }, 0, 0 };
    CHECK(spec_choose(&cpu, 0.9, 1, 1, 0, 4, 0) >= 1);
    CHECK_EQ(spec_choose(&cpu, 0.9, 4, 1, 0, 4, 0), 0);
    CHECK_EQ(spec_choose(&cpu, 0.5, 1, 1, 0, 4, 0), 1);
    CHECK_EQ(spec_choose(&flat, 0.9, 4, 1, 0, 4, 0), 4);
    CHECK_EQ(spec_choose(&flat, 0.9, 16, 1, 0, 4, 0), 4);
    CHECK_EQ(spec_choose(&lin, 0.9, 4, 1, 0, 4, 0), 0);
    /* probes: one level where none pays, on the 16th call in a row, then
     * (a drafter whose levels cost time) after 32, 64 ... up to 256 calls,
     * unless none would pay even were the probe kept; a call where
     * drafting pays restarts the wait only.  On the cpu curve with levels
     * of 0.05 decode, 1 kept of 2 (a = 1/2) pays, 0 of 1 (1/3) does not */
    const double tl = 0.05;
    CHECK(fabs(spec_acceptance(0, 0) - 0.5) < 1e-12 && fabs(spec_acceptance(8, 0) - 0.9) < 1e-12);
    CHECK_EQ(spec_choose(&cpu, spec_acceptance(1, 1), 1, 1, tl, 4, 0), 1);
    CHECK_EQ(spec_choose(&cpu, spec_acceptance(0, 1), 1, 1, tl, 4, 0), 0);
    struct spec_probe p_lin = { 0, 0 }, p_dear = { 0, 0 }, p = { 0, 0 }, p_no = { 0, 0 };
    struct spec_probe p_look = { 0, 0 }, p_new = { 0, 0 };
    int probes = 0, look = 0, fresh = 0;
    int64_t at[16], n_at = 0;
    for (int64_t tick = 0; tick < 1200; tick++) {
        CHECK_EQ(spec_auto_levels(&lin, 8, 0, 1, 1, 0, 4, 0, &p_lin), 0);
        CHECK_EQ(spec_auto_levels(&cpu, 8, 0, 4, 1, 8.0, 4, 0, &p_dear), 0);
        /* 0 of 3 (1/5): kept, the probe would give 1/3, no better */
        CHECK_EQ(spec_auto_levels(&cpu, 0, 3, 1, 1, tl, 4, 0, &p_no), 0);
        /* lookup (no cost per level): every 16th call, never stopping */
        look += spec_auto_levels(&cpu, 0, 3, 1, 1, 0, 4, 0, &p_look);
        /* nothing rejected yet: probes as if every draft were kept (a
         * kept probe, 2/3, would not pay with levels of half a decode) */
        if (tick < 48)
            fresh += spec_auto_levels(&cpu, 0, 0, 1, 1, 0.5, 4, 0, &p_new);
        int k = spec_auto_levels(&cpu, 0, 1, 1, 1, tl, 4, 0, &p);
        CHECK(k == 0 || k == 1);
        if (k && n_at < 16)
            at[n_at++] = tick;
        probes += k;
    }
    /* the 16th, 48th, 112th, 240th, 496th call, then every 256th */
    static const int64_t want_at[] = { 15, 47, 111, 239, 495, 751, 1007 };
    CHECK_EQ(probes, 7);
    CHECK_EQ(look, 75);
    CHECK_EQ(fresh, 2);
    CHECK_EQ(spec_choose(&cpu, spec_acceptance(1, 0), 1, 1, 0.5, 4, 0), 0);
    CHECK_EQ(n_at, 7);
    for (int64_t j = 0; j < n_at && j < 7; j++)
        CHECK_EQ(at[j], want_at[j]);
    /* drafting pays: the size chosen; the next probe a whole period (256)
     * after it, not 16 */
    CHECK_EQ(spec_auto_levels(&flat, 8, 0, 4, 1, 0, 4, 0, &p), 4);
    CHECK_EQ(p.period, SPEC_PROBE_MAX);
    probes = 0;
    for (int tick = 0; tick < 255; tick++)
        probes += spec_auto_levels(&cpu, 0, 1, 1, 1, tl, 4, 0, &p);
    CHECK_EQ(probes, 0);
    CHECK_EQ(spec_auto_levels(&cpu, 0, 1, 1, 1, tl, 4, 0, &p), 1);
    struct spec_cost none = { 0, { 0 }, { 0 }, 0, 0 };
    CHECK_EQ(spec_choose(&none, 0.5, 1, 1, 0, 5, 0), 5);

    /* the context: SmolLM2 Q4_1's curve at position 0 on 2 cores (ms) and
     * its attention, 0.002 ms per token and slot: one sequence at a = 0.5
     * drafts at 64 slots, not at 2048, where 2 tokens cost 1.6 decodes */
    struct spec_cost sm = { 5, { 1, 2, 4, 8, 16 }, { 3.53, 4.10, 6.28, 10.47, 20.05 }, 0, 0 };
    CHECK(spec_choose(&sm, 0.5, 1, 1, 0, 8, 0) >= 1);
    sm.slot_ms = 0.002;
    CHECK_NEAR(spec_cost_pass(&sm, 4, 4.0 * 2048), 6.28 + 4 * 2048 * 0.002, 1e-9);
    CHECK(spec_choose(&sm, 0.5, 1, 1, 0, 8, 64) >= 1);
    CHECK_EQ(spec_choose(&sm, 0.5, 1, 1, 0, 8, 2048), 0);
    CHECK(spec_choose(&sm, 0.9, 1, 1, 0, 8, 2048) < spec_choose(&sm, 0.9, 1, 1, 0, 8, 64));
    /* fitting slot_ms: passes over fewer than SPEC_OBS_SLOTS token-slots
     * and an unmeasured curve fit nothing; the first pass sets it, later
     * ones move it by a fifth, a slow one at most 4 times the fit so far,
     * a pass faster than the curve counts as 0 */
    struct spec_cost fit = { 5, { 1, 2, 4, 8, 16 }, { 3.53, 4.10, 6.28, 10.47, 20.05 }, 0, 0 };
    spec_cost_observe(&fit, 8, SPEC_OBS_SLOTS - 1, 100);
    spec_cost_observe(&none, 8, 8.0 * 2048, 100);
    CHECK(fit.n_obs == 0 && fit.slot_ms == 0 && none.n_obs == 0 && none.slot_ms == 0);
    spec_cost_observe(&fit, 8, 8.0 * 1024, 10.47 + 8 * 1024 * 0.002);
    CHECK_EQ(fit.n_obs, 1);
    CHECK_NEAR(fit.slot_ms, 0.002, 1e-12);
    for (int i = 0; i < 40; i++)
        spec_cost_observe(&fit, 1 + i % 16, (1 + i % 16) * 3000.0,
                          spec_cost_at(&fit, 1 + i % 16) + (1 + i % 16) * 3000.0 * 0.003);
    CHECK_NEAR(fit.slot_ms, 0.003, 1e-5);
    spec_cost_observe(&fit, 4, 4.0 * 4096, 1e6);
    CHECK_NEAR(fit.slot_ms, 0.8 * 0.003 + 0.2 * 4 * 0.003, 1e-5);
    spec_cost_observe(&fit, 4, 4.0 * 4096, 1.0);
    CHECK_NEAR(fit.slot_ms, 0.8 * (0.8 * 0.003 + 0.2 * 4 * 0.003), 1e-5);
    /* a first pass faster than the curve fits 0, and the passes after it
     * still move the fit (no cap at 4 x 0); a 16-token pass over 64 slots
     * each (1024 in all) fits nothing: under SPEC_OBS_CTX a token */
    struct spec_cost z = { 5, { 1, 2, 4, 8, 16 }, { 3.53, 4.10, 6.28, 10.47, 20.05 }, 0, 0 };
    spec_cost_observe(&z, 1, 2048, 3.0);
    CHECK(z.n_obs == 1 && z.slot_ms == 0);
    for (int i = 0; i < 60; i++)
        spec_cost_observe(&z, 1, 2048, 3.53 + 2048 * 0.002);
    CHECK_NEAR(z.slot_ms, 0.002, 1e-6);
    spec_cost_observe(&z, 16, 16.0 * 64, 1000.0);
    CHECK_EQ(z.n_obs, 61);
    T_DONE();
}
