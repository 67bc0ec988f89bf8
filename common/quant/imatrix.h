/*
 * imatrix.h - importance matrices: the per-column mean of squared
 * activations at the input of every linear, as llama.cpp's llama-imatrix
 * collects them and llama-quantize consumes them (llama.cpp
 * tools/imatrix/imatrix.cpp: IMatrixCollector::collect_imatrix, save_imatrix,
 * save_imatrix_legacy; tools/quantize/quantize.cpp: load_imatrix).
 *
 * An entry holds, for one weight (by tensor name), the raw sums of x_j^2 over
 * every token row that went through it, per input column j, and the number of
 * rows (n_mat slices for 3-D expert weights; 1 for dense ones).
 *
 * Files:
 *   GGUF (llama.cpp's default): general.type = "imatrix", imatrix.datasets
 *     (array of strings), imatrix.chunk_count (u32), imatrix.chunk_size (u32);
 *     tensors "<name>.in_sum2" (F32, ne = [ne0, n_mat]) and "<name>.counts"
 *     (F32, ne = [1, n_mat]), entries sorted by name.
 *   legacy .dat: i32 n_entries, then per entry i32 name_len, name bytes,
 *     i32 ncall, i32 nval, f32 values[nval] (= sum / count * ncall); then an
 *     optional i32 chunk count and i32 length + dataset name.
 */
#ifndef LLMKIT_IMATRIX_H
#define LLMKIT_IMATRIX_H

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "runcb.h"
#include "status.h"
#include "xio.h"

struct model;
struct kvcache;

struct imatrix_entry {
    char *name;                 /* weight tensor name, e.g. "blk.0.attn_q.weight" */
    int64_t ne0;                /* input columns */
    int64_t n_mat;              /* slices (experts); 1 for a dense weight */
    float *sums;                /* [n_mat][ne0]: GGUF/collected: sum of x^2;
                                 * legacy: the stored values (mean * ncall) */
    int64_t *counts;            /* [n_mat]: rows seen; legacy: [0] = ncall */
};

struct imatrix {
    struct imatrix_entry *e;
    size_t n, cap;
    char **datasets;            /* names of the calibration texts */
    size_t n_datasets;
    int64_t chunk_count;        /* chunks processed */
    int64_t chunk_size;         /* tokens per chunk (0 for legacy files) */
    bool legacy;                /* read from a .dat file: sums are means * ncall */
    bool has_metadata;          /* GGUF with all three imatrix.* keys */
};

/* imatrix_init() : an empty matrix (caller-owned storage). */
void imatrix_init(struct imatrix *im);

/* imatrix_release() : frees what im owns; safe on an initialised or
 * released matrix. */
void imatrix_release(struct imatrix *im);

/* What an imatrix for a given model can hold (imatrix_limits_of): at most
 * one entry per tensor of the model, each of at most n_values values (the
 * widest tensor's row: columns times expert slices). */
struct imatrix_limits {
    uint64_t n_entries;
    int64_t n_values;
};

struct gguf;

/* imatrix_limits_of() : the limits of an imatrix for the model g. */
void imatrix_limits_of(struct imatrix_limits *lim, const struct gguf *g);

/* imatrix_check_limits() : 0, or -ST_FORMAT when im has more entries than
 * lim allows, or an entry with more values ("entry 'x' has 9000 values, more
 * than any tensor's row of the model (256)"). */
int imatrix_check_limits(const struct imatrix *im, const struct imatrix_limits *lim,
                         struct diag *d);

/* The bytes of an imatrix file, read once (imatrix_file_open). */
struct imatrix_file {
    const uint8_t *p;           /* the whole file */
    size_t n;
    struct src src;             /* the file, mapped when it is a regular one */
    uint8_t *buf;               /* a stream's bytes, owned */
};

/* imatrix_file_open() : the bytes of the imatrix file at path ("-" = standard
 * input), opened and read once, so that a pipe or FIFO works as a file
 * does: a regular file is mapped; a stream (pipe, FIFO, device) is read to
 * its end after its first bytes are checked (the GGUF magic, version and
 * counts, or the legacy entry count), so that /dev/zero or any other stream
 * that is no imatrix fails at once.  With lim (the model's, may be NULL) the
 * counts must be within it, each record is checked as it arrives (a legacy
 * entry's name length and value count; a GGUF metadata record within the
 * 1 MiB of metadata an imatrix has, a GGUF tensor record's name, dimensions
 * and value count), so that a stream fails at its first record that no
 * imatrix of the model has, and a stream is read no further than an
 * imatrix of lim can reach; without it, at most 4 GiB.  Release with
 * imatrix_file_close.  Returns 0, -ST_IO, -ST_FORMAT, -ST_NOMEM. */
int imatrix_file_open(struct imatrix_file *f, const char *path, const struct imatrix_limits *lim,
                      struct diag *d);

