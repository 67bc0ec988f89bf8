/*
 * test_eagle3.c - the EAGLE-3 head (common/train/eagle3.h) on the tiny llama
 * fixture: the features the target hooks capture, the whole unrolled head's
 * gradient (training-time test over 3 steps, a reduced draft vocabulary)
 * against central finite differences of its loss, tensor by tensor, the
 * OpenBLAS table's gradient against the reference's, and the head file
 * round trip (eagle_io.h, architecture "eagle3"), and the features the
 * self-distillation's own passes give (distill.h's sink) against a
 * feature run's.
 *
 * As in test_eagle.c the head computes in f32, so each tensor's check is
 * along one direction (eagle_fd.h); attn_ttt's own f64 check is
 * tests/kernels/test_backward.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backward.h"
#include "distill.h"
#include "eagle.h"
#include "eagle3.h"
#include "eagle_draft.h"
#include "eagle_test.h"
#include "eagle_io.h"
#include "eagle_target.h"
#include "model.h"
#include "qtypes.h"
#include "rng.h"
#include "scheduler.h"
#include "t.h"

#define FIXTURE "tests/fixtures/tiny-llama-f32.gguf"
#define N 10                    /* head rows: a sequence of N + 1 tokens */
#define STEPS 3
#define NDRAFT 40               /* draft vocabulary: every 5th token id */
#define FD_EPS 1e-2
#define FD_TOL 1e-2

struct fd_ctx {
    const struct backend_backward_ops *bw;
    struct eagle_head *h;
    struct eagle_frozen *fz;
    struct eagle3_ws *ws;
    const int32_t *tok;
    const float *f3, *feat;
    int64_t d;
    const uint8_t *keep, *mask;
};

/* the self-distillation's features (distill.h's sink): prompt p's
 * position i at rows[p * SINK_MAX + i] ([3d] layer inputs, [d] final) */
#define SINK_MAX 32
struct sink_ctx {
    int64_t d;
    float *x3;                  /* the hooks' rows */
    float *rows;
    int64_t n_fed[4], n_calls[4];
    bool bad;                   /* a position out of range */
};

static int
sink_rows(void *ctx, int64_t tag, int64_t pos0, const float *hidden, int64_t row0, int64_t n)
{
    struct sink_ctx *c = ctx;
    int64_t d = c->d;
    if (tag < 0 || tag >= 4 || pos0 < 0 || pos0 + n > SINK_MAX || pos0 > c->n_fed[tag]) {
        c->bad = true;
        return 0;
    }
    for (int64_t i = 0; i < n; i++) {
        float *row = c->rows + (tag * SINK_MAX + pos0 + i) * 4 * d;
        memcpy(row, c->x3 + (row0 + i) * 3 * d, (size_t)(3 * d) * sizeof(float));
        memcpy(row + 3 * d, hidden + (row0 + i) * d, (size_t)d * sizeof(float));
    }
    if (pos0 + n > c->n_fed[tag])
        c->n_fed[tag] = pos0 + n;
    c->n_calls[tag]++;
    return 0;
}

static int
sink_result(void *ctx, const struct sched_result *r)
{
    (void)ctx, (void)r;
    return 0;
}

static double
fd_loss(void *ctx)
{
    struct fd_ctx *c = ctx;
    struct eagle_loss l;
    eagle3_forward(c->bw, c->h, c->fz, c->ws, c->tok + 1, c->f3, N);
    eagle3_loss_backward(c->bw, c->h, c->fz, c->ws, c->feat + c->d, c->keep, c->mask, 1.0f, NULL,
                         &l);
    return l.total;
}

