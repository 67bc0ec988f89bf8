#include "runcb.h"

#include <stdarg.h>
#include <stdio.h>

void
runcb_progress(const struct run_callbacks *cb, const char *label, int64_t done, int64_t total)
{
    if (cb && cb->progress)
        cb->progress(cb->ctx, label, done, total);
}

static void
say(void (*fn)(void *, const char *), void *ctx, const char *fmt, va_list ap)
{
    char buf[512];

    vsnprintf(buf, sizeof(buf), fmt, ap);
    fn(ctx, buf);
}

void
runcb_warn(const struct run_callbacks *cb, const char *fmt, ...)
{
    va_list ap;

    if (!cb || !cb->warn)
        return;
    va_start(ap, fmt);
    say(cb->warn, cb->ctx, fmt, ap);
    va_end(ap);
}

void
runcb_info(const struct run_callbacks *cb, const char *fmt, ...)
{
    va_list ap;

    if (!cb || !cb->info)
        return;
    va_start(ap, fmt);
    say(cb->info, cb->ctx, fmt, ap);
    va_end(ap);
}
