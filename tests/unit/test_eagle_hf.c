/*
 * test_eagle_hf.c - EAGLE heads in the HF layouts (common/train/eagle_hf.h)
 * against the reference code.  EAGLE-1, against the EAGLE authors' code: tests/golden/eagle1/head is a head
 * trained on the tiny fixture and exported by convert, forward.json the
 * output of eagle-llm's own draft model (eagle.model.cnets.Model, float64)
 * loading that directory, on 12 tokens and features (scripts/mkgolden-eagle1).
 * Our forward on the head read back from the directory must match it to a
 * relative error of 1e-4; read with the wrong q/k row order (as if the base
 * used NEOX RoPE) it must not.  Importing the directory and exporting the
 * result again gives the same config.json and model.safetensors bytes.
 * LLMKIT_EAGLE1_GOLDEN=DIR and LLMKIT_EAGLE1_BASE=GGUF check another golden
 * (scripts/mkgolden-eagle1 --head --base: a real model's head), alone.
 *
 * EAGLE-3, against vLLM's speculators library: tests/golden/eagle3/head is
 * an EAGLE-3 head trained on the tiny fixture and exported by convert in
 * the speculators layout, forward.json the draft logits of speculators' own
 * Eagle3DraftModel (float64) built from that directory, on 12 tokens and
 * 3d-wide features, for 3 unrolled steps (the later two on the head's own
 * fed-back output; scripts/mkgolden-eagle3).  Our forward (eagle3_forward
 * and the head's LM head) on the head read back from the directory must
 * match every step to 1e-4; with the wrong q/k row order it must not.
 * Importing the directory and exporting the result again gives the same
 * bytes in the speculators layout, and the EAGLE authors' layout reads back
 * to the same GGUF.  LLMKIT_EAGLE3_GOLDEN=DIR and LLMKIT_EAGLE3_BASE=GGUF
 * check another (scripts/mkgolden-eagle3 --head --base), alone.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backward.h"
#include "eagle.h"
#include "eagle3.h"
#include "eagle_hf.h"
#include "eagle_target.h"
#include "json.h"
#include "model.h"
#include "safetensors.h"
#include "t.h"
#include "xio.h"

#define FIXTURE "tests/fixtures/tiny-llama-f32.gguf"
#define GOLDEN "tests/golden/eagle1"
#define GOLDEN3 "tests/golden/eagle3"

/* the head in cfg and f read with base configuration c, to run with RoPE
 * style style */
static bool
read_head(struct eagle_head *h, struct eagle_meta *meta, const struct eagle_config *c, int style,
          const char *cfg, size_t len, const struct sft_file *f)
{
    struct diag d = { "" };

    if (eagle_hf_head_read(h, meta, cfg, len, f, c, &d) < 0) {
        fprintf(stderr, "test_eagle_hf: %s\n", d.msg);
        return false;
    }
    h->c.rope.style = style;
    return true;
}

/* max over positions of max|ours - ref| / max|ref| of the head read with
 * base configuration c and run with RoPE style style */
static double
forward_err(const struct eagle_config *c, int style, const struct eagle_frozen *fz, const char *cfg,
            size_t len, const struct sft_file *f, const int32_t *tok, const float *feat,
            const double *ref, int64_t n)
{
    struct eagle_head h;
    struct eagle_meta meta;
    struct eagle_ws *ws = NULL;
    double err = INFINITY;

    if (!read_head(&h, &meta, c, style, cfg, len, f))
        return err;
    float *out = malloc((size_t)(n * c->d) * sizeof(float));
    if (out && eagle_ws_new(&ws, c, n) == 0) {
        double num = 0, den = 0;
        eagle_forward(&backward_ops_ref, &h, fz, ws, tok, feat, n, out);
        for (int64_t i = 0; i < n * c->d; i++) {
            num = fmax(num, fabs(out[i] - ref[i]));
            den = fmax(den, fabs(ref[i]));
        }
        err = num / den;
    }
    eagle_ws_free(ws);
    free(out);
    free(meta.draft_ids);
    eagle_head_release(&h);
    return err;
}

