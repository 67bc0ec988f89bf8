/*
 * resume.h - the results file of `generate --batch --resume FILE`: read
 * back at the start (which requests already have a result), then appended
 * to one whole line at a time while the run goes on.
 *
 * Opening (resume_open):
 *   - FILE must be a regular file, or absent (then it is created, empty);
 *     a directory, FIFO, device or socket is refused (-ST_IO) without being
 *     opened, and so is an input of this run (xout_check: -ST_RANGE).
 *   - It is locked (flock, exclusive) for the whole run: a second run on the
 *     same file fails at once (-ST_IO, "another run is writing it").
 *   - Every line must be a generate/1 result (resume_line_parse); a line
 *     that is not is bad data (-ST_FORMAT, the line number in the message),
 *     except the last line when it has no "\n": that is the torn end of a
 *     run that died while writing it, and it is cut off (ftruncate).
 *   - A completion whose finish_reason is not "cancelled" is a success: its
 *     id goes into `done` with its line, and into `res` with the line of
 *     the file it is on, for resume_check_requests.  Error and cancelled results, and a
 *     second success for an id, are dropped: the file is rewritten without
 *     them through xio's temporary + fsync + rename (a crash leaves the old
 *     file or the new one, never a mix), and the lock goes with the new
 *     file.  Blank lines are kept as they are.
 *
 * Appending (resume_append): a line goes out in one write(2) on an O_APPEND
 * descriptor; when a write fails half way the file is cut back to the last
 * whole line, so the file only ever ends in a whole line (or, after a crash
 * of the machine, in a torn one, which the next open cuts off).  The file
 * is fsynced after every sync_lines lines, and when a line or a tick
 * (resume_tick) comes sync_seconds or more after the last fsync with lines
 * unsynced: a machine that dies loses at most that window, and a process
 * that dies loses nothing it wrote.
 */
#ifndef LLMKIT_RESUME_H
#define LLMKIT_RESUME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "idset.h"
#include "status.h"

#define RESUME_SYNC_LINES 32        /* default --sync-lines */
#define RESUME_SYNC_SECONDS 5.0     /* default --sync-seconds */

/* a success kept from the file */
struct resume_result {
    json_t *id;                 /* a reference is held */
    int64_t line;               /* the request's line it names */
    int64_t at;                 /* its own line in the results file */
};

struct resume_file {
    int fd;                     /* O_APPEND, locked; -1 = closed */
    char *path;
    bool created;               /* resume_open made the file */
    struct id_set done;         /* ids with a successful result -> the result's line */
    struct resume_result *res;  /* [kept] the successes, in file order */
    int64_t cap_res;
    int64_t kept;               /* result lines kept (successes) */
    int64_t dropped;            /* error, cancelled and repeated results dropped */
    size_t torn;                /* bytes of a torn last line cut off (0 = none) */
    int64_t appended;           /* lines appended by this run */
    off_t end;                  /* bytes in the file: whole lines only */
    int64_t sync_lines;         /* fsync after this many lines (>= 1) */
    double sync_seconds;        /* ... or this long after the last fsync (>= 0) */
    int64_t unsynced;           /* lines written since the last fsync */
    double t_sync;              /* now_seconds() of the last fsync */
};

/* resume_open() : opens (or creates) path as described above; sync_lines
 * < 1 and sync_seconds < 0 mean the defaults.  reqs (may be NULL: the
 * caller checks later, resume_check_requests) holds the ids of the request
 * file named req_name: a file with a success for none of them is refused
 * before anything in it changes.  Returns 0, -ST_IO, -ST_RANGE, -ST_FORMAT
 * (a line that is not a result, a result of another request file),
 * -ST_NOMEM; the message names the file.  Close with resume_close() after
 * a 0 return. */
int resume_open(struct resume_file *rf, const char *path, int64_t sync_lines, double sync_seconds,
                const struct id_set *reqs, const char *req_name, struct diag *d);

/* resume_check_requests() : every success kept from the file must be the
 * result of a request: reqs holds each request id of the request file
 * (named req_name) with the line that has it first.  A result whose id is
 * no request's, or is the id of another line, is results of another request
 * file: -ST_FORMAT naming the results file, the line and the id.  0 when
 * all match. */
int resume_check_requests(const struct resume_file *rf, const struct id_set *reqs,
                          const char *req_name, struct diag *d);

/* resume_append() : appends the n bytes at line (one result line, ending in
 * "\n").  Returns 0 or -ST_IO (named; the file still ends in a whole line). */
int resume_append(struct resume_file *rf, const char *line, size_t n, struct diag *d);

/* resume_tick() : fsyncs when lines have waited sync_seconds; resume_sync()
 * fsyncs whatever is unsynced.  0 or -ST_IO. */
int resume_tick(struct resume_file *rf, struct diag *d);
int resume_sync(struct resume_file *rf, struct diag *d);

/* resume_close() : fsyncs, unlocks and closes; a file that resume_open
 * created is removed again when ok is false and nothing was appended (a run
 * that failed before its first result leaves nothing behind).  Accepts a
 * closed or zeroed struct (path NULL).  Returns 0 or -ST_IO (the fsync failed: the last lines may be lost). */
int resume_close(struct resume_file *rf, bool ok, struct diag *d);

/* ---- result lines (also read by genmerge.c) ---- */

struct result_info {
    json_t *id;                 /* string or integer; a reference is held */
    int64_t line;               /* the request's line number (>= 1) */
    bool completion;            /* type "completion" (else "error") */
    bool cancelled;             /* finish_reason "cancelled" */
};

/* resume_line_parse() : one line of a results file (without its "\n"):
 * a JSON object with "schema":"generate/1", "type" "completion" or "error",
 * "id" (string or integer), "line" (integer >= 1) and "finish_reason"
 * (string).  Returns 0 with ri filled (release with result_info_release),
 * 1 for a blank line, -ST_FORMAT with the reason, -ST_NOMEM. */
int resume_line_parse(const char *s, size_t n, struct result_info *ri, struct diag *d);

void result_info_release(struct result_info *ri);

#endif
