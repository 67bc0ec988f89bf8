/*
 * runcb.h - the one set of callbacks every run_*() of the library takes
 * (run_generate, run_generate_batch, run_convert, run_quantize, run_kvstat)
 * and hands down to the work it calls (perplexity, imatrix collection,
 * quantization quality, the GGUF and safetensors writers).  The library
 * draws no progress bar and never decides what the user sees: it tells the
 * tool, and the tool decides (tools/tool_cb.c: bars on a terminal, warnings
 * unless -q, notes with -v).
 *
 * Every member may be NULL (nothing is said); a zeroed struct is silent.
 * The callbacks are called on the calling thread.
 */
#ifndef LLMKIT_RUNCB_H
#define LLMKIT_RUNCB_H

#include <stdint.h>

struct run_callbacks {
    /* A phase of measurable work, named by label ("converting",
     * "quantizing", "calibrating", "evaluating", "perplexity"): called with
     * done == 0 when it begins, then with the work done so far, and with
     * done == total when it is complete.  A phase that fails stops without
     * the last call.  Units are the caller's (bytes, chunks). */
    void (*progress)(void *ctx, const char *label, int64_t done, int64_t total);
    /* a non-fatal problem the user should hear of (one line, no prefix) */
    void (*warn)(void *ctx, const char *msg);
    /* a note on what is being done, for verbose output (one line) */
    void (*info)(void *ctx, const char *msg);
    void *ctx;
};

/* runcb_progress() : cb->progress(cb->ctx, label, done, total) when both cb
 * and the member are set. */
void runcb_progress(const struct run_callbacks *cb, const char *label, int64_t done, int64_t total);

/* runcb_warn(), runcb_info() : format a message (at most 511 bytes kept)
 * and pass it to cb->warn or cb->info when set. */
void runcb_warn(const struct run_callbacks *cb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void runcb_info(const struct run_callbacks *cb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
