/*
 * test_eagle.c - the EAGLE-1 head (common/train/eagle.h) on the tiny llama
 * fixture: features from the fixture's forward pass, the whole head's
 * gradient against central finite differences of its loss, tensor by
 * tensor, and the OpenBLAS table's gradient against the reference's; the
 * head file round trip; and the drafter (eagle_draft.h) against the
 * training forward: the root's children of a draft are the top tokens of
 * the LM head on eagle_forward's last output, and a tree obeys its
 * budget, depth and parent order.
 *
 * The head computes in f32, so the finite differences are taken along one
 * direction per tensor (the normalised sum of the gradient's direction and
 * a random one), where the change of the loss is large against f32
 * rounding; each op's own check in f64 is tests/kernels/test_backward.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backward.h"
#include "eagle.h"
#include "eagle_draft.h"
#include "eagle_test.h"
#include "eagle_io.h"
#include "eagle_target.h"
#include "model.h"
#include "qtypes.h"
#include "rng.h"
#include "t.h"

#define FIXTURE "tests/fixtures/tiny-llama-f32.gguf"
#define N 12                    /* head positions: a sequence of N + 1 tokens */
#define FD_EPS 1e-2
#define FD_TOL 1e-2

struct fd_ctx {
    const struct backend_backward_ops *bw;
    struct eagle_head *h;
    struct eagle_target *t;
    struct eagle_ws *ws;
    const int32_t *tok;
    const float *feat;
    const uint8_t *mask;
};

static double
fd_loss(void *ctx)
{
    struct fd_ctx *c = ctx;
    struct eagle_loss l;
    eagle_forward(c->bw, c->h, &c->t->fz, c->ws, c->tok + 1, c->feat, N, NULL);
    eagle_loss_backward(c->bw, c->h, &c->t->fz, c->ws, c->feat + c->t->c.d, c->mask, 0.1f, 1.0f,
                        NULL, &l);
    return l.total;
}

