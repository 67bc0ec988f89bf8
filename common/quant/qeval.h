/*
 * qeval.h - what quantization cost: a base model and its quantized copy run
 * on the same tokens, chunk by chunk, as perplexity.h describes
 * (llama-perplexity's method: chunks of ctx tokens from an empty cache, BOS
 * first when the vocabulary adds one, the second half of each chunk scored).
 * For every scored position it compares the two next-token distributions:
 *
 *   nll      -log p(token) under each model -> perplexity of each
 *   KL       sum_v p_base(v) (log p_base(v) - log p_quant(v)), in nats,
 *            computed in double from the f32 logits (llama-perplexity
 *            --kl-divergence's definition); mean, median, 99th percentile
 *   top-1    whether both models rank the same token first
 */
#ifndef LLMKIT_QEVAL_H
#define LLMKIT_QEVAL_H

#include <stdint.h>

#include "runcb.h"
#include "status.h"

struct qeval_opts {
    int64_t ctx;                /* tokens per chunk (>= 4) */
    int64_t max_chunks;         /* < 0: every whole chunk */
    int n_threads;              /* <= 0: all CPUs */
    const char *kernel;         /* NULL: auto */
    struct run_callbacks cb;    /* progress ("evaluating": chunks) */
};

struct qeval_result {
    double ppl_base, ppl_base_err;
    double ppl_quant, ppl_quant_err;
    double kld_mean, kld_median, kld_p99, kld_max;
    double top1;                /* fraction of positions where the argmax agrees */
    int64_t n_tokens;           /* tokens in the text */
    int64_t n_chunks, n_scored;
};

/* qeval_run() : evaluates quant_path against base_path on the text of
 * text_path ("-" = stdin; tokenized with the base model's tokenizer, BOS
 * added as the vocabulary says).  Both must be GGUF files (not pipes) of the
 * same vocabulary.  Returns 0; -ST_IO; -ST_FORMAT (bad model, vocabularies
 * differ); -ST_RANGE (fewer than 2 * ctx tokens); -ST_NOMEM; or a forward
 * pass error. */
int qeval_run(const char *base_path, const char *quant_path, const char *text_path,
              const struct qeval_opts *o, struct qeval_result *r, struct diag *d);

#endif