struct golden3 {
    const json_t *logits;       /* [steps][n - s][n_draft] */
    int32_t *tok;
    float *feat;                /* [n][3d] */
    int64_t n;
    int steps;
};

/* EAGLE-3: max over steps of max|ours - ref| / max|ref| over the step's
 * rows (the draft logits), the head read from cfg and f with base
 * configuration c and run with RoPE style style */
static double
forward3_err(const struct eagle_config *c, int style, const struct eagle_frozen *fz,
            const char *cfg, size_t len, const struct sft_file *f, const struct golden3 *g)
{
    struct eagle_head h;
    struct eagle_meta meta;
    struct eagle3_ws *ws = NULL;
    double err = INFINITY;

    if (!read_head(&h, &meta, c, style, cfg, len, f))
        return err;
    if (h.c.arch == EAGLE_ARCH_3 && eagle3_ws_new(&ws, &h.c, g->n, g->steps) == 0) {
        int64_t d_ = h.c.d, V = h.c.n_draft;
        eagle3_forward(&backward_ops_ref, &h, fz, ws, g->tok, g->feat, g->n);
        err = 0;
        for (int s = 0; s < g->steps; s++) {
            const float *on = eagle3_ws_normed(ws, s);
            const json_t *js = json_array_get(g->logits, (size_t)s);
            double num = 0, den = 0;
            if ((int64_t)json_array_size(js) != g->n - s)
                err = INFINITY;
            for (int64_t i = 0; i < g->n - s && err < INFINITY; i++) {
                const json_t *row = json_array_get(js, (size_t)i);
                for (int64_t v = 0; v < V; v++) {
                    double z = 0, ref = json_number_value(json_array_get(row, (size_t)v));
                    for (int64_t k = 0; k < d_; k++)
                        z += (double)on[i * d_ + k] * h.t[EAGLE3_LM][v * d_ + k];
                    num = fmax(num, fabs(z - ref));
                    den = fmax(den, fabs(ref));
                }
            }
            err = fmax(err, num / den);
        }
    }
    eagle3_ws_free(ws);
    eagle_meta_release(&meta);
    eagle_head_release(&h);
    return err;
}

static bool
same_file(const char *a, const char *b)
{
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    bool same = read_file_all(a, (size_t)1 << 26, &x, &nx, NULL) == 0 &&
                read_file_all(b, (size_t)1 << 26, &y, &ny, NULL) == 0 && nx == ny &&
                !memcmp(x, y, nx);
    free(x);
    free(y);
    return same;
}

/* a golden directory's forward.json, head/config.json and
 * head/model.safetensors (head: the head directory's path) */
struct golden_files {
    json_t *g;
    char *cfg;
    size_t len;
    struct sft_file f;
    char head[512];
};

static bool
golden_open(struct golden_files *gf, const char *golden)
{
    struct diag d = { "" };
    char path[3][600];

    memset(gf, 0, sizeof *gf);
    snprintf(gf->head, sizeof gf->head, "%s/head", golden);
    snprintf(path[0], sizeof path[0], "%s/forward.json", golden);
    snprintf(path[1], sizeof path[1], "%s/config.json", gf->head);
    snprintf(path[2], sizeof path[2], "%s/model.safetensors", gf->head);
    CHECK(json_load_path(path[0], (size_t)1 << 26, &gf->g, &d) == 0);
    CHECK(read_file_all(path[1], 1 << 20, &gf->cfg, &gf->len, &d) == 0);
    bool f_ok = sft_open(&gf->f, path[2], &d) == 0;
    CHECK(f_ok);
    if (gf->g && gf->cfg && f_ok)
        return true;
    if (f_ok)
        sft_close(&gf->f);
    json_decref(gf->g);
    free(gf->cfg);
    return false;
}

static void
golden_close(struct golden_files *gf)
{
    sft_close(&gf->f);
    json_decref(gf->g);
    free(gf->cfg);
}

/* the EAGLE-3 golden (speculators) in directory golden against the target
 * t of base */
