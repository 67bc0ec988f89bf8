/*
 * genbatch.h - `generate --batch`: a file or stream of requests through the
 * continuous-batching engine (scheduler.h), one JSON result line per request
 * as soon as it finishes.
 *
 * Input: one request per line (JSON Lines; at most BATCH_LINE_MAX bytes a
 * line, a longer one ends the run: struct batch_reader; "\r\n" accepted;
 * blank lines skipped).  A line whose first
 * non-blank byte is '{' is a JSON object:
 *
 *   {"id": "a1" | 7, "prompt": "text" | "tokens": [1, 2, ...],
 *    "max_tokens": N, "temperature": t, "top_p": p, "top_k": k,
 *    "min_p": p, "repeat_penalty": r, "seed": s, "stop": "x" | ["x", ...]}
 *
 * Exactly one of prompt and tokens; everything else is optional (defaults:
 * the line number as id, and the tool's -n, --temp, --top-p, --top-k,
 * --min-p, --repeat-penalty, --seed).  Unknown keys are ignored.  A prompt
 * is wrapped in the chat template with --chat (its text tokenized literally
 * unless --parse-special: chat_encode) and tokenized with the model's BOS;
 * tokens are used as given.  Any other line is a prompt as plain text (id =
 * its line number).  An id names one request: a line whose id (explicit,
 * or its line number by default) an earlier line already had - whatever
 * became of that line - gets an error result ("duplicate id") instead of
 * running; ids of different JSON types ("7" and 7) differ.
 *
 * Output: per request, in the order requests finish,
 *
 *   {"schema":"generate/1","type":"completion","id":..,"line":N,"text":"..",
 *    "tokens":[..],"finish_reason":"stop"|"length","prompt_tokens":N,
 *    "completion_tokens":N,"cached_tokens":N,"preemptions":N,
 *    "queue_ms":x,"ttft_ms":x,"total_ms":x}
 *
 * (text with invalid UTF-8 replaced by U+FFFD; times from the moment the
 * line was read; finish_reason "cancelled" for a request cut off by a stop
 * request, below), or for a line that cannot be run
 *
 *   {"schema":"generate/1","type":"error","id":..,"line":N,
 *    "finish_reason":"error","error":"message"}
 *
 * and the run goes on ("line" is the request's line number in the input,
 * counted from 1, blank lines included).  With a KV trace file, one kvtrace/1 line per
 * engine step (docs/kv-trace.md), after a "header" line and before a
 * closing "summary" line.
 */
#ifndef LLMKIT_GENBATCH_H
#define LLMKIT_GENBATCH_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "generate.h"
#include "sample.h"
#include "status.h"

#define BATCH_LINE_MAX ((size_t)16 << 20)

/* A request file or stream (--batch, --merge), read with read(2) into a
 * buffer of its own, so that --batch can look for more requests without
 * blocking while sequences run.  A line has at most BATCH_LINE_MAX bytes
 * (its "\n" or "\r\n" aside): the buffer grows to that and its ending
 * and no further, and a line that does not end there fails the read as
 * soon as its first BATCH_LINE_MAX + 2 bytes are in, the rest of it unread
 * (an endless input with no newline, such as /dev/zero, ends at once). */
struct batch_reader {
    int fd;
    const char *name;           /* for messages: the path or "<stdin>" */
    bool own, eof;
    char *buf;
    size_t start, end, cap;
    int64_t lineno;             /* lines given so far */
};

/* batch_reader_open() : path, or standard input for NULL or "-" (not
 * closed).  0; -ST_IO (cannot open, a directory: the message names it);
 * -ST_NOMEM.  rd is released on failure. */
int batch_reader_open(struct batch_reader *rd, const char *path, struct diag *d);

/* batch_reader_fill() : reads what is available, waiting up to 100 ms for
 * it when block (so that a caller sees a stop request soon).  0 (rd->eof
 * set at the end of the input); -ST_FORMAT for a line longer than
 * BATCH_LINE_MAX ("'<name>' line N: longer than ..."); -ST_IO; -ST_NOMEM.
 * Call it when batch_reader_line() has no line to give. */
int batch_reader_fill(struct batch_reader *rd, bool block, struct diag *d);

