/*
 * test_devpath.c - the library's paths for a backend whose buffers are not
 * host memory (backend.host = 0: the CUDA backend), run on every machine
 * with the CPU backend standing in (its buffers are host memory, but
 * with host = 0 the library must reach them only through the backend):
 * the KV pool allocated from the backend (kv_config.be), copy-on-write and
 * swap through its copy op, the hidden states and logits rows copied by the
 * backend, hooks fed a downloaded copy.  Every result must be bit-identical
 * to the plain CPU path's.  (A read of device memory the library would make
 * directly goes unnoticed here: the stand-in's memory is host memory; that
 * is for scripts/gpu-check on a GPU.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "kvcache.h"
#include "model.h"
#include "qtypes.h"
#include "t.h"

#define FIXTURE "tests/fixtures/tiny-llama-f32.gguf"
#define NP 12

struct hooksum {
    double sum;
    long calls;
};

static int
hook(void *ctx, const struct model_hook_event *ev)
{
    struct hooksum *h = ctx;
    for (int64_t t = 0; t < ev->n_tok; t++)
        for (int64_t i = 0; i < ev->dim; i++)
            h->sum += ev->x[t * ev->ld + i];
    h->calls++;
    return 0;
}

/* a prompt, then: a fork of the sequence decoding one token into a shared
 * partial block (copy-on-write), a swap out and in of the original, one more
 * token; logits and hidden states of every step into lg/hd */
static int
run(struct model *m, float *lg, float *hd, struct hooksum *hs)
{
    const int64_t V = m->hp.n_vocab;
    struct kv_config c;
    struct kvcache *kv = NULL;
    struct diag d;
    struct batch_tok bt[NP];
    int32_t seq, fork, back;
    struct model_hooks hk = { hook, hs, MODEL_HOOK_LINEAR_IN | MODEL_HOOK_LAYER_OUT };
    int rc = -1;

    model_kv_config(m, (size_t)1 << 20, GGML_TYPE_F16, &c);
    CHECK(c.be == (m->be->host ? NULL : m->be));
    c.block_size = 8;           /* the prompt ends inside a block: a fork shares it */
    if (kv_new(&kv, &c, &d) || kv_seq_new(kv, &seq))
        goto out;
    for (int i = 0; i < NP; i++)
        bt[i] = (struct batch_tok){ seq, i, 5 + 7 * i, 1, 0, 0 };
    struct batch b = { NP, bt, NULL, 0 };
    struct model_out mo = { lg, hd };
    if (model_forward(m, kv, &b, &hk, &mo, &d))
        goto out;
    if (kv_seq_fork(kv, seq, &fork))
        goto out;
    bt[0] = (struct batch_tok){ fork, NP, 42, 1, 0, 0 };
    b.n = 1;
    mo.logits = lg + NP * V;
    mo.hidden = hd + NP * m->hp.n_embd;
    if (model_forward(m, kv, &b, &hk, &mo, &d))
        goto out;
    struct kv_swap *sw;
    if (kv_seq_swap_out(kv, seq, &sw, &d) || kv_seq_swap_in(kv, sw, &back, &d))
        goto out;
    bt[0] = (struct batch_tok){ back, NP, 43, 1, 0, 0 };
    mo.logits = lg + (NP + 1) * V;
    mo.hidden = hd + (NP + 1) * m->hp.n_embd;
    if (model_forward(m, kv, &b, &hk, &mo, &d))
        goto out;
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "test_devpath: %s\n", d.msg);
    kv_free(kv);
    return rc;
}

int
main(void)
{
    struct model *m[2];
    struct diag d;
    struct model_opts o = MODEL_OPTS_INIT;

    o.n_threads = 2;
    o.kernel = "ref";
    for (int i = 0; i < 2; i++) {
        if (model_open(&m[i], FIXTURE, &o, &d)) {
            fprintf(stderr, "test_devpath: %s: %s (make fixtures)\n", FIXTURE, d.msg);
            return 1;
        }
    }
    CHECK_EQ(m[0]->be->host, 1);
    m[1]->be->host = 0;         /* the stand-in for a device backend */
    const int64_t V = m[0]->hp.n_vocab, E = m[0]->hp.n_embd, n = NP + 2;
    float *lg[2], *hd[2];
    struct hooksum hs[2] = { { 0 } };
    for (int i = 0; i < 2; i++) {
        lg[i] = calloc((size_t)(n * V), sizeof(float));
        hd[i] = calloc((size_t)(n * E), sizeof(float));
        CHECK_EQ(run(m[i], lg[i], hd[i], &hs[i]), 0);
    }
    CHECK(memcmp(lg[0], lg[1], (size_t)(n * V) * sizeof(float)) == 0);
    CHECK(memcmp(hd[0], hd[1], (size_t)(n * E) * sizeof(float)) == 0);
    CHECK(hs[0].calls > 0 && hs[0].calls == hs[1].calls);
    CHECK(hs[0].sum == hs[1].sum);
    /* the steps after the fork and the swap are real decodes */
    int nz = 0;
    for (int64_t i = 0; i < V; i++)
        nz += lg[1][(NP + 1) * V + i] != 0.0f;
    CHECK(nz > 0);
    for (int i = 0; i < 2; i++) {
        free(lg[i]);
        free(hd[i]);
        model_free(m[i]);
    }
    T_DONE();
}
