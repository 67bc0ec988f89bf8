/*
 * quantize.h - GGUF quantization as llama.cpp's llama-quantize does it: the
 * file types (mixes) and their per-tensor rules (llama_tensor_get_type in
 * src/llama-quant.cpp), the shape fallbacks, importance-matrix lookup by
 * tensor name, and the output file (tensors sorted by layer then name, input
 * metadata copied, general.quantization_version and general.file_type set
 * last).  The row quantizers are kernels/quant.h; with the same input and
 * imatrix the tensor data is byte for byte what llama-quantize writes.
 *
 * Provenance is recorded under llmkit.*: llmkit.quantize.method ("ggml"),
 * .type (the file type name), .version, and, when an importance matrix was
 * used, .imatrix_sha256 (of its file) or .calib_sha256 (of the calibration
 * text it was collected from).
 */
#ifndef LLMKIT_QUANTIZE_H
#define LLMKIT_QUANTIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runcb.h"
#include "status.h"

struct gguf;
struct imatrix;

/* A file type: llama.cpp's name, its llama_ftype (general.file_type) and
 * the default tensor type of the mix. */
struct quant_ftype {
    const char *name;           /* "Q4_K_M" */
    uint32_t ftype;             /* llama_ftype value */
    uint32_t type;              /* default ggml type */
    const char *desc;
};

/* quant_ftype_find() : a file type by name, case-insensitive, with
 * llama-quantize's aliases (Q3_K = Q3_K_M, Q4_K = Q4_K_M, Q5_K = Q5_K_M), or
 * by its number; NULL if unknown. */
const struct quant_ftype *quant_ftype_find(const char *name);

/* quant_ftype_list() : the table (n entries), for --help. */
const struct quant_ftype *quant_ftype_list(size_t *n);

/* quant_tensor_type_parse() : a per-tensor type name (Q4_0 ... Q6_K, IQ4_NL,
 * IQ4_XS, F16, BF16, F32; case-insensitive) -> ggml type, or -1 if it is not
 * one quantize can produce. */
int quant_tensor_type_parse(const char *name);

/* ---- the mix rules ---- */

/* quant_tensor_allowed() : whether llama-quantize would quantize a tensor of
 * that name and dimension count (2-D or more, name ending in "weight", not a
 * norm, not output.weight when keep_output, ...). */
bool quant_tensor_allowed(const char *name, uint32_t n_dims, bool keep_output);

/* quant_layer_cmp() : llama.cpp's weight order: block number parsed from
 * "blk.%d." (-1 for other tensors), then strcmp of the names. */
int quant_layer_cmp(const char *a, const char *b);

struct quant_override {
    const char *pattern;        /* regular expression searched in the tensor name */
    uint32_t type;
};

struct quant_mix_opts {
    uint32_t ftype;             /* llama_ftype */
    bool pure;                  /* --pure: every quantizable tensor gets the default type */
    bool keep_output;           /* output.weight stays as it is */
    bool has_imatrix;           /* changes Q4_0/Q5_0/IQ4 ffn_down choices */
    int output_type;            /* -1, or the type for output.weight (and a tied token_embd) */
    int embd_type;              /* -1, or the type for token_embd.weight */
    const struct quant_override *ov;    /* --tensor-type, first match wins */
    size_t n_ov;
};

struct quant_mix {
    struct quant_mix_opts o;
    uint32_t default_type;
    /* model facts */
    bool falcon, is_70b, tied;
    int64_t n_layer, n_gqa, n_expert;
    int n_attn_v;
    /* counters, advanced as tensors are typed in order */
    int i_attn_v, i_ffn_down, i_ffn_gate, i_ffn_up;
    int n_fallback;
    void **re;                  /* compiled patterns */
};

/* quant_mix_init() : prepares the rules for the model described by g (its
 * architecture keys and tensor names): block count, heads, experts, tied
 * embeddings, number of attn_v tensors; compiles the override patterns.
 * Returns 0, -ST_RANGE (unknown file type, bad pattern: message in d),
 * -ST_FORMAT (missing/mistyped hyperparameter), -ST_NOMEM. */