/* batch_reader_line() : the next complete line (the last one may lack its
 * "\n" at the end of the input), without its "\n": 1 with *line and *len
 * (valid until the next call; rd->lineno is its number), 0 when none is
 * buffered, -ST_FORMAT for a line over BATCH_LINE_MAX (a last "\r" aside:
 * a line may end "\r\n"). */
int batch_reader_line(struct batch_reader *rd, const char **line, size_t *len, struct diag *d);

/* batch_reader_has_line() : whether batch_reader_line() would give one. */
bool batch_reader_has_line(const struct batch_reader *rd);

/* batch_reader_next() : the next line, waiting for it: 1 as
 * batch_reader_line(), 0 at the end of the input, or batch_reader_fill()'s
 * error.  Never takes a failed read for the end of the input. */
int batch_reader_next(struct batch_reader *rd, const char **line, size_t *len,
                      struct diag *d);

/* batch_reader_release() : closes what batch_reader_open() opened and frees
 * the buffer; NULL and a released reader are fine. */
void batch_reader_release(struct batch_reader *rd);

/* A share of the requests: request k (counting from 0 the lines that are
 * requests, i.e. not blank) is this run's when k mod count == index, or,
 * by_id, when id_hash(its id) mod count == index (idset.h: FNV-1a of the
 * id's type and value, so every line with one id falls in one shard).
 * Every shard reads every line, so that each one refuses the same
 * duplicate ids a single run would. */
struct batch_shard {
    int64_t index, count;       /* 0 <= index < count; count 0 = no sharding */
    bool by_id;
};

#define BATCH_SHARDS_MAX ((int64_t)1 << 30)

/* batch_shard_parse() : "I/N" (decimal, 0 <= I < N <= BATCH_SHARDS_MAX;
 * no sign, blank or other character) into sh->index and sh->count.
 * Returns 0 or -ST_RANGE with the reason in d. */
int batch_shard_parse(const char *s, struct batch_shard *sh, struct diag *d);

struct batch_opts {
    const struct generate_opts *g;  /* model, output, force, n_predict, chat, system,
                                     * ignore_eos, sampling defaults, repeat_last_n,
                                     * threads, kernel, kv_mem, ctx */
    const char *input;          /* request file; NULL or "-" = stdin */
    int64_t max_seqs;           /* --max-seqs */
    int64_t max_batch_tokens;   /* --max-batch-tokens */
    int64_t block_size;         /* --block-size; 0 = 16 */
    uint32_t kv_type;           /* GGML_TYPE_F16, _F32 or _Q8_0 */
    int policy;                 /* enum sched_policy */
    int preempt;                /* enum sched_preempt */
    bool prefix_cache;
    const char *trace;          /* --kv-trace FILE, or NULL */
    /* Set asynchronously (signal handler) to the number of stop requests:
     * 1 = admit nothing new and let the started requests finish (drain),
     * for at most drain_timeout seconds; 2 = end the drain after the
     * current step.  When the drain ends early, every started request
     * (running, or preempted and waiting to resume) ends with
     * finish_reason "cancelled" and its result line is written; requests
     * never started get no line.  May be NULL. */
    volatile sig_atomic_t *stop;
    double drain_timeout;       /* --drain-timeout seconds (default 30); 0 = cancel at once;
                                 * < 0 = no limit */
    struct batch_shard shard;   /* --shard I/N, --shard-by; count 0 = every request */
    const char *resume;         /* --resume FILE (resume.h): results appended there
                                 * instead of g->output, requests it has done skipped */
    int64_t sync_lines;         /* --sync-lines; 0 = RESUME_SYNC_LINES */
    double sync_seconds;        /* --sync-seconds; < 0 = RESUME_SYNC_SECONDS */
};

void batch_opts_init(struct batch_opts *o, const struct generate_opts *g);

