/*
 * xio.h - input sources and atomic outputs.
 *
 * Inputs: "-" is standard input.  A regular file is mapped read-only (mmap)
 * and read in place; a pipe or terminal is read sequentially.  Parsers use the
 * same calls for both (src_read, src_skip) and may ask for a pointer into the
 * mapping when there is one (src_map_at).
 *
 * Outputs: "-" streams to standard output.  Anything else is written to a
 * temporary "<dst>.tmp.llmkit-XXXXXX" in the destination's directory and renamed
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
#include <sys/types.h>

#include "status.h"

struct src {
    char *name;            /* for messages: the path, or "<stdin>" */
    const uint8_t *map;    /* whole file when mapped, else NULL */
    uint64_t size;         /* file size when known (mapped or regular), else UINT64_MAX */
    uint64_t pos;          /* bytes consumed so far */
    FILE *fp;              /* sequential reads when not mapped */
    bool is_stdin;
    size_t map_len;
    uint8_t *heap;         /* the bytes src_load read from a stream, owned */
    int in_slot;           /* 1 + its entry among this run's inputs, 0 = none */
};

/* src_open() : opens path ("-" = stdin) for reading.  Regular files are
 * mmapped.  Returns 0 or -ST_IO with the reason in d. */
int src_open(struct src *s, const char *path, struct diag *d);

/* src_open_file() : src_open() for an input that is mapped, never streamed.
 * A FIFO, a device or a socket (or "-" on a pipe) is refused before anything
 * is read, and without waiting: a plain open() of a FIFO waits for a writer.
 * Returns 0, -ST_IO with "is a FIFO, not a regular file" ("a character
 * device", "a block device", "a socket", "a pipe") in d, or what src_open()
 * returns (-ST_IO "is a directory"): a path that must be a regular file and
 * names something else is an I/O error, exit 4, in every tool.  The source
 * is mapped unless the file is empty. */
int src_open_file(struct src *s, const char *path, struct diag *d);

/* file_kind_name() : "a directory", "a FIFO", "a character device", "a block
 * device", "a socket", "a symbolic link" (a mode from lstat()) or "a special
 * file", for messages about mode m. */
const char *file_kind_name(mode_t m);

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

/* src_load() : reads the next n bytes of a stream into memory, after which
 * the source behaves as mapped over [0, pos + n) (the bytes before pos, already
 * consumed, read as zeros).  Memory grows with what the stream delivers, not
 * with n, so a short or endless stream costs no more than what it sent before
 * the error: -ST_FORMAT when it ends early, -ST_NOMEM when memory runs out
 * ("out of memory reading ..."), -ST_IO on a read error.  A mapped source is
 * left as it is (0). */
int src_load(struct src *s, uint64_t n, struct diag *d);

/* src_map_at() : pointer to bytes [off, off+n) of a mapped source, or NULL if
 * the source is not mapped or the range is outside it. */
const void *src_map_at(const struct src *s, uint64_t off, uint64_t n);

/* ---- atomic outputs ---- */

/*
 * What an output path may name, and what happens to it:
 *   "-"                      standard output, streamed.
 *   absent                   a temporary "<dst>.tmp.llmkit-XXXXXX" beside it, renamed
 *                            into place on commit.  Without force the rename
 *                            never replaces a file that appeared meanwhile
 *                            (renameat2 RENAME_NOREPLACE, or link + unlink):
 *                            the later of two runs fails instead.
 *   a regular file           the same, replacing it; only with force.
 *   a symbolic link          followed: the file it names is replaced as above
 *                            and the link stays; a dangling link is refused.
 *   a character device, FIFO written in place, with or without force: no
 *                            temporary, no rename, so /dev/null stays a device.
 *   anything else            (directory, block device, socket) refused.
 * A path that is also an input of this run (a source open now, or a path
 * named by xio_note_input) or another open output is refused with -ST_RANGE.
 * Temporaries hold an exclusive flock while their run lives; xout_open removes
 * its destination's temporaries whose lock nobody holds (left by a run that
 * was killed with SIGKILL).
 */
