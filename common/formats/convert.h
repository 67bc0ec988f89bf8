/*
 * convert.h - model format conversion and inspection (the library side of
 * the `convert` tool).
 *
 * Formats: GGUF files, Hugging Face checkpoint directories (config.json,
 * model.safetensors or a sharded index, tokenizer.json, tokenizer_config.json)
 * and llama.c legacy checkpoints (+ tokenizer.bin).  Every conversion streams
 * one tensor at a time: memory stays bounded by the largest tensor, and
 * outputs are written atomically (xio.h).
 */
#ifndef LLMKIT_CONVERT_H
#define LLMKIT_CONVERT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "runcb.h"
#include "status.h"

enum model_fmt {
    FMT_AUTO = 0,
    FMT_GGUF,
    FMT_HF,
    FMT_LLAMA2C,
};

/* model_fmt_parse() : "gguf" | "hf" | "llama2c" -> enum; FMT_AUTO if unknown. */
enum model_fmt model_fmt_parse(const char *s);
const char *model_fmt_name(enum model_fmt f);

/* convert_detect() : the format of an input from its magic bytes or its
 * directory contents.  A stream ("-", a FIFO, /dev/stdin on a pipe, a
 * device: path_is_stream) is GGUF, the one format read from a stream, and
 * is not read here: it can be read only once.  -ST_FORMAT when
 * unrecognised. */
int convert_detect(const char *path, enum model_fmt *out, struct diag *d);

struct convert_opts {
    const char *input;          /* path, directory or "-" */
    const char *output;         /* path, directory or "-" */
    enum model_fmt from, to;    /* FMT_AUTO = detect / infer from the output name */
    int out_type;               /* -1 = keep (GGUF) or auto (HF); else GGML_TYPE_F32/F16/BF16 */
    const char *tokenizer;      /* llama2c tokenizer.bin (default: beside the model) */
    uint64_t shard_size;        /* HF output: max bytes per safetensors shard;
                                 * 0 = SFT_DEFAULT_SHARD (5 GB) */
    const char *base;           /* EAGLE head HF -> GGUF: the base model GGUF the
                                 * head drafts for (eagle_hf.h); NULL otherwise */
    const char *layout;         /* EAGLE head GGUF -> HF: "eagle" (the EAGLE authors',
                                 * NULL: the same) or "speculators" (eagle_hf.h) */
    const char *verifier;       /* with layout "speculators": the target's HF id or
                                 * path for its config (NULL: none, null there) */
    bool force;                 /* replace an existing output */
    FILE *info;                 /* non-NULL: describe the input on this stream
                                 * (convert_info) instead of converting */
    bool json;                  /* with info: JSON Lines */
    struct run_callbacks cb;    /* progress (bytes written), warnings (messages
                                 * quote names from the input unescaped) */
    struct xout *out;           /* GGUF output: written into this open output and
                                 * left for the caller to commit or abort (the
                                 * caller commits it with its other outputs);
                                 * NULL = open o->output and commit it here */
};

/* run_convert() : converts o->input to o->output, or with o->info describes
 * o->input there (convert_info; the message in d then does not name the
 * input, and an output error leaves ferror(o->info) set).  Returns 0 or -ST_*
 * with the reason in d; a failed conversion leaves no output behind. */
int run_convert(const struct convert_opts *o, struct diag *d);

/* convert_info() : writes a description of a model to out: metadata (long
 * arrays summarised), tensor table (name, type, shape, offset, bytes), totals
 * and bits per weight.  json: JSON Lines with "schema":"convert-info/1". */
int convert_info(const char *path, enum model_fmt fmt, bool json, FILE *out, struct diag *d);

#endif
