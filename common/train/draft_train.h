/*
 * draft_train.h - run_draft_train(): the whole `draft-train` run (tools/draft-train.c).
 *
 *   1. open the base model; tokenize the training text (plain text, or JSON
 *      Lines whose objects carry "text", or a "prompt" or chat "messages"
 *      whose responses the base model generates itself through the batch
 *      scheduler, up to gen_tokens at gen_temp: self-distillation, distill.h;
 *      the text of such a line is its prompt tokens and the response)
 *   2. cut it into sequences of seq_len + 1 tokens, put in an order whose
 *      first ones, however many, spread over the data (bit-reversed
 *      indices); the last 1/20 of them in that order (at least one
 *      sequence) is held out for evaluation, or, with eval, every one
 *      trains and eval's text (read as data is, its prompts answered
 *      whatever max_time) cut the same way is held out
 *   3. features: each sequence's final hidden states (EAGLE-3: also the
 *      hidden states entering its three feature layers), kept in f16: those
 *      of the prompts and responses from the scheduler's passes that
 *      answered them (its feature sink, scheduler.h), each in its own
 *      context; a sequence holding other tokens through the shared forward
 *      pass over it (eagle_target_features, eagle_target_features3); with
 *      cache_dir read from / written to DIR/<key>.eaglefeat.zst
 *      (zstd), key = SHA-256 of the head's architecture, the base's tensor
 *      data, the text (with prompts: and gen_tokens, gen_temp and seed; the
 *      responses are generated again all the same) and seq_len
 *   4. the CE term (EAGLE-3: the head's own LM head) over the draft_vocab
 *      most frequent tokens of the text
 *      (the LM head's rows of them; the target's distribution renormalised
 *      over them), as EAGLE-3 trains over a reduced vocabulary: the LM
 *      head's products are most of the cost of a step
 *   5. AdamW (beta 0.9/0.95, eps 1e-8, decoupled weight decay
 *      weight_decay, on every trained parameter) on the EAGLE-1
 *      loss (or EAGLE-3's, eagle3.h: features entering three layers, the
 *      training-time test unrolled ttt_steps steps, the head's own LM head
 *      over that vocabulary) with U(-noise, noise) noise on the input
 *      features; linear
 *      warmup over the first 5% of the run, then linear decay to 10% of lr;
 *      the gradient's global norm clipped to clip; the run's length is
 *      epochs over the training sequences, or what max_time leaves after
 *      steps 1-4 (then the schedule follows the training's elapsed time),
 *      whichever ends first.  max_time is the whole run's budget: no
 *      prompt starts its response after gen_share of it (the first ones
 *      answered), no sequence its features after gen_share + 0.25 (the
 *      sequences in an order whose first ones spread over the data, at
 *      least 2 kept; a cache entry holds the ones done when some were
 *      computed, and the next run goes on from it); a resumed run repeats
 *      the checkpoint's data and training time
 *   6. checkpoints (the head + optimizer state, eagle_io.h) to
 *      OUTPUT.ckpt every ckpt_every steps and when *stop becomes nonzero
 *      (then the run returns -ST_FAIL with "interrupted"); resume continues
 *      from one
 *   7. the head to output (GGUF, eagle_io.h), atomically
 */
#ifndef LLMKIT_DRAFT_TRAIN_H
#define LLMKIT_DRAFT_TRAIN_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "runcb.h"
#include "status.h"

