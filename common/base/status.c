#include "status.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int
diag_set(struct diag *d, int st, const char *fmt, ...)
{
    va_list ap;

    if (d) {
        va_start(ap, fmt);
        vsnprintf(d->msg, sizeof(d->msg), fmt, ap);
        va_end(ap);
    }
    return st > 0 ? -st : st;
}

void
diag_prefix(struct diag *d, const char *fmt, ...)
{
    char pre[DIAG_MSG_MAX], old[DIAG_MSG_MAX];
    va_list ap;

    if (!d)
        return;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof(pre), fmt, ap);
    va_end(ap);
    memcpy(old, d->msg, sizeof(old));
    size_t n = strlen(pre);
    if (n > sizeof(d->msg) - 3)
        n = sizeof(d->msg) - 3;
    memcpy(d->msg, pre, n);
    memcpy(d->msg + n, ": ", 2);
    n += 2;
    size_t m = strlen(old);
    if (m > sizeof(d->msg) - 1 - n)
        m = sizeof(d->msg) - 1 - n;
    memcpy(d->msg + n, old, m);
    d->msg[n + m] = '\0';
}

const char *
st_str(int st)
{
    if (st < 0)
        st = -st;
    switch (st) {
    case ST_OK: return "ok";
    case ST_IO: return "i/o error";
    case ST_FORMAT: return "bad input data";
    case ST_NOMEM: return "out of memory";
    case ST_RANGE: return "out of range";
    case ST_DEVICE: return "no usable device";
    case ST_CHECK: return "check failed";
    default: return "failure";
    }
}

int
diag_errno(struct diag *d, int neg_errno, const char *msg)
{
    int st;

    switch (neg_errno) {
    case -ENOMEM:
    case -EAGAIN: st = ST_NOMEM; break;
    case -ENODEV: st = ST_DEVICE; break;
    case -EINVAL:
    case -ERANGE: st = ST_RANGE; break;
    default: st = ST_FAIL; break;
    }
    return diag_set(d, st, "%s", msg);
}