static void
check_eagle3(const char *golden, const char *base, const struct eagle_target *t)
{
    struct golden_files gf;
    struct diag d = { "" };
    struct golden3 gd = { 0 };

    if (!golden_open(&gf, golden))
        return;
    const json_t *jt = json_object_get(gf.g, "tokens"), *jf = json_object_get(gf.g, "features");
    int64_t n = (int64_t)json_array_size(jt), w = 3 * t->c.d;
    gd.logits = json_object_get(gf.g, "logits");
    gd.steps = (int)json_integer_value(json_object_get(gf.g, "steps"));
    gd.n = n;
    CHECK(n == 12 && (int64_t)json_array_size(jf) == n && gd.steps == 3 &&
          (int)json_array_size(gd.logits) == gd.steps);
    gd.tok = malloc((size_t)n * sizeof(int32_t));
    gd.feat = malloc((size_t)(n * w) * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        gd.tok[i] = (int32_t)json_integer_value(json_array_get(jt, (size_t)i));
        CHECK((int64_t)json_array_size(json_array_get(jf, (size_t)i)) == w);
        for (int64_t j = 0; j < w; j++)
            gd.feat[i * w + j] = (float)json_number_value(
                json_array_get(json_array_get(jf, (size_t)i), (size_t)j));
    }
    double err = forward3_err(&t->c, t->c.rope.style, &t->fz, gf.cfg, gf.len, &gf.f, &gd);
    fprintf(stderr, "test_eagle_hf: max relative error of the draft logits vs speculators "
            "%.3g\n", err);
    CHECK(err <= 1e-4);
    /* negative control: q/k rows read in the other order (as for a base
     * with the other RoPE style) but run with the base's RoPE */
    struct eagle_config other = t->c;
    other.rope.style = t->c.rope.style == ROPE_NORM ? ROPE_NEOX : ROPE_NORM;
    double bad = forward3_err(&other, t->c.rope.style, &t->fz, gf.cfg, gf.len, &gf.f, &gd);
    fprintf(stderr, "test_eagle_hf: with q/k rows in the wrong order %.3g\n", bad);
    CHECK(bad > 1e-3);

    /* HF -> GGUF -> HF gives the golden's bytes back; the EAGLE authors'
     * layout reads back to the same GGUF */
    char tmp[] = "/tmp/test_eagle_hf.XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    char gg[64], gg2[64], dir[64], dir2[64], a[600], b[96];
    snprintf(gg, sizeof gg, "%s/head.gguf", tmp);
    snprintf(gg2, sizeof gg2, "%s/head2.gguf", tmp);
    snprintf(dir, sizeof dir, "%s/head", tmp);
    snprintf(dir2, sizeof dir2, "%s/eagle", tmp);
    CHECK(eagle_hf_import(gf.head, base, gg, false, &d) == 0);
    /* the verifier's name is not in the GGUF: given again */
    json_t *jc = NULL;
    CHECK(json_load_mem(gf.cfg, gf.len, &jc, &d) == 0);
    const json_t *jv = json_object_get(json_object_get(json_object_get(jc, "speculators_config"),
                                                       "verifier"), "name_or_path");
    CHECK(eagle_hf_export(gg, dir, -1, EAGLE_HF_SPECULATORS, json_string_value(jv), false,
                          &d) == 0);
    json_decref(jc);
    CHECK(eagle_hf_export(gg, dir2, -1, EAGLE_HF_EAGLE, NULL, false, &d) == 0);
    CHECK(eagle_hf_import(dir2, base, gg2, false, &d) == 0);
    CHECK(same_file(gg, gg2));
    const char *files[] = { "config.json", "model.safetensors" };
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/%s", gf.head, files[i]);
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        CHECK(same_file(a, b));
        unlink(b);
        snprintf(b, sizeof b, "%s/%s", dir2, files[i]);
        unlink(b);
    }
    rmdir(dir);
    rmdir(dir2);
    unlink(gg);
    unlink(gg2);
    rmdir(tmp);

    golden_close(&gf);
    free(gd.tok);
    free(gd.feat);
}

/* the EAGLE-1 golden (eagle-llm) in directory golden against the target t
 * of base */