/* imatrix_file_close() : releases f; safe on a zeroed or closed one. */
void imatrix_file_close(struct imatrix_file *f);

/* imatrix_read() : reads an imatrix file (imatrix_file_open): GGUF when it
 * starts with the GGUF magic, else the legacy format.  Every count and
 * length is checked against the bytes present.  "-" reads standard input.
 * Returns 0, -ST_IO, -ST_FORMAT (message in d), -ST_NOMEM. */
int imatrix_read(struct imatrix *im, const char *path, struct diag *d);

/* imatrix_read_mem() : the same from len bytes at p (tests, fuzzers). */
int imatrix_read_mem(struct imatrix *im, const void *p, size_t len, struct diag *d);

/* imatrix_write() : writes im atomically to path ("-" = stdout) as GGUF, or
 * in the legacy format when legacy is true (llama-imatrix's two writers:
 * entries sorted by name; legacy skips entries without data).  An existing
 * path is replaced only with force.  Returns 0, -ST_IO, -ST_RANGE (exists, or
 * a name too long for a GGUF tensor), -ST_NOMEM. */
int imatrix_write(const struct imatrix *im, const char *path, bool legacy, bool force,
                  struct diag *d);

/* imatrix_write_fp() : the same bytes written to fp (an open output the
 * caller commits, e.g. together with the quantized model). */
int imatrix_write_fp(const struct imatrix *im, FILE *fp, bool legacy, struct diag *d);

/* imatrix_find() : the entry of a weight, or NULL. */
const struct imatrix_entry *imatrix_find(const struct imatrix *im, const char *name);

/* imatrix_values() : the importance vector llama-quantize passes to the
 * quantizer for entry e, into out[n_mat * ne0]: sums / count per slice (1.0
 * where the count is 0) for GGUF and collected matrices, values / ncall
 * (values when ncall is 0) for legacy ones.  Returns 0, or -ST_FORMAT when a
 * value is not finite (llama-quantize refuses those). */
int imatrix_values(const struct imatrix *im, const struct imatrix_entry *e, float *out,
                   struct diag *d);

/* imatrix_filter() : keeps only the entries whose name contains one of the
 * include substrings (when n_inc > 0), then drops those containing one of
 * the exclude substrings. */
void imatrix_filter(struct imatrix *im, const char *const *inc, size_t n_inc,
                    const char *const *exc, size_t n_exc);

/* ---- collection ---- */

struct imatrix_collect_opts {
    int64_t ctx;                /* tokens per chunk */
    int64_t max_chunks;         /* < 0: every whole chunk of the text */
    int32_t bos;                /* replaces each chunk's first token; -1 = keep */
    bool process_output;        /* also collect the LM head's input (llama-imatrix
                                 * --process-output); default: blk.* weights only */
    const char *dataset;        /* recorded in imatrix.datasets (may be NULL) */
    struct run_callbacks cb;    /* progress ("calibrating": chunks) */
};

/* imatrix_collect() : runs tokens[0..n_tokens) through m in chunks of
 * o->ctx tokens (each chunk from an empty sequence of kv, its first token
 * replaced by o->bos when >= 0, as llama-imatrix does) and adds, for every
 * linear whose weight is named blk.*, sum x_j^2 over the chunk's token rows
 * and the row count to im (entries created as needed).  Batches of fewer
 * than 16 rows are skipped, as llama-imatrix skips them.  Sets chunk_size
 * and adds the chunks processed to chunk_count.  kv must hold o->ctx tokens.
 * Returns 0, -ST_RANGE (fewer than 2 * ctx tokens, as llama-imatrix
 * requires), -ST_FORMAT (a non-finite activation), -ST_NOMEM, or
 * model_forward()'s error. */
int imatrix_collect(struct imatrix *im, struct model *m, struct kvcache *kv, const int32_t *tokens,
                    int64_t n_tokens, const struct imatrix_collect_opts *o, struct diag *d);

/* IMATRIX_TEXT_MAX : the largest calibration text (bytes). */
#define IMATRIX_TEXT_MAX ((size_t)1 << 30)

/* imatrix_from_text() : opens the model at model_path (a GGUF file),
 * tokenizes text[0..len) (the calibration text, read by the caller, named
 * text_name in messages) with the model's tokenizer as llama-imatrix does
 * (special tokens added as the vocabulary says, special texts not parsed),
 * and collects into im (o->bos is taken from the vocabulary; o->dataset
 * defaults to text_name).  n_threads and kernel go to model_open.
 * *n_tokens (may be NULL) receives the text's token count.  Returns what
 * model_open, the tokenizer or imatrix_collect return. */
int imatrix_from_text(struct imatrix *im, const char *model_path, const char *text, size_t len,
                      const char *text_name, const struct imatrix_collect_opts *o, int n_threads,
                      const char *kernel, int64_t *n_tokens, struct diag *d);

#endif
