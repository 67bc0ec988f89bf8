/*
 * status.h - status codes and diagnostics shared by libllmkit and the kernels.
 *
 * Library functions return 0 on success or a negative -ST_* code.  Functions that
 * parse input take a `struct diag *` (may be NULL) and, on failure, leave a
 * one-line, lower-case message there that names the problem, e.g.
 * "tensor 'blk.0.attn_q.weight': data past end of file".  The tool prefixes
 * the program and file name and maps the code to an exit status (rc_from_st).
 */
#ifndef LLMKIT_STATUS_H
#define LLMKIT_STATUS_H

#include <stdarg.h>

enum st {
    ST_OK = 0,
    ST_FAIL = 1,     /* general failure */
    ST_IO = 2,       /* open/read/write/rename/fsync failed (errno kept in diag) */
    ST_FORMAT = 3,   /* bad input data: magic, version, shape, truncated, corrupt */
    ST_NOMEM = 4,    /* allocation failed or a size limit was exceeded */
    ST_RANGE = 5,    /* argument out of range, unsupported request */
    ST_DEVICE = 6,   /* no usable device */
    ST_CHECK = 7,    /* a requested check failed */
};

#define DIAG_MSG_MAX 512

struct diag {
    char msg[DIAG_MSG_MAX];
};

/* diag_set() : formats a message into d (if d is not NULL) and returns -st, so
 * that `return diag_set(d, ST_FORMAT, "...")` reads naturally. */
int diag_set(struct diag *d, int st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* diag_prefix() : prepends "prefix: " to the message already in d. */
void diag_prefix(struct diag *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* diag_errno() : the status of a kernels/ call that failed with a negative
 * errno code (-ENOMEM, -EAGAIN: ST_NOMEM; -ENODEV: ST_DEVICE; -EINVAL,
 * -ERANGE: ST_RANGE; others ST_FAIL), msg as its message; returns -status. */
int diag_errno(struct diag *d, int neg_errno, const char *msg);

/* st_str() : a short English name for a status code. */
const char *st_str(int st);

#endif