static void
check_eagle1(const char *golden, const char *base, const struct eagle_target *t)
{
    struct golden_files gf;
    struct diag d = { "" };

    if (!golden_open(&gf, golden))
        return;
    const json_t *jt = json_object_get(gf.g, "tokens"), *jf = json_object_get(gf.g, "features"),
                 *je = json_object_get(gf.g, "expected");
    int64_t n = (int64_t)json_array_size(jt), dd = t->c.d;
    CHECK(n == 12 && (int64_t)json_array_size(jf) == n && (int64_t)json_array_size(je) == n);
    int32_t *tok = malloc((size_t)n * sizeof(int32_t));
    float *feat = malloc((size_t)(n * dd) * sizeof(float));
    double *ref = malloc((size_t)(n * dd) * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        tok[i] = (int32_t)json_integer_value(json_array_get(jt, (size_t)i));
        CHECK((int64_t)json_array_size(json_array_get(jf, (size_t)i)) == dd);
        for (int64_t j = 0; j < dd; j++) {
            feat[i * dd + j] = (float)json_number_value(
                json_array_get(json_array_get(jf, (size_t)i), (size_t)j));
            ref[i * dd + j] = json_number_value(
                json_array_get(json_array_get(je, (size_t)i), (size_t)j));
        }
    }
    double err = forward_err(&t->c, t->c.rope.style, &t->fz, gf.cfg, gf.len, &gf.f, tok, feat, ref, n);
    fprintf(stderr, "test_eagle_hf: max relative error vs eagle-llm %.3g\n", err);
    CHECK(err <= 1e-4);
    /* negative control: q/k rows read in the other order (as for a base
     * with the other RoPE style) but run with the base's RoPE */
    struct eagle_config other = t->c;
    other.rope.style = t->c.rope.style == ROPE_NORM ? ROPE_NEOX : ROPE_NORM;
    double bad = forward_err(&other, t->c.rope.style, &t->fz, gf.cfg, gf.len, &gf.f, tok, feat, ref, n);
    fprintf(stderr, "test_eagle_hf: with q/k rows in the wrong order %.3g\n", bad);
    CHECK(bad > 1e-3);

    /* HF -> GGUF -> HF gives the golden's bytes back */
    char tmp[] = "/tmp/test_eagle_hf.XXXXXX";
    CHECK(mkdtemp(tmp) != NULL);
    char gguf_path[64], dir[64], a[600], b[96];
    snprintf(gguf_path, sizeof gguf_path, "%s/head.gguf", tmp);
    snprintf(dir, sizeof dir, "%s/head", tmp);
    CHECK(eagle_hf_import(gf.head, base, gguf_path, false, &d) == 0);
    CHECK(eagle_hf_export(gguf_path, dir, -1, EAGLE_HF_EAGLE, NULL, false, &d) == 0);
    const char *files[] = { "config.json", "model.safetensors" };
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/%s", gf.head, files[i]);
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        CHECK(same_file(a, b));
        unlink(b);
    }
    rmdir(dir);
    unlink(gguf_path);
    rmdir(tmp);
    golden_close(&gf);
    free(tok);
    free(feat);
    free(ref);
}

int
main(void)
{
    struct model *m = NULL;
    struct eagle_target t;
    struct diag d = { "" };
    const char *g1 = getenv("LLMKIT_EAGLE1_GOLDEN"), *g3 = getenv("LLMKIT_EAGLE3_GOLDEN");
    const char *base = g3 ? getenv("LLMKIT_EAGLE3_BASE") : getenv("LLMKIT_EAGLE1_BASE");

    /* another golden (a real model's head) is checked alone, against its
     * base */
    base = base ? base : FIXTURE;
    if (access(base, R_OK) != 0) {
        fprintf(stderr, "test_eagle_hf: %s missing: run `make fixtures`\n", base);
        return 77;
    }
    CHECK(model_open(&m, base, NULL, &d) == 0);
    if (!m)
        T_DONE();
    CHECK(eagle_target_init(&t, m, 16, &d) == 0);
    if (!g3)
        check_eagle1(g1 ? g1 : GOLDEN, base, &t);
    if (!g1)
        check_eagle3(g3 ? g3 : GOLDEN3, base, &t);
    eagle_target_release(&t);
    model_free(m);
    T_DONE();
}
