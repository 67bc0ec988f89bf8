/*
 * test_model_real.c - the forward pass on the real SmolLM2-135M-Instruct
 * Q4_1 model (${LLMKIT_CACHE:-$HOME/.cache/llmkit}).  Skipped (77) when the
 * model is absent, unless CI=true, where that is a failure.
 *
 * Checks the hyperparameters, finite logits, batch == step decoding, and,
 * once tests/golden/generate/smollm2-greedy.json (llama.cpp's greedy
 * continuations, made by scripts/mkgolden-generate) exists, that the argmax
 * after each golden prompt is llama.cpp's first generated token.  With
 * LLMKIT_SLOW_TESTS=1 every golden step is checked (teacher forcing): our
 * argmax must equal llama.cpp's token wherever llama.cpp's top-1/top-2
 * margin is not a near tie.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "kvcache.h"
#include "model.h"
#include "qtypes.h"
#include "t.h"

#define GOLDEN "tests/golden/generate/smollm2-greedy.json"
/* Logit margin below which the scalar reference kernels and llama.cpp may
 * pick different tokens.  SmolLM2 is very sensitive to rounding (its
 * residual stream carries values of 2e4): llama.cpp's own two attention
 * paths (flash attention on/off) disagree on 2 of these golden steps, at
 * margins 0.19 and 0.21.  The reference sums in its own order and uses
 * libm's expf; the avx2 kernels reproduce ggml's AVX2 arithmetic bit for bit
 * (lane order, FMA, its vectorised exp), so with them every token must
 * match. */
#define NEAR_TIE 0.25

static int
argmax(const float *x, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int)i;
    return best;
}

static int
all_finite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

static int
fwd(struct model *m, struct kvcache *kv, int32_t seq, const int32_t *tok, int64_t n,
    float *last_logits)
{
    struct batch_tok *bt = malloc((size_t)n * sizeof(*bt));
    int64_t len0 = kv_seq_len(kv, seq);
    struct diag d;

    /* a prompt (into an empty sequence) as llama.cpp decodes it: tiled
     * attention for 64+ tokens; the steps after it one-row */
    for (int64_t i = 0; i < n; i++)
        bt[i] = (struct batch_tok){ seq, (int32_t)(len0 + i), tok[i], i == n - 1,
                                    len0 == 0 ? model_prompt_tiled(n, i) : 0,
                                    len0 == 0 ? model_prompt_gemm(n, i) : 0 };
    struct batch b = { n, bt, NULL, 0 };
    struct model_out out = { last_logits, NULL };
    int rc = model_forward(m, kv, &b, NULL, &out, &d);
    if (rc < 0)
        fprintf(stderr, "model_forward: %s\n", d.msg);
    free(bt);
    return rc;
}

static void
check_golden(struct model *m, struct kvcache *kv, int slow)
{
    json_t *root = NULL, *cases;
    struct diag d;
    int64_t V = m->hp.n_vocab;
    float *lg = malloc((size_t)V * sizeof(float));
    int n_first = 0, n_steps = 0, n_tie_miss = 0;

    if (access(GOLDEN, R_OK) != 0) {
        fprintf(stderr, "test_model_real: %s absent, golden check skipped\n", GOLDEN);
        free(lg);
        return;
    }
    CHECK_EQ(json_load_path(GOLDEN, JSON_MAX_FILE, &root, &d), 0);
    cases = json_object_get(root, "cases");
    CHECK(json_is_array(cases) && json_array_size(cases) > 0);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *cs = json_array_get(cases, c);
        json_t *pt = json_object_get(cs, "prompt_tokens");
        json_t *gt = json_object_get(cs, "tokens");
        json_t *mg = json_object_get(cs, "margins");
        const char *name = json_string_value(json_object_get(cs, "name"));
        size_t np = json_array_size(pt), ng = json_array_size(gt);
        if (np == 0 || ng == 0) {
            CHECK(0);
            continue;
        }
        int32_t *p = malloc(np * sizeof(int32_t));
        for (size_t i = 0; i < np; i++)
            p[i] = (int32_t)json_integer_value(json_array_get(pt, i));
        int32_t seq;
        kv_seq_new(kv, &seq);
        CHECK_EQ(fwd(m, kv, seq, p, (int64_t)np, lg), 0);
        CHECK(all_finite(lg, V));
        int want = (int)json_integer_value(json_array_get(gt, 0));
        int got = argmax(lg, V);
        if (got != want)
            fprintf(stderr, "%s: first token %d, llama.cpp %d (margin %.3f)\n", name, got, want,
                    json_number_value(json_array_get(mg, 0)));
        CHECK_EQ(got, want);
        n_first++;
        for (size_t s = 1; slow && s < ng; s++) {
            int32_t prev = (int32_t)json_integer_value(json_array_get(gt, s - 1));
            CHECK_EQ(fwd(m, kv, seq, &prev, 1, lg), 0);
            want = (int)json_integer_value(json_array_get(gt, s));
            got = argmax(lg, V);
            double margin = json_number_value(json_array_get(mg, s));
            n_steps++;
            if (got != want) {
                fprintf(stderr, "%s step %zu: %d, llama.cpp %d (margin %.3f)\n", name, s, got,
                        want, margin);
                /* the avx2 kernels compute what llama.cpp computes: no excuse */
                if (margin >= NEAR_TIE || strcmp(m->be->kernel, "avx2") == 0)
                    CHECK(0);
                else
                    n_tie_miss++;
            }
        }
        kv_seq_free(kv, seq);
        free(p);
    }
    fprintf(stderr, "test_model_real: %d prompts, %d further steps checked, %d near-tie "
            "differences\n", n_first, n_steps, n_tie_miss);
    json_decref(root);
    free(lg);
}

