/*
 * generate.h - the `generate` tool's work: one prompt through the model with
 * streamed output, or a perplexity evaluation (perplexity.h).  The tool
 * parses options into struct generate_opts and calls run_generate(); this
 * module never writes to stderr and never exits: notes, warnings and
 * progress go to o->cb, statistics come back in struct generate_report for
 * the tool to print (generate_report_print).
 *
 * A run: open the model (model.h) and its tokenizer (tokenizer.h); read the
 * prompt (-p text, -f file or standard input; one trailing newline of a
 * file or of standard input is dropped, as llama.cpp does); with chat, wrap
 * it in the model's chat template (chat.h) with an optional system message;
 * tokenize it (with BOS when the vocabulary asks for one; control-token
 * texts are special in a plain prompt, but with chat only in the template's
 * markers unless parse_special: chat_encode); prefill the whole
 * prompt as ONE batch through model_forward(); then decode one token per
 * step, sampling (sample.h) from the last logits, until an end-of-generation
 * token, n_predict tokens, or the context is full.  Each token's text is
 * written to the output as soon as it is produced, never splitting a UTF-8
 * sequence (an incomplete one is held back until it completes), and flushed.
 * With json the text is not streamed; one generate/1 object is written at
 * the end instead.
 */
#ifndef LLMKIT_GENERATE_H
#define LLMKIT_GENERATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "runcb.h"
#include "sample.h"
#include "spec.h"
#include "status.h"

struct generate_opts {
    const char *model;          /* -m: GGUF path (required) */
    const char *prompt;         /* -p TEXT */
    const char *prompt_file;    /* -f FILE, "-" = stdin; with prompt NULL too: stdin */
    const char *output;         /* -o FILE; NULL or "-" = stdout */
    bool force;                 /* replace an existing -o file */
    int64_t n_predict;          /* -n: tokens to generate; < 0 = until EOS or context full */
    bool chat;                  /* wrap the prompt in the model's chat template */
    bool ignore_eos;            /* keep generating past end-of-generation tokens (benchmarks) */
    const char *system;         /* system message for chat (NULL = none) */
    bool parse_special;         /* chat: control-token texts in the prompt and the system
                                 * message become control tokens (default: plain text;
                                 * only the template's markers are special) */
    struct sample_params sp;    /* sampling; sp.seed is used as given */
    int32_t repeat_last_n;      /* -1 = the whole context, else >= 0 (copied into sp) */
    int threads;                /* <= 0 = all online CPUs */
    const char *kernel;         /* "ref", "auto"; NULL = $LLMKIT_KERNEL or auto */
    const char *device;         /* "cpu" (NULL), "cuda": model_opts.device */
    int64_t kv_mem;             /* KV budget in bytes; 0 = enough for ctx tokens */
    int64_t ctx;                /* context (tokens); 0 = the model's training context
                                 * (generation) or 512 (perplexity) */
    bool json;                  /* one generate/1 JSON object instead of text */
    int top_logits;             /* json: the top_logits largest raw logits of the step
                                 * that chose each generated token (0: none) */
    /* speculative decoding (spec.h), the output plain decoding's token for
     * token: prompt lookup drafts (a chain from the longest matching n-gram
     * of at most lookup_ngram tokens), or a draft model's tree (spec_depth
     * levels of spec_width tokens, the chain stopping where the draft's best
     * token has probability < draft_p_min); at most spec_tokens draft
     * tokens per verify pass */
    bool lookup;
    int lookup_ngram;           /* default 3 */
    const char *draft;          /* the draft model's GGUF, or NULL */
    const char *draft_head;     /* an EAGLE head (eagle_draft.h): EAGLE-2 trees of
                                 * spec_depth levels, spec_width children per node; or NULL */
    int spec_depth;             /* default 8 */
    int spec_width;             /* default 1 (a chain) */
    float draft_p_min;          /* default 0.5; with a head, the EAGLE-2 confidence floor
                                 * (eagle_draft.h; the tool's default there: 0) */
    bool spec_compare;          /* also decode plainly (first, silently): check that the
                                 * tokens are the same (-ST_CHECK if not), report the speedup */
    int64_t spec_tokens;        /* draft tokens per verify pass; 0 (the default): auto,
                                 * the number of levels that maximises the expected
                                 * tokens per second (spec_choose) */
    const char *perplexity;     /* evaluate perplexity over this file instead */
    int64_t chunks;             /* perplexity: at most this many chunks; < 0 = all */
    struct run_callbacks cb;    /* progress (perplexity chunks), notes, warnings
                                 * (e.g. a guessed chat template) */
};

