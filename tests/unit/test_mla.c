/*
 * test_mla.c - the deepseek2 (MLA) forward pass against llama.cpp on the
 * random-weight models of scripts/mkgolden-mla, whose goldens are
 * tests/golden/generate/mla.json.  The models are built by the BATS set-up
 * (tests/cli/deepseek2.bats: scripts/mkgolden-mla --models DIR) and named by
 * $LLMKIT_MLA_DIR; without it the test is skipped (77).
 *
 * Per model and golden text: the prompt decoded as one batch (prompt rows
 * as llama.cpp computes them), every position's logits compared with
 * llama.cpp's stored ones (ids 0, stride, ... and its top 8): the largest
 * error relative to the position's largest |logit| below MAX_REL, and the
 * top-1 ids agreeing at TOP1_MIN of the positions; the cache's bytes per
 * token are the latent and the RoPE key only.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "kvcache.h"
#include "model.h"
#include "qtypes.h"
#include "t.h"

#define GOLDEN "tests/golden/generate/mla.json"
#define MAX_REL 1e-4
#define TOP1_MIN 0.99

static int
argmax(const float *x, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int)i;
    return best;
}

static void
check_model(const char *dir, json_t *gm, int64_t stride, int *n_pos, int *n_top1, double *worst)
{
    const char *name = json_string_value(json_object_get(gm, "model"));
    char path[4096];
    struct model *m = NULL;
    struct kvcache *kv = NULL;
    struct kv_config c;
    struct diag d;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct model_opts o = MODEL_OPTS_INIT;
    o.n_threads = 1;
    if (model_open(&m, path, &o, &d) < 0) {
        fprintf(stderr, "test_mla: %s: %s\n", path, d.msg);
        CHECK(0);
        return;
    }
    CHECK(m->hp.mla);
    /* per token and layer: kv_lora_rank + n_rot f16 elements, nothing else */
    CHECK_EQ(model_kv_bytes_per_token(m, GGML_TYPE_F16),
             m->hp.n_layer * (m->hp.kv_lora_rank + m->hp.rope.n_rot) * 2);
    model_kv_config(m, (size_t)64 << 20, GGML_TYPE_F16, &c);
    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    CHECK_EQ(kv_block_bytes(&c), (size_t)c.block_size * model_kv_bytes_per_token(m, GGML_TYPE_F16));

    json_t *cases = json_object_get(gm, "cases");
    int64_t V = m->hp.n_vocab;
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *cs = json_array_get(cases, ci);
        json_t *pt = json_object_get(cs, "prompt_tokens"), *rows = json_object_get(cs, "rows");
        int64_t n = (int64_t)json_array_size(pt);
        CHECK(n > 0 && (size_t)n == json_array_size(rows));
        struct batch_tok *bt = calloc((size_t)n, sizeof(*bt));
        float *lg = malloc((size_t)(n * V) * sizeof(float));
        int32_t seq;
        kv_seq_new(kv, &seq);
        for (int64_t i = 0; i < n; i++)
            bt[i] = (struct batch_tok){ seq, (int32_t)i,
                                        (int32_t)json_integer_value(json_array_get(pt, i)), 1,
                                        model_prompt_tiled(n, i), model_prompt_gemm(n, i) };
        struct batch b = { n, bt, NULL, 0 };
        struct model_out out = { lg, NULL };
        CHECK_EQ(model_forward(m, kv, &b, NULL, &out, &d), 0);
        int64_t n_samp = (V + stride - 1) / stride;
        for (int64_t i = 0; i < n; i++) {
            json_t *r = json_array_get(rows, i);
            const float *l = lg + i * V;
            double mx = 0, err = 0;
            size_t nr = json_array_size(r);
            CHECK(nr >= (size_t)(1 + n_samp + 2));
            for (size_t k = 1; k < nr; k++)
                mx = fmax(mx, fabs(json_number_value(json_array_get(r, k))));
            for (int64_t s = 0; s < n_samp; s++)
                err = fmax(err, fabs(l[s * stride] - json_number_value(json_array_get(r, 1 + s))));
            for (size_t k = 1 + (size_t)n_samp; k + 1 < nr; k += 2) {
                int64_t id = (int64_t)json_number_value(json_array_get(r, k));
                if (id >= 0 && id < V)
                    err = fmax(err, fabs(l[id] - json_number_value(json_array_get(r, k + 1))));
            }
            *worst = fmax(*worst, err / (mx > 0 ? mx : 1));
            *n_top1 += argmax(l, V) == (int)json_number_value(json_array_get(r, 0));
            ++*n_pos;
        }
        kv_seq_free(kv, seq);
        free(bt);
        free(lg);
    }
    kv_free(kv);
    model_free(m);
}

int
main(void)
{
    const char *dir = getenv("LLMKIT_MLA_DIR");
    json_t *root = NULL;
    struct diag d;
    int n_pos = 0, n_top1 = 0;
    double worst = 0;

    if (!dir || !*dir) {
        fprintf(stderr, "test_mla: LLMKIT_MLA_DIR not set (tests/cli/deepseek2.bats sets it), "
                "skipped\n");
        return 77;
    }
    CHECK_EQ(json_load_path(GOLDEN, JSON_MAX_FILE, &root, &d), 0);
    if (!root)
        T_DONE();
    int64_t stride = (int64_t)json_integer_value(json_object_get(root, "stride"));
    json_t *models = json_object_get(root, "models");
    CHECK(stride > 0 && json_array_size(models) == 3);
    for (size_t i = 0; i < json_array_size(models); i++)
        check_model(dir, json_array_get(models, i), stride, &n_pos, &n_top1, &worst);
    fprintf(stderr, "test_mla: %d positions, top-1 agreement %d, max relative error %.3g\n",
            n_pos, n_top1, worst);
    CHECK(n_pos >= 256);
    CHECK(n_top1 >= TOP1_MIN * n_pos);
    CHECK(worst < MAX_REL);
    json_decref(root);
    T_DONE();
}
