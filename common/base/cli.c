#include "cli.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "escape.h"
#include "threadpool.h"
#include "status.h"
#include "xio.h"

const char *cli_progname = "llmkit";
int cli_verbosity = 1;

static void
on_signal(int sig)
{
    xio_cleanup_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

void
cli_init(const char *argv0)
{
    const char *b;
    struct sigaction sa;

    if (argv0) {
        b = strrchr(argv0, '/');
        cli_progname = b ? b + 1 : argv0;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* Messages quote names and text from files; whatever a caller forgot to
 * escape, the line that reaches stderr holds no control character, no bytes
 * that are not UTF-8 and no hidden reordering (escape.h), so it stays one
 * line and cannot drive the terminal. */
static void
vmsg(const char *prefix, const char *fmt, va_list ap)
{
    int e = errno;
    size_t n = strlen(fmt);
    char *buf = NULL;
    int len = vasprintf(&buf, fmt, ap);

    fprintf(stderr, "%s: %s", cli_progname, prefix);
    if (len >= 0 && buf)
        esc_fwrite(stderr, buf, (size_t)len, SIZE_MAX, ESC_KEEP_BACKSLASH);
    else
        fputs("(out of memory formatting a message)", stderr);
    free(buf);
    if (n && fmt[n - 1] == ':')
        fprintf(stderr, " %s", strerror(e));
    fputc('\n', stderr);
}

void
die(int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
    xio_cleanup_all();
    exit(rc);
}

void
usage_error(const char *usage, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", usage);
    xio_cleanup_all();
    exit(RC_USAGE);
}

void
warnmsg(const char *fmt, ...)
{
    va_list ap;

    if (cli_verbosity < 1)
        return;
    va_start(ap, fmt);
    vmsg("warning: ", fmt, ap);
    va_end(ap);
}

void
infomsg(const char *fmt, ...)
{
    va_list ap;

    if (cli_verbosity < 2)
        return;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

int
rc_from_st(int st)
{
    if (st < 0)
        st = -st;
    switch (st) {
    case ST_OK: return RC_OK;
    case ST_IO: return RC_IO;
    case ST_FORMAT: return RC_DATA;
    case ST_NOMEM: return RC_RESOURCE;
    case ST_DEVICE: return RC_RESOURCE;
    case ST_RANGE: return RC_USAGE;
    case ST_CHECK: return RC_CHECK;
    default: return RC_FAIL;
    }
}

int
cli_cap_threads(int n, bool oversubscribe)
{
    int cpus = threadpool_n_cpus();

    if (n > cpus && !oversubscribe) {
        warnmsg("-t %d: this process may run on %d CPUs; using %d threads "
                "(--oversubscribe keeps %d)", n, cpus, cpus, n);
        return cpus;
    }
    return n;
}

int64_t
cli_parse_i64(const char *s, int64_t min, int64_t max, const char *what, bool sizes)
{
    char *end;
    long long v;
    int64_t mul = 1;

    if (!s || !*s)
        die(RC_USAGE, "%s: empty value", what);
    errno = 0;
    v = strtoll(s, &end, 10);
    if (end == s || errno == ERANGE)
        die(RC_USAGE, "%s: invalid number '%s'", what, ESC(s));
    if (sizes && *end) {
        switch (*end) {
        case 'k': case 'K': mul = 1LL << 10; break;
        case 'm': case 'M': mul = 1LL << 20; break;
        case 'g': case 'G': mul = 1LL << 30; break;
        case 't': case 'T': mul = 1LL << 40; break;
        default: mul = 0; break;
        }
        if (mul) {
            end++;
            if (*end == 'i')
                end++;
            if (*end == 'B')
                end++;
        } else if (*end == 'B' && end[1] == '\0') {
            mul = 1;
            end++;
        }
    }
    if (*end || !mul)
        die(RC_USAGE, "%s: invalid number '%s'", what, ESC(s));
    if (v != 0 && (v > INT64_MAX / mul || v < INT64_MIN / mul))
        die(RC_USAGE, "%s: '%s' is out of range", what, ESC(s));
    v *= mul;
    if (v < min || v > max)
        die(RC_USAGE, "%s: '%s' is out of range [%lld, %lld]", what, ESC(s),
            (long long)min, (long long)max);
    return v;
}

double
cli_parse_double(const char *s, double min, double max, const char *what)
{
    char *end;
    double v;

    if (!s || !*s)
        die(RC_USAGE, "%s: empty value", what);
    errno = 0;
    v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v))
        die(RC_USAGE, "%s: invalid number '%s'", what, ESC(s));
    if (v < min || v > max)
        die(RC_USAGE, "%s: '%s' is out of range [%g, %g]", what, ESC(s), min, max);
    return v;
}

void
cli_finish_stdout(void)
{
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        if (!errno)     /* the error came from an earlier write */
            errno = EIO;
        die(RC_IO, "stdout: write failed:");
    }
    if (fclose(stdout) != 0)
        die(RC_IO, "stdout: write failed:");
}

double
now_seconds(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void
progress_draw(struct progress *p)
{
    double frac = p->total ? (double)p->done / (double)p->total : 0.0;
    int width = 30, fill, i;
    char bar[32];

    if (frac > 1.0)
        frac = 1.0;
    fill = (int)(frac * width);
    for (i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r%s: %s [%s] %3d%%", cli_progname, p->label, bar, (int)(frac * 100.0));
    fflush(stderr);
}

void
progress_begin(struct progress *p, int enabled, const char *label, uint64_t total)
{
    memset(p, 0, sizeof(*p));
    if (enabled < 0)
        p->on = cli_verbosity >= 1 && isatty(STDERR_FILENO);
    else
        p->on = enabled > 0;
    p->label = label;
    p->total = total;
    p->start = now_seconds();
}

void
progress_update(struct progress *p, uint64_t done)
{
    double t;

    p->done = done;
    if (!p->on)
        return;
    t = now_seconds();
    if (t - p->last_draw < 0.1)
        return;
    p->last_draw = t;
    progress_draw(p);
}

void
progress_end(struct progress *p)
{
    if (!p->on)
        return;
    p->done = p->total;
    progress_draw(p);
    fputc('\n', stderr);
    p->on = false;
}