struct batch_report {
    int64_t requests;           /* lines that were requests */
    int64_t completed;          /* result lines written (cancelled ones included) */
    int64_t cancelled;          /* of which finish_reason "cancelled" */
    int64_t errors;             /* error lines written */
    int64_t unfinished;         /* accepted, never started, dropped by a stop request */
    int64_t other_shards;       /* requests of other shards (not counted in requests) */
    int64_t resumed;            /* of requests: done already in the --resume file */
    int64_t resume_kept;        /* results the --resume file had, kept */
    int64_t resume_dropped;     /* error, cancelled, repeated results it had, dropped */
    size_t resume_torn;         /* bytes of a torn last line cut off it */
    int64_t prompt_tokens, generated;
    int64_t steps, preemptions, prefix_hits;
    double wall_ms;             /* first step to last */
    double gen_tok_s;           /* generated tokens / wall */
    double waste_paged;         /* 1 - stored / allocated slots, over all steps */
    double waste_contig;        /* 1 - tokens / (prompt + max output) reserved, over all steps */
    size_t swap_peak;
    int64_t ctx, blocks_total, block_size;
    int threads;
    const char *kernel;
    const char *spec;           /* the drafter: "lookup", "draft", "eagle"; NULL = none */
    int64_t spec_passes, spec_drafted, spec_accepted;   /* sched_totals */
    double spec_levels;         /* --spec-tokens auto: the mean draft size chosen per
                                 * sequence and step; -1 when fixed */
    double spec_slot_ms;        /* auto: the verify cost per token and slot of context
                                 * fitted (spec.h slot_ms; 0: none) */
};

/* --spec-tokens auto with --batch: each step's draft size per sequence is
 * chosen (sched_opts.spec_cost) from the model's verify cost curve,
 * measured once at the start for up to max_seqs * (1 + this) tokens (at
 * most 32, extrapolated beyond), the sequences decoding in the step and
 * the acceptance so far: at most this many tokens, 0 when drafting does
 * not pay */
#define BATCH_SPEC_AUTO 4

/* run_generate_batch() : the run described at the top of this file.  The
 * output and the trace are written atomically unless stdout, and committed
 * together (xout_commit_all: both or neither); what finished before a stop
 * request is kept.  With o->resume, results are appended to that file as
 * they come instead (resume.h; the trace is still atomic), and a request
 * whose id has a result there is skipped; its line number must be the one
 * the result names (else -ST_FORMAT: results of another request file).  Messages name the file concerned.  Returns 0 (error lines may have
 * been written: see r->errors); -ST_IO, -ST_FORMAT (model), -ST_RANGE (bad
 * option), -ST_NOMEM (including a KV budget too small for any request). */
int run_generate_batch(const struct batch_opts *o, struct batch_report *r, struct diag *d);

/* batch_report_print() : the two summary lines of a run, each beginning
 * with prefix and ": " (the tool's name), on fp. */
void batch_report_print(const struct batch_report *r, const char *prefix, FILE *fp);

/* batch_kv_type_parse() : "f16", "f32" or "q8_0" -> GGML_TYPE_*, or -1. */
int batch_kv_type_parse(const char *s);

/* ---- the request parser (also for the fuzz harness) ---- */

struct batch_req_defaults {
    int64_t max_tokens;         /* < 0 = until the end or the context */
    struct sample_params sp;
};

struct batch_req {
    json_t *id;                 /* string or integer (a reference is held) */
    char *prompt;               /* NUL-terminated (may hold NULs: prompt_len), or NULL */
    size_t prompt_len;
    int32_t *tokens;            /* or NULL */
    int64_t n_tokens;
    int64_t max_tokens;
    struct sample_params sp;
    char **stop;
    size_t n_stop;
};

/* batch_req_parse() : one input line (without its "\n"; a final "\r" is
 * dropped) numbered lineno.  Returns 0 with r filled, 1 for a blank line
 * (r empty), -ST_FORMAT for a bad request (message in d; r->id is still
 * set, to the request's id when it could be read, else the line number),
 * -ST_NOMEM.  Release r with batch_req_release() in every case. */
int batch_req_parse(const char *line, size_t len, int64_t lineno,
                    const struct batch_req_defaults *def, struct batch_req *r, struct diag *d);

void batch_req_release(struct batch_req *r);

/* batch_read_ids() : reads the requests at path ("-" = standard input)
 * through struct batch_reader, as --batch does, and calls fn(ctx, id, line)
 * for every line: id is the request's id as batch_req_parse gives it (a bad
 * request has one too), NULL for a blank line, borrowed for the call; fn
 * returns 0 or -ST_NOMEM.  Returns 0; the reader's errors (a line over
 * BATCH_LINE_MAX ends it, as it ends a batch); -ST_NOMEM ("'<name>' line N:
 * out of memory"). */
int batch_read_ids(const char *path, int (*fn)(void *ctx, json_t *id, int64_t line),
                   void *ctx, struct diag *d);

#endif
