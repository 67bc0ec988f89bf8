/*
 * perplexity.h - perplexity of a token sequence, computed the way
 * llama.cpp's llama-perplexity does (tools/perplexity/perplexity.cpp,
 * function perplexity(), read at ggml-org/llama.cpp commit 050fc7f3):
 *
 *   - the text is tokenized once, with BOS when the vocabulary adds one;
 *   - it is cut into n_chunk = min(chunks, n_tokens / ctx) chunks of ctx
 *     consecutive tokens (the remainder is not used);
 *   - each chunk is evaluated from an empty KV cache, its first token
 *     replaced by BOS when the vocabulary adds one;
 *   - only the second half is scored: with first = ctx / 2, the logits at
 *     positions first .. ctx-2 predict tokens first+1 .. ctx-1, so each
 *     chunk scores ctx - 1 - first tokens;
 *   - each scored token contributes nll = -log softmax(logits)[token],
 *     computed as max + log(sum exp(l - max)) - l[token] with the sum in
 *     double; the running sums are sum(nll) and sum(nll^2);
 *   - PPL = exp(mean nll); its error is PPL * sqrt(var / (count - 1)) with
 *     var = mean(nll^2) - mean(nll)^2, i.e. the standard error of the mean
 *     NLL carried through exp() to first order ("PPL = x +/- y").
 */
#ifndef LLMKIT_PERPLEXITY_H
#define LLMKIT_PERPLEXITY_H

#include <stdint.h>

#include "status.h"

struct model;
struct kvcache;

/* Running sums over scored tokens. */
struct ppl_acc {
    double nll;                 /* sum of -log p */
    double nll2;                /* sum of (log p)^2 */
    int64_t count;
};

struct model;
struct kvcache;
struct batch;
struct model_out;
struct diag;
struct run_callbacks;

/* ppl_forward() : model_forward() of tokens [p0, p0 + b->n) of a chunk of
 * ctx tokens, stating to the forward pass the size of the llama.cpp ubatch
 * they were in (the chunk cut in ubatches of 512 from position 0), so that
 * attention and float matmuls round as llama-perplexity's do (model.h,
 * llamacpp_ubatch).  The call must not straddle two ubatches (ppl_cut). */
int ppl_forward(struct model *m, struct kvcache *kv, const struct batch *b,
                struct model_out *mo, int64_t ctx, int64_t p0, struct diag *d);

/* ppl_cut() : the length of the next call from position p0: at most n, not
 * past the end of p0's ubatch. */
int64_t ppl_cut(int64_t p0, int64_t n);

/* ppl_token_nll() : -log softmax(logits)[tok] over n_vocab logits. */
double ppl_token_nll(const float *logits, int64_t n_vocab, int32_t tok);

/* ppl_acc_add() : adds one token's nll. */
void ppl_acc_add(struct ppl_acc *a, double nll);

/* ppl_acc_result() : PPL = exp(mean) into *ppl and its standard error into
 * *err (0 when fewer than two tokens or the variance is not positive). */
void ppl_acc_result(const struct ppl_acc *a, double *ppl, double *err);

struct ppl_result {
    double ppl, err;
    double nll_mean;
    int64_t n_chunks;           /* chunks evaluated */
    int64_t n_scored;           /* tokens scored */
    double *chunk_ppl;          /* [n_chunks] running PPL after each chunk (malloc'd;
                                 * the caller frees it) */
};

/* perplexity_check() : -ST_RANGE when ctx < 4 or n_tokens < 2 * ctx (the
 * message says how many are needed), else 0: perplexity_run()'s refusals,
 * for a caller to make before it allocates a KV pool for ctx tokens. */
int perplexity_check(int64_t n_tokens, int64_t ctx, struct diag *d);

/* perplexity_run() : evaluates tokens[0..n_tokens) as described above with
 * m, using kv (configured for m and able to hold ctx tokens) for one
 * sequence at a time.  bos is the BOS id that replaces each chunk's first
 * token, or -1 to keep the tokens as they are.  max_chunks < 0 means all.
 * cb (may be NULL) hears of progress as "perplexity": (0, n) first and
 * (i, n) after chunk i.  Fills r (r->chunk_ppl owned by the caller).
 * Returns 0; -ST_RANGE (ctx < 4, or fewer than 2 * ctx tokens, as
 * llama-perplexity requires; the message says how many are needed);
 * -ST_NOMEM; or model_forward()'s error. */
int perplexity_run(struct model *m, struct kvcache *kv, const int32_t *tokens, int64_t n_tokens,
                   int64_t ctx, int64_t max_chunks, int32_t bos, const struct run_callbacks *cb,
                   struct ppl_result *r, struct diag *d);

#endif