int
main(void)
{
    struct model *m = NULL;
    struct diag d = { "" };
    struct eagle_target t;
    struct eagle_head h;
    struct eagle3_ws *ws = NULL, *ws1 = NULL;
    struct rng r;
    int32_t tok[N + 1], ids[NDRAFT];

    if (access(FIXTURE, R_OK) != 0) {
        fprintf(stderr, "test_eagle3: %s missing: run `make fixtures`\n", FIXTURE);
        return 77;
    }
    CHECK(model_open(&m, FIXTURE, NULL, &d) == 0);
    if (!m)
        T_DONE();
    CHECK(eagle_target_init(&t, m, 64, &d) == 0);
    int64_t dd = t.c.d, L = m->hp.n_layer;
    /* 2 layers: the inputs of layers 1, 1 and 0 (clamped 2, L/2, L - 3) */
    CHECK(L == 2);
    CHECK(t.c.feat_layer[0] == 1 && t.c.feat_layer[1] == 1 && t.c.feat_layer[2] == 0);
    struct eagle_config c = t.c;
    c.arch = EAGLE_ARCH_3;
    c.n_draft = NDRAFT;
    CHECK(eagle_head_init(&h, &c, 11) == 0);
    CHECK(h.n_tensors == EAGLE3_N_TENSORS);
    CHECK(h.rows[EAGLE3_LM] == NDRAFT && h.cols[EAGLE3_FC] == 3 * dd);
    CHECK(eagle3_ws_new(&ws, &h.c, N, STEPS) == 0);
    CHECK(eagle3_ws_new(&ws1, &h.c, N, 1) == 0);
    struct eagle3_ws *bad = NULL;
    CHECK(eagle3_ws_new(&bad, &t.c, N, 1) == -ST_RANGE && !bad);   /* an EAGLE-1 config */
    CHECK(eagle3_ws_new(&bad, &h.c, N, EAGLE3_MAX_STEPS + 1) == -ST_RANGE && !bad);

    /* the frozen parts: the embedding, the draft vocabulary's LM rows */
    float *lm = malloc((size_t)(NDRAFT * dd) * sizeof(float));
    for (int i = 0; i < NDRAFT; i++) {
        ids[i] = 5 * i;
        memcpy(lm + i * dd, t.fz.lm + (int64_t)ids[i] * dd, (size_t)dd * sizeof(float));
    }
    struct eagle_frozen fz = { t.fz.embd, lm, NDRAFT };

    float *f3 = malloc((size_t)((N + 1) * 3 * dd) * sizeof(float));
    float *feat = malloc((size_t)((N + 1) * dd) * sizeof(float));
    float *feat1 = malloc((size_t)((N + 1) * dd) * sizeof(float));
    rng_seed(&r, 5);
    for (int i = 0; i <= N; i++)
        tok[i] = (int32_t)(rng_next(&r) % (uint64_t)t.c.n_vocab);
    CHECK(eagle_target_features3(&t, tok, N + 1, f3, feat, &d) == 0);
    CHECK(eagle_target_features(&t, tok, N + 1, feat1, &d) == 0);
    CHECK(memcmp(feat, feat1, (size_t)((N + 1) * dd) * sizeof(float)) == 0);
    /* block 2 is the embedding (layer 0's input), blocks 0 and 1 the same
     * layer's input, which differs from it */
    double e2 = 0, e01 = 0, e02 = 0;
    for (int i = 0; i <= N; i++)
        for (int64_t j = 0; j < dd; j++) {
            const float *row = f3 + i * 3 * dd;
            e2 = fmax(e2, fabs(row[2 * dd + j] - t.fz.embd[(int64_t)tok[i] * dd + j]));
            e01 = fmax(e01, fabs(row[j] - row[dd + j]));
            e02 = fmax(e02, fabs(row[j] - row[2 * dd + j]));
        }
    CHECK(e2 == 0 && e01 == 0 && e02 > 1e-3);

    const struct backend_backward_ops *ref = &backward_ops_ref;
    int64_t np = h.n_param;
    float *g = calloc((size_t)np, sizeof(float)), *g2 = calloc((size_t)np, sizeof(float));
    float *u = malloc((size_t)np * sizeof(float));
    struct eagle_loss l, l1;
    eagle3_forward(ref, &h, &fz, ws, tok + 1, f3, N);
    eagle3_loss_backward(ref, &h, &fz, ws, feat + dd, NULL, NULL, 1.0f, g, &l);
    CHECK(l.n == N && l.total > 0 && isfinite(l.total) && l.reg == 0);
    /* one step is the first term of the unrolled loss; the later steps
     * add to it and leave step 0's output alone */
    eagle3_forward(ref, &h, &fz, ws1, tok + 1, f3, N);
    eagle3_loss_backward(ref, &h, &fz, ws1, feat + dd, NULL, NULL, 1.0f, NULL, &l1);
    CHECK(l1.total > 0 && l.total > l1.total * 1.2);
    CHECK(memcmp(eagle3_ws_out(ws), eagle3_ws_out(ws1), (size_t)(N * dd) * sizeof(float)) == 0);
    CHECK(l.correct == l1.correct);

    struct fd_ctx fc = { ref, &h, &fz, ws, tok, f3, feat, dd, NULL, NULL };
    for (int i = 0; i < EAGLE3_N_TENSORS; i++) {
        double gn, rel = eagle_fd_tensor(&h, i, g, u, &r, FD_EPS, fd_loss, &fc, &gn);
        CHECK(gn > 0);
        CHECK(rel <= FD_TOL);
    }

    /* the optimized table gives the reference's gradient */
    eagle3_forward(&backward_ops_blas, &h, &fz, ws, tok + 1, f3, N);
    struct eagle_loss l2;
    eagle3_loss_backward(&backward_ops_blas, &h, &fz, ws, feat + dd, NULL, NULL, 1.0f, g2, &l2);
    CHECK_NEAR(l2.total, l.total, 1e-5 * l.total);
    double gm, dm = eagle_grad_diff(g, 1.0f, g2, np, &gm);
    printf("blas vs ref: max |dg| %.3g of max |g| %.3g\n", dm, gm);
    CHECK(dm <= 1e-4 * gm);

    /* the logits formed 3 rows at a time (the last chunk short), and the
     * target's distribution formed for each chunk of each step instead of
     * once, give the loss and gradient of one chunk of all N rows */
    CHECK(eagle3_ws_ce_rows(ws, 1000) == N && eagle3_ws_ce_rows(ws, 0) == 1);
    CHECK(eagle3_ws_ce_rows(ws, 3) == 3);
    for (int once = 1; once >= 0; once--) {
        CHECK(eagle3_ws_target_once(ws, once) == once);
        memset(g2, 0, (size_t)np * sizeof(float));
        eagle3_forward(ref, &h, &fz, ws, tok + 1, f3, N);
        eagle3_loss_backward(ref, &h, &fz, ws, feat + dd, NULL, NULL, 1.0f, g2, &l2);
        CHECK_NEAR(l2.total, l.total, 1e-6 * l.total);
        CHECK(l2.correct == l.correct && l2.n == l.n);
        dm = eagle_grad_diff(g, 1.0f, g2, np, &gm);
        CHECK(dm <= 1e-5 * gm);
    }
    CHECK(eagle3_ws_ce_rows(ws, N) == N && eagle3_ws_target_once(ws, true));

    /* the keep mask (target argmax outside the draft vocabulary): all kept
     * is no mask; none kept is no loss and no gradient; dropping target row
     * 0 removes only step 0's row 0, with three steps as with one (row i of
     * step s reads target row i + s); the gradient under a mask passes the
     * finite-difference check */
    uint8_t keep[N];
    memset(keep, 1, sizeof keep);
    memset(g2, 0, (size_t)np * sizeof(float));
    eagle3_forward(ref, &h, &fz, ws, tok + 1, f3, N);
    eagle3_loss_backward(ref, &h, &fz, ws, feat + dd, keep, NULL, 1.0f, g2, &l2);
    CHECK(l2.total == l.total && eagle_grad_diff(g, 1.0f, g2, np, NULL) == 0);
    memset(keep, 0, sizeof keep);
    memset(g2, 0, (size_t)np * sizeof(float));
    eagle3_loss_backward(ref, &h, &fz, ws, feat + dd, keep, NULL, 1.0f, g2, &l2);
    eagle_grad_diff(g2, 1.0f, g2, np, &dm);
    CHECK(l2.total == 0 && dm == 0);
    memset(keep, 1, sizeof keep);
    keep[0] = 0;
    struct eagle_loss m3, m1;
    eagle3_loss_backward(ref, &h, &fz, ws, feat + dd, keep, NULL, 1.0f, NULL, &m3);
    eagle3_forward(ref, &h, &fz, ws1, tok + 1, f3, N);
    eagle3_loss_backward(ref, &h, &fz, ws1, feat + dd, keep, NULL, 1.0f, NULL, &m1);
    printf("mask row 0: 3 steps %.6g -> %.6g, 1 step %.6g -> %.6g\n", l.total, m3.total, l1.total,
           m1.total);
    CHECK(m3.total < l.total && m1.total < l1.total);
    CHECK_NEAR(l.total - m3.total, l1.total - m1.total, 1e-5 * l.total);
    keep[3] = keep[N - 1] = 0;
    fc.keep = keep;
    memset(g2, 0, (size_t)np * sizeof(float));
    eagle3_forward(ref, &h, &fz, ws, tok + 1, f3, N);
    eagle3_loss_backward(ref, &h, &fz, ws, feat + dd, keep, NULL, 1.0f, g2, &l2);
    for (int i = 0; i < EAGLE3_N_TENSORS; i += 3) {
        double gn, rel = eagle_fd_tensor(&h, i, g2, u, &r, FD_EPS, fd_loss, &fc, &gn);
        CHECK(gn > 0);
        CHECK(rel <= FD_TOL);
    }
    fc.keep = NULL;

    /* the loss mask (EAGLE's, the responses' rows): all counted is no mask;
     * the losses of a mask and of its complement add up to the whole (a
     * mean over n, as the keep mask's), their counts and agreements too;
     * under both masks, the finite-difference check */
    uint8_t mask[N], comp[N];
    memset(mask, 1, sizeof mask);
    memset(g2, 0, (size_t)np * sizeof(float));
    eagle3_forward(ref, &h, &fz, ws, tok + 1, f3, N);
    eagle3_loss_backward(ref, &h, &fz, ws, feat + dd, NULL, mask, 1.0f, g2, &l2);
    CHECK(l2.total == l.total && l2.n == N && eagle_grad_diff(g, 1.0f, g2, np, NULL) == 0);
    int na = 0;
    for (int i = 0; i < N; i++) {
        mask[i] = i >= 4;
        comp[i] = !mask[i];
        na += mask[i];
    }
    struct eagle_loss la, lb;
    memset(g2, 0, (size_t)np * sizeof(float));
    eagle3_loss_backward(ref, &h, &fz, ws, feat + dd, NULL, mask, 1.0f, g2, &la);
    eagle3_loss_backward(ref, &h, &fz, ws, feat + dd, NULL, comp, 1.0f, g2, &lb);
    printf("mask of %d rows: loss %.6g + complement %.6g of %.6g\n", na, la.total, lb.total,
           l.total);
    CHECK(la.n == na && lb.n == N - na && la.correct + lb.correct == l.correct);
    CHECK_NEAR(la.total + lb.total, l.total, 1e-5 * l.total);
    CHECK(la.total > 0 && lb.total > 0);
    CHECK(eagle_grad_diff(g, 1.0f, g2, np, NULL) <= 1e-5 * gm);
    keep[5] = 0;
    fc.keep = keep;
    fc.mask = mask;
    memset(g2, 0, (size_t)np * sizeof(float));
    eagle3_loss_backward(ref, &h, &fz, ws, feat + dd, keep, mask, 1.0f, g2, &l2);
    for (int i = 1; i < EAGLE3_N_TENSORS; i += 3) {
        double gn, rel = eagle_fd_tensor(&h, i, g2, u, &r, FD_EPS, fd_loss, &fc, &gn);
        CHECK(gn > 0);
        CHECK(rel <= FD_TOL);
    }
    fc.keep = fc.mask = NULL;

    /* scale multiplies the gradient, not the loss */
    memset(g2, 0, (size_t)np * sizeof(float));
    eagle3_forward(ref, &h, &fz, ws, tok + 1, f3, N);
    eagle3_loss_backward(ref, &h, &fz, ws, feat + dd, NULL, NULL, 0.5f, g2, &l2);
    CHECK_NEAR(l2.total, l.total, 1e-6 * l.total);
    dm = eagle_grad_diff(g, 0.5f, g2, np, NULL);
    CHECK(dm <= 1e-6 * gm);

    /* the head file round trip: architecture "eagle3", its keys, the draft
     * vocabulary; an EAGLE-3 head whose draft vocabulary size disagrees is
     * refused */
    char path[] = "/tmp/test_eagle3.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    struct eagle_meta mt = { .steps = 3, .draft_ids = ids, .n_draft = NDRAFT };
    CHECK(eagle_base_sha256(m, mt.base_sha256) == 0);
    snprintf(mt.base_name, sizeof mt.base_name, "tiny");
    snprintf(mt.data_sha256, sizeof mt.data_sha256, "%064d", 0);
    CHECK(eagle_head_write(&h, &mt, NULL, NULL, path, true, &d) == 0);
    struct eagle_head h2;
    struct eagle_meta mt2;
    CHECK(eagle_head_read(&h2, &mt2, NULL, NULL, path, &d) == 0);
    CHECK(h2.c.arch == EAGLE_ARCH_3 && h2.c.n_draft == NDRAFT && h2.n_param == h.n_param);
    CHECK(h2.c.feat_layer[0] == 1 && h2.c.feat_layer[2] == 0);
    CHECK(mt2.n_draft == NDRAFT && mt2.draft_ids && mt2.draft_ids[1] == 5);
    CHECK(h2.param && memcmp(h2.param, h.param, (size_t)np * sizeof(float)) == 0);
    CHECK(eagle_head_check_base(&h2, &mt2, m, &d) == 0);
    free(mt2.draft_ids);
    eagle_head_release(&h2);

    /* the drafter: the root's output is the training forward's (step 0,
     * last row), its children the top tokens of the head's own LM head
     * over the draft vocabulary, and deeper levels make a tree */
    struct eagle_draft *ed = NULL;
    enum { K = 3 };
    CHECK(eagle_draft_open(&ed, path, m, 64, K, GGML_TYPE_F32, &d) == 0);
    if (ed) {
        CHECK_STR(eagle_draft_arch(ed), "eagle3");
        for (int i = 0; i < N; i++)
            eagle_draft_feed(ed, i, f3 + i * 3 * dd);
        eagle3_forward(ref, &h, &fz, ws, tok + 1, f3, N);
        const float *fo = eagle3_ws_out(ws) + (N - 1) * dd;
        float on[64], z[NDRAFT];
        CHECK(dd <= 64);
        ref->rmsnorm_fwd(on, fo, h.t[EAGLE3_OUT_NORM], 1, dd, h.c.eps);
        ref->matmul_fwd(z, on, h.t[EAGLE3_LM], NULL, 1, NDRAFT, dd);
        int32_t best[K];
        eagle_top_ids(z, NDRAFT, K, best);
        struct spec_tree tr;
        CHECK(spec_tree_init(&tr, 64, &d) == 0);
        spec_tree_reset(&tr, tok[N]);
        CHECK(eagle_draft_tree(ed, tok, N + 1, 1, 10, 0.0f, &tr, &d) == 0);
        CHECK_EQ(tr.n, 1 + K);
        const float *ro = eagle_draft_root_out(ed);
        double dm2 = 0, fm = 0;
        for (int64_t j = 0; j < dd; j++) {
            dm2 = fmax(dm2, fabs((double)ro[j] - fo[j]));
            fm = fmax(fm, fabs((double)fo[j]));
        }
        printf("drafter vs training forward: max |d out| %.3g of %.3g\n", dm2, fm);
        CHECK(dm2 <= 1e-5 * fm);
        for (int j = 0; j < K && j + 1 < tr.n; j++) {
            CHECK_EQ(tr.tok[j + 1], ids[best[j]]);
            CHECK_EQ(tr.parent[j + 1], 0);
        }
        spec_tree_reset(&tr, tok[N]);
        CHECK(eagle_draft_tree(ed, tok, N + 1, 4, 20, 0.0f, &tr, &d) == 0);
        CHECK(tr.n > 1 + K && tr.n <= 21);
        int maxd = 0;
        for (int64_t j = 1; j < tr.n; j++) {
            CHECK(tr.parent[j] < j);
            CHECK_EQ(tr.depth[j], tr.depth[tr.parent[j]] + 1);
            CHECK(tr.tok[j] % 5 == 0);  /* draft vocabulary tokens only */
            maxd = tr.depth[j] > maxd ? tr.depth[j] : maxd;
        }
        CHECK(maxd >= 2 && maxd <= 4);
        spec_tree_release(&tr);
        eagle_draft_free(ed);
    }
    mt.n_draft = NDRAFT - 1;
    CHECK(eagle_head_write(&h, &mt, NULL, NULL, path, true, &d) == 0);
    CHECK(eagle_head_read(&h2, &mt2, NULL, NULL, path, &d) == -ST_FORMAT);
    CHECK(strstr(d.msg, "draft_vocab_size") != NULL);
    /* ids out of order: the error names the EAGLE-3 head's own key */
    mt.n_draft = NDRAFT;
    int32_t i1 = ids[1];
    ids[1] = ids[2];
    ids[2] = i1;
    CHECK(eagle_head_write(&h, &mt, NULL, NULL, path, true, &d) == 0);
    CHECK(eagle_head_read(&h2, &mt2, NULL, NULL, path, &d) == -ST_FORMAT);
    CHECK(strstr(d.msg, "'eagle3.draft_vocab': ids not ascending") != NULL);
    ids[2] = ids[1];
    ids[1] = i1;
    unlink(path);

    /* EAGLE-3 head files written by gguf-py (scripts/mkcorpus-eagle) */
    static const struct { const char *f; int rc; int64_t n_draft; } files[] = {
        { "eagle3-valid.gguf", 0, 3 }, { "eagle3-whole-vocab.gguf", 0, 12 },
        { "eagle3-no-feature-layers.gguf", -ST_FORMAT, 0 },
        { "eagle3-draft-vocab-size.gguf", -ST_FORMAT, 0 },
        { "eagle3-missing-lm.gguf", -ST_FORMAT, 0 },
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        struct eagle_head hf;
        struct eagle_meta mf;
        int rc = eagle_read_corpus(files[i].f, files[i].rc, &hf, &mf);
        CHECK_EQ(rc, files[i].rc);
        if (rc == 0) {
            CHECK(hf.c.arch == EAGLE_ARCH_3 && hf.c.n_draft == files[i].n_draft);
            CHECK(hf.c.feat_layer[0] == 2 && hf.c.feat_layer[1] == 1 && hf.c.feat_layer[2] == 0);
            CHECK(hf.rows[EAGLE3_LM] == files[i].n_draft && hf.cols[EAGLE3_WQ] == 32);
            eagle_head_release(&hf);
            free(mf.draft_ids);
        }
    }

    /* A CE chunk (32 rows of a step) none of whose rows counts is skipped:
     * with NaN targets where only such chunks read them, the loss and the
     * gradient are those of finite targets, bit for bit. */
    {
        enum { N2 = 44, SKIP = 32 + STEPS };
        struct eagle3_ws *w2 = NULL;
        int32_t tk[N2 + 1];
        uint8_t mk[N2];
        float *f32 = malloc((size_t)((N2 + 1) * 3 * dd) * sizeof(float));
        float *ft = malloc((size_t)((N2 + 1) * dd) * sizeof(float));
        float *g3 = calloc((size_t)np, sizeof(float));
        struct eagle_loss l3, l4;
        CHECK(eagle3_ws_new(&w2, &h.c, N2, STEPS) == 0);
        for (int i = 0; i <= N2; i++)
            tk[i] = (int32_t)(rng_next(&r) % (uint64_t)t.c.n_vocab);
        CHECK(eagle_target_features3(&t, tk, N2 + 1, f32, ft, &d) == 0);
        for (int i = 0; i < N2; i++)
            mk[i] = i >= SKIP;
        memset(g2, 0, (size_t)np * sizeof(float));
        eagle3_forward(ref, &h, &fz, w2, tk + 1, f32, N2);
        eagle3_loss_backward(ref, &h, &fz, w2, ft + dd, NULL, mk, 1.0f, g2, &l3);
        for (int64_t i = 0; i < 32 * dd; i++)
            ft[dd + i] = NAN;
        eagle3_loss_backward(ref, &h, &fz, w2, ft + dd, NULL, mk, 1.0f, g3, &l4);
        CHECK(l3.n == l4.n && l3.n > 0 && l4.correct == l3.correct);
        CHECK(isfinite(l3.total) && l3.total > 0);
        CHECK(memcmp(&l3.total, &l4.total, sizeof l3.total) == 0);
        CHECK(memcmp(g2, g3, (size_t)np * sizeof(float)) == 0);
        /* and the skipped chunks held nothing that counts: with the
         * complement's loss (which skips none) it adds up to the whole */
        uint8_t cm[N2];
        for (int i = 0; i < N2; i++)
            cm[i] = !mk[i];
        CHECK(eagle_target_features3(&t, tk, N2 + 1, f32, ft, &d) == 0);   /* finite again */
        eagle3_loss_backward(ref, &h, &fz, w2, ft + dd, NULL, cm, 1.0f, g3, &l4);
        struct eagle_loss lw;
        memset(g, 0, (size_t)np * sizeof(float));
        eagle3_loss_backward(ref, &h, &fz, w2, ft + dd, NULL, NULL, 1.0f, g, &lw);
        CHECK(l3.n + l4.n == lw.n && l3.correct + l4.correct == lw.correct);
        CHECK_NEAR(l3.total + l4.total, lw.total, 1e-5 * lw.total);
        double gm3, dm3 = eagle_grad_diff(g, 1.0f, g3, np, &gm3);
        CHECK(dm3 <= 1e-5 * gm3);
        eagle3_ws_free(w2);
        free(f32), free(ft), free(g3);
    }

    /* a head started from the target's last layer (eagle_target_init_head):
     * the layer's matrices in the hidden half of q/k/v, in o and the MLP,
     * its norms (attn_norm as the hidden norm), the model's output norm,
     * the LM rows given, 1 added to the diagonal of the FC's deepest block; the
     * rest (the embedding half, the input norm) the random start's */
    {
        struct eagle_head hi, hr, h1;
        const struct model_layer *ll = &m->layers[L - 1];
        int64_t qd = h.c.n_head * h.c.head_dim, kd = h.c.n_head_kv * h.c.head_dim;
        CHECK(eagle_head_init(&hi, &c, 11) == 0 && eagle_head_init(&hr, &c, 11) == 0);
        CHECK(ll->wq.type == GGML_TYPE_F32 && ll->ffn_down.type == GGML_TYPE_F32);
        CHECK(eagle_target_init_head(&t, &hi, lm) == 0);
        const struct { const struct model_weight *w; int i; } half[] = {
            { &ll->wq, EAGLE3_WQ }, { &ll->wk, EAGLE3_WK }, { &ll->wv, EAGLE3_WV },
        };
        for (int k = 0; k < 3; k++) {
            const float *src = half[k].w->data;
            int64_t rows = half[k].i == EAGLE3_WQ ? qd : kd;
            CHECK_EQ(half[k].w->rows, rows);
            for (int64_t r0 = 0; r0 < rows; r0++) {
                const float *a = hi.t[half[k].i] + r0 * 2 * dd, *b = hr.t[half[k].i] + r0 * 2 * dd;
                CHECK(memcmp(a, b, (size_t)dd * sizeof(float)) == 0);
                CHECK(memcmp(a + dd, src + r0 * dd, (size_t)dd * sizeof(float)) == 0);
            }
        }
        const struct { const struct model_weight *w; int i; } whole[] = {
            { &ll->wo, EAGLE3_WO }, { &ll->ffn_gate, EAGLE3_GATE }, { &ll->ffn_up, EAGLE3_UP },
            { &ll->ffn_down, EAGLE3_DOWN }, { &ll->attn_norm, EAGLE3_HID_NORM },
            { &ll->ffn_norm, EAGLE3_FFN_NORM }, { &m->output_norm, EAGLE3_OUT_NORM },
        };
        for (int k = 0; k < 7; k++) {
            int64_t len = hi.rows[whole[k].i] * hi.cols[whole[k].i];
            CHECK_EQ(whole[k].w->rows * whole[k].w->cols, len);
            CHECK(memcmp(hi.t[whole[k].i], whole[k].w->data, (size_t)len * sizeof(float)) == 0);
        }
        CHECK(memcmp(hi.t[EAGLE3_LM], lm, (size_t)(NDRAFT * dd) * sizeof(float)) == 0);
        CHECK(memcmp(hi.t[EAGLE3_IN_NORM], hr.t[EAGLE3_IN_NORM], (size_t)dd * sizeof(float)) == 0);
        /* the deepest feature's block: the fixture's {1, 1, 0} -> the last
         * of the two layer-1 inputs; SmolLM2's {2, 15, 27} -> the third */
        int kd3 = eagle_deepest_feature(&c);
        CHECK_EQ(kd3, 1);
        struct eagle_config c30 = c;
        c30.feat_layer[0] = 2, c30.feat_layer[1] = 15, c30.feat_layer[2] = 27;
        CHECK_EQ(eagle_deepest_feature(&c30), 2);
        int64_t n_diff = 0, n_one = 0;
        for (int64_t r0 = 0; r0 < dd; r0++)
            for (int64_t j = 0; j < 3 * dd; j++) {
                float a = hi.t[EAGLE3_FC][r0 * 3 * dd + j], b = hr.t[EAGLE3_FC][r0 * 3 * dd + j];
                n_diff += a != b;
                n_one += j == kd3 * dd + r0 && a == b + 1.0f;
            }
        CHECK_EQ(n_diff, dd);
        CHECK_EQ(n_one, dd);
        /* an EAGLE-1 head is refused, untouched */
        CHECK(eagle_head_init(&h1, &t.c, 11) == 0);
        float first = h1.param[0];
        CHECK(eagle_target_init_head(&t, &h1, lm) == -ST_RANGE && h1.param[0] == first);
        eagle_head_release(&h1);
        eagle_head_release(&hi);
        eagle_head_release(&hr);
    }

    /* the features of self-distillation's own passes (distill.h's sink):
     * every token of prompt and response given once at least, each row as
     * a feature run over the whole sequence computes it (a pass of
     * prompt chunks and one-token decodes, batched with the other
     * prompts, against one prefill: the same values to f32 rounding), a
     * response cut by max_tokens cut back to it */
    {
        enum { NP = 3, GEN = 6 };
        struct sink_ctx sc = { dd, NULL, NULL, {0}, {0}, 0 };
        struct eagle_capture cp = { t.c.feat_layer, dd, NULL, DISTILL_BATCH_TOKENS };
        struct model_hooks hk = { eagle_capture_hook, &cp, EAGLE_CAPTURE_SITES };
        struct tok_ids pr[NP], resp[NP];
        bool ans[NP];
        int64_t n_gen = 0, plen[NP] = { 3, 9, 5 };
        cp.feat3 = sc.x3 = malloc((size_t)(DISTILL_BATCH_TOKENS * 3 * dd) * sizeof(float));
        sc.rows = calloc((size_t)(NP * SINK_MAX * 4 * dd), sizeof(float));
        memset(pr, 0, sizeof pr), memset(resp, 0, sizeof resp);
        for (int p = 0; p < NP; p++)
            for (int64_t i = 0; i < plen[p]; i++)
                CHECK(tok_ids_push(&pr[p], (int32_t)((7 * p + 3 * i + 1) % t.c.n_vocab)) == 0);
        struct distill_gen gn = { GEN, 0.0f, 1, 2, NULL, 0, &hk, sink_rows, &sc };
        CHECK_EQ(distill_generate(m, NULL, pr, NP, &gn, resp, ans, &n_gen, &d), 0);
        CHECK(!sc.bad);
        int64_t total = 0;
        double err = 0, big = 0;
        for (int p = 0; p < NP; p++) {
            CHECK(ans[p] && resp[p].n == GEN);      /* (no tokenizer: no end of generation) */
            total += (int64_t)resp[p].n;
            int64_t n = plen[p] + (int64_t)resp[p].n;
            CHECK_EQ(sc.n_fed[p], n);               /* the last kept token computed too */
            int32_t *all = malloc((size_t)n * sizeof(int32_t));
            float *x3 = malloc((size_t)(n * 3 * dd) * sizeof(float));
            float *fin = malloc((size_t)(n * dd) * sizeof(float));
            memcpy(all, pr[p].v, (size_t)plen[p] * sizeof(int32_t));
            memcpy(all + plen[p], resp[p].v, resp[p].n * sizeof(int32_t));
            CHECK(eagle_target_features3(&t, all, n, x3, fin, &d) == 0);
            for (int64_t i = 0; i < n; i++) {
                const float *row = sc.rows + (p * SINK_MAX + i) * 4 * dd;
                for (int64_t j = 0; j < 4 * dd; j++) {
                    float want = j < 3 * dd ? x3[i * 3 * dd + j] : fin[i * dd + j - 3 * dd];
                    err = fmax(err, fabs(row[j] - want));
                    big = fmax(big, fabs(want));
                }
            }
            free(all), free(x3), free(fin);
            tok_ids_release(&pr[p]), tok_ids_release(&resp[p]);
        }
        CHECK_EQ(n_gen, total);
        CHECK(big > 0.1 && err <= 1e-4 * big);
        /* a sink goes with no drafter and not the prefix cache */
        struct sched_opts so = SCHED_OPTS_INIT;
        struct sched_callbacks cb = { sink_result, NULL, NULL };
        struct sched *sch = NULL;
        struct kv_config kc;
        struct kvcache *kv = NULL;
        model_kv_config(m, 1 << 20, GGML_TYPE_F16, &kc);
        CHECK(kv_new(&kv, &kc, &d) == 0);
        so.feat_rows = sink_rows;
        so.feat_ctx = &sc;
        d.msg[0] = 0;
        CHECK(so.prefix_cache && sched_new(&sch, m, kv, NULL, &so, &cb, &d) == -ST_RANGE && !sch);
        CHECK(strstr(d.msg, "feature sink") != NULL);
        so.prefix_cache = false;
        so.spec_tokens = 4;
        d.msg[0] = 0;
        CHECK(sched_new(&sch, m, kv, NULL, &so, &cb, &d) == -ST_RANGE && !sch);
        CHECK(strstr(d.msg, "feature sink") != NULL);
        so.spec_tokens = 0;
        CHECK(sched_new(&sch, m, kv, NULL, &so, &cb, &d) == 0 && sch);
        sched_free(sch);
        kv_free(kv);
        free(sc.x3), free(sc.rows);
    }

    free(g), free(g2), free(u), free(f3), free(feat), free(feat1), free(lm);
    eagle3_ws_free(ws);
    eagle3_ws_free(ws1);
    eagle_head_release(&h);
    eagle_target_release(&t);
    model_free(m);
    T_DONE();
}
