/*
 * genmerge.h - `generate --merge`: the results files of the shards of one
 * batch job (`generate --batch --shard I/N`) checked against the job's
 * request file and joined into one file in request order.
 *
 * A request is a line of the request file that is not blank, with the id
 * `generate --batch` gives it (genbatch.h: its "id", or its line number);
 * the file is read by --batch's reader (struct batch_reader), so a line
 * over BATCH_LINE_MAX fails the merge with -ST_FORMAT.
 * A result is a line of a results file (resume.h: resume_line_parse); it
 * names its request by "line" and "id", and both must match.  Every request
 * must have exactly one result - a completion or an error line; a
 * "cancelled" completion does not count, it stands for a request still to
 * run (`generate --batch --resume` runs it again).  A last line with no
 * "\n" (the torn end of a task that died while writing it) is left out
 * with a note, and its request is missing.  Blank lines are skipped.
 *
 * When every request has its result, the result lines are written, as they
 * were, ordered by line, to the output (atomically unless stdout).  When
 * not, nothing is written: each missing request (its id and line), each
 * second result for a request and each result that matches no request is
 * passed to o->cb.warn (at most MERGE_NOTES_MAX of them, then one line
 * with the number not listed), and the run fails with -ST_CHECK.
 */
#ifndef LLMKIT_GENMERGE_H
#define LLMKIT_GENMERGE_H

#include <stdbool.h>
#include <stdint.h>

#include <stdio.h>

#include "runcb.h"
#include "status.h"

#define MERGE_NOTES_MAX 100

struct merge_opts {
    const char *requests;           /* the job's request file; "-" = stdin */
    const char *const *results;     /* [n_results] results files (regular files: each
                                     * is mapped, and read again for the output) */
    int n_results;
    const char *output;             /* NULL or "-" = stdout */
    bool force;                     /* replace an existing output file */
    struct run_callbacks cb;        /* warn: one problem a call */
};

struct merge_report {
    int64_t requests;               /* request lines */
    int64_t results;                /* results taken (one a request at most) */
    int64_t errors;                 /* of which error lines */
    int64_t missing;                /* requests with no result */
    int64_t cancelled;              /* cancelled results seen (not taken) */
    int64_t repeated;               /* results for a request that had one already */
    int64_t stray;                  /* results that match no request */
    int64_t torn;                   /* torn last lines left out */
};

/* run_generate_merge() : the merge described above.  Returns 0 (output
 * written), -ST_CHECK (missing, repeated or stray results; counts in r,
 * details through o->cb.warn, nothing written), -ST_FORMAT (a line that is not
 * a result, a request line over BATCH_LINE_MAX: file and line named), -ST_IO, -ST_RANGE (an output that may not
 * be written, e.g. one of the inputs), -ST_NOMEM. */
int run_generate_merge(const struct merge_opts *o, struct merge_report *r, struct diag *d);

/* merge_report_print() : the summary line of a merge of n_results files,
 * beginning with prefix and ": " (the tool's name), on fp. */
void merge_report_print(const struct merge_report *r, int n_results, const char *prefix, FILE *fp);

#endif