int
main(void)
{
    struct model *m = NULL;
    struct diag d = { "" };
    struct eagle_target t;
    struct eagle_head h;
    struct eagle_ws *ws = NULL;
    struct rng r;
    int32_t tok[N + 1];

    if (access(FIXTURE, R_OK) != 0) {
        fprintf(stderr, "test_eagle: %s missing: run `make fixtures`\n", FIXTURE);
        return 77;
    }
    CHECK(model_open(&m, FIXTURE, NULL, &d) == 0);
    if (!m)
        T_DONE();
    CHECK(eagle_target_init(&t, m, 64, &d) == 0);
    CHECK(t.c.d == m->hp.n_embd && t.c.n_vocab == m->hp.n_vocab);
    CHECK(eagle_head_init(&h, &t.c, 7) == 0);
    CHECK(eagle_ws_new(&ws, &t.c, N) == 0);
    int64_t dd = t.c.d, np = h.n_param;
    float *feat = malloc((size_t)((N + 1) * dd) * sizeof(float));
    float *g = calloc((size_t)np, sizeof(float)), *g2 = calloc((size_t)np, sizeof(float));
    float *u = malloc((size_t)np * sizeof(float));
    rng_seed(&r, 3);
    for (int i = 0; i <= N; i++)
        tok[i] = (int32_t)(rng_next(&r) % (uint64_t)t.c.n_vocab);
    CHECK(eagle_target_features(&t, tok, N + 1, feat, &d) == 0);
    /* the features are the forward pass's final hidden states: finite, and
     * the LM head on them gives model_forward's logits' argmax */
    double fsum = 0;
    for (int64_t i = 0; i < (N + 1) * dd; i++)
        fsum += fabs(feat[i]);
    CHECK(isfinite(fsum) && fsum > 0);

    const struct backend_backward_ops *ref = &backward_ops_ref;
    struct eagle_loss l;
    eagle_forward(ref, &h, &t.fz, ws, tok + 1, feat, N, NULL);
    eagle_loss_backward(ref, &h, &t.fz, ws, feat + dd, NULL, 0.1f, 1.0f, g, &l);
    CHECK(l.n == N && l.total > 0 && isfinite(l.total));
    CHECK_NEAR(l.total, l.reg + 0.1f * l.cls, 1e-6);

    /* per tensor: the directional derivative */
    struct fd_ctx fc = { ref, &h, &t, ws, tok, feat, NULL };
    for (int i = 0; i < EAGLE_N_TENSORS; i++) {
        double gn, rel = eagle_fd_tensor(&h, i, g, u, &r, FD_EPS, fd_loss, &fc, &gn);
        CHECK(gn > 0);
        CHECK(rel <= FD_TOL);
    }

    /* the optimized table gives the reference's gradient */
    eagle_forward(&backward_ops_blas, &h, &t.fz, ws, tok + 1, feat, N, NULL);
    struct eagle_loss l2;
    eagle_loss_backward(&backward_ops_blas, &h, &t.fz, ws, feat + dd, NULL, 0.1f, 1.0f, g2, &l2);
    CHECK_NEAR(l2.total, l.total, 1e-5 * l.total);
    double gm, dm = eagle_grad_diff(g, 1.0f, g2, np, &gm);
    printf("blas vs ref: max |dg| %.3g of max |g| %.3g\n", dm, gm);
    CHECK(dm <= 1e-4 * gm);

    /* scale multiplies the gradient; a second call accumulates */
    memset(g2, 0, (size_t)np * sizeof(float));
    eagle_forward(ref, &h, &t.fz, ws, tok + 1, feat, N, NULL);
    eagle_loss_backward(ref, &h, &t.fz, ws, feat + dd, NULL, 0.1f, 0.5f, g2, NULL);
    eagle_loss_backward(ref, &h, &t.fz, ws, feat + dd, NULL, 0.1f, 0.5f, g2, NULL);
    dm = eagle_grad_diff(g, 1.0f, g2, np, NULL);
    CHECK(dm <= 1e-6 * gm);

    /* the loss mask: all counted is no mask; none counted is no loss, no
     * count and no gradient; the rows of a mask and of its complement, each
     * a mean over its rows and weighted by its share, make up the whole
     * loss and gradient; the gradient under a mask passes the
     * finite-difference check */
    uint8_t mask[N], comp[N];
    memset(mask, 1, sizeof mask);
    memset(g2, 0, (size_t)np * sizeof(float));
    eagle_loss_backward(ref, &h, &t.fz, ws, feat + dd, mask, 0.1f, 1.0f, g2, &l2);
    CHECK(l2.total == l.total && l2.n == N && eagle_grad_diff(g, 1.0f, g2, np, NULL) == 0);
    memset(mask, 0, sizeof mask);
    memset(g2, 0, (size_t)np * sizeof(float));
    eagle_loss_backward(ref, &h, &t.fz, ws, feat + dd, mask, 0.1f, 1.0f, g2, &l2);
    eagle_grad_diff(g2, 1.0f, g2, np, &dm);
    CHECK(l2.total == 0 && l2.n == 0 && l2.correct == 0 && dm == 0);
    int na = 0;
    for (int i = 0; i < N; i++) {
        mask[i] = i < 3 || i % 4 == 1;
        comp[i] = !mask[i];
        na += mask[i];
    }
    struct eagle_loss la, lb;
    memset(g2, 0, (size_t)np * sizeof(float));
    eagle_loss_backward(ref, &h, &t.fz, ws, feat + dd, mask, 0.1f, (float)na / N, g2, &la);
    eagle_loss_backward(ref, &h, &t.fz, ws, feat + dd, comp, 0.1f, (float)(N - na) / N, g2, &lb);
    printf("mask of %d rows: loss %.6g + complement %.6g\n", na, la.total, lb.total);
    CHECK(la.n == na && lb.n == N - na && la.correct + lb.correct == l.correct);
    CHECK_NEAR(la.total * na + lb.total * (N - na), l.total * N, 1e-5 * l.total * N);
    CHECK(la.total != l.total);
    dm = eagle_grad_diff(g, 1.0f, g2, np, NULL);
    CHECK(dm <= 1e-5 * gm);
    fc.mask = mask;
    memset(g2, 0, (size_t)np * sizeof(float));
    eagle_loss_backward(ref, &h, &t.fz, ws, feat + dd, mask, 0.1f, 1.0f, g2, NULL);
    for (int i = 0; i < EAGLE_N_TENSORS; i += 2) {
        double gn, rel = eagle_fd_tensor(&h, i, g2, u, &r, FD_EPS, fd_loss, &fc, &gn);
        CHECK(gn > 0);
        CHECK(rel <= FD_TOL);
    }
    fc.mask = NULL;

    /* Rows that do not count add nothing, so a CE chunk (32 rows) none of
     * whose rows counts is skipped: with NaN targets in such a chunk the
     * loss and the gradient are those of finite targets, bit for bit (an
     * uncounted row still weighted 0 x NaN would spread NaN). */
    {
        enum { N2 = 40, SKIP = 34 };
        struct eagle_ws *w2 = NULL;
        int32_t tk[N2 + 1];
        uint8_t mk[N2];
        float *f2 = malloc((size_t)((N2 + 1) * dd) * sizeof(float));
        float *tg = malloc((size_t)(N2 * dd) * sizeof(float));
        float *g3 = calloc((size_t)np, sizeof(float));
        struct eagle_loss l3, l4;
        CHECK(eagle_ws_new(&w2, &t.c, N2) == 0);
        for (int i = 0; i <= N2; i++)
            tk[i] = (int32_t)(rng_next(&r) % (uint64_t)t.c.n_vocab);
        CHECK(eagle_target_features(&t, tk, N2 + 1, f2, &d) == 0);
        for (int i = 0; i < N2; i++)
            mk[i] = i >= SKIP;
        memcpy(tg, f2 + dd, (size_t)(N2 * dd) * sizeof(float));
        memset(g2, 0, (size_t)np * sizeof(float));
        eagle_forward(ref, &h, &t.fz, w2, tk + 1, f2, N2, NULL);
        eagle_loss_backward(ref, &h, &t.fz, w2, tg, mk, 0.1f, 1.0f, g2, &l3);
        for (int64_t i = 0; i < 32 * dd; i++)
            tg[i] = NAN;
        eagle_loss_backward(ref, &h, &t.fz, w2, tg, mk, 0.1f, 1.0f, g3, &l4);
        CHECK(l3.n == N2 - SKIP && l4.n == l3.n && l4.correct == l3.correct);
        CHECK(isfinite(l3.total) && l3.total > 0);
        CHECK(memcmp(&l3.total, &l4.total, sizeof l3.total) == 0);
        CHECK(memcmp(g2, g3, (size_t)np * sizeof(float)) == 0);
        eagle_ws_free(w2);
        free(f2), free(tg), free(g3);
    }

    /* the head file round trip */
    char path[] = "/tmp/test_eagle.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    struct eagle_meta mt = { .steps = 3 };
    CHECK(eagle_base_sha256(m, mt.base_sha256) == 0);
    snprintf(mt.base_name, sizeof mt.base_name, "fixture");
    CHECK(eagle_head_write(&h, &mt, NULL, NULL, path, true, &d) == 0);
    struct eagle_head h2;
    struct eagle_meta mt2;
    CHECK(eagle_head_read(&h2, &mt2, NULL, NULL, path, &d) == 0);
    CHECK(h2.n_param == h.n_param && mt2.steps == 3);
    CHECK(h2.param && memcmp(h2.param, h.param, (size_t)np * sizeof(float)) == 0);
    CHECK(eagle_head_check_base(&h2, &mt2, m, &d) == 0);
    eagle_head_release(&h2);

    /* the drafter: its root children are the top tokens of the training
     * forward's last output */
    struct eagle_draft *ed = NULL;
    enum { K = 3 };
    CHECK(eagle_draft_open(&ed, path, m, 64, K, GGML_TYPE_F32, &d) == 0);
    if (ed) {
        CHECK(7 * 40 < t.c.n_vocab);
        for (int i = 0; i < N; i++)
            eagle_draft_feed(ed, i, feat + i * dd);
        /* hist = tok[0 .. N]: root tok[N], positions 0 .. N-1 are the head's */
        eagle_forward(&backward_ops_blas, &h, &t.fz, ws, tok + 1, feat, N, NULL);
        int64_t V = t.c.n_vocab;
        float *z = malloc((size_t)V * sizeof(float));
        backward_ops_blas.matmul_fwd(z, eagle_ws_out(ws) + (N - 1) * dd, t.fz.lm, NULL, 1, V, dd);
        int32_t best[K];
        eagle_top_ids(z, V, K, best);
        struct spec_tree tr;
        CHECK(spec_tree_init(&tr, 64, &d) == 0);
        spec_tree_reset(&tr, tok[N]);
        CHECK(eagle_draft_tree(ed, tok, N + 1, 1, 10, 0.0f, &tr, &d) == 0);
        CHECK_EQ(tr.n, 1 + K);
        const float *ro = eagle_draft_root_out(ed), *fo = eagle_ws_out(ws) + (N - 1) * dd;
        double dm2 = 0, fm = 0;
        for (int64_t j = 0; j < dd; j++) {
            dm2 = fmax(dm2, fabs((double)ro[j] - fo[j]));
            fm = fmax(fm, fabs((double)fo[j]));
        }
        printf("drafter vs training forward: max |d out| %.3g of %.3g\n", dm2, fm);
        CHECK(dm2 <= 1e-5 * fm);
        for (int j = 0; j < K && j + 1 < tr.n; j++) {
            CHECK_EQ(tr.tok[j + 1], best[j]);
            CHECK_EQ(tr.parent[j + 1], 0);
        }
        /* deeper: budget and depth respected, parents before children */
        spec_tree_reset(&tr, tok[N]);
        CHECK(eagle_draft_tree(ed, tok, N + 1, 4, 20, 0.0f, &tr, &d) == 0);
        CHECK(tr.n > 1 + K && tr.n <= 21);
        int maxd = 0;
        for (int64_t j = 1; j < tr.n; j++) {
            CHECK(tr.parent[j] < j);
            CHECK_EQ(tr.depth[j], tr.depth[tr.parent[j]] + 1);
            maxd = tr.depth[j] > maxd ? tr.depth[j] : maxd;
        }
        CHECK(maxd >= 2 && maxd <= 4);
        /* a missing feature: no draft */
        spec_tree_reset(&tr, tok[N]);
        CHECK(eagle_draft_tree(ed, tok, N + 3, 4, 20, 0.0f, &tr, &d) == 0);
        CHECK_EQ(tr.n, 1);
        /* streams (--batch): a chain of width 1 is the greedy path; a
         * stream fed the same features drafts the same chain whatever
         * another stream did in between; the confidence floor prunes */
        struct eagle_stream *s1 = NULL, *s2 = NULL;
        CHECK(eagle_stream_new(ed, &s1, &d) == 0 && eagle_stream_new(ed, &s2, &d) == 0);
        if (s1 && s2) {
            struct spec_tree c1, c2;
            CHECK(spec_tree_init(&c1, 8, &d) == 0 && spec_tree_init(&c2, 8, &d) == 0);
            eagle_stream_feed_rows(ed, s1, 0, feat, NULL, N);
            eagle_stream_feed_rows(ed, s2, 0, feat + dd, NULL, N - 1);  /* other features */
            spec_tree_reset(&c1, tok[N]);
            CHECK(eagle_stream_tree(ed, s1, tok, N + 1, 4, 1, 4, 0.0f, &c1, &d) == 0);
            CHECK_EQ(c1.n, 5);
            CHECK_EQ(c1.tok[1], best[0]);
            for (int64_t j = 1; j < c1.n; j++)
                CHECK_EQ(c1.parent[j], j - 1);
            spec_tree_reset(&c2, tok[N - 1]);
            CHECK(eagle_stream_tree(ed, s2, tok, N, 4, 1, 4, 0.0f, &c2, &d) == 0);
            spec_tree_reset(&c2, tok[N]);
            CHECK(eagle_stream_tree(ed, s1, tok, N + 1, 4, 1, 4, 0.0f, &c2, &d) == 0);
            CHECK(c2.n == c1.n && memcmp(c2.tok, c1.tok, (size_t)c1.n * sizeof(int32_t)) == 0);
            spec_tree_reset(&c2, tok[N]);
            CHECK(eagle_stream_tree(ed, s1, tok, N + 1, 4, 1, 4, 1.0f, &c2, &d) == 0);
            CHECK_EQ(c2.n, 1);
            /* the streams' chains drafted together (--batch) are each one's
             * chain drafted alone: fresh streams, so that every one catches
             * up from position 0 in the shared passes; one stream has a
             * missing feature and gets nothing */
            struct eagle_stream *b[4] = { NULL };
            int32_t out[4][4], want[4][4];
            int64_t n_want[4];
            for (int i = 0; i < 4; i++)
                CHECK(eagle_stream_new(ed, &b[i], &d) == 0);
            const int64_t nh[4] = { N + 1, N, N, N + 3 }, mx[4] = { 4, 3, 2, 4 };
            const int64_t nf[4] = { N, N - 1, N - 1, N };
            const float *fs[4] = { feat, feat + dd, feat + 2 * dd, feat };
            for (int i = 0; i < 4; i++) {     /* alone */
                struct eagle_stream *one = NULL;
                CHECK(eagle_stream_new(ed, &one, &d) == 0);
                eagle_stream_feed_rows(ed, one, 0, fs[i], NULL, nf[i]);
                spec_tree_reset(&c2, tok[nh[i] - 1 < N ? nh[i] - 1 : N]);
                CHECK(eagle_stream_tree(ed, one, tok, nh[i], (int)mx[i], 1, mx[i], 0.0f, &c2,
                                        &d) == 0);
                n_want[i] = c2.n - 1;
                memcpy(want[i], c2.tok + 1, (size_t)n_want[i] * sizeof(int32_t));
                eagle_stream_free(one);
            }
            struct eagle_chain_req rq[4];
            for (int i = 0; i < 4; i++) {
                eagle_stream_feed_rows(ed, b[i], 0, fs[i], NULL, nf[i]);
                rq[i] = (struct eagle_chain_req){ b[i], tok, nh[i], mx[i], out[i], -1 };
            }
            CHECK(eagle_streams_chains(ed, rq, 4, 0.0f) == 0);
            for (int i = 0; i < 4; i++) {
                printf("stream %d: %lld tokens together, %lld alone\n", i, (long long)rq[i].n_out,
                       (long long)n_want[i]);
                CHECK_EQ(rq[i].n_out, n_want[i]);
                CHECK(memcmp(out[i], want[i], (size_t)n_want[i] * sizeof(int32_t)) == 0);
            }
            CHECK(n_want[0] == 4 && n_want[1] == 3 && n_want[2] == 2 && n_want[3] == 0);
            /* again, with nothing new: the same chains; the floor 1 prunes all */
            CHECK(eagle_streams_chains(ed, rq, 4, 0.0f) == 0);
            for (int i = 0; i < 3; i++)
                CHECK(rq[i].n_out == n_want[i] &&
                      memcmp(out[i], want[i], (size_t)n_want[i] * sizeof(int32_t)) == 0);
            CHECK(eagle_streams_chains(ed, rq, 4, 1.0f) == 0);
            for (int i = 0; i < 4; i++)
                CHECK_EQ(rq[i].n_out, 0);
            for (int i = 0; i < 4; i++)
                eagle_stream_free(b[i]);
            /* a full group (32 chains of 8): every chain as long as alone */
            enum { NS = 32, MX = 8 };
            struct eagle_stream *many[NS] = { NULL };
            struct eagle_chain_req mr[NS];
            int32_t mo[NS][MX];
            struct spec_tree c8;
            CHECK(spec_tree_init(&c8, MX + 1, &d) == 0);
            struct eagle_stream *one = NULL;
            CHECK(eagle_stream_new(ed, &one, &d) == 0);
            eagle_stream_feed_rows(ed, one, 0, feat, NULL, N);
            spec_tree_reset(&c8, tok[N]);
            CHECK(eagle_stream_tree(ed, one, tok, N + 1, MX, 1, MX, 0.0f, &c8, &d) == 0);
            CHECK_EQ(c8.n, MX + 1);
            eagle_stream_free(one);
            for (int i = 0; i < NS; i++) {
                CHECK(eagle_stream_new(ed, &many[i], &d) == 0);
                eagle_stream_feed_rows(ed, many[i], 0, feat, NULL, N);
                mr[i] = (struct eagle_chain_req){ many[i], tok, N + 1, MX, mo[i], -1 };
            }
            CHECK(eagle_streams_chains(ed, mr, NS, 0.0f) == 0);
            int64_t full = 0;
            for (int i = 0; i < NS; i++)
                full += mr[i].n_out == MX && memcmp(mo[i], c8.tok + 1, MX * sizeof(int32_t)) == 0;
            CHECK_EQ(full, NS);
            /* a level's cost: measured at open for K rows, then for 1 .. 32
             * (any number of chains); positive and finite, whatever the
             * machine's speed */
            CHECK(eagle_draft_level_ms(ed, K) > 0 && isfinite(eagle_draft_level_ms(ed, K)));
            eagle_draft_measure(ed, 40);
            for (int64_t n = 1; n <= 64; n++)
                CHECK(eagle_draft_level_ms(ed, n) > 0 && isfinite(eagle_draft_level_ms(ed, n)));
            /* the catch-up (level 1: every position since the stream's
             * last draft) is not a level's cost: drafts of one level, a
             * tree's and a batch's chains, each after catching up on all
             * N positions, leave the cost per level as it was */
            double l1 = eagle_draft_level_ms(ed, K), l32 = eagle_draft_level_ms(ed, 32);
            struct eagle_stream *fresh = NULL;
            CHECK(eagle_stream_new(ed, &fresh, &d) == 0);
            eagle_stream_feed_rows(ed, fresh, 0, feat, NULL, N);
            spec_tree_reset(&c8, tok[N]);
            CHECK(eagle_stream_tree(ed, fresh, tok, N + 1, 1, K, K, 0.0f, &c8, &d) == 0);
            CHECK_EQ(c8.n, K + 1);
            eagle_stream_free(fresh);
            for (int i = 0; i < NS; i++) {
                eagle_stream_free(many[i]);
                many[i] = NULL;
                CHECK(eagle_stream_new(ed, &many[i], &d) == 0);
                eagle_stream_feed_rows(ed, many[i], 0, feat, NULL, N);
                mr[i] = (struct eagle_chain_req){ many[i], tok, N + 1, 1, mo[i], -1 };
            }
            CHECK(eagle_streams_chains(ed, mr, NS, 0.0f) == 0);
            CHECK_EQ(mr[0].n_out, 1);
            CHECK(eagle_draft_level_ms(ed, K) == l1 && eagle_draft_level_ms(ed, 32) == l32);
            /* a deeper draft does move it (its levels after the first) */
            spec_tree_reset(&c8, tok[N]);
            CHECK(eagle_stream_tree(ed, many[0], tok, N + 1, 3, K, 3 * K, 0.0f, &c8, &d) == 0);
            CHECK(eagle_draft_level_ms(ed, K) != l1);
            for (int i = 0; i < NS; i++)
                eagle_stream_free(many[i]);
            spec_tree_release(&c8);
            spec_tree_release(&c1);
            spec_tree_release(&c2);
        }
        eagle_stream_free(s1);
        eagle_stream_free(s2);
        /* the head in Q8_0 (what generate runs): close to the f32 one */
        eagle_draft_free(ed);
        ed = NULL;
        CHECK(eagle_draft_open(&ed, path, m, 64, K, GGML_TYPE_Q8_0, &d) == 0);
        if (ed) {
            for (int i = 0; i < N; i++)
                eagle_draft_feed(ed, i, feat + i * dd);
            spec_tree_reset(&tr, tok[N]);
            CHECK(eagle_draft_tree(ed, tok, N + 1, 1, 10, 0.0f, &tr, &d) == 0);
            const float *qo = eagle_draft_root_out(ed);
            double dq = 0;
            for (int64_t j = 0; j < dd; j++)
                dq = fmax(dq, fabs((double)qo[j] - fo[j]));
            printf("drafter in Q8_0 vs training forward: max |d out| %.3g of %.3g\n", dq, fm);
            CHECK(dq > 0 && dq <= 2e-2 * fm);
        }
        /* a head with a draft vocabulary drafts its tokens only: the root's
         * children are the best of them */
        eagle_draft_free(ed);
        ed = NULL;
        int32_t sub[40];
        for (int j = 0; j < 40; j++)
            sub[j] = (int32_t)(j * 7 % V);
        for (int j = 1; j < 40; j++)            /* ascending (7 * j < V) */
            CHECK(sub[j] > sub[j - 1]);
        mt.draft_ids = sub;
        mt.n_draft = 40;
        CHECK(eagle_head_write(&h, &mt, NULL, NULL, path, true, &d) == 0);
        mt.draft_ids = NULL;
        CHECK(eagle_draft_open(&ed, path, m, 64, K, GGML_TYPE_F32, &d) == 0);
        if (ed) {
            for (int i = 0; i < N; i++)
                eagle_draft_feed(ed, i, feat + i * dd);
            spec_tree_reset(&tr, tok[N]);
            CHECK(eagle_draft_tree(ed, tok, N + 1, 3, 20, 0.0f, &tr, &d) == 0);
            CHECK(tr.n > 1 + K);
            for (int64_t j = 1; j < tr.n; j++)
                CHECK(tr.tok[j] % 7 == 0 && tr.tok[j] / 7 < 40);
            int32_t b0 = -1;
            for (int j = 0; j < 40; j++)
                if (b0 < 0 || z[sub[j]] > z[b0])
                    b0 = sub[j];
            CHECK_EQ(tr.tok[1], b0);
            eagle_draft_free(ed);
        }
        /* ids out of order: refused, the error naming the key */
        sub[1] = sub[2];
        mt.draft_ids = sub;
        CHECK(eagle_head_write(&h, &mt, NULL, NULL, path, true, &d) == 0);
        mt.draft_ids = NULL;
        mt.n_draft = 0;
        struct eagle_head hb;
        struct eagle_meta mb;
        CHECK(eagle_head_read(&hb, &mb, NULL, NULL, path, &d) == -ST_FORMAT);
        CHECK(strstr(d.msg, "'eagle.draft_vocab': ids not ascending") != NULL);
        spec_tree_release(&tr);
        free(z);
    }
    unlink(path);

    /* head files (the fuzz corpus): the valid ones read, the others are
     * bad data with a message */
    static const struct { const char *f; int rc; } files[] = {
        { "valid.gguf", 0 }, { "valid-draft-vocab.gguf", 0 },
        { "draft-vocab-unsorted.gguf", -ST_FORMAT }, { "draft-vocab-out-of-range.gguf", -ST_FORMAT },
        { "missing-tensor.gguf", -ST_FORMAT }, { "wrong-shape.gguf", -ST_FORMAT },
        { "bad-heads.gguf", -ST_FORMAT },
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        struct eagle_head hf;
        struct eagle_meta mf;
        int rc = eagle_read_corpus(files[i].f, files[i].rc, &hf, &mf);
        CHECK_EQ(rc, files[i].rc);
        if (rc == 0) {
            CHECK_EQ(mf.n_draft, i == 1 ? 3 : 0);
            eagle_head_release(&hf);
            free(mf.draft_ids);
        }
    }

    /* bad shapes */
    struct eagle_config bad = t.c;
    bad.n_head_kv = 3;
    struct eagle_head hb;
    CHECK(eagle_head_init(&hb, &bad, 1) == -ST_RANGE);

    free(feat), free(g), free(g2), free(u);
    eagle_ws_free(ws);
    eagle_head_release(&h);
    eagle_target_release(&t);
    model_free(m);
    T_DONE();
}