int quant_mix_init(struct quant_mix *m, const struct gguf *g, const struct quant_mix_opts *o,
                   struct diag *d);

/* quant_mix_type() : the type a tensor gets.  Must be called for every
 * tensor in llama.cpp's order (quant_layer_cmp), once, since the rules count
 * attn_v and ffn tensors.  *fallback is set when the shape forced another
 * type (the count is kept in m->n_fallback).  Returns the ggml type, or
 * -ST_RANGE when no fallback exists (message in d). */
int quant_mix_type(struct quant_mix *m, const char *name, uint32_t cur_type, uint32_t n_dims,
                   const int64_t *ne, bool *fallback, struct diag *d);

/* quant_mix_release() : frees the compiled patterns. */
void quant_mix_release(struct quant_mix *m);

/* ---- the whole file ---- */

struct quantize_tensor_info {
    char name[64];
    uint32_t src_type, type;
    int64_t ne[4];
    uint32_t n_dims;
    uint64_t src_bytes, bytes;
    bool quantized;             /* converted (else copied) */
    bool fallback;
    bool used_imatrix;
    char sha256[65];            /* of the output bytes, hex */
};

struct quantize_report {
    struct quantize_tensor_info *t;
    size_t n;
    uint64_t src_bytes, out_bytes, n_params, file_bytes;
    int n_fallback;
    int imatrix_missing;        /* quantized tensors without an imatrix entry */
    bool requantized;           /* some input tensor was already quantized */
    double seconds;
};

struct quantize_opts {
    const char *input;          /* GGUF path or "-" */
    struct gguf *in;            /* NULL: quantize_model opens input; else input's
                                 * header, already read by gguf_open(input)
                                 * (borrowed: its data section is read, and on
                                 * a stream loaded, here; the caller releases it) */
    const char *output;         /* path or "-" */
    struct quant_mix_opts mix;
    const struct imatrix *imatrix;      /* NULL: none */
    const char *imatrix_file;   /* for quantize.imatrix.file (may be NULL) */
    const char *imatrix_sha256; /* provenance (may be NULL) */
    const char *calib_sha256;   /* provenance (may be NULL) */
    int n_threads;              /* <= 0: all CPUs */
    bool force;
    struct run_callbacks cb;    /* progress ("quantizing": bytes written), warnings */
    struct xout *out;           /* NULL: output is opened and committed here;
                                 * else the open output written into and left
                                 * uncommitted (the caller commits it) */
};

/* quantize_model() : quantizes o->input into o->output (atomically; nothing
 * is left behind on failure) and fills r (caller releases it with
 * quantize_report_release).  Quantized input tensors that must change type
 * are dequantized first (a warning tells).  Returns 0; -ST_IO; -ST_FORMAT
 * (bad input, non-finite weights or imatrix values, an imatrix entry of the
 * wrong size); -ST_RANGE (unsupported type or file type, no fallback);
 * -ST_NOMEM.  Messages about the model or its tensors name o->input, those
 * about the matrix's entries o->imatrix_file (else the model it was
 * collected from), I/O errors writing o->output. */
int quantize_model(const struct quantize_opts *o, struct quantize_report *r, struct diag *d);

void quantize_report_release(struct quantize_report *r);

/* quantize_threadpool() : a pool of n_threads workers (<= 0: every CPU)
 * for the quantizers' row loops; -ST_RANGE (too many), or the errno of a
 * thread that could not start.  Freed with threadpool_free(). */
struct threadpool;
int quantize_threadpool(struct threadpool **tp, int n_threads, struct diag *d);

/* quantize_sha256_hex() : SHA-256 of n bytes as 64 hex digits + NUL into out[65].
 * 0 or -ST_NOMEM. */
int quantize_sha256_hex(const void *p, size_t n, char out[65]);

/* quantize_sha256_hexv() : the same of k buffers one after another (p[i],
 * n[i] bytes). */
int quantize_sha256_hexv(const void *const *p, const size_t *n, int k, char out[65]);

#endif
