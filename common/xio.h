/*
 * xio.h - input sources and atomic outputs.
 *
 * Inputs: "-" is standard input.  A regular file is mapped read-only (mmap)
 * and read in place; a pipe or terminal is read sequentially.  Parsers use the
 * same calls for both (src_read, src_skip) and may ask for a pointer into the
 * mapping when there is one (src_map_at).
 *
 * Outputs: "-" streams to standard output.  Anything else is written to a
 * temporary "<dst>.tmp.XXXXXX" in the destination's directory and renamed
 * over <dst> on commit after fflush+fsync, then the directory is fsynced.
 * Temporaries are registered so that die() and the SIGINT/SIGTERM handler
 * remove them (xio_cleanup_all).  Directories (HF checkpoint output) work the
 * same way with a temporary directory.
 */
#ifndef LLMKIT_XIO_H
#define LLMKIT_XIO_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "status.h"

struct src {
    char *name;            /* for messages: the path, or "<stdin>" */
    const uint8_t *map;    /* whole file when mapped, else NULL */
    uint64_t size;         /* file size when known (mapped or regular), else UINT64_MAX */
    uint64_t pos;          /* bytes consumed so far */
    FILE *fp;              /* sequential reads when not mapped */
    bool is_stdin;
    size_t map_len;
};

/* src_open() : opens path ("-" = stdin) for reading.  Regular files are
 * mmapped.  Returns 0 or -ST_IO with the reason in d. */
int src_open(struct src *s, const char *path, struct diag *d);

/* src_open_mem() : a source over caller-owned bytes (tests, fuzzers). */
void src_open_mem(struct src *s, const void *data, size_t len, const char *name);

/* src_close() : releases the mapping / file.  Accepts a zeroed struct. */
void src_close(struct src *s);

/* src_read() : reads exactly n bytes.  -ST_FORMAT "unexpected end of file" when
 * fewer remain, -ST_IO on a read error. */
int src_read(struct src *s, void *buf, size_t n, struct diag *d);

/* src_skip() : skips n bytes (reads and discards on a pipe). */
int src_skip(struct src *s, uint64_t n, struct diag *d);

/* src_remaining() : bytes left when the size is known, else UINT64_MAX. */
uint64_t src_remaining(const struct src *s);

/* src_map_at() : pointer to bytes [off, off+n) of a mapped source, or NULL if
 * the source is not mapped or the range is outside it. */
const void *src_map_at(const struct src *s, uint64_t off, uint64_t n);

/* ---- atomic outputs ---- */

struct xout {
    FILE *fp;              /* write here */
    char *dst;             /* final path, NULL for stdout */
    char *tmp;             /* temporary path while open */
    bool is_stdout;
    bool is_dir;
    int slot;              /* cleanup registry slot */
};

/* xout_open() : opens an output file.  "-" = stdout.  Refuses to replace an
 * existing dst unless force.  Returns 0, -ST_IO or -ST_RANGE ("exists"). */
int xout_open(struct xout *o, const char *path, bool force, struct diag *d);

/* xout_commit() : flush, fsync, close, rename, fsync the directory.  On error
 * the temporary is removed.  The struct is released in every case. */
int xout_commit(struct xout *o, struct diag *d);

/* xout_abort() : closes and removes the temporary; safe to call twice. */
void xout_abort(struct xout *o);

/* xout_open_dir() : creates a temporary directory next to dst; o->tmp is its
 * path, to be filled by the caller; fp is NULL.  xout_commit renames it over
 * dst (an existing dst directory is replaced only with force). */
int xout_open_dir(struct xout *o, const char *path, bool force, struct diag *d);

/* xio_cleanup_all() : removes every registered temporary (async-signal-safe
 * enough for the exit paths it is used on). */
void xio_cleanup_all(void);

/* write_all() : fwrite with error reporting (-ST_IO, "write failed: ..."). */
int write_all(FILE *fp, const void *buf, size_t n, struct diag *d);

/* write_file_atomic() : writes len bytes to path atomically. */
int write_file_atomic(const char *path, const void *buf, size_t len, bool force, struct diag *d);

/* read_file_all() : reads a whole file ("-" = stdin) into a malloc'd buffer,
 * NUL-terminated, refusing files larger than max bytes.  Caller frees. */
int read_file_all(const char *path, size_t max, char **out, size_t *len, struct diag *d);

/* is_dir() / is_regular() : stat helpers (false when absent). */
bool path_is_dir(const char *path);
bool path_exists(const char *path);

/* path_join() : malloc'd "a/b". */
char *path_join(const char *a, const char *b);

#endif
