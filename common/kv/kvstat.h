/*
 * kvstat.h - the kvstat tool's library half: model descriptions from GGUF
 * headers and HF config.json files, length workloads, KV traces written by
 * `generate --kv-trace` (docs/kv-trace.md), and the reports (aligned table,
 * JSON Lines with "schema":"kvstat/1", CSV, SVG plot of a trace).
 *
 * Nothing here prints to stderr or exits: run_kvstat() writes its report to
 * the output it was asked for and returns 0 or -ST_* with a message in the
 * diag that names the file ("'x.gguf': bad magic").
 */
#ifndef LLMKIT_KVSTAT_H
#define LLMKIT_KVSTAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "gguf.h"
#include "kvmodel.h"
#include "runcb.h"
#include "status.h"

#define KVSTAT_SCHEMA "kvstat/1"
#define KVTRACE_SCHEMA "kvtrace/1"

enum kvstat_format {
    KVSTAT_TABLE,
    KVSTAT_JSON,
    KVSTAT_CSV,
};

/* What to report.  Zero means "not given" for the numeric fields unless said
 * otherwise; kvstat_opts_init() sets the defaults. */
struct kvstat_opts {
    const char *const *inputs;   /* model files ("-" = stdin), directories (config.json) */
    size_t n_inputs;
    /* a model from flags, used when n_inputs == 0 */
    int64_t layers, heads, kv_heads, head_dim;
    /* MLA: with no inputs part of the model; with --compare the MLA row */
    int64_t kv_lora_rank, rope_dim;
    enum kv_dtype kv_type;       /* default f16 */
    int64_t ctx;                 /* 0: the model's trained context, else 4096 */
    int64_t batch;               /* default 1 */
    int64_t block_size;          /* default 16 */
    int64_t mem;                 /* budget in bytes, 0 = none */
    int64_t weights;             /* bytes taken by weights, -1 = not given */
    const char *weights_name;    /* for reports: the file or the number given */
    bool compare;
    int64_t groups;              /* GQA K/V heads for --compare, 0 = default */
    /* workload: a lengths file, or a distribution (dist >= 0) */
    const char *lengths;
    int dist;                    /* enum kv_dist, -1 = none */
    double mean_prompt, mean_output;
    double shape;                /* 0 = the distribution's default */
    int64_t max_len;             /* 0: the longest request (file) or ctx */
    int64_t n;                   /* requests to draw, default 1000 */
    uint64_t seed;               /* default 1 */
    /* trace */
    const char *trace;           /* "-" = stdin */
    const char *svg;             /* plot output path ("-" = stdout) */
    /* output */
    const char *output;          /* default "-" */
    bool force;
    enum kvstat_format format;
    struct run_callbacks cb;     /* warnings (clipped lengths ...; messages quote
                                  * names from the inputs unescaped) */
};

/* kvstat_opts_init() : the defaults listed above. */
void kvstat_opts_init(struct kvstat_opts *o);

/* run_kvstat() : reads every input, computes, then writes the report to
 * o->output and the plot to o->svg, atomically and together: both are
 * renamed into place only when both were written (xout_commit_all), so
 * nothing is created when anything fails.  Strings from the inputs are
 * escaped in the table and CSV (escape.h).  Returns 0, -ST_FORMAT (bad input
 * data), -ST_IO, -ST_NOMEM, or -ST_RANGE (inconsistent request, e.g. --groups
 * that does not divide the heads), with "'FILE': problem" or "problem" in d;
 * an output that fails is named "'FILE'" or "stdout".  Messages are not
 * escaped: the caller escapes them for the terminal. */
int run_kvstat(const struct kvstat_opts *o, struct diag *d);

/* ---- model descriptions ---- */

/* kv_model_from_gguf() : the attention geometry from a GGUF header of any
 * architecture, read by arch_read_hparams() (general.architecture,
 * <arch>.block_count, .attention.head_count[_kv] (scalar or per-layer array),
 * .attention.key_length/value_length, .embedding_length,
 * .attention.kv_lora_rank and .rope.dimension_count for MLA, .context_length,
 * .attention.sliding_window[_pattern]) and kv_model_from_hparams(), with
 * general.name.  m must be initialised; it is checked with kv_model_check().
 * 0 or -ST_FORMAT naming the key. */
int kv_model_from_gguf(const struct gguf *g, struct kv_model *m, struct diag *d);

