/*
 * sample.h - choosing the next token from a row of logits.
 *
 * The chain runs in llama.cpp's default order (common_params_sampling's
 * sampler list, leaving out the samplers llmkit does not have):
 *
 *   repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw
 *
 * so top-k, top-p and min-p see the untempered distribution, and the
 * temperature only reshapes what they kept.  With temp <= 0 the chain is
 * greedy: the token with the highest logit after the penalty (ties go to
 * the lowest id).  Every stage is a no-op at its "off" value: top_k <= 0,
 * top_p >= 1, min_p <= 0, repeat_penalty == 1 or repeat_last_n == 0.
 *
 * Random numbers come from xoshiro256** (Blackman and Vigna), its 256-bit
 * state filled by four outputs of splitmix64 started at the seed; a draw
 * takes the top 53 bits of one output as a double in [0, 1) and walks the
 * cumulative distribution of the candidates sorted by decreasing logit
 * (ties by increasing id).  The same seed, parameters and logits give the
 * same tokens on every machine.
 */
#ifndef LLMKIT_SAMPLE_H
#define LLMKIT_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rng.h"
#include "status.h"

struct sample_params {
    float temp;             /* temperature; <= 0: greedy (default 0.8) */
    int32_t top_k;          /* keep the k most likely; <= 0: off (default 40) */
    float top_p;            /* nucleus: smallest set with mass >= p; >= 1: off (default 0.95) */
    float min_p;            /* keep p >= min_p * p_max; <= 0: off (default 0.05) */
    float repeat_penalty;   /* divide positive / multiply negative logits of recent tokens (default 1 = off) */
    int32_t repeat_last_n;  /* how many recent tokens the penalty looks at; 0: off (default 64) */
    uint64_t seed;          /* RNG seed (default 0; tools pick a random one unless --seed) */
};

/* sample_params_init() : llama.cpp's defaults, listed above. */
void sample_params_init(struct sample_params *p);

/* sample_random_seed() : a seed for a run without --seed, from getrandom()
 * (the time and the process id where that fails), below 2^53 so that a JSON
 * number holds it exactly. */
uint64_t sample_random_seed(void);

/* ---- candidate sets: the stages one by one ---- */

struct sample_cand {
    int32_t id;
    float logit;
    float p;                /* probability, valid after sample_softmax() */
};

/* A set of candidates over caller-owned storage.  sorted: c[] is in
 * decreasing logit order (ties by increasing id). */
struct sample_set {
    struct sample_cand *c;
    size_t n;
    bool sorted;
};

/* sample_set_fill() : every token of the vocabulary, in id order; c must
 * hold n_vocab entries. */
void sample_set_fill(struct sample_set *s, struct sample_cand *c, const float *logits, int32_t n_vocab);

/* sample_penalty() : repetition penalty (CTRL, Keskar et al. 2019, as
 * llama.cpp applies it): each distinct token of hist[0..n_hist) has its
 * logit divided by penalty when positive, multiplied when not.  The set must
 * still be the whole vocabulary in id order (the first stage of the chain);
 * ids in hist outside the vocabulary are ignored. */
void sample_penalty(struct sample_set *s, const int32_t *hist, size_t n_hist, float penalty);

/* sample_top_k() : keeps the k highest logits and leaves the set sorted. */
void sample_top_k(struct sample_set *s, int32_t k);

/* sample_softmax() : sorts the set if needed and sets p to softmax(logit). */
void sample_softmax(struct sample_set *s);

/* sample_top_p() : keeps the shortest prefix of the sorted set whose
 * probability mass reaches p (at least one token). */
void sample_top_p(struct sample_set *s, float p);

/* sample_min_p() : keeps the tokens with p >= min_p * max p, i.e. logit >=
 * max logit + log(min_p) (at least one token). */
void sample_min_p(struct sample_set *s, float min_p);

/* sample_temperature() : divides every logit by t (t > 0). */
void sample_temperature(struct sample_set *s, float t);

/* sample_draw() : softmax, then the token at a uniform point of the
 * cumulative distribution.  The set must not be empty. */
int32_t sample_draw(struct sample_set *s, struct rng *r);

/* sample_argmax() : the id of the highest logit (the lowest id among ties). */
int32_t sample_argmax(const float *logits, int32_t n);

/* ---- the whole chain ---- */

struct sampler;

/* sampler_new() : a sampler for a vocabulary of n_vocab tokens with its own
 * RNG (seeded from p->seed) and scratch; the caller frees it with
 * sampler_free().  Returns 0, -ST_RANGE (bad parameters, message in d) or
 * -ST_NOMEM. */
int sampler_new(struct sampler **out, const struct sample_params *p, int32_t n_vocab, struct diag *d);

/* sampler_free() : releases s (NULL is fine). */
void sampler_free(struct sampler *s);

/* sampler_accept() : appends a token to the history the repetition penalty
 * looks at (prompt tokens and generated tokens, as llama.cpp does). */
void sampler_accept(struct sampler *s, int32_t token);

/* sampler_reset() : empties the history and reseeds the RNG from seed. */
void sampler_reset(struct sampler *s, uint64_t seed);

/* sampler_sample() : runs the chain on one row of n_vocab logits (not
 * modified) and returns the chosen id.  Does not accept the token. */
int32_t sampler_sample(struct sampler *s, const float *logits);

#endif
