/*
 * gguf_write.h - the tensor pipeline every GGUF writer shares: where an
 * output tensor's bytes come from (struct tsrc), how they are converted to
 * the output type row by row (tensor_emit) and handed to a consumer (a
 * sink), and the streaming writer that puts a set of tensors into a GGUF
 * output atomically (write_gguf_out, write_gguf_emit).  convert uses it for
 * every conversion, quantize runs its row quantizers through it (its own
 * emitter); the HF writer uses tensor_emit with a safetensors sink.
 */
#ifndef LLMKIT_GGUF_WRITE_H
#define LLMKIT_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "runcb.h"
#include "status.h"

struct xout;

/* Where an output tensor's bytes come from: source bytes of a ggml type
 * (safetensors F32/F16/BF16 have ggml's layouts), the source shape in GGUF
 * order, an optional Q/K row permutation: perm_heads > 0 turns HF rows
 * into GGUF rows with that many heads, < 0 the inverse, and a constant added
 * to every value in float32 (Gemma's RMSNorm weights: HF w, GGUF 1 + w). */
struct tsrc {
    const void *data;
    uint32_t type;
    int64_t ne[4];
    int perm_heads;
    float add;
};

/* A consumer of output bytes, called in order with pieces of the tensor. */
typedef int (*tensor_sink_fn)(void *ctx, const void *p, size_t n, struct diag *d);

/* tensor_emit() : converts s to out_type row by row (in chunks of ~4 MiB)
 * and hands the bytes to sink.  Same type, no permutation and nothing to
 * add: one call with the source bytes. */
int tensor_emit(const struct tsrc *s, uint32_t out_type, tensor_sink_fn sink, void *ctx,
                struct diag *d);

/* sink_file() : a sink that fwrites to the FILE * in ctx. */
int sink_file(void *ctx, const void *p, size_t n, struct diag *d);

/* diag_prefix_output() : prefixes the message in d with the output it is
 * about: "stdout" for "-", else the quoted path. */
void diag_prefix_output(struct diag *d, const char *path);

/* permute_src_row() : the source row that output row r of a Q/K weight with
 * n_rows rows and n_head heads comes from; to_hf selects the GGUF -> HF
 * direction (convert_hf_to_gguf.py LlamaModel.permute; its inverse is
 * llama2.c export.py permute_original). */
int64_t permute_src_row(int64_t r, int64_t n_rows, int n_head, bool to_hf);

/* An output tensor: its GGUF name, shape and type, and where it comes from
 * (src.data NULL: ask the fetch callback, in index order). */
struct out_tensor {
    char name[64];
    uint32_t n_dims;
    int64_t ne[4];
    uint32_t type;
    struct tsrc src;
};

/* Sets *data to the bytes of output tensor i (asked for in index order);
 * returns 0, or -ST_* with the reason in d (the writer names the input). */
typedef int (*tensor_fetch_fn)(void *ctx, size_t i, const void **data, struct diag *d);

/* Where and how a GGUF is written. */
struct gguf_write_opts {
    const char *output;         /* path or "-" (named in messages) */
    const char *input;          /* the file the tensors come from, named in
                                 * messages about them (NULL: none named) */
    bool force;                 /* replace an existing output */
    struct run_callbacks cb;    /* progress: bytes of tensor data written */
    struct xout *out;           /* written into this open output and left for
                                 * the caller to commit or abort; NULL = open
                                 * output and commit it here */
};

/* write_gguf_out() : adds ts[0..n) to meta (whose KVs are set), writes the
 * GGUF atomically to o->output, reporting progress (o->cb), converting each tensor
 * with tensor_emit.  Leaves no output on failure.  Returns 0 or -ST_* with
 * the reason in d: an I/O error writing names the output ("stdout" for
 * "-"), any other error about a tensor (fetching or converting it, out of
 * memory) names o->input when it is set, then the tensor. */
int write_gguf_out(struct gguf *meta, const struct out_tensor *ts, size_t n, tensor_fetch_fn fetch,
                   void *fetch_ctx, const struct gguf_write_opts *o, struct diag *d);

/* A replacement for tensor_emit in write_gguf_emit: produces the bytes of
 * output tensor i (type out_type) from s and hands them to sink.  Used by
 * quantize to run its own row quantizers through the same writer. */
typedef int (*tensor_emit_fn)(void *ctx, size_t i, const struct tsrc *s, uint32_t out_type,
                              tensor_sink_fn sink, void *sink_ctx, struct diag *d);

/* write_gguf_emit() : write_gguf_out with another emitter (emit NULL =
 * tensor_emit) and progress label (NULL = "converting"). */
int write_gguf_emit(struct gguf *meta, const struct out_tensor *ts, size_t n, tensor_fetch_fn fetch,
                    void *fetch_ctx, tensor_emit_fn emit, void *emit_ctx, const char *label,
                    const struct gguf_write_opts *o, struct diag *d);

/* ---- output types ---- */

/* tensor_is_1d() : whether a GGUF shape has one dimension (ne[1..3] == 1). */
bool tensor_is_1d(const int64_t *ne);

/* ftype_for_type() : general.file_type of a model whose weights are of ggml
 * type `type` (F32 0, F16 1, BF16 32; 0 for any other). */
uint32_t ftype_for_type(int type);

/* retype_for() : the type tensor `name` of shape ne and type src_type gets
 * when a model is retyped to `want` (< 0: kept): 1-D tensors, norms and
 * tensors not named *.weight stay F32, as convert_hf_to_gguf.py writes
 * them. */
uint32_t retype_for(const char *name, const int64_t *ne, uint32_t src_type, int want);

#endif