int
main(void)
{
    const char *cache = getenv("LLMKIT_CACHE");
    const char *home = getenv("HOME");
    const char *ci = getenv("CI");
    char path[4096];
    struct model *m = NULL;
    struct diag d;

    if (cache && *cache)
        snprintf(path, sizeof(path), "%s/SmolLM2-135M-Instruct.Q4_1.gguf", cache);
    else
        snprintf(path, sizeof(path), "%s/.cache/llmkit/SmolLM2-135M-Instruct.Q4_1.gguf",
                 home ? home : "");
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "test_model_real: %s absent%s\n", path,
                ci && strcmp(ci, "true") == 0 ? " (required in CI)" : ", skipped");
        return ci && strcmp(ci, "true") == 0 ? 1 : 77;
    }
    CHECK_EQ(model_open(&m, path, NULL, &d), 0);
    if (!m) {
        fprintf(stderr, "%s: %s\n", path, d.msg);
        T_DONE();
    }
    CHECK_EQ(m->hp.n_embd, 576);
    CHECK_EQ(m->hp.n_layer, 30);
    CHECK_EQ(m->hp.n_head, 9);
    CHECK_EQ(m->hp.n_head_kv, 3);
    CHECK_EQ(m->hp.n_ff, 1536);
    CHECK_EQ(m->hp.n_vocab, 49152);
    CHECK(m->hp.tied_output);
    CHECK_EQ(m->tok_embd.type, GGML_TYPE_Q8_0);
    CHECK_EQ(m->layers[0].wq.type, GGML_TYPE_Q4_1);
    CHECK_NEAR(m->hp.rope.freq_base, 100000.0, 0);

    struct kv_config c;
    struct kvcache *kv = NULL;
    model_kv_config(m, (size_t)32 << 20, GGML_TYPE_F16, &c);
    CHECK_EQ(kv_new(&kv, &c, &d), 0);
    int64_t V = m->hp.n_vocab;
    float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));

    /* fixed token ids: one batch against token-by-token decoding */
    static const int32_t prompt[] = { 504, 3575, 282, 4649, 314 };
    int32_t s1, s2;
    kv_seq_new(kv, &s1);
    kv_seq_new(kv, &s2);
    CHECK_EQ(fwd(m, kv, s1, prompt, 5, a), 0);
    CHECK(all_finite(a, V));
    for (int i = 0; i < 5; i++)
        CHECK_EQ(fwd(m, kv, s2, prompt + i, 1, b), 0);
    double e = 0;
    for (int64_t i = 0; i < V; i++)
        if (fabs((double)a[i] - b[i]) > e)
            e = fabs((double)a[i] - b[i]);
    CHECK(e <= 1e-4);
    kv_seq_free(kv, s1);
    kv_seq_free(kv, s2);

    const char *slow = getenv("LLMKIT_SLOW_TESTS");
    check_golden(m, kv, slow && strcmp(slow, "1") == 0);

    free(a);
    free(b);
    kv_free(kv);
    model_free(m);
    T_DONE();
}