/* kv_model_from_config() : the same from a Hugging Face config.json, read by
 * arch_read_config(ARCH_READ_KV) (llama, mistral, qwen2, gemma/gemma2/gemma3
 * incl. text_config, deepseek_v2/v3, falcon, gpt_bigcode; the key spellings
 * of each), with _name_or_path.  0 or -ST_FORMAT. */
int kv_model_from_config(const json_t *cfg, struct kv_model *m, struct diag *d);

/* kvstat_load_model() : opens path (GGUF by its magic or a ".gguf" name,
 * else JSON; a directory means its config.json; "-" = stdin) and fills m.
 * *weights (may be NULL) gets a GGUF's tensor data size, or -1.  Messages in
 * d are not prefixed with the path. */
int kvstat_load_model(const char *path, struct kv_model *m, int64_t *weights, struct diag *d);

/* kvstat_parse_lengths() : a workload file: one request per line, "PROMPT
 * OUTPUT" (whitespace or a comma between them), '#' comments and blank lines
 * ignored; each request 1 to KV_MAX_LEN tokens.  *out is malloc'd (caller
 * frees).  0, -ST_FORMAT ("line N: ..."), -ST_NOMEM. */
int kvstat_parse_lengths(const char *buf, size_t len, struct kv_req **out, size_t *n,
                         struct diag *d);

/* ---- KV traces ---- */

enum kvtrace_phase {
    KVTRACE_PREFILL,
    KVTRACE_DECODE,
    KVTRACE_MIXED,
    KVTRACE_NPHASE
};

/* One plotted point: the steps of a bucket, with maxima (peaks survive
 * thinning) and the preemptions summed. */
struct kvtrace_point {
    double t;                    /* time_ms of the bucket's last step */
    int64_t step;                /* its step number */
    int64_t used, total, running, waiting, preemptions;
    int64_t n;                   /* steps merged */
};

#define KVTRACE_POINTS 1024

struct kvtrace_phase_stats {
    int64_t steps;
    double time_ms;              /* sum of the steps' durations */
    double sum_used, sum_util, sum_running, slots, stored;
    int64_t preemptions, prefix_hits;
};

/* A streaming summary: memory stays O(KVTRACE_POINTS) whatever the length. */
struct kvtrace {
    int64_t lineno;              /* lines seen */
    int64_t n_steps;
    int64_t first_step, last_step;
    double t_first, t_last;
    int64_t block_size;          /* constant over the trace */
    int64_t max_total;
    int64_t peak_used, peak_used_step;
    double peak_util;
    double sum_used, sum_util, sum_waste, slots, stored;
    int64_t peak_running, peak_waiting;
    double sum_running, sum_waiting;
    int64_t preemptions, prefix_hits;
    struct kvtrace_phase_stats phase[KVTRACE_NPHASE];
    struct kvtrace_point pts[KVTRACE_POINTS];
    size_t n_pts;
    int64_t bucket;              /* steps per point */
};

/* kvtrace_init() : an empty summary. */
void kvtrace_init(struct kvtrace *t);

/* kvtrace_add_line() : parses one line (no newline needed; len bytes, need
 * not be NUL-terminated) and adds it.  Blank lines and records whose "type"
 * is not "step" are skipped.  Checks the schema, every field's type and
 * range, block arithmetic (used + free == total, tokens fit the blocks) and
 * order (steps increase, time does not go back).  0 or -ST_FORMAT
 * "line N: ..." in d, -ST_NOMEM. */
int kvtrace_add_line(struct kvtrace *t, const char *line, size_t len, struct diag *d);

/* kvtrace_read() : reads a whole trace from path ("-" = stdin) line by line
 * (lines up to 64 KiB).  An empty trace is -ST_FORMAT. */
int kvtrace_read(struct kvtrace *t, const char *path, struct diag *d);

/* kvtrace_phase_name() : "prefill", "decode", "mixed". */
const char *kvtrace_phase_name(enum kvtrace_phase p);

/* kvtrace_svg() : a standalone SVG of blocks used/total (left axis) and
 * running/waiting sequences (right axis) over time, with axes, labels,
 * legend and preemption marks.  title is escaped.  0 or -ST_IO. */
int kvtrace_svg(const struct kvtrace *t, FILE *fp, const char *title, struct diag *d);

#endif