struct draft_train_opts {
    const char *model;         /* base GGUF */
    const char *data;          /* text or JSONL file, "-" = stdin */
    const char *output;        /* head GGUF */
    const char *cache_dir;     /* NULL: no feature cache */
    int arch;                  /* EAGLE_ARCH_1 or EAGLE_ARCH_3 (eagle.h) */
    int ttt_steps;             /* EAGLE-3: training-time-test steps unrolled */
    bool force;
    bool resume;               /* continue from OUTPUT.ckpt */
    int64_t epochs;            /* 0 = until max_time (one of them must be set) */
    double max_time;           /* seconds, 0 = none */
    double lr;
    int64_t batch;             /* sequences per step */
    int64_t seq_len;           /* positions per sequence */
    uint64_t seed;
    int64_t ckpt_every;        /* steps between checkpoints, 0 = none */
    int64_t draft_vocab;       /* the CE's tokens: the text's most frequent; 0 = all */
    float noise;               /* feature noise half-width */
    float clip;                /* gradient norm clip */
    int n_threads;
    const char *kernel;
    FILE *json;                /* NULL, or --json log lines (draft-train/1) go here */
    volatile sig_atomic_t *stop;   /* NULL, or nonzero when a stop signal arrived */
    struct run_callbacks cb;
    /* self-distillation (prompt and messages lines): response tokens at
     * most, sampling temperature (0: greedy; request i seeded seed + i);
     * gen_set: they were given, so the data must have prompts */
    int64_t gen_tokens;
    float gen_temp;
    bool gen_set;
    bool no_fc_bias;           /* EAGLE-1: the FC bias held at zero (not trained) */
    const char *eval;          /* NULL, or the held-out text (as data; never trained on) */
    bool train_prompts;        /* the loss over every position, not the responses' only (the
                                * held-out figures stay the responses') */
    int init;                  /* enum draft_init */
    double gen_share;          /* of max_time: no response starts after it, no sequence's
                                * features after gen_share + 0.25 (0 < gen_share <= 0.75;
                                * default 0.25) */
    bool gen_share_set;        /* given: the data must have prompts */
    double weight_decay;       /* AdamW's decoupled weight decay (default 0.01) */
};

/* the head's starting point: random, or (EAGLE-3 on a llama model, the
 * default there) the target's last layer, final norm and LM head rows
 * (eagle_target_init_head) */
enum draft_init { DRAFT_INIT_AUTO, DRAFT_INIT_RANDOM, DRAFT_INIT_TARGET };

#define DRAFT_WEIGHT_DECAY 0.01

#define DRAFT_TRAIN_OPTS_INIT { NULL, NULL, NULL, NULL, 1, 7, false, false, 0, 0, 1e-3, 4, 256, 1, 0, \
                                8192, 0.1f, 0.5f, 0, NULL, NULL, NULL, { 0 }, 256, 0.0f, false, \
                                false, NULL, false, DRAFT_INIT_AUTO, 0.25, false, \
                                DRAFT_WEIGHT_DECAY }

struct draft_train_report {
    int64_t steps, tokens;      /* optimizer steps taken (in all), head positions trained */
    int64_t n_seq, n_hold;      /* sequences, of which held out */
    int64_t n_lm;               /* tokens of the CE term */
    double keep_frac;           /* EAGLE-3 with a draft vocabulary: the share of positions
                                 * whose target argmax is a draft token (the others carry no
                                 * loss); 1 otherwise */
    int64_t n_tok;              /* tokens of the training text */
    int64_t n_prompts, n_generated;     /* self-distillation: prompts, response tokens */
    double train_loss;          /* mean loss of the last step */
    double hold_loss, hold_acc; /* held-out loss and top-1 agreement with the target */
    int64_t hold_n;             /* the held-out positions counted (0: none, the figures 0) */
    double seconds;             /* training time, resumed runs included */
    bool cache_hit;             /* features came from the cache */
    int64_t peak_rss;           /* bytes, the process's maximum resident set */
};

/* run_draft_train() : see above; r (may be NULL) gets the figures.  Returns 0; -ST_IO, -ST_FORMAT (bad model,
 * data, cache or checkpoint), -ST_RANGE (unsupported model, too little data,
 * output refused), -ST_NOMEM, -ST_FAIL (interrupted after the checkpoint was
 * written). */
int run_draft_train(const struct draft_train_opts *o, struct draft_train_report *r,
                    struct diag *d);

#endif
