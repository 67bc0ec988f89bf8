/*
 * distill.h - self-distillation data for draft-train: prompts whose
 * responses the base model generates itself, through the continuous-batching
 * engine of `generate --batch` (scheduler.h), so that the head learns the
 * distribution it will draft for rather than a corpus's.
 *
 * A data line of JSON Lines is an object with exactly one of
 *
 *   "text": "..."                  training text, used as it is
 *   "prompt": "..."                a prompt, tokenized with the model's BOS
 *                                  (special-token texts parsed, as generate
 *                                  -p does); the model's response follows it
 *   "messages": [{"role": "user", "content": "..."}, ...]
 *                                  a chat rendered with the model's chat
 *                                  template and the generation prompt
 *                                  (chat_encode: message text literal); the
 *                                  model's response follows it
 *
 * (other keys ignored; at most DISTILL_MSGS_MAX messages, each with string
 * "role" and "content").  The training text of a prompt line is then its
 * prompt tokens and the response tokens (the end-of-generation token not
 * included), features computed on both.
 */
#ifndef LLMKIT_DISTILL_H
#define LLMKIT_DISTILL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "chat.h"
#include "status.h"
#include "tokenizer.h"

struct model;

#define DISTILL_MSGS_MAX 256

enum distill_kind {
    DISTILL_TEXT = 0,
    DISTILL_PROMPT = 1,
    DISTILL_MESSAGES = 2,
};

struct distill_line {
    int kind;                   /* enum distill_kind */
    json_t *obj;                /* the parsed line (owned; the strings point into it) */
    const char *text;           /* TEXT and PROMPT: NUL-terminated */
    size_t text_len;            /* its length (it may hold NULs) */
    struct chat_msg *msgs;      /* MESSAGES: [n_msgs] (owned array) */
    size_t n_msgs;
};

/* distill_line_parse() : one line (without its "\n"; a final "\r" is
 * dropped).  Returns 0 with l filled, 1 for a blank line, -ST_FORMAT (not
 * JSON, not an object, none or more than one of text, prompt and messages,
 * a member of the wrong type; message in d), -ST_NOMEM.  Release l with
 * distill_line_release() in every case. */
int distill_line_parse(const char *line, size_t len, struct distill_line *l, struct diag *d);
void distill_line_release(struct distill_line *l);

/* the scheduler's tokens per step in distill_generate() */
#define DISTILL_BATCH_TOKENS 512

/* How responses are generated. */
struct distill_gen {
    int64_t max_tokens;         /* response tokens per prompt at most, >= 1 (the context
                                 * of the model, or 4096, caps prompt + response) */
    float temp;                 /* 0: greedy; > 0: temperature sampling (top-k, top-p
                                 * and min-p off), request i seeded with seed + i */
    uint64_t seed;
    int64_t max_seqs;           /* sequences generated together */
    volatile sig_atomic_t *stop;    /* NULL, or nonzero when a stop signal arrived:
                                     * checked after every scheduler step */
    double deadline;            /* now_seconds() past which no prompt starts (0 = none;
                                 * checked after every scheduler step) */
    /* NULL, or a sink for the features of the tokens computed (scheduler.h:
     * feat_hooks, feat_rows, feat_ctx; the tag is the prompt's index).  Then
     * no prefix cache, and each response is generated one token past
     * max_tokens and cut back to it, so that every token of a response cut
     * by max_tokens was computed (the last token sampled never is). */
    const struct model_hooks *feat_hooks;
    int (*feat_rows)(void *ctx, int64_t tag, int64_t pos0, const float *hidden, int64_t row0,
                     int64_t n);
    void *feat_ctx;
};

/* distill_ctx() : the tokens of prompt and response at most, for model m
 * (its training context, or 4096) */
int64_t distill_ctx(const struct model *m);

/* distill_generate() : the responses of m to the n prompts (token ids),
 * generated together by the scheduler (its default token budget and
 * preemption, no prefix cache needed); the response of prompt i is
 * appended to resp[i] and answered[i] set (n entries each, caller-owned).
 * A prompt of distill_ctx() tokens or more is left unanswered.  Past
 * g->deadline the prompts started finish and the others are left
 * unanswered: prompts start in order, so the answered ones are the first
 * ones (those too long aside), each response what it is without a
 * deadline.  *n_gen gets the
 * number of tokens generated.  Returns 0, 1 when the deadline left prompts
 * unanswered, -ST_RANGE (a prompt longer than the context, bad options), -ST_NOMEM,
 * -ST_FAIL (g->stop), or a forward-pass error. */
int distill_generate(struct model *m, const struct tokenizer *tok, struct tok_ids *prompts,
                     int64_t n, const struct distill_gen *g, struct tok_ids *resp, bool *answered,
                     int64_t *n_gen, struct diag *d);

#endif
