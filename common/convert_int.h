/*
 * convert_int.h - internals shared by convert.c, convert_hf.c, convert_l2c.c
 * and convert_info.c.  Not part of the library's public interface.
 */
#ifndef LLMKIT_CONVERT_INT_H
#define LLMKIT_CONVERT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "convert.h"
#include "gguf.h"

/* Where an output tensor's bytes come from: source bytes of a ggml type
 * (safetensors F32/F16/BF16 have ggml's layouts), the source shape in GGUF
 * order, and an optional Q/K row permutation: perm_heads > 0 turns HF rows
 * into GGUF rows with that many heads, < 0 the inverse. */
struct tsrc {
    const void *data;
    uint32_t type;
    int64_t ne[4];
    int perm_heads;
};

/* A consumer of output bytes, called in order with pieces of the tensor. */
typedef int (*tensor_sink_fn)(void *ctx, const void *p, size_t n, struct diag *d);

/* tensor_emit() : converts s to out_type row by row (in chunks of ~4 MiB)
 * and hands the bytes to sink.  Same type and no permutation: one call with
 * the source bytes. */
int tensor_emit(const struct tsrc *s, uint32_t out_type, tensor_sink_fn sink, void *ctx,
                struct diag *d);

/* sink_file() : a sink that fwrites to the FILE * in ctx. */
int sink_file(void *ctx, const void *p, size_t n, struct diag *d);

/* diag_prefix_output() : prefixes the message in d with the output it is
 * about: "stdout" for "-", else the quoted path. */
void diag_prefix_output(struct diag *d, const char *path);

/* permute_src_row() : the source row that output row r of a Q/K weight with
 * n_rows rows and n_head heads comes from; to_hf selects the GGUF -> HF
 * direction (formats.md §8.3). */
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

typedef const void *(*tensor_fetch_fn)(void *ctx, size_t i, struct diag *d);

/* write_gguf_out() : adds ts[0..n) to meta (whose KVs are set), writes the
 * GGUF atomically to o->output with a progress bar, converting each tensor
 * with tensor_emit.  Leaves no output on failure. */
int write_gguf_out(struct gguf *meta, const struct out_tensor *ts, size_t n, tensor_fetch_fn fetch,
                   void *fetch_ctx, const struct convert_opts *o, struct diag *d);

/* A replacement for tensor_emit in write_gguf_emit: produces the bytes of
 * output tensor i (type out_type) from s and hands them to sink.  Used by
 * quantize to run its own row quantizers through the same writer. */
typedef int (*tensor_emit_fn)(void *ctx, size_t i, const struct tsrc *s, uint32_t out_type,
                              tensor_sink_fn sink, void *sink_ctx, struct diag *d);

/* write_gguf_emit() : write_gguf_out with another emitter (emit NULL =
 * tensor_emit) and progress label (NULL = "converting"). */
int write_gguf_emit(struct gguf *meta, const struct out_tensor *ts, size_t n, tensor_fetch_fn fetch,
                    void *fetch_ctx, tensor_emit_fn emit, void *emit_ctx, const char *label,
                    const struct convert_opts *o, struct diag *d);

bool tensor_is_1d(const int64_t *ne);
uint32_t ftype_for_type(int type);
uint32_t retype_for(const char *name, const int64_t *ne, uint32_t src_type, int want);

int convert_gguf_to_hf(const struct convert_opts *o, struct diag *d);
int convert_hf_to_gguf(const struct convert_opts *o, struct diag *d);
int convert_l2c_to_gguf(const struct convert_opts *o, struct diag *d);
int info_hf(const char *dir, bool json, FILE *out, struct diag *d);
int info_l2c(const char *path, bool json, FILE *out, struct diag *d);

#endif
