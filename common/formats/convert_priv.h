/*
 * convert_priv.h - the directions of run_convert() and convert_info()
 * that live in their own files (convert_hf.c, convert_l2c.c), for
 * convert.c and convert_info.c.  Not part of the library's public
 * interface: use convert.h.  The tensor pipeline all of them share is the
 * public gguf_write.h.
 *
 * The entry points take convert.h's options by pointer only, so this header
 * needs no other header of ours: it sits below convert.h, and convert.c
 * calls down into convert_hf.c and convert_l2c.c, which never call back.
 */
#ifndef LLMKIT_CONVERT_PRIV_H
#define LLMKIT_CONVERT_PRIV_H

#include <stdbool.h>
#include <stdio.h>

struct convert_opts;
struct diag;

/* The output part of convert_opts, as write_gguf_out() takes it:
 * struct gguf_write_opts w = CONVERT_WRITE_OPTS(o); */
#define CONVERT_WRITE_OPTS(o) \
    { .output = (o)->output, .input = (o)->input, .force = (o)->force, .cb = (o)->cb, \
      .out = (o)->out }

/* ---- convert_hf.c ---- */

/* hf_dir_check_files() : -ST_IO ("'config.json': is a FIFO, not a regular
 * file"; the caller names dir) when a file of the HF directory that convert
 * reads is a FIFO, a device or a socket: some are read twice
 * (config.json by the configuration and the GPTQ/AWQ reader, the index by
 * the EAGLE check and the loader), and a FIFO's second open would wait for
 * ever.  0 otherwise, -ST_NOMEM. */
int hf_dir_check_files(const char *dir, struct diag *d);
int convert_gguf_to_hf(const struct convert_opts *o, struct diag *d);
int convert_hf_to_gguf(const struct convert_opts *o, struct diag *d);
int info_hf(const char *dir, bool json, FILE *out, struct diag *d);

/* ---- convert_l2c.c ---- */
int convert_l2c_to_gguf(const struct convert_opts *o, struct diag *d);
int info_l2c(const char *path, bool json, FILE *out, struct diag *d);

#endif