/* utf8_valid_dup() : a malloc'd copy of s[0..n), NUL-terminated, length in
 * *out_len, in which every ill-formed sequence is replaced by U+FFFD, one per
 * maximal subpart (Unicode 3.9, "substitution of maximal subparts", as
 * Python's errors="replace" does): text for JSON.  NULL when out of memory. */
char *utf8_valid_dup(const char *s, size_t n, size_t *out_len);

/* generate_opts_init() : the defaults above (sampling: sample_params_init,
 * repeat_last_n 64, n_predict -1, chunks -1). */
void generate_opts_init(struct generate_opts *o);

struct generate_report {
    bool perplexity;            /* which half below is filled */
    uint64_t seed;
    int64_t ctx;                /* context used (tokens) */
    int threads;
    const char *kernel;         /* the kernel implementation used */
    double load_ms;             /* model open + tokenizer load */
    int64_t kv_bytes;           /* the KV pool's budget (--kv-mem, or --ctx tokens) */
    int64_t max_rss_bytes;      /* the process's peak resident set when the
                                 * results were written (getrusage) */
    /* generation */
    int64_t prompt_tokens;
    int64_t completion_tokens;
    const char *finish_reason;  /* "stop" (end-of-generation token) or "length" */
    double prompt_ms;           /* prefill of the whole prompt */
    double gen_ms;              /* decode steps after the first token */
    double ttft_ms;             /* prefill + first sample */
    double total_ms;            /* prompt + generation */
    double prompt_tok_s;
    double gen_tok_s;           /* tokens after the first / gen_ms */
    bool ends_in_newline;       /* the streamed text ended with '\n' (or was empty) */
    /* speculative decoding (drafter NULL: none) */
    const char *drafter;        /* "lookup", "draft" */
    int64_t spec_passes;        /* decode forward passes */
    int64_t spec_drafted;       /* draft tokens verified */
    int64_t spec_accepted;      /* of them, kept */
    bool spec_auto;             /* the draft size chosen as the run goes */
    int64_t spec_budget;        /* the fixed draft size (spec_tokens) */
    int64_t spec_levels;        /* auto: the levels chosen, summed over the passes */
    double spec_draft_ms, spec_verify_ms;
    bool spec_compared;         /* --spec-compare ran the plain decoding */
    double spec_plain_tok_s;    /* its speed (0: not run, or nothing to time: one token) */
    struct spec_cost spec_cost; /* auto: the verify pass's measured cost */
    /* perplexity (perplexity.h) */
    double ppl, ppl_err;
    int64_t ppl_chunks;
    int64_t ppl_file_tokens;
    int64_t ppl_scored;
    double ppl_ms;
    double ppl_tok_s;           /* tokens evaluated per second */
};

/* run_generate() : does the whole run described at the top of this file and
 * fills r.  The output file is written atomically (xio.h) unless it is
 * stdout, where text streams as it is produced.
 * Every message about a file names it ("'out.txt': write failed: ...";
 * standard output is "stdout", standard input '<stdin>').
 * Returns 0; -ST_IO (model, prompt or output file); -ST_FORMAT (bad model
 * or tokenizer data, the message names it); -ST_RANGE (prompt longer than
 * the context, bad option value); -ST_NOMEM. */
int run_generate(const struct generate_opts *o, struct generate_report *r, struct diag *d);

/* generate_report_print() : the one-line summary of a run (generation or
 * perplexity), beginning with prefix and ": " (the tool's name), on fp. */
void generate_report_print(const struct generate_report *r, const char *prefix, FILE *fp);

/* ---- pieces, for tests and for other front ends ---- */

/* UTF-8 streaming: bytes are appended to a small pending buffer, and the
 * longest prefix that does not end inside a multibyte sequence is released.
 * Invalid bytes are released as they are (they can never complete).  With
 * escape (the text goes to a terminal), what is released is written through
 * esc_fwrite() (escape.h) with its line breaks kept, as --detokenize writes
 * to a terminal: a character split between tokens is escaped whole, and no
 * control sequence from the vocabulary reaches the terminal.  Without it the
 * bytes are written as they are. */
struct utf8_stream {
    unsigned char pend[8];
    int n;
    bool escape;
};

/* utf8_stream_push() : appends len bytes of s, writes every complete
 * prefix to fp (escaped with u->escape) and keeps an incomplete tail (at
 * most 3 bytes).  0 or -ST_IO (write error, message in d). */
int utf8_stream_push(struct utf8_stream *u, const char *s, size_t len, FILE *fp, struct diag *d);

/* utf8_stream_flush() : writes whatever is pending (end of generation). */
int utf8_stream_flush(struct utf8_stream *u, FILE *fp, struct diag *d);

/* utf8_complete_len() : length of the longest prefix of s[0..n) that does
 * not end inside an incomplete (but so far valid) multibyte sequence. */
size_t utf8_complete_len(const unsigned char *s, size_t n);

#endif