struct xout {
    FILE *fp;              /* write here */
    char *dst;             /* final path (a symlink resolved), NULL for stdout */
    char *tmp;             /* temporary path while open; NULL when direct */
    bool is_stdout;
    bool is_dir;
    bool direct;           /* device or FIFO written in place */
    bool force;            /* an existing dst may be replaced */
    int lock_fd;           /* directory outputs: holds the temporary's lock */
    int slot;              /* cleanup registry slot */
};

/* xout_check() : the checks xout_open makes before it creates anything (see
 * above), for a tool that wants to fail before a long computation.  0 when
 * xout_open would accept path, else -ST_RANGE / -ST_IO with the reason. */
int xout_check(const char *path, bool force, struct diag *d);
/* xout_check_dir() : the same for xout_open_dir's directory output */
int xout_check_dir(const char *path, bool force, struct diag *d);

/* xout_open() : opens an output file.  "-" = stdout.  Refuses to replace an
 * existing dst unless force.  Returns 0, -ST_IO or -ST_RANGE ("exists"). */
int xout_open(struct xout *o, const char *path, bool force, struct diag *d);

/* xout_commit() : flush, fsync, close, rename, fsync the directory.  On error
 * the temporary is removed.  The struct is released in every case. */
int xout_commit(struct xout *o, struct diag *d);

/* xout_commit_all() : commits n outputs as one: every file is flushed, fsynced
 * and closed first, and only when all of them succeeded are they renamed into
 * place (in array order).  On any error every output not yet renamed is
 * aborted, so a run whose outputs fail to write leaves none of them behind.
 * Entries never opened (zeroed, or already released) are skipped.  Every
 * struct is released in every case.  The message names the output that
 * failed ("'out.svg': write failed: ..." or "stdout: ..."), so callers do
 * not prefix it. */
int xout_commit_all(struct xout *o, int n, struct diag *d);

/* xout_abort() : closes and removes the temporary; safe to call twice. */
void xout_abort(struct xout *o);

/* xout_open_dir() : creates a temporary directory next to dst; o->tmp is its
 * path, to be filled by the caller; fp is NULL.  xout_commit renames it over
 * dst (an existing dst directory is replaced only with force, and only
 * one that holds nothing but the files a Hugging Face checkpoint has:
 * *.safetensors, *.json, tokenizer.model, merges.txt, vocab.txt,
 * chat_template.jinja, README.md, .gitattributes; no folder, and none of
 * this run's inputs; checked at the open and again at the commit). */
int xout_open_dir(struct xout *o, const char *path, bool force, struct diag *d);

/* xio_cleanup_all() : removes every registered temporary (async-signal-safe
 * enough for the exit paths it is used on, all of which then end the
 * process).  It first waits while another thread replaces an output
 * directory (the renames and the removal of the old one, run with SIGINT,
 * SIGTERM, SIGHUP, SIGPIPE and SIGQUIT blocked in that thread), and no
 * replacement starts after it, so a signal never leaves one half done. */
void xio_cleanup_all(void);

/* write_all() : fwrite with error reporting (-ST_IO, "write failed: ..."). */
int write_all(FILE *fp, const void *buf, size_t n, struct diag *d);

/* write_file_atomic() : writes len bytes to path atomically. */
int write_file_atomic(const char *path, const void *buf, size_t len, bool force, struct diag *d);

/* read_file_all() : reads a whole file ("-" = stdin) into a malloc'd buffer,
 * NUL-terminated, refusing files larger than max bytes.  Caller frees. */
int read_file_all(const char *path, size_t max, char **out, size_t *len, struct diag *d);

/* xio_note_input() : records path as an input for the rest of the run, so
 * that no output replaces it (an open source counts only while it is open;
 * a tool names its inputs here so that -o cannot take one of them). */
void xio_note_input(const char *path);

/* is_dir() / is_regular() : stat helpers (false when absent). */
bool path_is_dir(const char *path);
bool path_exists(const char *path);

/* path_is_stream() : whether an input path can be read only once, from its
 * start to its end: "-" (standard input, even when it is a file), or an
 * existing path that is neither a regular file nor a directory (a FIFO,
 * /dev/stdin or /dev/fd/N on a pipe, a character device, a socket).  Such
 * an input cannot be opened a second time to read it again. */
bool path_is_stream(const char *path);

/* path_join() : malloc'd "a/b". */
char *path_join(const char *a, const char *b);

#endif
