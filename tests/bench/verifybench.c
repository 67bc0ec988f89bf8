/*
 * verifybench.c - what a speculative verify pass of n tokens costs at each
 * context length: model_forward of n tokens (the logits of every one, as a
 * verify pass computes them) after a sequence prefilled to c slots, the
 * fastest of 5 tries, for c = 0, 256, 1024, 2048, 4000 and n = 1, 2, 4, 8,
 * 16, 24, 32, each also as a multiple of that context's one-token pass.
 * generate's --spec-tokens auto measures only the c = 0 row and fits the
 * rest (common/model/spec.h: t(n) + n x c x slot_ms); this prints the rows
 * that fit describes, and the slot cost each implies (docs/generate.md "The
 * context in the cost").
 *
 *   build/verifybench MODEL.gguf [threads [kernel]]
 *
 * The prefill is one-row attention in chunks of up to 512 tokens (its
 * time is not measured); the n tokens are rolled back after each try.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchtime.h"
#include "kvcache.h"
#include "model.h"
#include "qtypes.h"
#include "status.h"

#define N_CTX 5
#define N_N 7

int
main(int argc, char **argv)
{
    static const int ctxs[N_CTX] = { 0, 256, 1024, 2048, 4000 };
    static const int ns[N_N] = { 1, 2, 4, 8, 16, 24, 32 };
    struct model_opts mo = MODEL_OPTS_INIT;
    struct model *m = NULL;
    struct kvcache *kv = NULL;
    struct kv_config c;
    struct diag d;
    double t[N_CTX][N_N];

    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: verifybench MODEL.gguf [threads [kernel]]\n");
        return 2;
    }
    mo.n_threads = argc > 2 ? atoi(argv[2]) : 0;
    mo.kernel = argc > 3 ? argv[3] : NULL;
    if (model_open(&m, argv[1], &mo, &d) < 0) {
        fprintf(stderr, "verifybench: %s\n", d.msg);
        return 1;
    }
    model_kv_config(m, 0, GGML_TYPE_F16, &c);
    c.mem = kv_mem_for(&c, ctxs[N_CTX - 1] + ns[N_N - 1] + 64, m->max_batch);
    float *logits = malloc((size_t)m->hp.n_vocab * (size_t)ns[N_N - 1] * sizeof(float));
    struct batch_tok *bt = calloc(512, sizeof(*bt));
    if (!c.mem || kv_new(&kv, &c, &d) < 0 || !logits || !bt) {
        fprintf(stderr, "verifybench: out of memory\n");
        return 5;
    }
    printf("%-8s", "slots");
    for (int j = 0; j < N_N; j++) {
        char h[24];
        snprintf(h, sizeof(h), "t(%d) ms", ns[j]);
        printf(" %15s", h);
    }
    printf("\n");
    for (int i = 0; i < N_CTX; i++) {
        int32_t seq;
        if (kv_seq_new(kv, &seq) < 0)
            return 5;
        for (int p = 0; p < ctxs[i]; p += 512) {
            int n = ctxs[i] - p < 512 ? ctxs[i] - p : 512;
            for (int k = 0; k < n; k++)
                bt[k] = (struct batch_tok){ .seq = seq, .pos = p + k,
                                            .token = (int32_t)((7 * (p + k) + 11) % m->hp.n_vocab) };
            struct batch b = { n, bt, NULL, 0 };
            struct model_out o = { logits, NULL };
            if (model_forward(m, kv, &b, NULL, &o, &d) < 0) {
                fprintf(stderr, "verifybench: %s\n", d.msg);
                return 1;
            }
        }
        printf("%-8d", ctxs[i]);
        for (int j = 0; j < N_N; j++) {
            double best = 1e30;
            for (int r = 0; r < 5; r++) {
                for (int k = 0; k < ns[j]; k++)
                    bt[k] = (struct batch_tok){ .seq = seq, .pos = ctxs[i] + k,
                                                .token = (int32_t)((100 + k) % m->hp.n_vocab),
                                                .logits = 1 };
                struct batch b = { ns[j], bt, NULL, 0 };
                struct model_out o = { logits, NULL };
                double t0 = bench_now();
                if (model_forward(m, kv, &b, NULL, &o, &d) < 0) {
                    fprintf(stderr, "verifybench: %s\n", d.msg);
                    return 1;
                }
                double ms = (bench_now() - t0) * 1e3;
                best = ms < best ? ms : best;
                kv_seq_truncate(kv, seq, ctxs[i]);
            }
            t[i][j] = best;
            printf(" %7.2f (%4.1fx)", best, best / t[i][0]);
        }
        printf("\n");
        kv_seq_free(kv, seq);
    }
    /* what each context adds per token and slot, against the first row */
    printf("us per token and slot over the first row:\n");
    for (int i = 1; i < N_CTX; i++) {
        printf("%-8d", ctxs[i]);
        for (int j = 0; j < N_N; j++)
            printf(" %15.2f", (t[i][j] - t[0][j]) * 1e3 / ((double)ns[j] * ctxs[i]));
        printf("\n");
    }
    kv_free(kv);
    model_free(m);
    free(logits);
    free(bt);
    return 0;
}
